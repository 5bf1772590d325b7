//! End to end: containers. Every sample knows its cgroup, as perf's does;
//! a dump scoped to a container holds it alone; a container gone before
//! the dump is still named; the runtime names it; bad requests and keys
//! are named. Real Podman (runc, cgroupfs), real cgroups, real perf.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flightrec_tests::containers::{Cgroup, Container};
use flightrec_tests::{Daemon, copy_executable, require_root, test_config};
use serde_json::Value;

/// The rows of `perf report --stdio` with `args` for the section of
/// `event` (perf prints one per event), split at whitespace.
fn report_rows(path: &Path, args: &[&str], event: &str) -> Vec<Vec<String>> {
    let out = Command::new("perf")
        .args(["report", "--stdio", "--no-children"])
        .args(args)
        .arg("-i")
        .arg(path)
        .output()
        .expect("perf report");
    assert!(out.status.success(), "perf report: {out:?}");
    let mut current = String::new();
    let mut rows = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(rest) = line.strip_prefix("# Samples:") {
            current = rest
                .split_once("of event '")
                // `--time` adds ` (time slices: ...)` after the name.
                .and_then(|(_, e)| e.split_once('\''))
                .map(|(e, _)| e.to_string())
                .unwrap_or_default();
        } else if current == event && !line.starts_with('#') && !line.trim().is_empty() {
            rows.push(line.split_whitespace().map(str::to_string).collect());
        }
    }
    rows
}

/// `perf report --sort cgroup` of a file: share (percent) per cgroup path.
fn cgroup_shares(path: &Path, event: &str) -> BTreeMap<String, f64> {
    report_rows(path, &["--sort", "cgroup"], event)
        .into_iter()
        .filter_map(|row| {
            let pct = row.first()?.strip_suffix('%')?.parse().ok()?;
            Some((row.get(1)?.clone(), pct))
        })
        .collect()
}

/// `perf report -n --sort cgroup` of a file: samples per cgroup path.
fn cgroup_samples(path: &Path, event: &str) -> BTreeMap<String, u64> {
    report_rows(path, &["-n", "--sort", "cgroup"], event)
        .into_iter()
        .filter_map(|row| Some((row.get(2)?.clone(), row.get(1)?.parse().ok()?)))
        .collect()
}

/// The times of the first and last sample in the file at `path`, in
/// seconds, as perf's header gives them.
fn sample_span(path: &str) -> (f64, f64) {
    let out = Command::new("perf")
        .args(["report", "--header-only", "-i", path])
        .output()
        .expect("perf report --header-only");
    let header = String::from_utf8_lossy(&out.stdout).into_owned();
    let seconds = |key: &str| -> f64 {
        header
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_start_matches(':').trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key:?} in perf's header of {path}:\n{header}"))
    };
    (
        seconds("# time of first sample"),
        seconds("# time of last sample"),
    )
}

/// A daemon with 32 MiB rings (several seconds under load), cgroups
/// on, its runtime socket `socket` if any.
fn daemon(socket: Option<&Path>) -> Daemon {
    let dir = tempfile::tempdir().expect("tempdir");
    let sockets = socket.map_or(String::from("[]"), |s| format!("[\"{}\"]", s.display()));
    let text = test_config(
        dir.path(),
        &format!(
            "[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n\n[containers]\n\
             cgroups = true\nruntime_sockets = {sockets}\n"
        ),
    )
    .replace("per_cpu = \"256KiB\"", "per_cpu = \"32MiB\"")
    .replace("frequency = 999", "frequency = 4000");
    Daemon::start_in(dir, &text, &[])
}

