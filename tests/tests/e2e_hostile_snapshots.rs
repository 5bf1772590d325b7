//! End to end: snapshot files and text that other hosts and processes
//! wrote, against the real `snapctl` (issue 31, items 7 to 9).
//!
//! - Files built here from a real daemon's snapshot: a COMPRESSED record
//!   whose zstd stream expands to 256 MiB of the snapshot's own sample
//!   records (a few KiB on disk), a file with 8 of them, feature sections
//!   of 0x7fffffffffff and u64::MAX bytes, an EVENT_DESC that claims 2^31
//!   events. `report`, `export`, `decompress` and `archive` refuse each
//!   (the bomb: not `archive`, which copies the file as it is) with an
//!   error naming the limit, in < 2 s and < 256 MiB of peak RSS (GNU
//!   time's %M). A snapshot of 512 MiB of real records, compressed as the
//!   daemon compresses, still decompresses, streaming; `--max-decompressed`
//!   lets a file past the default limit through; a real `snapctl compress`
//!   round-trips byte for byte.
//! - Control characters planted in `fleet list`'s object headers, in a
//!   `fleet dump` responder's fields and in the comm of a process a
//!   trigger matched (`watch`) come out escaped, never raw.
//! - A `--kallsyms` that is a FIFO, /dev/zero or a loop of links is said
//!   not to be used, and why, at once.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, object_store};
use flightrec_perfdata::abi::{RecordHeader, record_type};
use flightrec_perfdata::format::{FEATURE_BITMAP_OFFSET, bit, feature_index};
use flightrec_perfdata::reader::{mib, parse};
use flightrec_perfdata::records::file_records;
use flightrec_tests::{Daemon, Load, NatsServer, bin_path, require_root, snapshot_id};
use flightrecd::fleet::object::ObjectHeaders;
use serde_json::Value;

const MIB: u64 = 1 << 20;
/// What a hostile file may cost `snapctl` at most.
const MAX_WALL: Duration = Duration::from_secs(2);
const MAX_RSS: u64 = 256 * MIB;
/// A run past these is killed: the code before the fix would take the
/// machine's memory (23.8 GB for the file of 8 bombs).
const KILL_RSS: u64 = 1 << 30;
const KILL_AFTER: Duration = Duration::from_secs(60);

/// A `snapctl` run, measured.
#[derive(Debug)]
struct Measured {
    out: Output,
    wall: Duration,
    /// Peak RSS in bytes (GNU time's %M, from the kernel's rusage).
    peak_rss: u64,
    /// Killed by the watchdog (past [`KILL_RSS`] or [`KILL_AFTER`]).
    killed: Option<String>,
}

impl Measured {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
}

