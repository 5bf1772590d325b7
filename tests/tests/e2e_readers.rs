//! End to end: snapshots of a real flightrecd opened by the readers people
//! use next: `perf data convert --to-json`, `perf report --header-only`,
//! `perf script -F+tod` (wall-clock times), build-id tables, `samply import`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flightrec_tests::{Daemon, Load, perf_script, require_root, test_config};

/// The header features perf 6.1 lists when it finds them (`perf report
/// --header-only`) and a flightrec snapshot must have.
const FEATURES: [&str; 20] = [
    "TRACING_DATA",
    "BUILD_ID",
    "HOSTNAME",
    "OSRELEASE",
    "VERSION",
    "ARCH",
    "NRCPUS",
    "CPUDESC",
    "CPUID",
    "TOTAL_MEM",
    "CMDLINE",
    "EVENT_DESC",
    "CPU_TOPOLOGY",
    "NUMA_TOPOLOGY",
    "PMU_MAPPINGS",
    "CACHE",
    "SAMPLE_TIME",
    "MEM_TOPOLOGY",
    "CLOCKID",
    "CLOCK_DATA",
];

fn dump(d: &Daemon, args: &[&str]) -> std::path::PathBuf {
    let mut all = vec!["dump"];
    all.extend_from_slice(args);
    let v = d.json(&all);
    Path::new(v["path"].as_str().expect("path")).to_path_buf()
}

