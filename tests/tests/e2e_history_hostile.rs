//! End to end: the history read back as root, against files that are not
//! its own and windows of any size. A link, a FIFO or a huge sparse file
//! where a segment was costs neither memory nor time; a history directory
//! others could write is refused at start; a dump of the whole history is
//! streamed, its memory not growing with its window.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, Load, flightrecd_to_end, require_root, test_config};

/// (VmHWM, VmRSS) of `pid`, in bytes.
fn peak_and_rss(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .map(|k| k * 1024)
            .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
    };
    (kib("VmHWM:"), kib("VmRSS:"))
}

/// Resets the peak RSS of `pid` to its RSS now (clear_refs 5).
fn reset_peak(pid: i32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM");
}

fn daemon_with_history(dir: tempfile::TempDir, history: &Path, extra: &str) -> Daemon {
    let text = test_config(
        dir.path(),
        &format!(
            "[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n\n[history]\n\
             enabled = true\ndir = \"{}\"\n{extra}\n",
            history.display()
        ),
    );
    Daemon::start_in(dir, &text, &[])
}

/// The closed segments of `dir`, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read history dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            n.starts_with("seg-") && n.ends_with(".hist")
        })
        .collect();
    v.sort();
    v
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_history_dir_others_can_write_is_refused_at_start_naming_it() {
    require_root("a_history_dir_others_can_write_is_refused_at_start_naming_it");
    let dir = tempfile::tempdir().expect("tempdir");
    let history = dir.path().join("history");
    std::fs::create_dir(&history).unwrap();
    std::fs::set_permissions(&history, std::fs::Permissions::from_mode(0o770)).unwrap();
    let config = dir.path().join("flightrec.toml");
    std::fs::write(
        &config,
        test_config(
            dir.path(),
            &format!(
                "[history]\nenabled = true\ndir = \"{}\"\n",
                history.display()
            ),
        ),
    )
    .unwrap();
    for flag in ["--check-config", "--config"] {
        let out = flightrecd_to_end(flag, &config);
        assert_eq!(out.status.code(), Some(2), "{flag}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("history.dir") && err.contains(&*history.to_string_lossy()),
            "{flag}: the error names the key and the path: {err}"
        );
        assert!(err.contains("0770"), "{flag}: and the mode: {err}");
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_planted_link_fifo_or_huge_file_costs_no_memory_and_no_wait() {
    require_root("a_planted_link_fifo_or_huge_file_costs_no_memory_and_no_wait");
    let dir = tempfile::tempdir().expect("tempdir");
    let history = dir.path().join("history");
    let big = dir.path().join("big-sparse");
    let d = daemon_with_history(dir, &history, "max_age = \"40s\"");
    let _load = Load::shells(
        1,
        "while :; do perf bench sched messaging -g 1 -l 50 >/dev/null 2>&1; done",
    );
    // Segments close every tenth of max_age: wait for four.
    let deadline = Instant::now() + Duration::from_secs(60);
    while segments(&history).len() < 5 {
        assert!(Instant::now() < deadline, "no closed segments");
        std::thread::sleep(Duration::from_millis(250));
    }
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(3 << 30).unwrap();
    let planted = segments(&history);
    let victims = [&planted[1], &planted[2], &planted[3]];
    std::fs::remove_file(victims[0]).unwrap();
    std::os::unix::fs::symlink(&big, victims[0]).unwrap();
    std::fs::remove_file(victims[1]).unwrap();
    nix::unistd::mkfifo(victims[1], nix::sys::stat::Mode::from_bits_truncate(0o600))
        .expect("mkfifo");
    // A 3 GiB sparse regular file owned by root where a segment was.
    std::fs::remove_file(victims[2]).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(victims[2])
        .unwrap();
    f.set_len(3 << 30).unwrap();

    // The window of the three planted segments: a segment is named by
    // the instant it started, and ends where the next starts.
    let started = |p: &Path| -> i64 {
        let n = p.file_name().unwrap().to_string_lossy().to_string();
        n["seg-".len()..n.len() - ".hist".len()]
            .parse()
            .expect("seg-<unix ns>.hist")
    };
    let (from, to) = (started(&planted[1]), started(&planted[4]));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let at = format!("-{}ms", (now - to) / 1_000_000);
    let before = format!("{}ms", (to - from) / 1_000_000 + 500);
    let pid = d.pid();
    reset_peak(pid);
    let (_, rss_before) = peak_and_rss(pid);
    // Root's own dump meanwhile: the planted files are the history
    // lane's to skip, the rings' dump never waits on them.
    let mut planted_dump = d
        .snapctl_cmd(&[
            "--json", "dump", "--at", &at, "--before", &before, "--label", "planted",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn snapctl");
    let asked = Instant::now();
    let root = d.json(&["dump", "--label", "root"]);
    let took = asked.elapsed();
    eprintln!("root's dump beside it: {took:?}");
    // Behind a read of the FIFO it would wait for ever (the planted
    // window's own deadline below is 180 s); a loaded 2-CPU machine takes
    // seconds to run snapctl beside the window's dump.
    assert!(took < Duration::from_secs(20), "root's dump took {took:?}");
    assert!(Path::new(root["path"].as_str().unwrap()).exists());
    // The window over the planted files completes: no FIFO holds it.
    // A cut runs at normal priority, by design: among a scheduler-heavy
    // load's hundred runnable tasks and a release build beside them a
    // debug build's cut of this window took 77 s (2.6 s under that load
    // alone), so the deadline tells a wait for ever from a slow cut.
    let deadline = Instant::now() + Duration::from_secs(180);
    while planted_dump.try_wait().expect("poll").is_none() {
        assert!(
            Instant::now() < deadline,
            "the dump over the planted files hangs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = planted_dump.wait_with_output().expect("wait");
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let (peak, _) = peak_and_rss(pid);
    let grew = peak.saturating_sub(rss_before);
    eprintln!(
        "dump over planted segments: {:?}, peak RSS +{:.1} MiB",
        asked.elapsed(),
        grew as f64 / (1 << 20) as f64
    );
    assert!(
        grew < 16 << 20,
        "the peak RSS grew {:.1} MiB",
        grew as f64 / (1 << 20) as f64
    );
    assert!(std::path::Path::new(v["path"].as_str().unwrap()).exists());
    assert!(
        d.log_text().contains("left out of the window"),
        "the log says segments were left out:\n{}",
        d.log_text()
    );
    // A signal is still served at once.
    let before = d.list().len();
    d.signal("USR2");
    let deadline = Instant::now() + Duration::from_secs(2);
    while d.list().len() == before {
        assert!(Instant::now() < deadline, "SIGUSR2 not served");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_dump_of_the_whole_history_is_streamed_in_bounded_memory() {
    require_root("a_dump_of_the_whole_history_is_streamed_in_bounded_memory");
    let dir = tempfile::tempdir().expect("tempdir");
    let history = dir.path().join("history");
    // Many large samples: cpu-clock at 20 kHz with call chains.
    let text = test_config(
        dir.path(),
        &format!(
            "[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n\n[history]\n\
             enabled = true\ndir = \"{}\"\nmax_age = \"30min\"\nmax_bytes = \"2GiB\"\n",
            history.display()
        ),
    )
    .replace("frequency = 999", "frequency = 20000");
    let d = Daemon::start_in(dir, &text, &[]);
    let load = Load::shells(
        1,
        "while :; do perf bench sched messaging -g 2 -l 200 >/dev/null 2>&1; done",
    );
    const RECORDS: u64 = 300 << 20;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let raw = d.json(&["status"])["history"]["raw_bytes"]
            .as_u64()
            .unwrap_or(0);
        if raw >= RECORDS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the history holds {} MiB of records, not 300",
            raw >> 20
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    drop(load);
    let pid = d.pid();
    reset_peak(pid);
    let (_, rss_before) = peak_and_rss(pid);
    let asked = Instant::now();
    let v = d.json(&["dump", "--before", "7d", "--label", "whole"]);
    let took = asked.elapsed();
    let (peak, _) = peak_and_rss(pid);
    let grew = peak.saturating_sub(rss_before);
    let bytes = v["bytes"].as_u64().unwrap();
    eprintln!(
        "whole history: {} MiB file in {took:?}, peak RSS +{:.1} MiB",
        bytes >> 20,
        grew as f64 / (1 << 20) as f64
    );
    assert!(
        bytes >= RECORDS,
        "the file holds {} MiB, less than the history's records",
        bytes >> 20
    );
    assert!(
        grew < 64 << 20,
        "the peak RSS grew {:.1} MiB for a {} MiB window",
        grew as f64 / (1 << 20) as f64,
        bytes >> 20
    );
    // An independent reader walks it whole.
    let file = std::fs::File::open(v["path"].as_str().unwrap()).expect("open");
    let linux_perf_data::PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = linux_perf_data::PerfFileReader::parse_file(std::io::BufReader::new(file))
        .expect("linux-perf-data parses it");
    let mut samples = 0u64;
    while let Some(r) = record_iter.next_record(&mut perf_file).expect("a record") {
        if let linux_perf_data::PerfFileRecord::EventRecord { record, .. } = r
            && record.record_type == linux_perf_data::linux_perf_event_reader::RecordType::SAMPLE
        {
            samples += 1;
        }
    }
    let reported: u64 = v["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["records"].as_u64().unwrap())
        .sum();
    assert!(samples > 1_000_000, "{samples} samples");
    assert!(
        samples <= reported,
        "{samples} samples, {reported} records reported"
    );
}