/// The RSS of `pid` in bytes, if it still runs.
fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Runs `snapctl ARGS` under `/usr/bin/time -f %M` in a process group of
/// its own, killed (the whole group) past [`KILL_RSS`] or [`KILL_AFTER`].
fn measured<S: AsRef<OsStr>>(dir: &Path, args: &[S]) -> Measured {
    let rss_file = tempfile::NamedTempFile::new().expect("temp file");
    let started = Instant::now();
    let child = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(rss_file.path())
        .arg(bin_path("snapctl"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("run /usr/bin/time snapctl (Debian package time)");
    let time_pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || -> Option<String> {
            while !done.load(Ordering::Relaxed) {
                let children =
                    std::fs::read_to_string(format!("/proc/{time_pid}/task/{time_pid}/children"))
                        .unwrap_or_default();
                let rss: u64 = children
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .filter_map(rss_of)
                    .sum();
                let why = if rss > KILL_RSS {
                    Some(format!("killed at {} MiB of RSS", rss / MIB))
                } else if started.elapsed() > KILL_AFTER {
                    Some(format!("killed after {KILL_AFTER:?}"))
                } else {
                    None
                };
                if let Some(why) = why {
                    let group = nix::unistd::Pid::from_raw(time_pid as i32);
                    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
                    return Some(why);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        })
    };
    let out = child.wait_with_output().expect("wait for snapctl");
    let wall = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let killed = watchdog.join().expect("watchdog");
    let report = std::fs::read_to_string(rss_file.path()).unwrap_or_default();
    let peak_rss = report
        .lines()
        .last()
        .and_then(|l| l.trim().parse::<u64>().ok())
        .map_or(u64::MAX, |kb| kb * 1024);
    Measured {
        out,
        wall,
        peak_rss,
        killed,
    }
}

/// A perf.data file taken apart: everything before the data section
/// (header, attrs, ids), the data section, the features.
#[derive(Clone)]
struct Parts {
    before_data: Vec<u8>,
    data: Vec<u8>,
    features: Vec<(u32, Vec<u8>)>,
}

impl Parts {
    fn of(bytes: &[u8]) -> Parts {
        let f = parse(bytes).expect("a snapshot the daemon wrote parses");
        Parts {
            before_data: f.before_data.to_vec(),
            data: f.data.to_vec(),
            features: f.features.iter().map(|(b, s)| (*b, s.to_vec())).collect(),
        }
    }

    /// The file: header (its data size and feature bits made to fit),
    /// data, feature index, bodies.
    fn assemble(&self) -> Vec<u8> {
        let mut out = self.before_data.clone();
        out[0x30..0x38].copy_from_slice(&(self.data.len() as u64).to_le_bytes());
        out[FEATURE_BITMAP_OFFSET..FEATURE_BITMAP_OFFSET + 32].fill(0);
        for (b, _) in &self.features {
            out[FEATURE_BITMAP_OFFSET + (*b / 8) as usize] |= 1 << (b % 8);
        }
        out.extend_from_slice(&self.data);
        let bodies: Vec<&[u8]> = self.features.iter().map(|(_, b)| &b[..]).collect();
        let (index, _) = feature_index(out.len() as u64, &bodies);
        out.extend_from_slice(&index);
        for b in bodies {
            out.extend_from_slice(b);
        }
        out
    }

    /// These parts with `data` as a compressed file's data section (the
    /// COMPRESSED feature added, as the daemon writes it).
    fn compressed(&self, data: Vec<u8>) -> Parts {
        let mut p = self.clone();
        p.data = data;
        p.features.retain(|(b, _)| *b != bit::COMPRESSED);
        // version 0, zstd, level 3, ratio, mmap_len
        let body: Vec<u8> = [0u32, 1, 3, 10, 1 << 20]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        p.features.push((bit::COMPRESSED, body));
        p.features.sort_by_key(|(b, _)| *b);
        p
    }
}

/// `zstd` bytes as COMPRESSED records of at most 64000 bytes each (one
/// stream across them, as perf reads it).
fn compressed_records(zstd: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in zstd.chunks(64_000) {
        let header = RecordHeader {
            type_: record_type::COMPRESSED,
            misc: 0,
            size: u16::try_from(8 + piece.len()).expect("record size"),
        };
        out.extend_from_slice(&header.to_bytes());
        out.extend_from_slice(piece);
    }
    out
}

/// One zstd frame of `pattern` repeated to `total` bytes (whole
/// patterns), and the length it decompresses to.
fn bomb_frame(pattern: &[u8], total: u64) -> (Vec<u8>, u64) {
    use std::io::Write;
    let reps = total / pattern.len() as u64;
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 1).expect("zstd encoder");
    for _ in 0..reps {
        enc.write_all(pattern).expect("compress");
    }
    (enc.finish().expect("compress"), reps * pattern.len() as u64)
}

/// The sample records of a data section, whole, up to about `max` bytes.
fn sample_records(data: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for (header, record) in file_records(data).map_while(Result::ok) {
        if header.type_ == record_type::SAMPLE && out.len() + record.len() <= max {
            out.extend_from_slice(record);
        }
    }
    assert!(out.len() > 1000, "the snapshot has too few samples");
    out
}

/// A plain snapshot of a real daemon under load, and its bytes.
fn real_snapshot(d: &Daemon) -> (PathBuf, Vec<u8>) {
    let load = Load::start();
    std::thread::sleep(Duration::from_millis(1500));
    let path = PathBuf::from(d.json(&["dump"])["path"].as_str().expect("path"));
    drop(load);
    let bytes = std::fs::read(&path).expect("read the snapshot");
    (path, bytes)
}

/// The feature `bit`'s size patched to `size` in the index of `file`.
fn with_feature_size(file: &[u8], bit: u32, size: u64) -> Vec<u8> {
    let f = parse(file).expect("parses");
    let i = f
        .features
        .iter()
        .position(|(b, _)| *b == bit)
        .expect("the feature");
    let index = (f.before_data.len() + f.data.len()) + i * 16;
    let mut out = file.to_vec();
    out[index + 8..index + 16].copy_from_slice(&size.to_le_bytes());
    out
}

fn assert_no_raw_controls(what: &str, text: &[u8]) {
    let raw: Vec<(usize, u8)> = text
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, b)| (*b < 0x20 && *b != b'\n') || *b == 0x7f)
        .collect();
    assert!(
        raw.is_empty(),
        "{what} holds raw control bytes {raw:?}: {:?}",
        String::from_utf8_lossy(text)
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn bombs_and_bad_sections_are_refused_naming_the_limit_in_bounded_time_and_memory() {
    require_root("bombs_and_bad_sections_are_refused_naming_the_limit_in_bounded_time_and_memory");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\n");
    let (_, real) = real_snapshot(&d);
    let parts = Parts::of(&real);
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path();

    // The snapshot's own sample records, repeated to 256 MiB in one zstd
    // stream (the records a report would then parse are valid ones).
    let pattern = sample_records(&parts.data, 64 << 10);
    let started = Instant::now();
    let (frame, expands_to) = bomb_frame(&pattern, 256 * MIB);
    eprintln!(
        "bomb: {} KiB of zstd for {} MiB of records, made in {:?}",
        frame.len() >> 10,
        expands_to / MIB,
        started.elapsed()
    );
    // Only the bombs: no other record (as small a file as can be).
    let one = parts.compressed(compressed_records(&frame)).assemble();
    let mut eight = Vec::new();
    for _ in 0..8 {
        eight.extend(compressed_records(&frame));
    }
    let eight = parts.compressed(eight).assemble();
    let files = [
        ("bomb", one.clone()),
        ("eight-bombs", eight),
        (
            "section-2^47",
            with_feature_size(&real, bit::HOSTNAME, 0x7fff_ffff_ffff),
        ),
        (
            "section-u64-max",
            with_feature_size(&real, bit::HOSTNAME, u64::MAX),
        ),
        ("event-desc-2^31", {
            // Compressed, so that `decompress` gets as far as the others.
            let packed = zstd::encode_all(&parts.data[..], 1).expect("compress");
            let mut p = parts.compressed(compressed_records(&packed));
            let desc = p
                .features
                .iter_mut()
                .find(|(b, _)| *b == bit::EVENT_DESC)
                .expect("EVENT_DESC");
            desc.1[0..4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
            p.assemble()
        }),
    ];
    for (name, bytes) in &files {
        let path = dir.join(format!("{name}.perf.data"));
        std::fs::write(&path, bytes).expect("write the hostile file");
        let p = path.to_str().expect("utf-8 path");
        let is_bomb = name.contains("bomb");
        let runs: [(&str, Vec<&str>); 4] = [
            ("report", vec!["report", p, "-o", "r.html"]),
            (
                "export",
                vec!["export", p, "--format", "collapsed", "-o", "e.folded"],
            ),
            ("decompress", vec!["decompress", p, "-o", "plain.perf.data"]),
            ("archive", vec!["archive", p, "-o", "a.tar"]),
        ];
        for (verb, args) in runs {
            let m = measured(dir, &args);
            eprintln!(
                "{name} ({} bytes), {verb}: exit {:?}, {:?}, peak RSS {} MiB: {}",
                bytes.len(),
                m.out.status.code(),
                m.wall,
                m.peak_rss / MIB,
                m.stderr().trim()
            );
            assert_eq!(m.killed, None, "{name}, {verb}");
            assert!(
                m.peak_rss < MAX_RSS,
                "{name}, {verb}: peak RSS {} MiB",
                m.peak_rss / MIB
            );
            if is_bomb && verb == "archive" {
                // An archive copies the file as it is (and the files its
                // build-id table names, which takes what it takes): it
                // decompresses nothing, and a reader elsewhere applies
                // the limit.
                assert!(m.out.status.success(), "{}", m.stderr());
                let tar = std::fs::metadata(dir.join("a.tar")).expect("the archive");
                assert!(tar.len() >= bytes.len() as u64);
                std::fs::remove_file(dir.join("a.tar")).expect("remove");
                continue;
            }
            assert_eq!(m.out.status.code(), Some(1), "{name}, {verb}");
            assert!(m.wall < MAX_WALL, "{name}, {verb}: took {:?}", m.wall);
            let err = m.stderr();
            let expected = if is_bomb {
                let limit = (bytes.len() as u64 * 64).max(16 * MIB);
                format!(
                    "its records take more than {} once decompressed, the default limit \
                     for a file of {} bytes (64 times the file's size, at least 16 MiB); \
                     --max-decompressed SIZE raises it",
                    mib(limit),
                    bytes.len()
                )
            } else if name.starts_with("section") {
                format!("the HOSTNAME feature section ({}", parse_err_offset(&real))
            } else {
                "the EVENT_DESC section is malformed: 2147483647 events do not fit".to_string()
            };
            assert!(err.contains(&expected), "{name}, {verb}: {err}");
            if name.starts_with("section") {
                assert!(
                    err.contains(&format!("lies outside the {}-byte file", bytes.len())),
                    "{err}"
                );
            }
        }
        for out in ["r.html", "e.folded", "plain.perf.data"] {
            assert!(!dir.join(out).exists(), "{name}: {out} was written");
        }
    }

    // The option raises the limit: the bomb decompresses (streaming: its
    // 256 MiB of records never in memory), and a report reads it.
    let bomb = dir.join("bomb.perf.data");
    let m = measured(
        dir,
        &[
            "--json",
            "decompress",
            bomb.to_str().unwrap(),
            "--max-decompressed",
            "300MiB",
            "-o",
            "plain.perf.data",
        ],
    );
    assert!(m.out.status.success(), "{}", m.stderr());
    let v: Value = serde_json::from_slice(&m.out.stdout).expect("JSON");
    let plain_len = std::fs::metadata(dir.join("plain.perf.data"))
        .expect("the plain copy")
        .len();
    assert_eq!(v["bytes"].as_u64(), Some(plain_len));
    let plain_data_len = {
        let mut h = [0u8; 0x38];
        std::fs::File::open(dir.join("plain.perf.data"))
            .and_then(|mut f| f.read_exact(&mut h))
            .expect("read the header");
        u64::from_le_bytes(h[0x30..0x38].try_into().unwrap())
    };
    assert_eq!(plain_data_len, expands_to);
    eprintln!(
        "bomb, decompress --max-decompressed 300MiB: {:?}, peak RSS {} MiB, {} MiB written",
        m.wall,
        m.peak_rss / MIB,
        plain_len / MIB
    );
    assert!(m.peak_rss < 64 * MIB, "peak RSS {} MiB", m.peak_rss / MIB);
    // An export of a smaller one (20 MiB of records) past the default
    // limit.
    let (small_frame, small_len) = bomb_frame(&pattern, 20 * MIB);
    let small = dir.join("small-bomb.perf.data");
    let data = compressed_records(&small_frame);
    std::fs::write(&small, parts.compressed(data).assemble()).expect("write");
    let small = small.to_str().unwrap();
    let refused = measured(dir, &["export", small, "--format", "collapsed", "-o", "-"]);
    assert_eq!(refused.out.status.code(), Some(1), "{}", refused.stderr());
    assert!(
        refused
            .stderr()
            .contains("more than 16 MiB once decompressed")
    );
    let m = measured(
        dir,
        &[
            "export",
            small,
            "--format",
            "collapsed",
            "--max-decompressed",
            "64MiB",
            "-o",
            "-",
        ],
    );
    assert!(m.out.status.success(), "{}", m.stderr());
    // Every sample of the pattern, repeated, is counted.
    let samples: u64 = m
        .stdout()
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    let per_pattern = file_records(&pattern).count() as u64;
    let cpu_clock_in_pattern = file_records(&pattern)
        .map_while(Result::ok)
        .filter(|(_, r)| is_cpu_clock(&parts, r))
        .count() as u64;
    eprintln!(
        "small bomb, export --max-decompressed 64MiB: {:?}, peak RSS {} MiB, {samples} samples \
         ({per_pattern} records a pattern, {cpu_clock_in_pattern} of them cpu-clock)",
        m.wall,
        m.peak_rss / MIB
    );
    assert_eq!(
        samples,
        cpu_clock_in_pattern * (small_len / pattern.len() as u64)
    );
}

/// The offset of the HOSTNAME feature in `file`, as the error names it.
fn parse_err_offset(file: &[u8]) -> u64 {
    let f = parse(file).expect("parses");
    let body = f
        .features
        .iter()
        .find(|(b, _)| *b == bit::HOSTNAME)
        .expect("HOSTNAME")
        .1;
    body.as_ptr() as u64 - file.as_ptr() as u64
}

/// Whether `record` (a SAMPLE) is one of the cpu-clock event's: its id
/// (the first u64 of the body with PERF_SAMPLE_IDENTIFIER) is one of the
/// ids EVENT_DESC gives cpu-clock.
fn is_cpu_clock(parts: &Parts, record: &[u8]) -> bool {
    let desc = &parts
        .features
        .iter()
        .find(|(b, _)| *b == bit::EVENT_DESC)
        .expect("EVENT_DESC")
        .1;
    let Some(id) = record.get(8..16) else {
        return false;
    };
    let nr = u32::from_le_bytes(desc[0..4].try_into().unwrap());
    let attr_size = u32::from_le_bytes(desc[4..8].try_into().unwrap()) as usize;
    let mut at = 8;
    for _ in 0..nr {
        at += attr_size;
        let nr_ids = u32::from_le_bytes(desc[at..at + 4].try_into().unwrap()) as usize;
        let len = u32::from_le_bytes(desc[at + 4..at + 8].try_into().unwrap()) as usize;
        let name = &desc[at + 8..at + 8 + len];
        at += 8 + len;
        let ids = &desc[at..at + nr_ids * 8];
        at += nr_ids * 8;
        if name.starts_with(b"cpu-clock") && ids.chunks(8).any(|i| i == id) {
            return true;
        }
    }
    false
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_large_compressed_snapshot_decompresses_streaming_and_byte_for_byte() {
    require_root("a_large_compressed_snapshot_decompresses_streaming_and_byte_for_byte");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\n");
    let (path, real) = real_snapshot(&d);
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path();

    // A real compress, decompressed: the plain file byte for byte.
    let id = snapshot_id(&path);
    let packed = d.json(&["compress", &id]);
    assert_eq!(packed["compressed"], true, "{packed}");
    let m = measured(
        dir,
        &[
            "--socket",
            d.socket.to_str().unwrap(),
            "decompress",
            &id,
            "-o",
            "again.perf.data",
        ],
    );
    assert!(m.out.status.success(), "{}", m.stderr());
    assert!(
        std::fs::read(dir.join("again.perf.data")).expect("the copy") == real,
        "the decompressed copy differs from the snapshot"
    );

    // 512 MiB of the snapshot's records, compressed as the daemon does it
    // (a frame per MiB of records, split into COMPRESSED records).
    let parts = Parts::of(&real);
    let mut chunk = Vec::new();
    let mut frames = Vec::new();
    for (_, record) in file_records(&parts.data).map_while(Result::ok) {
        chunk.extend_from_slice(record);
        if chunk.len() >= 1 << 20 {
            frames.extend(compressed_records(
                &zstd::encode_all(&chunk[..], 1).expect("compress"),
            ));
            chunk.clear();
        }
    }
    if !chunk.is_empty() {
        frames.extend(compressed_records(
            &zstd::encode_all(&chunk[..], 1).expect("compress"),
        ));
    }
    let copies = (512 * MIB) / parts.data.len() as u64;
    let mut data = Vec::with_capacity(frames.len() * copies as usize);
    for _ in 0..copies {
        data.extend_from_slice(&frames);
    }
    let large = parts.compressed(data).assemble();
    let records = copies * parts.data.len() as u64;
    let large_path = dir.join("large.perf.data");
    std::fs::write(&large_path, &large).expect("write");
    drop(large);
    let m = measured(
        dir,
        &[
            "--json",
            "decompress",
            large_path.to_str().unwrap(),
            "-o",
            "large.plain.perf.data",
        ],
    );
    let file_len = std::fs::metadata(&large_path).expect("large").len();
    eprintln!(
        "{} MiB file of {} MiB of records (ratio {:.1}): decompress {:?}, peak RSS {} MiB",
        file_len / MIB,
        records / MIB,
        records as f64 / file_len as f64,
        m.wall,
        m.peak_rss / MIB
    );
    assert_eq!(m.killed, None);
    assert!(m.out.status.success(), "{}", m.stderr());
    assert!(m.peak_rss < 64 * MIB, "peak RSS {} MiB", m.peak_rss / MIB);
    // The copy: the header says the records' size, and they are the
    // snapshot's records `copies` times, then its features.
    let plain = dir.join("large.plain.perf.data");
    let mut f = BufReader::with_capacity(1 << 20, std::fs::File::open(&plain).expect("copy"));
    let mut before = vec![0u8; parts.before_data.len()];
    f.read_exact(&mut before).expect("read");
    assert_eq!(
        u64::from_le_bytes(before[0x30..0x38].try_into().unwrap()),
        records
    );
    let mut copy = vec![0u8; parts.data.len()];
    for i in 0..copies {
        f.read_exact(&mut copy).expect("read");
        assert!(copy == parts.data, "copy {i} of the records differs");
    }
    let mut rest = Vec::new();
    f.read_to_end(&mut rest).expect("read");
    let index_len = parts.features.len() * 16;
    let bodies: Vec<u8> = parts
        .features
        .iter()
        .flat_map(|(_, b)| b.iter().copied())
        .collect();
    assert_eq!(rest.len(), index_len + bodies.len());
    assert!(rest[index_len..] == bodies[..], "the features differ");
}

// --- Item 8: text from elsewhere, escaped --------------------------------

const BUCKET: &str = "flightrec";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Puts `data` as object `name` with `headers` into the bucket. A header
/// value holding CR or LF (which async-nats refuses to send as a NATS
/// header) is planted as any writer of the bucket can: in the object's
/// metadata, a JSON message on its meta subject, published again.
fn put(url: &str, name: &str, headers: &ObjectHeaders, data: &[u8]) {
    runtime().block_on(async {
        let client = async_nats::connect(url).await.expect("connect to nats");
        let js = jetstream::new(client);
        let store = match js.get_object_store(BUCKET).await {
            Ok(store) => store,
            Err(_) => js
                .create_object_store(object_store::Config {
                    bucket: BUCKET.into(),
                    ..Default::default()
                })
                .await
                .expect("create the bucket"),
        };
        let mut map = HeaderMap::new();
        let mut planted = serde_json::Map::new();
        for (k, v) in headers.to_pairs() {
            if v.contains(['\r', '\n']) {
                planted.insert(k.to_string(), serde_json::json!([v]));
                map.insert(k, "placeholder");
            } else {
                map.insert(k, v.as_str());
            }
        }
        let meta = object_store::ObjectMetadata {
            name: name.into(),
            headers: Some(map),
            ..Default::default()
        };
        let info = store
            .put(meta, &mut &data[..])
            .await
            .unwrap_or_else(|e| panic!("put {name:?}: {e}"));
        if planted.is_empty() {
            return;
        }
        let mut info = serde_json::to_value(&info).expect("object info as JSON");
        for (k, v) in planted {
            info["headers"][k] = v;
        }
        use base64::Engine;
        let subject = format!(
            "$O.{BUCKET}.M.{}",
            base64::engine::general_purpose::URL_SAFE.encode(name)
        );
        let mut rollup = HeaderMap::new();
        rollup.insert("Nats-Rollup", "sub");
        js.publish_with_headers(subject, rollup, info.to_string().into())
            .await
            .expect("publish the metadata")
            .await
            .expect("the metadata stored");
    });
}

/// A window title, a screen clear, a colour, and a CR/LF that forges a
/// row.
const TITLE: &str = "\x1b]0;owned\x07";
const CLEAR: &str = "\x1b[2J";
const FORGED_ROW: &str = "\r\nforged-host  forged-id  1.0KiB";

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn fleet_list_shows_planted_object_headers_escaped() {
    require_root("fleet_list_shows_planted_object_headers_escaped");
    let nats = NatsServer::start();
    let url = nats.url();
    let host = format!("evil{TITLE}");
    let id = format!("id{CLEAR}");
    let h = ObjectHeaders {
        host: host.clone(),
        id: id.clone(),
        label: "\x1b[31mred".into(),
        trigger: format!("api{FORGED_ROW}"),
        bytes: 1024,
        compressed: false,
        created_unix_ns: 1_795_212_693_000_000_000,
        labels: BTreeMap::new(),
        digest: String::new(),
    };
    put(&url, &h.object_name(), &h, &[0u8; 1024]);
    // An object that is not a snapshot, named with the same sequences.
    let mut other = h.clone();
    other.host = "someone-else".into();
    put(&url, &format!("{host}/x{CLEAR}.txt"), &other, b"x");

    let out = Command::new(bin_path("snapctl"))
        .args(["fleet", "--nats", &url, "list"])
        .output()
        .expect("run snapctl fleet list");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_raw_controls("fleet list", &out.stdout);
    assert_no_raw_controls("fleet list's warnings", &out.stderr);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "a header, one row, the total: {lines:?}");
    assert!(
        lines[1].starts_with("evil\\x1b]0;owned\\x07  id\\x1b[2J  1.0KiB"),
        "{}",
        lines[1]
    );
    assert!(
        lines[1].contains("api\\r\\nforged-host  forged-id  1.0KiB")
            && lines[1].ends_with("\\x1b[31mred"),
        "{}",
        lines[1]
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn fleet_dump_shows_a_responders_fields_escaped() {
    require_root("fleet_dump_shows_a_responders_fields_escaped");
    let nats = NatsServer::start();
    let url = nats.url();
    let hosts = [format!("evil{TITLE}"), format!("bad{CLEAR}")];
    let replies = vec![
        serde_json::json!({
            "host": hosts[0],
            "id": format!("id{FORGED_ROW}"),
            "bytes": 2048,
            "path": format!("/snap/{CLEAR}x.perf.data"),
        }),
        serde_json::json!({"host": hosts[1], "error": format!("disk full{TITLE}\r\nok")}),
    ];
    // A responder on the subject, as any member of it could be.
    let ready = std::sync::mpsc::channel();
    let responder = {
        let url = url.clone();
        std::thread::spawn(move || {
            runtime().block_on(async move {
                use tokio_stream::StreamExt;
                let client = async_nats::connect(&url).await.expect("connect");
                let mut requests = client.subscribe("flightrec.dump").await.expect("sub");
                client.flush().await.expect("flush");
                ready.0.send(()).expect("ready");
                if let Some(m) = requests.next().await {
                    let inbox = m.reply.expect("a reply subject");
                    for r in replies {
                        client
                            .publish(inbox.clone(), r.to_string().into())
                            .await
                            .expect("reply");
                    }
                    client.flush().await.expect("flush");
                }
            });
        })
    };
    ready.1.recv().expect("the responder subscribed");
    let out = Command::new(bin_path("snapctl"))
        .args(["fleet", "--nats", &url, "dump", "--wait", "10s", "--expect"])
        .arg(OsStr::from_bytes(hosts.join(",").as_bytes()))
        .output()
        .expect("run snapctl fleet dump");
    responder.join().expect("responder");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}\n{}", String::from_utf8_lossy(&out.stderr));
    // One host answered with an error: exit status 1.
    assert_eq!(out.status.code(), Some(1));
    assert_no_raw_controls("fleet dump", &out.stdout);
    assert_no_raw_controls("fleet dump's error", &out.stderr);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "two replies and the total: {lines:?}");
    assert_eq!(
        lines[..2],
        [
            "bad\\x1b[2J  error: disk full\\x1b]0;owned\\x07\\r\\nok",
            "evil\\x1b]0;owned\\x07  id\\r\\nforged-host  forged-id  1.0KiB  2.0KiB  \
             /snap/\\x1b[2Jx.perf.data",
        ]
    );
    assert!(lines[2].starts_with("2 hosts answered"), "{}", lines[2]);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn watch_shows_a_matched_comm_escaped() {
    require_root("watch_shows_a_matched_comm_escaped");
    let d = Daemon::start(
        r#"
[[event]]
name = "sched:sched_process_exec"

[[trigger]]
name = "hostile-exec"
on = "tracepoint"
event = "sched:sched_process_exec"
filter = 'filename ~ "*fr-hostile-comm*"'
cooldown = "1h"
"#,
    );
    // A program whose name (the comm after exec: 14 bytes) retitles the
    // terminal, clears the screen and ends the line.
    let dir = d.dir.path().join("fr-hostile-comm");
    std::fs::create_dir(&dir).expect("mkdir");
    // (CR/LF in the middle: the daemon trims the end of /proc/PID/comm.)
    let comm = format!("{}\r\n{CLEAR}", "\x1b]0;pwn\x07");
    assert!(comm.len() <= 15);
    let program = dir.join(OsStr::from_bytes(comm.as_bytes()));
    flightrec_tests::copy_executable("/bin/sleep", &program);

    let mut watch = d
        .snapctl_cmd(&["watch"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn snapctl watch");
    let (lines_tx, lines) = std::sync::mpsc::channel::<Vec<u8>>();
    let stdout = watch.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        loop {
            let mut line = Vec::new();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if lines_tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });
    // Until watch (which may not be subscribed yet) shows the firing.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let fired = 'found: loop {
        let mut sleeper = Command::new(&program)
            .arg("2")
            .spawn()
            .expect("run the program");
        let until = Instant::now() + Duration::from_secs(2);
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            if let Ok(line) = lines.recv_timeout(left) {
                let found = String::from_utf8_lossy(&line).contains("trigger hostile-exec fired");
                seen.push(line.clone());
                if found {
                    let _ = sleeper.wait();
                    break 'found line;
                }
            }
        }
        let _ = sleeper.wait();
        assert!(
            Instant::now() < deadline,
            "no firing on watch in 30s: {:?}",
            seen.iter()
                .map(|l| String::from_utf8_lossy(l))
                .collect::<Vec<_>>()
        );
    };
    let _ = watch.kill();
    let _ = watch.wait();
    let text = String::from_utf8_lossy(&fired).into_owned();
    eprintln!("{text}");
    assert_no_raw_controls("watch's line", &fired[..fired.len() - 1]);
    assert!(
        text.contains("(\\x1b]0;pwn\\x07\\r\\n\\x1b[2J)"),
        "the comm is not shown escaped: {text:?}"
    );
}

// --- Item 9: a --kallsyms that cannot be used ------------------------------

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_kallsyms_that_cannot_be_used_is_said_at_once() {
    require_root("a_kallsyms_that_cannot_be_used_is_said_at_once");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\n");
    let (path, _) = real_snapshot(&d);
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path();
    let fifo = dir.join("kallsyms.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let (a, b) = (dir.join("loop-a"), dir.join("loop-b"));
    std::os::unix::fs::symlink(&b, &a).expect("symlink");
    std::os::unix::fs::symlink(&a, &b).expect("symlink");
    let cases = [
        (fifo.clone(), "it is not a regular file (a FIFO)"),
        (
            PathBuf::from("/dev/zero"),
            "it is not a regular file (a device)",
        ),
        (a.clone(), "Too many levels of symbolic links"),
    ];
    let snapshot = path.to_str().unwrap();
    // "At once" against the same report without the option, run here under
    // the same load: a fixed bound failed on a loaded machine (over 20 s).
    let plain = measured(dir, &["--json", "report", snapshot, "-o", "plain.html"]);
    assert!(plain.out.status.success(), "{}", plain.stderr());
    let at_once = plain.wall * 2 + Duration::from_secs(10);
    for (i, (kallsyms, why)) in cases.iter().enumerate() {
        let k = kallsyms.to_str().unwrap();
        let page = format!("r{i}.html");
        let m = measured(
            dir,
            &["--json", "report", snapshot, "--kallsyms", k, "-o", &page],
        );
        eprintln!(
            "--kallsyms {k}: {:?}, exit {:?}: {}",
            m.wall,
            m.out.status.code(),
            m.stdout()
        );
        assert_eq!(m.killed, None, "{k}");
        assert!(m.out.status.success(), "{k}: {}", m.stderr());
        assert!(
            m.wall < at_once,
            "{k}: {:?}, {:?} without --kallsyms",
            m.wall,
            plain.wall
        );
        let v: Value = serde_json::from_slice(&m.out.stdout).expect("JSON");
        let not_used = v["not_used"].as_array().expect("not_used");
        assert_eq!(not_used.len(), 1, "{v}");
        assert_eq!(not_used[0]["option"], "--kallsyms");
        assert_eq!(not_used[0]["path"], k);
        let reason = not_used[0]["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{k}: {reason}");
        // In words too, beside the frames not named.
        let m = measured(
            dir,
            &[
                "export",
                snapshot,
                "--format",
                "collapsed",
                "--kallsyms",
                k,
                "-o",
                "x.folded",
            ],
        );
        assert!(m.out.status.success(), "{k}: {}", m.stderr());
        assert!(
            m.stdout()
                .lines()
                .any(|l| l.starts_with(&format!("  not used: --kallsyms {k}: ")) && l.contains(why)),
            "{k}: {}",
            m.stdout()
        );
        std::fs::remove_file(dir.join("x.folded")).expect("remove");
    }
}