/// `snapctl decompress FROM -o TO`, which must succeed.
fn decompress(d: &Daemon, from: &Path, to: &Path) {
    let out = d.snapctl(&[
        "decompress",
        from.to_str().unwrap(),
        "-o",
        to.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run reader");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn perf_script_samples(path: &Path) -> usize {
    perf_script(path, &["-F", "cpu,event"])
        .lines()
        .filter(|l| l.trim_start().starts_with('['))
        .count()
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn perf_converts_plain_and_compressed_snapshots_to_json_with_every_sample() {
    require_root("perf_converts_plain_and_compressed_snapshots_to_json");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n");
    let _load = Load::start();
    std::thread::sleep(Duration::from_millis(500));
    for args in [&[][..], &["--compress"][..]] {
        let path = dump(&d, args);
        let json_path = d.dir.path().join("out.json");
        // perf 6.1 segfaulted here when CPUDESC/CPUID were missing.
        run(Command::new("perf")
            .args(["data", "convert", "--force", "--to-json"])
            .arg(&json_path)
            .arg("-i")
            .arg(&path));
        let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap())
            .expect("perf's JSON parses");
        let samples = json["samples"].as_array().expect("samples array");
        let expected = perf_script_samples(&path);
        assert!(expected > 100, "only {expected} samples under load");
        assert_eq!(samples.len(), expected, "JSON vs perf script, {args:?}");
        assert_eq!(json["headers"]["clockid"], 1, "CLOCK_MONOTONIC");
        assert!(
            json["headers"]["cpuid"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        );
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn perf_header_lists_every_feature_and_the_kernel_build_id() {
    require_root("perf_header_lists_every_feature");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n");
    let _load = Load::start();
    std::thread::sleep(Duration::from_millis(300));
    let path = dump(&d, &[]);
    let header = run(Command::new("perf")
        .args(["report", "--header-only", "-I", "-i"])
        .arg(&path));
    let missing = header
        .lines()
        .find_map(|l| l.strip_prefix("# missing features:"))
        .unwrap_or_default();
    for f in FEATURES {
        assert!(
            !missing.split_whitespace().any(|m| m == f),
            "{f} missing: {missing}\n{header}"
        );
    }
    // And what perf prints of them matches this machine.
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    if let Some(model) = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|v| v.split_once(':')))
    {
        let model = model.1.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            header.contains(&format!("# cpudesc : {model}\n")),
            "{header}"
        );
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total = meminfo
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap();
    assert!(
        header.contains(&format!("# total memory : {total} kB\n")),
        "{header}"
    );
    assert!(header.contains("# clockid: monotonic (1)\n"), "{header}");
    assert!(header.contains("# sibling threads : "), "{header}");
    assert!(header.contains("# CPU cache info:\n"), "{header}");
    assert!(header.contains("# pmu mappings: "), "{header}");
    assert!(header.contains("software = 1"), "{header}");

    // perf's build-id list names the running kernel with its build-id.
    let ids = run(Command::new("perf").args(["buildid-list", "-i"]).arg(&path));
    let kernel = run(Command::new("perf").args(["buildid-list", "-k"]));
    let kernel = kernel.trim();
    assert_eq!(kernel.len(), 40, "perf buildid-list -k: {kernel}");
    assert!(
        ids.lines()
            .any(|l| l == format!("{kernel} [kernel.kallsyms]")),
        "{ids}"
    );
}

/// Seconds since the epoch of a `perf script -F+tod` time such as
/// `2026-11-23 15:27:07.120909` (UTC: the test runs with TZ=UTC).
fn tod_seconds(date: &str, time: &str) -> Option<f64> {
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (h, min, s) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + min * 60) as f64 + s)
}

#[test]
fn tod_seconds_reads_perfs_format() {
    assert_eq!(tod_seconds("1970-01-02", "00:00:01.5"), Some(86_401.5));
    assert_eq!(
        tod_seconds("2026-11-23", "15:27:07.120909"),
        Some(1_795_447_627.120909)
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn perf_script_prints_wall_clock_times_of_the_dump() {
    require_root("perf_script_prints_wall_clock_times_of_the_dump");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n");
    let _load = Load::start();
    std::thread::sleep(Duration::from_millis(500));
    let path = dump(&d, &[]);
    let dumped = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let out = Command::new("perf")
        .env("TZ", "UTC")
        .args(["script", "-F", "+tod", "-i"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let times: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let i = f
                .iter()
                .position(|w| w.len() == 10 && w.as_bytes()[4] == b'-')?;
            tod_seconds(f[i], f.get(i + 1)?)
        })
        .collect();
    assert!(
        times.len() > 100,
        "{} timed lines:\n{}",
        times.len(),
        &text[..text.len().min(2000)]
    );
    let newest = times.iter().copied().fold(f64::MIN, f64::max);
    // The newest sample is from just before the dump: within a few seconds
    // (the rings hold about a second of this load) of the real time.
    assert!(
        (dumped - newest).abs() < 3.0,
        "newest sample at {newest}, dump at {dumped}"
    );
}

const SPIN_C: &str = r#"
volatile unsigned long sink;
__attribute__((noinline)) void flightrec_inner_spin(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) sink += i * 7;
}
__attribute__((noinline)) void flightrec_outer_loop(void) {
    for (;;) flightrec_inner_spin(1000000);
}
int main(void) { flightrec_outer_loop(); return 0; }
"#;

/// Kills the child when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `perf report` of `snapshot` for the `spin` program, symbols only.
fn spin_symbols(snapshot: &Path, buildid_dir: &Path) -> String {
    run(Command::new("perf")
        .arg("--buildid-dir")
        .arg(buildid_dir)
        .args(["report", "--stdio", "--comm", "spin", "--sort", "sym", "-i"])
        .arg(snapshot))
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn archive_resolves_the_functions_of_a_deleted_program() {
    require_root("archive_resolves_the_functions_of_a_deleted_program");
    let d = Daemon::start("[snapshot]\ncompression = \"zstd\"\nmin_interval = \"100ms\"\n");
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("spin.c");
    let exe = work.path().join("spin");
    std::fs::write(&src, SPIN_C).unwrap();
    run(Command::new("gcc")
        .args(["-g", "-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src));
    let spin = Running(Command::new(&exe).spawn().expect("run spin"));
    // Deleted while it runs: its symbols can only come from the archive.
    std::fs::remove_file(&exe).unwrap();
    // Dump until a snapshot holds samples of spin (on a busy machine the
    // rings may cover a moment it was not running).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let path = loop {
        std::thread::sleep(Duration::from_millis(300));
        let path = dump(&d, &[]);
        let ids = run(Command::new("perf").args(["buildid-list", "-i"]).arg(&path));
        // The name may carry " (deleted)" when the daemon learned the
        // mapping from /proc after the file was removed.
        if ids.lines().any(|l| l.contains(exe.to_str().unwrap())) {
            break path;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no snapshot with samples of {} within 30 s:\n{ids}",
            exe.display()
        );
    };
    let id = flightrec_tests::snapshot_id(&path);
    let tarball = work.path().join("out.tar");
    let out = d.snapctl(&["--json", "archive", &id, "-o", tarball.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(spin);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let spin_entry = summary["build_ids"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["name"]
                .as_str()
                .is_some_and(|n| n.strip_suffix(" (deleted)").unwrap_or(n) == exe.to_str().unwrap())
        })
        .unwrap_or_else(|| panic!("spin not archived: {summary}"));
    assert!(
        spin_entry["from"].as_str().unwrap().contains("/map_files/"),
        "{spin_entry}"
    );
    assert_eq!(
        summary["bytes"].as_u64(),
        Some(std::fs::metadata(&tarball).unwrap().len())
    );

    // A fresh build-id cache from the archive alone.
    let cache = work.path().join("cache");
    flightrec_tests::unpack(&tarball, &cache);
    let unpacked = cache.join(path.file_name().unwrap());
    assert_eq!(
        std::fs::read(&unpacked).unwrap(),
        std::fs::read(&path).unwrap()
    );
    let resolved = spin_symbols(&unpacked, &cache);
    assert!(resolved.contains("flightrec_inner_spin"), "{resolved}");
    // Without it, perf cannot name them (the binary is gone).
    let empty = work.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let unresolved = spin_symbols(&unpacked, &empty);
    assert!(!unresolved.contains("flightrec_inner_spin"), "{unresolved}");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn decompress_writes_a_plain_copy_perf_reads_the_same() {
    require_root("decompress_writes_a_plain_copy_perf_reads_the_same");
    let d = Daemon::start("[snapshot]\ncompression = \"zstd\"\nmin_interval = \"100ms\"\n");
    let _load = Load::start();
    std::thread::sleep(Duration::from_millis(300));
    let path = dump(&d, &[]);
    let plain = d.dir.path().join("plain.perf.data");
    decompress(&d, &path, &plain);
    assert!(std::fs::metadata(&plain).unwrap().len() > 2 * std::fs::metadata(&path).unwrap().len());
    let header = run(Command::new("perf")
        .args(["report", "--header-only", "-i"])
        .arg(&plain));
    assert!(!header.contains("# compressed"), "{header}");
    let before = perf_script(&path, &[]);
    assert!(before.lines().count() > 100);
    assert_eq!(perf_script(&plain, &[]), before);
    // An uncompressed file is refused with a clear message.
    let again = d.snapctl(&["decompress", plain.to_str().unwrap(), "-o", "/dev/null"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("the file is not compressed"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// What the linux-perf-data crate (the perf.data parser of samply, the
/// Firefox Profiler's importer) finds in a snapshot.
fn read_with_linux_perf_data(path: &Path) -> (usize, Vec<(String, String)>, Option<u32>) {
    use linux_perf_data::linux_perf_event_reader::EventRecord;
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    let file = std::fs::File::open(path).unwrap();
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(std::io::BufReader::new(file))
        .expect("samply's parser reads it");
    let build_ids = perf_file
        .build_ids()
        .unwrap()
        .values()
        .map(|d| {
            (
                String::from_utf8_lossy(&d.path).into_owned(),
                d.build_id.iter().map(|b| format!("{b:02x}")).collect(),
            )
        })
        .collect();
    let clockid = perf_file.clock_data().unwrap().map(|c| c.clockid);
    let mut samples = 0;
    while let Some(record) = record_iter.next_record(&mut perf_file).unwrap() {
        if let PerfFileRecord::EventRecord { record, .. } = record
            && let Ok(EventRecord::Sample(_)) = record.parse()
        {
            samples += 1;
        }
    }
    (samples, build_ids, clockid)
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn samplys_parser_finds_every_sample_and_the_build_ids() {
    require_root("samplys_parser_finds_every_sample_and_the_build_ids");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n");
    let _load = Load::start();
    std::thread::sleep(Duration::from_millis(500));
    let kernel = run(Command::new("perf").args(["buildid-list", "-k"]));
    for args in [&[][..], &["--compress"][..]] {
        let path = dump(&d, args);
        let (samples, build_ids, clockid) = read_with_linux_perf_data(&path);
        let expected = perf_script_samples(&path);
        assert!(expected > 100, "only {expected} samples");
        assert_eq!(
            samples, expected,
            "linux-perf-data vs perf script, {args:?}"
        );
        assert_eq!(clockid, Some(1), "CLOCK_MONOTONIC");
        assert!(
            build_ids.contains(&("[kernel.kallsyms]".to_string(), kernel.trim().to_string())),
            "{build_ids:?}"
        );
        // The load runs ls: its binary is among the files with samples.
        assert!(
            build_ids.iter().any(|(p, _)| p.ends_with("/ls")),
            "{build_ids:?}"
        );
    }
}

/// samply's executable: `$FLIGHTREC_TEST_SAMPLY`, else `samply` on PATH
/// (tests/prepare-host installs it). None, after saying why, when there is
/// none; under `CI=true` that is a failure.
fn find_samply(test: &str) -> Option<PathBuf> {
    let samply =
        std::env::var_os("FLIGHTREC_TEST_SAMPLY").map_or_else(|| "samply".into(), PathBuf::from);
    let works = Command::new(&samply)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(samply);
    }
    let why = format!(
        "no samply at {} (run tests/prepare-host, or set FLIGHTREC_TEST_SAMPLY)",
        samply.display()
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    None
}

/// Processes busy on the CPU under a name no other process has (a copy of
/// /bin/sh named `name`, so the kernel's comm is `name`); killed on drop.
struct Spinners {
    children: Vec<std::process::Child>,
    _dir: tempfile::TempDir,
}

impl Spinners {
    fn start(name: &str, count: usize) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let exe = dir.path().join(name);
        flightrec_tests::copy_executable("/bin/sh", &exe);
        let children = (0..count)
            .map(|_| {
                Command::new(&exe)
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .expect("spawn spinner")
            })
            .collect();
        Spinners {
            children,
            _dir: dir,
        }
    }

    fn pids(&self) -> Vec<u64> {
        self.children.iter().map(|c| u64::from(c.id())).collect()
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn samply_imports_a_snapshot_with_the_samples_of_a_busy_process() {
    const TEST: &str = "samply_imports_a_snapshot_with_the_samples_of_a_busy_process";
    const SPINNER: &str = "fr-samply-spin";
    require_root(TEST);
    let Some(samply) = find_samply(TEST) else {
        return;
    };
    // samply profiles the file's first event and, when a sched_switch
    // event follows, adds off-CPU samples of its own: cpu-clock alone gives
    // it samples to count one for one against perf script's.
    let dir = tempfile::tempdir().expect("tempdir");
    let text = test_config(
        dir.path(),
        "[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n",
    )
    .replacen("[[event]]\nname = \"sched:sched_switch\"\n\n", "", 1);
    assert!(!text.contains("sched_switch"), "{text}");
    let d = Daemon::start_in(dir, &text, &[]);
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let spinners = Spinners::start(SPINNER, cpus);

    // Dump until the window holds enough of the spinners' samples.
    let spinner_samples = |path: &Path| {
        perf_script(path, &["-F", "comm,event"])
            .lines()
            .filter(|l| {
                let mut words = l.split_whitespace();
                words.next() == Some(SPINNER) && words.next() == Some("cpu-clock:")
            })
            .count()
    };
    // Each dump's window starts where the previous one ended (the lossless
    // freeze): wait longer before each, so a busy machine that gives the
    // spinners little CPU still fills a window, at most 60 s in all.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut wait = Duration::from_millis(500);
    let (path, expected) = loop {
        std::thread::sleep(wait);
        let path = dump(&d, &[]);
        let n = spinner_samples(&path);
        eprintln!("{TEST}: {n} samples of {SPINNER} in {}", path.display());
        if n >= 200 {
            break (path, n);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {n} cpu-clock samples of {SPINNER} in {}",
            path.display()
        );
        wait = (wait * 2).min(Duration::from_secs(8));
    };

    let out_dir = tempfile::tempdir().expect("tempdir");
    let ours = spinners.pids();
    let check = |snapshot: &Path, expected: usize, what: &str| {
        let (counted, pids) = samply_samples_of(&samply, snapshot, out_dir.path(), SPINNER);
        eprintln!(
            "{TEST}: {what}: perf script {expected} cpu-clock samples of {SPINNER}, samply \
             {counted}"
        );
        assert!(counted > 0, "{what}: samply found no samples of {SPINNER}");
        let expected = expected as u64;
        assert!(
            counted.abs_diff(expected) <= (expected / 100).max(2),
            "{what}: samply {counted} vs perf script {expected} samples of {SPINNER}"
        );
        assert!(
            !pids.is_empty() && pids.iter().all(|p| ours.contains(p)),
            "{what}: samply's {SPINNER} pids {pids:?}, spawned {ours:?}"
        );
    };
    check(&path, expected, "plain snapshot");

    // samply 0.13.1 finds no sample in zstd-compressed files (perf record
    // -z's included): it opens the plain copy `snapctl decompress` writes.
    let packed = dump(&d, &["--compress"]);
    let plain = out_dir.path().join("plain.perf.data");
    decompress(&d, &packed, &plain);
    check(&plain, spinner_samples(&packed), "decompressed copy");
}

/// `samply import` of `snapshot` (profile saved in `out_dir`, no server):
/// the samples of the threads of processes named `process`, and the pids
/// of those with samples.
fn samply_samples_of(
    samply: &Path,
    snapshot: &Path,
    out_dir: &Path,
    process: &str,
) -> (u64, Vec<u64>) {
    let profile_path = out_dir.join("profile.json");
    run(Command::new(samply)
        .args(["import", "--save-only", "--no-open", "-o"])
        .arg(&profile_path)
        .arg(snapshot));
    let profile: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&profile_path).expect("samply wrote the profile"))
            .expect("samply's profile is JSON");
    let threads: Vec<&serde_json::Value> = profile["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["processName"] == process)
        .collect();
    let counted = threads
        .iter()
        .map(|t| t["samples"]["length"].as_u64().expect("samples.length"))
        .sum();
    // pid is a string; samply adds a suffix (".1") to a pid it saw start
    // twice (the process table's record, then the exec inside the window).
    let pids = threads
        .iter()
        .filter(|t| t["samples"]["length"].as_u64() > Some(0))
        .filter_map(|t| {
            t["pid"]
                .as_str()
                .and_then(|p| p.split('.').next()?.parse().ok())
                .or(t["pid"].as_u64())
        })
        .collect();
    (counted, pids)
}