/// A CPU-bound program named `name` (a copy of `yes`), in `cgroup`.
fn burner(cgroup: &Cgroup, dir: &Path, name: &str) -> std::process::Child {
    let bin = dir.join(name);
    copy_executable("/usr/bin/yes", &bin);
    cgroup.spawn(&bin, &[])
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn every_sample_knows_its_cgroup_with_the_shares_perf_gives() {
    require_root("every_sample_knows_its_cgroup_with_the_shares_perf_gives");
    let d = daemon(None);
    let status = d.json(&["status"]);
    assert_eq!(status["cgroups"]["recorded"], true, "{status}");
    let busy = Container::run("fr-e2e-share", &[], "while :; do :; done");
    let other = Cgroup::make("/fr-e2e-share/other.service");
    let mut child = burner(&other, d.dir.path(), "fr-other-burn");
    std::thread::sleep(Duration::from_millis(500));
    // perf over five seconds at the daemon's rate, on the daemon's clock
    // (CLOCK_MONOTONIC), then a dump of exactly the span of its samples
    // (40,000 samples: a share's sampling error is well under the point
    // allowed).
    let perf_file = d.dir.path().join("perf.data");
    let perf = Command::new("perf")
        .args(["record", "-q", "--all-cgroups", "-a", "-k", "monotonic"])
        .args(["-e", "cpu-clock", "-F", "4000", "-o"])
        .arg(&perf_file)
        .args(["--", "sleep", "5"])
        .stderr(Stdio::null())
        .status()
        .expect("perf record");
    assert!(perf.success());
    let (first, last) = sample_span(perf_file.to_str().unwrap());
    let realtime_minus_monotonic = {
        use nix::time::{ClockId, clock_gettime};
        let ns = |c| {
            let t = clock_gettime(c).expect("clock_gettime");
            t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9
        };
        ns(ClockId::CLOCK_REALTIME) - ns(ClockId::CLOCK_MONOTONIC)
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let at = format!(
        "-{}us",
        ((now - last - realtime_minus_monotonic) * 1e6) as u64
    );
    let before = format!("{}us", ((last - first) * 1e6) as u64);
    let v = d.json(&["dump", "--at", &at, "--before", &before]);
    assert_eq!(
        v["window_missing_ns"], 0,
        "the rings held the whole window: {v}"
    );
    let _ = child.kill();
    let _ = child.wait();
    let ours = cgroup_samples(Path::new(v["path"].as_str().unwrap()), "cpu-clock");
    let theirs = cgroup_samples(&perf_file, "cpu-clock");
    eprintln!("flightrec {ours:?}\nperf {theirs:?}");
    let (n_ours, n_theirs) = (
        ours.values().sum::<u64>() as f64,
        theirs.values().sum::<u64>() as f64,
    );
    for cgroup in [busy.cgroup(), other.path.clone()] {
        let (k_ours, k_theirs) = (
            ours.get(&cgroup).copied().unwrap_or(0),
            theirs.get(&cgroup).copied().unwrap_or(0),
        );
        // Each burner has a CPU of its own on an idle machine (about half
        // of the 40,000 samples); a loaded one leaves them less (a
        // context-switching load on one CPU left one of them 1.75%).
        assert!(
            k_theirs >= 100,
            "{cgroup} has {k_theirs} samples in perf's file: not busy enough to compare"
        );
        // Two samplings of one span: their shares differ by sampling
        // alone by about `sd`, whatever the share; four of it are
        // allowed. A cgroup of 100 samples or more then never passes
        // with none.
        let (a, b) = (k_ours as f64 / n_ours, k_theirs as f64 / n_theirs);
        let sd = (b * (1.0 - b) * (1.0 / n_ours + 1.0 / n_theirs)).sqrt();
        assert!(
            (a - b).abs() <= 4.0 * sd,
            "{cgroup}: {:.2}% of {n_ours} samples in flightrec's snapshot, {:.2}% of \
             {n_theirs} in perf's (at most {:.2} points apart)",
            100.0 * a,
            100.0 * b,
            400.0 * sd
        );
    }
    // The sidecar and List name the container.
    let listed = d.list();
    let snap = listed
        .iter()
        .find(|s| s["path"] == v["path"])
        .expect("listed");
    let containers = snap["containers"].as_array().expect("containers");
    assert!(
        containers
            .iter()
            .any(|c| c["runtime"] == "podman"
                && busy.id.starts_with(c["id"].as_str().unwrap_or("-"))),
        "{snap}"
    );
    assert!(
        containers
            .iter()
            .any(|c| c["runtime"] == "systemd" && c["id"] == "other.service"),
        "{snap}"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_dump_scoped_to_a_container_holds_it_alone() {
    require_root("a_dump_scoped_to_a_container_holds_it_alone");
    let d = daemon(None);
    let busy = Container::run("fr-e2e-scope", &[], "while :; do :; done");
    let other = Cgroup::make("/fr-e2e-scope/secret.service");
    let mut child = burner(&other, d.dir.path(), "fr-secret-burn");
    std::thread::sleep(Duration::from_secs(2));
    // The same second, twice: the whole machine and the container alone.
    // The instant is fixed here, not relative to each request: on a busy
    // machine the two requests arrive a second or more apart.
    let at =
        humantime::format_rfc3339_nanos(std::time::SystemTime::now() - Duration::from_millis(500))
            .to_string();
    let at = at.as_str();
    let whole = d.json(&["dump", "--at", at, "--before", "1s", "--label", "whole"]);
    let scoped = d.json(&[
        "dump",
        "--at",
        at,
        "--before",
        "1s",
        "--container",
        &busy.id[..12],
        "--label",
        "scoped",
    ]);
    let by_name = d.json(&["dump", "--cgroup", &busy.cgroup(), "--label", "by-path"]);
    let _ = child.kill();
    let _ = child.wait();
    let path = |v: &Value| v["path"].as_str().unwrap().to_string();
    let scoped_shares = cgroup_shares(Path::new(&path(&scoped)), "cpu-clock");
    assert_eq!(
        scoped_shares.keys().collect::<Vec<_>>(),
        [&busy.cgroup()],
        "every sample of the scoped dump is the container's"
    );
    // Counted over the span both files hold: under a heavy load the rings
    // may no longer reach the start of the second when the second dump
    // is cut.
    let span = {
        let (a, b) = (sample_span(&path(&whole)), sample_span(&path(&scoped)));
        (a.0.max(b.0), a.1.min(b.1))
    };
    assert!(
        span.1 - span.0 >= 0.25,
        "the two dumps share {:.3} s: {whole}\n{scoped}",
        span.1 - span.0
    );
    let time = format!("--time={:.6},{:.6}", span.0, span.1);
    let samples_of = |p: &str, cgroup: &str| -> u64 {
        report_rows(Path::new(p), &["-F", "sample,cgroup", &time], "cpu-clock")
            .into_iter()
            .filter(|row| row.get(1).is_some_and(|c| c == cgroup))
            .filter_map(|row| row.first()?.parse::<u64>().ok())
            .sum()
    };
    let (in_scoped, in_whole) = (
        samples_of(&path(&scoped), &busy.cgroup()),
        samples_of(&path(&whole), &busy.cgroup()),
    );
    eprintln!("container samples: scoped {in_scoped}, whole {in_whole}");
    assert!(in_whole > 100, "{in_whole}");
    assert!(
        in_scoped as f64 >= 0.95 * in_whole as f64,
        "the scoped dump holds {in_scoped} of the container's {in_whole} samples"
    );
    // Nothing of the other one: neither its name nor its path.
    let script = Command::new("perf")
        .args(["script", "-i", &path(&scoped)])
        .output()
        .expect("perf script");
    let text = String::from_utf8_lossy(&script.stdout);
    assert!(text.lines().count() > 100);
    assert!(
        !text.contains("fr-secret-burn"),
        "the other process's name leaked"
    );
    assert!(
        !text.contains("secret.service"),
        "the other cgroup's path leaked"
    );
    let raw = std::fs::read(path(&scoped)).unwrap();
    assert!(
        !raw.windows(b"fr-secret-burn".len())
            .any(|w| w == b"fr-secret-burn"),
        "the other process's name is in the file"
    );
    assert_eq!(scoped["scope"], format!("container:{}", &busy.id[..12]));
    assert!(
        cgroup_shares(Path::new(&path(&by_name)), "cpu-clock")
            .keys()
            .all(|k| k == &busy.cgroup())
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_container_gone_before_the_dump_is_still_named_and_by_its_runtime() {
    require_root("a_container_gone_before_the_dump_is_still_named_and_by_its_runtime");
    // Podman's Docker-compatible API on a socket of the test's own.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("podman.sock");
    let mut service = Command::new("podman")
        .args([
            "--runtime",
            "runc",
            "--cgroup-manager",
            "cgroupfs",
            "system",
            "service",
            "--time=0",
        ])
        .arg(format!("unix://{}", socket.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("podman system service");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "podman system service never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let d = daemon(Some(&socket));
    let gone = Container::run(
        "fr-e2e-gone",
        &["io.kubernetes.pod.name=fr-pod"],
        "while :; do :; done",
    );
    let cgroup = gone.cgroup();
    // A witness that the daemon named it: a dump listing it by name.
    let deadline = Instant::now() + Duration::from_secs(30);
    let id = loop {
        let v = d.json(&["dump", "--before", "1s"]);
        let snap = d
            .list()
            .into_iter()
            .find(|s| s["path"] == v["path"])
            .expect("listed");
        let named = snap["containers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "fr-e2e-gone" && c["pod"] == "fr-pod");
        if named {
            break snap["id"].as_str().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "never named by the runtime: {snap}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // A dump of it by the runtime's name holds its samples alone.
    let by_name = d.json(&["dump", "--container", "fr-e2e-gone", "--before", "1s"]);
    assert_eq!(by_name["scope"], "container:fr-e2e-gone", "{by_name}");
    let shares = cgroup_shares(Path::new(by_name["path"].as_str().unwrap()), "cpu-clock");
    assert_eq!(
        shares.keys().collect::<Vec<_>>(),
        [&cgroup],
        "every sample of the dump by name is the container's"
    );
    // Its samples are labelled with the runtime's name in pprof, rooted
    // at it in the folded export, and named in the report's header.
    let out = |name: &str| dir.path().join(name);
    let exported = d.snapctl(&[
        "export",
        &id,
        "--format",
        "pprof",
        "-o",
        out("p.pb.gz").to_str().unwrap(),
    ]);
    assert!(exported.status.success(), "{exported:?}");
    let tags = flightrec_tests::pprof::tags(&out("p.pb.gz"));
    let count = |key: &str, value: &str| {
        tags.get(key)
            .and_then(|v| v.iter().find(|(x, _)| x == value))
            .map_or(0, |(_, n)| *n)
    };
    let in_container = count("container", "fr-e2e-gone");
    assert!(in_container > 0, "no sample labelled fr-e2e-gone: {tags:?}");
    assert_eq!(count("pod", "fr-pod"), in_container, "{tags:?}");
    assert_eq!(count("cgroup", &cgroup), in_container, "{tags:?}");
    let folded = d.snapctl(&[
        "export",
        &id,
        "--format",
        "collapsed",
        "--by",
        "container",
        "-o",
        "-",
    ]);
    assert!(folded.status.success(), "{folded:?}");
    let folded = String::from_utf8_lossy(&folded.stdout);
    let rooted: u64 = folded
        .lines()
        .filter(|l| l.starts_with("fr-e2e-gone;"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert_eq!(rooted, in_container, "{folded}");
    let page = d.snapctl(&["report", &id, "-o", out("r.html").to_str().unwrap()]);
    assert!(page.status.success(), "{page:?}");
    let html = std::fs::read_to_string(out("r.html")).unwrap();
    // The page draws its header from its data: the name is in that.
    assert!(
        html.contains("\"fr-e2e-gone\""),
        "the page's data does not name the container"
    );
    gone.remove();
    assert!(
        !Path::new(&format!(
            "{}{}",
            flightrec_tests::containers::cgroup2_mount().display(),
            cgroup
        ))
        .exists(),
        "podman removed its cgroup"
    );
    let v = d.json(&["dump", "--label", "after"]);
    let shares = cgroup_shares(Path::new(v["path"].as_str().unwrap()), "cpu-clock");
    assert!(
        shares.contains_key(&cgroup),
        "the gone container's cgroup {cgroup} is not named: {shares:?}"
    );
    let _ = service.kill();
    let _ = service.wait();
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn bad_scopes_are_named_in_requests_and_the_config() {
    require_root("bad_scopes_are_named_in_requests_and_the_config");
    let d = daemon(None);
    let refused = |args: &[&str], code: &str, wanted: &str| {
        let out = d.snapctl(&[&["--json", "dump"], args].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
        assert_eq!(err["code"], code, "{args:?}: {err}");
        assert!(
            err["error"].as_str().unwrap().contains(wanted),
            "{args:?}: {err}"
        );
    };
    refused(
        &["--cgroup", "relative/path"],
        "InvalidArgument",
        "cgroup: ",
    );
    refused(&["--container", "a b"], "InvalidArgument", "container: ");
    refused(
        &["--container", "no-such-container"],
        "FailedPrecondition",
        "container:no-such-container",
    );
    refused(
        &["--cgroup", "/no/such/cgroup"],
        "FailedPrecondition",
        "cgroup:/no/such/cgroup",
    );
    let config = d.dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "[containers]\nruntime_sockets = [\"relative.sock\"]\n",
    )
    .unwrap();
    let out = flightrec_tests::flightrecd_to_end("--check-config", &config);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":2:20") && err.contains("not an absolute path"),
        "line and column: {err}"
    );
}
