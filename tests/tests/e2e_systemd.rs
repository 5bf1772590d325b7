//! The Debian package and its unit, deployed as users deploy them: the
//! `.deb` that `cargo deb -p flightrecd` builds is installed with apt-get
//! on a machine where a real systemd runs as PID 1 (`tests/boot-systemd`,
//! an overlay of the host's root: nothing reaches the host), and every
//! check goes through systemctl, the journal, snapctl as a user would run
//! it and perf as the reader. Needs root (namespaces, mounts, perf events).

use std::path::Path;
use std::time::{Duration, Instant};

use flightrec_tests::systemd::{Machine, SHARE_INSIDE};
use flightrec_tests::{NatsServer, bin_path, debian_package, require_root, testing_flightrecd};

const UNIT: &str = "flightrecd";
const CONFIG: &str = "/etc/flightrec/flightrec.toml";
const SOCKET: &str = "/run/flightrec/flightrecd.sock";

/// The package built for this test run, installed with apt-get as the
/// README says; returns the package file's name.
fn install(m: &Machine) -> String {
    let deb = debian_package();
    let name = deb
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a package file name")
        .to_string();
    std::fs::copy(&deb, m.share.path().join(&name)).expect("copy the package");
    m.ok(&format!(
        "cd {SHARE_INSIDE} && DEBIAN_FRONTEND=noninteractive apt-get install -y -q ./{name}"
    ));
    name
}

/// `snapctl --json ARGS` inside the machine, as root, parsed.
fn snapctl_json(m: &Machine, args: &str) -> serde_json::Value {
    let out = m.ok(&format!("snapctl --json {args}"));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("snapctl {args}: not JSON ({e}): {out}"))
}

fn snapshots(m: &Machine) -> Vec<serde_json::Value> {
    snapctl_json(m, "list")["snapshots"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Journal entries of the unit after `cursor`: (microseconds since the
/// epoch, message).
fn journal_entries(m: &Machine, cursor: &str) -> Vec<(u64, String)> {
    m.ok(&format!(
        "journalctl --no-pager -q -o json --after-cursor='{cursor}' -u {UNIT}"
    ))
    .lines()
    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    .filter_map(|e| {
        let at = e["__REALTIME_TIMESTAMP"].as_str()?.parse().ok()?;
        // A message with bytes that are not UTF-8 comes as an array.
        let msg = e["MESSAGE"].as_str()?.to_string();
        Some((at, msg))
    })
    .collect()
}

fn main_pid(m: &Machine) -> u32 {
    m.property(UNIT, "MainPID").parse().expect("MainPID")
}

/// Replaces the config and restarts the daemon; waits until it answers.
fn restart_with(m: &Machine, config: &str) {
    std::fs::write(m.share.path().join("flightrec.toml"), config).expect("write config");
    m.ok(&format!(
        "install -m 0644 {SHARE_INSIDE}/flightrec.toml {CONFIG} && systemctl restart {UNIT}"
    ));
    assert_eq!(m.property(UNIT, "ActiveState"), "active");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn the_package_installs_runs_and_purges_under_systemd() {
    require_root("the_package_installs_runs_and_purges_under_systemd");
    let m = Machine::boot();
    the_package_installs_runs_and_purges(&m);
}

/// The README's order on a machine where flightrec ran before: the
/// quickstart (its first command), then everything the package test
/// checks, on the same machine. The machine boots over leftovers of
/// earlier runs (snapshots in /var/lib/flightrec, a config in
/// /etc/flightrec that the daemon would refuse, an earlier quickstart's
/// snapshot), as a host where they lie would look; the package must find
/// none of flightrec's own state, and the quickstart must leave none.
#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn the_quickstart_then_the_package_pass_in_that_order_where_flightrec_ran_before() {
    require_root("the_quickstart_then_the_package_pass_in_that_order");
    use std::io::{BufRead, BufReader};
    let leftovers = tempfile::tempdir().unwrap();
    let planted = |path: &str, text: &str| {
        let path = leftovers.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    planted(
        "var/lib/flightrec/snapshots/host-20261120T221133Z-000001-old.perf.data",
        "PERFILE2",
    );
    planted(
        "var/lib/flightrec/snapshots/.host-20261120T221133Z-000001-old.meta",
        r#"{"trigger":"api","created_unix_ns":1795212693000000000}"#,
    );
    planted(
        "etc/flightrec/flightrec.toml",
        "[buffers]\nper_cpu = \"3MiB\"\n",
    );
    let earlier =
        "/var/lib/flightrec-quickstart/snapshots/host-20261120T221133Z-000002-first.perf.data";
    planted(&earlier[1..], "PERFILE2");
    let m = Machine::boot_over(leftovers.path());
    assert!(
        m.path(earlier).exists(),
        "the leftovers were not laid over the machine's root"
    );
    for gone in ["/var/lib/flightrec", "/etc/flightrec", "/run/flightrec"] {
        assert!(
            !m.path(gone).exists(),
            "the machine booted with the host's {gone}"
        );
    }

    // The quickstart as the README runs it, on this test's binaries.
    let bin = m.share.path().join("bin");
    let scripts = m.share.path().join("packaging");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&scripts).unwrap();
    for name in ["flightrecd", "snapctl"] {
        std::fs::copy(bin_path(name), bin.join(name)).unwrap();
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::copy(
        repo.join("packaging/quickstart"),
        scripts.join("quickstart"),
    )
    .unwrap();
    let log_path = m.share.path().join("quickstart.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut quickstart = m
        .command(&[
            &format!("FLIGHTREC_BIN_DIR={SHARE_INSIDE}/bin"),
            &format!("{SHARE_INSIDE}/packaging/quickstart"),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("run the quickstart");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = quickstart.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("flightrecd keeps recording") {
                let _ = tx.send(());
            }
            lines.push(line);
        }
        lines
    });
    if rx.recv_timeout(Duration::from_secs(120)).is_err() {
        let _ = quickstart.kill();
        panic!(
            "the quickstart took no first snapshot in 120s:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }
    // Ctrl-C: SIGINT to the script (nsenter's child, in the machine).
    let nsenter = quickstart.id();
    let script: i32 = std::fs::read_to_string(format!("/proc/{nsenter}/task/{nsenter}/children"))
        .unwrap()
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the quickstart's pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(script),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = quickstart.wait().unwrap();
    let printed = reader.join().unwrap().join("\n");
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert_eq!(status.code(), Some(130), "{printed}\n{log}");
    // It stopped the daemon it started (nothing else would), which took its
    // socket with it.
    assert_eq!(m.sh("pidof flightrecd").trim(), "", "{printed}\n{log}");
    assert!(!m.path(SOCKET).exists(), "the quickstart left the socket");
    // Its first snapshot, in its own directory, is the CPU profile first
    // and plain: perf report leads with cpu-clock, and it says so.
    let first = printed
        .lines()
        .find_map(|l| l.strip_prefix("quickstart: first snapshot: "))
        .unwrap_or_else(|| panic!("no first snapshot in:\n{printed}"))
        .to_string();
    assert!(
        first.starts_with("/var/lib/flightrec-quickstart/snapshots/")
            && first.ends_with("-first.perf.data"),
        "{first}"
    );
    let events: Vec<&str> = printed
        .lines()
        .filter_map(|l| l.strip_prefix("# Samples: "))
        .collect();
    assert!(
        events
            .first()
            .is_some_and(|e| e.ends_with("of event 'cpu-clock'")),
        "the quickstart's perf report does not lead with the CPU profile:\n{printed}"
    );
    let header = m.ok(&format!("perf report --header-only -i {first} 2>/dev/null"));
    assert!(
        !header.contains("compressed"),
        "the default snapshot is compressed:\n{header}"
    );
    // Nothing of it where the package keeps its state.
    for gone in ["/var/lib/flightrec", "/etc/flightrec"] {
        assert!(!m.path(gone).exists(), "the quickstart left {gone}");
    }

    // Then the package, on the same machine.
    the_package_installs_runs_and_purges(&m);
}

/// Installs the package on `m`, checks what it holds and does under
/// systemd, and purges it.
fn the_package_installs_runs_and_purges(m: &Machine) {
    let deb = debian_package();
    let started = Instant::now();
    install(m);

    // --- What the package holds and what its scripts did.
    let files = m.ok("dpkg -L flightrecd");
    for path in [
        "/usr/bin/flightrecd",
        "/usr/bin/snapctl",
        "/usr/lib/systemd/system/flightrecd.service",
        "/usr/lib/sysusers.d/flightrecd.conf",
        "/usr/lib/tmpfiles.d/flightrecd.conf",
        CONFIG,
        "/usr/share/doc/flightrecd/README.md",
        "/usr/share/man/man8/flightrecd.8.gz",
        "/usr/share/man/man5/flightrec.toml.5.gz",
        "/usr/share/man/man1/snapctl.1.gz",
        "/usr/share/man/man1/snapctl-fleet-fetch.1.gz",
        "/usr/share/bash-completion/completions/snapctl",
        "/usr/share/zsh/vendor-completions/_snapctl",
        "/usr/share/fish/vendor_completions.d/snapctl.fish",
    ] {
        assert!(
            files.lines().any(|l| l == path),
            "the package lacks {path}:\n{files}"
        );
    }
    let depends = m.ok("dpkg-query -W -f '${Depends}' flightrecd");
    for needle in [
        "init-system-helpers",
        "systemd | systemd-standalone-sysusers",
    ] {
        assert!(
            depends.contains(needle),
            "{needle} not in Depends: {depends}"
        );
    }
    // perf reads the snapshots; the daemon runs without it.
    assert!(!depends.contains("linux-perf"), "Depends: {depends}");
    let recommends = m.ok("dpkg-query -W -f '${Recommends}' flightrecd");
    assert!(
        recommends.contains("linux-perf"),
        "Recommends: {recommends}"
    );
    let conffiles = m.ok("dpkg-query -W -f '${Conffiles}' flightrecd");
    assert!(conffiles.contains(CONFIG), "Conffiles: {conffiles}");
    let dbgsym = debian_package()
        .parent()
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("flightrecd-dbgsym_") && n.ends_with(".ddeb"))
        })
        .expect("cargo deb wrote a flightrecd-dbgsym_*.ddeb beside the package");
    let listed = std::process::Command::new("dpkg-deb")
        .arg("-c")
        .arg(&dbgsym)
        .output()
        .expect("run dpkg-deb -c");
    assert!(
        listed.status.success(),
        "dpkg-deb -c {}: {listed:?}",
        dbgsym.display()
    );
    let dbgsym_files = String::from_utf8_lossy(&listed.stdout).into_owned();
    for bin in ["/usr/bin/flightrecd", "/usr/bin/snapctl"] {
        let sections = m.ok(&format!("readelf -S -W {bin}"));
        assert!(
            !sections.contains(".debug_info") && !sections.contains(".debug_line"),
            "{bin} is not stripped:\n{sections}"
        );
        // Its debug symbols are in the -dbgsym package, found by build-id.
        assert!(sections.contains(".gnu_debuglink"), "{bin}:\n{sections}");
        let notes = m.ok(&format!("readelf -n {bin}"));
        let build_id = notes
            .lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: "))
            .unwrap_or_else(|| panic!("{bin} has no build-id:\n{notes}"))
            .trim()
            .to_string();
        let (dir, rest) = build_id.split_at(2);
        let debug_file = format!("./usr/lib/debug/.build-id/{dir}/{rest}.debug");
        assert!(
            dbgsym_files.lines().any(|l| l.ends_with(&debug_file)),
            "{bin}: {debug_file} not in the -dbgsym package:\n{dbgsym_files}"
        );
    }
    assert!(
        m.ok("getent group flightrec").starts_with("flightrec:"),
        "sysusers created no group"
    );

    // --- Enabled and started by the package, ready through READY=1.
    assert_eq!(
        m.ok(&format!("systemctl is-enabled {UNIT}")).trim(),
        "enabled"
    );
    assert_eq!(m.property(UNIT, "ActiveState"), "active");
    assert_eq!(m.property(UNIT, "SubState"), "running");
    assert_eq!(m.property(UNIT, "Type"), "notify");
    assert_eq!(m.property(UNIT, "WatchdogUSec"), "30s");
    // A Type=notify start returns once READY=1 came, sent after the socket
    // listens: it must be there at once.
    m.ok(&format!("systemctl stop {UNIT}"));
    assert!(!m.path(SOCKET).exists(), "stop left the socket");
    m.ok(&format!("systemctl start {UNIT} && test -S {SOCKET}"));
    assert_eq!(m.property(UNIT, "SubState"), "running");
    let cpus = m.ok("nproc").trim().parse::<usize>().expect("nproc");
    let plural = if cpus == 1 { "CPU" } else { "CPUs" };
    let status_text = m.wait_for("the STATUS= line", Duration::from_secs(20), || {
        let s = m.property(UNIT, "StatusText");
        s.starts_with("recording ").then_some(s)
    });
    assert_eq!(
        status_text,
        format!("recording {cpus} {plural}, 0 snapshots")
    );
    let status = m.sh(&format!("systemctl status --no-pager {UNIT}"));
    assert!(
        status.contains(&format!("Status: \"{status_text}\""))
            && status.contains("active (running)"),
        "{status}"
    );

    // --- systemd's own checks of the unit.
    let verify = m.run(&[
        "systemd-analyze",
        "verify",
        "/usr/lib/systemd/system/flightrecd.service",
    ]);
    assert!(
        verify.status.success() && verify.stdout.is_empty() && verify.stderr.is_empty(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let security = m.sh(&format!(
        "systemd-analyze security --no-pager {UNIT}.service"
    ));
    let score = security
        .lines()
        .find_map(|l| l.strip_prefix("→ Overall exposure level for flightrecd.service: "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no exposure level in:\n{security}"))
        .to_string();
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    assert!(
        readme.contains(&format!("exposure level {score}")),
        "README.md must state the unit's exposure level {score} (systemd-analyze security):\n{security}"
    );
    println!("systemd-analyze security: exposure level {score}");

    // --- Kernel symbols: the daemon read /proc/kallsyms under the unit.
    m.ok("dd if=/dev/zero of=/dev/null bs=64k count=100000 status=none");
    let snap = m.ok("snapctl dump --label kernel").trim().to_string();
    let report = m.ok(&format!(
        "perf report -i {snap} --no-children --sort sym --stdio -g none 2>/dev/null"
    ));
    let kernel: Vec<&str> = report
        .lines()
        .filter_map(|l| l.split_once("[k] ").map(|(_, s)| s.trim()))
        .collect();
    let named: Vec<&&str> = kernel.iter().filter(|s| !s.starts_with("0x")).collect();
    assert!(
        named.len() >= 5 && named.len() * 10 >= kernel.len() * 9,
        "kernel frames are not resolved ({} named of {}):\n{report}",
        named.len(),
        kernel.len()
    );

    // --- The dump thread runs SCHED_FIFO (CAP_SYS_NICE, no RestrictRealtime).
    let pid = main_pid(m);
    let policy = m.ok(&format!(
        "for t in /proc/{pid}/task/*; do if [ \"$(cat $t/comm)\" = flightrec-dump ]; then chrt -p ${{t##*/}}; fi; done"
    ));
    assert!(
        policy.contains("SCHED_FIFO"),
        "the dump thread is not realtime: {policy}"
    );

    // --- A member of group flightrec uses snapctl and perf without sudo;
    // a user outside it is refused.
    m.ok(
        "useradd --create-home --groups flightrec fr-operator && useradd --create-home fr-outsider",
    );
    let snap = m
        .ok("runuser -u fr-operator -- snapctl dump --label operator")
        .trim()
        .to_string();
    assert!(
        snap.starts_with("/var/lib/flightrec/snapshots/") && snap.ends_with("-operator.perf.data"),
        "{snap}"
    );
    let script = m.ok(&format!(
        "runuser -u fr-operator -- perf script -i {snap} 2>/dev/null"
    ));
    assert!(
        script.contains("sched:sched_switch") || script.contains("cpu-clock"),
        "perf script as fr-operator printed no event:\n{script}"
    );
    let refused = m.run(&["runuser", "-u", "fr-outsider", "--", "snapctl", "status"]);
    assert_eq!(refused.status.code(), Some(4), "fr-outsider: {refused:?}");

    // --- STATUS= follows the snapshots.
    let list = snapshots(m);
    assert_eq!(list.len(), 2);
    let newest = list
        .iter()
        .filter_map(|s| s["created_unix_ns"].as_i64())
        .max()
        .expect("created_unix_ns");
    let secs = newest.div_euclid(1_000_000_000).rem_euclid(86_400);
    let expected = format!(
        "recording {cpus} {plural}, 2 snapshots, last {:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    );
    m.wait_for("STATUS= after two dumps", Duration::from_secs(20), || {
        (m.property(UNIT, "StatusText") == expected).then_some(())
    });

    // --- systemctl reload with a bad config: kept running, the journal
    // names the file, line and column.
    m.ok(&format!("cp {CONFIG} /root/flightrec.toml.orig"));
    let pid = main_pid(m);
    let cursor = m.cursor();
    m.ok(&format!(
        "printf '[buffers]\\nper_cpu = \"3MiB\"\\n' > {CONFIG} && systemctl reload {UNIT}"
    ));
    let line = m.wait_journal(
        &cursor,
        UNIT,
        // The value of per_cpu starts at column 11.
        &format!("{CONFIG}:2:11:"),
        Duration::from_secs(20),
    );
    assert!(line.contains("rejected"), "{line}");
    assert_eq!(m.property(UNIT, "ActiveState"), "active");
    assert_eq!(main_pid(m), pid, "a bad reload restarted the daemon");
    m.ok(&format!("cp /root/flightrec.toml.orig {CONFIG}"));

    // --- systemctl kill -s USR2 dumps.
    m.ok(&format!("systemctl kill -s USR2 {UNIT}"));
    m.wait_for("a snapshot from SIGUSR2", Duration::from_secs(20), || {
        snapshots(m)
            .iter()
            .any(|s| s["trigger"] == "signal")
            .then_some(())
    });

    // --- The test-only fault switch is not in the packaged binary: the
    // label that hangs a testing build's dump thread is a label like any.
    let hang = snapctl_json(m, "dump --label testing-hang-dump-thread");
    assert!(
        hang["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("-testing-hang-dump-thread.perf.data")),
        "{hang}"
    );

    // --- [fleet] and a PSI trigger on a cgroup, after a restart.
    let nats = NatsServer::start();
    m.ok("systemd-run --quiet --unit=fr-psi-idle --slice=flightrecpsi.slice sleep infinity");
    let cgroup = "/sys/fs/cgroup/flightrecpsi.slice";
    m.ok(&format!("test -e {cgroup}/cpu.pressure"));
    let default_config = m.ok("cat /root/flightrec.toml.orig");
    restart_with(
        m,
        &format!(
            "{default_config}
[fleet]
nats = \"nats://localhost:{port}\"
host = \"fr-systemd\"

[[trigger]]
name = \"cg-pressure\"
on = \"psi\"
psi = \"cpu some 100ms 2s\"
cgroup = \"{cgroup}\"
",
            port = nats.port
        ),
    );
    m.wait_for("the fleet connection", Duration::from_secs(30), || {
        (snapctl_json(m, "status")["fleet"]["state"] == "connected").then_some(())
    });
    let url = format!("nats://127.0.0.1:{}", nats.port);
    let reply = m.ok(&format!(
        "snapctl --json fleet --nats {url} dump --label fleet --expect fr-systemd --wait 30s"
    ));
    let reply: serde_json::Value = serde_json::from_str(&reply).expect("fleet dump JSON");
    assert_eq!(reply["replies"][0]["host"], "fr-systemd", "{reply}");
    let id = reply["replies"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no snapshot in the reply: {reply}"))
        .to_string();
    m.wait_for(
        "the fleet snapshot's upload",
        Duration::from_secs(60),
        || {
            let listed = m.sh(&format!("snapctl --json fleet --nats {url} list"));
            listed.contains(&id).then_some(())
        },
    );
    // The trigger is armed; CPU pressure inside the cgroup fires it.
    let triggers = snapctl_json(m, "triggers");
    assert_eq!(triggers["triggers"][0]["name"], "cg-pressure", "{triggers}");
    m.ok(
        "systemd-run --quiet --unit=fr-psi-burn --slice=flightrecpsi.slice \
         bash -c 'for i in 1 2 3 4 5 6; do (while :; do :; done) & done; wait'",
    );
    m.wait_for(
        "a snapshot from the PSI trigger",
        Duration::from_secs(60),
        || {
            snapshots(m)
                .iter()
                .any(|s| s["trigger"] == "condition:cg-pressure")
                .then_some(())
        },
    );
    m.ok("systemctl stop fr-psi-burn fr-psi-idle");

    // --- stop: clean exit, no socket.
    let cursor = m.cursor();
    m.ok(&format!("systemctl stop {UNIT}"));
    assert!(!m.path(SOCKET).exists(), "stop left the socket");
    assert_eq!(m.property(UNIT, "Result"), "success");
    assert_eq!(m.property(UNIT, "ExecMainStatus"), "0");
    m.wait_journal(&cursor, UNIT, "stopped", Duration::from_secs(5));

    // --- An output_dir outside /var/lib/flightrec: refused with the way
    // out in the journal, then allowed by a drop-in.
    let cursor = m.cursor();
    restart_with_failure(
        m,
        &format!("{default_config}\n").replace(
            "output_dir = \"/var/lib/flightrec/snapshots\"",
            "output_dir = \"/srv/flightrec-snapshots\"",
        ),
    );
    m.wait_journal(
        &cursor,
        UNIT,
        "ReadWritePaths=PATH",
        Duration::from_secs(10),
    );
    assert_eq!(m.property(UNIT, "ExecMainStatus"), "2");
    m.ok(
        "mkdir /srv/flightrec-snapshots && mkdir -p /etc/systemd/system/flightrecd.service.d && printf '[Service]\\nReadWritePaths=/srv/flightrec-snapshots\\n' \
         > /etc/systemd/system/flightrecd.service.d/output.conf && systemctl daemon-reload && systemctl start flightrecd",
    );
    let elsewhere = m.ok("snapctl dump").trim().to_string();
    assert!(
        elsewhere.starts_with("/srv/flightrec-snapshots/"),
        "{elsewhere}"
    );
    m.ok(&format!(
        "rm -r /etc/systemd/system/flightrecd.service.d && systemctl daemon-reload && cp /root/flightrec.toml.orig {CONFIG} && systemctl restart {UNIT}"
    ));

    // --- Manual pages render; completion of `snapctl <TAB>` in bash.
    for page in m
        .ok("dpkg -L flightrecd | grep '^/usr/share/man/.*\\.gz$'")
        .lines()
    {
        let out = m.run(&[
            "bash",
            "-c",
            &format!("MANWIDTH=80 man --warnings -l {page} 2>&1 >/dev/null"),
        ]);
        assert!(
            out.stdout.is_empty(),
            "man -l {page}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let text = m.ok(&format!("MANWIDTH=80 man -l {page}"));
        assert!(
            text.contains("SYNOPSIS") && text.contains("SEE ALSO"),
            "{page}:\n{text}"
        );
    }
    let toml5 = m.ok("MANWIDTH=80 man flightrec.toml");
    assert!(toml5.contains("realtime_priority") && toml5.contains("[[trigger]]"));
    let complete = |line: &str| -> Vec<String> {
        let words: Vec<&str> = line.split(' ').collect();
        let script = format!(
            "source /usr/share/bash-completion/bash_completion
             # 124: loaded, try again (what bash does on TAB).
             _completion_loader snapctl || test $? -eq 124
             f=$(complete -p snapctl | sed -n 's/.*-F \\([^ ]*\\).*/\\1/p')
             COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{line}'; COMP_POINT={point}
             \"$f\" snapctl '{cur}' '{prev}'
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            words = words
                .iter()
                .map(|w| format!("'{w}'"))
                .collect::<Vec<_>>()
                .join(" "),
            cword = words.len() - 1,
            point = line.len(),
            cur = words[words.len() - 1],
            prev = words[words.len() - 2],
        );
        m.ok(&script).lines().map(str::to_string).collect()
    };
    let verbs = complete("snapctl ");
    for verb in [
        "dump",
        "list",
        "rotate",
        "compress",
        "status",
        "watch",
        "reload",
        "triggers",
        "archive",
        "decompress",
        "fleet",
    ] {
        assert!(verbs.iter().any(|v| v == verb), "snapctl <TAB>: {verbs:?}");
    }
    let fleet = complete("snapctl fleet ");
    for verb in ["dump", "list", "fetch"] {
        assert!(
            fleet.iter().any(|v| v == verb),
            "snapctl fleet <TAB>: {fleet:?}"
        );
    }
    let dump = complete("snapctl dump --");
    assert!(
        dump.iter().any(|v| v == "--label"),
        "snapctl dump --<TAB>: {dump:?}"
    );

    // --- remove: stopped, snapshots kept; purge: gone.
    let kept = m.ok("ls /var/lib/flightrec/snapshots | grep -c '\\.perf\\.data$'");
    assert!(kept.trim().parse::<u32>().expect("count") >= 4, "{kept}");
    m.ok("DEBIAN_FRONTEND=noninteractive apt-get remove -y -q flightrecd");
    assert_ne!(m.property(UNIT, "ActiveState"), "active");
    assert!(!m.path(SOCKET).exists(), "remove left the socket");
    assert_eq!(
        m.ok("ls /var/lib/flightrec/snapshots | grep -c '\\.perf\\.data$'"),
        kept,
        "remove must keep the snapshots"
    );
    assert!(m.path(CONFIG).exists(), "remove must keep the conffile");
    m.ok("DEBIAN_FRONTEND=noninteractive apt-get purge -y -q flightrecd");
    for gone in [
        "/var/lib/flightrec",
        "/etc/flightrec",
        "/usr/bin/flightrecd",
    ] {
        assert!(!m.path(gone).exists(), "purge left {gone}");
    }
    assert!(
        m.sh("dpkg -s flightrecd").contains("is not installed"),
        "purge left the package known to dpkg"
    );
    println!(
        "the package under systemd ({}): {:?} from install to purge",
        deb.display(),
        started.elapsed()
    );
}

/// Like [`restart_with`] for a config the daemon must refuse at start.
fn restart_with_failure(m: &Machine, config: &str) {
    std::fs::write(m.share.path().join("flightrec.toml"), config).expect("write config");
    m.ok(&format!(
        "install -m 0644 {SHARE_INSIDE}/flightrec.toml {CONFIG}"
    ));
    let out = m.run(&["systemctl", "restart", UNIT]);
    assert!(!out.status.success(), "the daemon started on {config}");
    assert_eq!(m.property(UNIT, "ActiveState"), "failed");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn the_watchdog_restarts_a_daemon_whose_dump_thread_hangs() {
    require_root("the_watchdog_restarts_a_daemon_whose_dump_thread_hangs");
    let testing = testing_flightrecd();
    let m = Machine::boot();
    install(&m);
    // The installed unit runs a test build: its fault switch hangs the dump
    // thread on a dump labelled testing-hang-dump-thread.
    std::fs::copy(&testing, m.share.path().join("flightrecd-testing")).expect("copy");
    m.ok(&format!(
        "mkdir -p /etc/systemd/system/{UNIT}.service.d && printf '[Service]\\nExecStart=\\nExecStart={SHARE_INSIDE}/flightrecd-testing\\n' \
         > /etc/systemd/system/{UNIT}.service.d/testing.conf && systemctl daemon-reload && systemctl restart {UNIT}"
    ));
    let pid = main_pid(&m);
    assert_eq!(
        m.ok(&format!("readlink /proc/{pid}/exe")).trim(),
        format!("{SHARE_INSIDE}/flightrecd-testing")
    );
    let limit = Duration::from_secs(30);
    assert_eq!(m.property(UNIT, "WatchdogUSec"), "30s");
    // Healthy, it pings: WATCHDOG=1 every 15s moves the watchdog timestamp.
    let first = m.wait_for("a first WATCHDOG=1", Duration::from_secs(40), || {
        let t = m.property(UNIT, "WatchdogTimestampMonotonic");
        (t != "0" && !t.is_empty()).then_some(t)
    });
    m.wait_for("a second WATCHDOG=1", Duration::from_secs(40), || {
        (m.property(UNIT, "WatchdogTimestampMonotonic") != first).then_some(())
    });

    // Hang the dump thread; its caller loses the connection when the
    // daemon is killed.
    let cursor = m.cursor();
    let mut caller = m
        .command(&["snapctl", "dump", "--label", "testing-hang-dump-thread"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn snapctl dump");
    m.wait_journal(&cursor, UNIT, "hangs on purpose", Duration::from_secs(20));
    m.wait_journal(
        &cursor,
        UNIT,
        "Watchdog timeout",
        limit + Duration::from_secs(20),
    );
    m.wait_for("the restart", Duration::from_secs(30), || {
        (m.property(UNIT, "NRestarts") == "1" && m.property(UNIT, "SubState") == "running")
            .then_some(())
    });
    let entries = journal_entries(&m, &cursor);
    let at = |needle: &str| {
        entries
            .iter()
            .find(|(_, msg)| msg.contains(needle))
            .map(|(t, _)| *t)
            .unwrap_or_else(|| panic!("no {needle:?} in the journal: {entries:#?}"))
    };
    let hung = at("hangs on purpose");
    let reason = at("watchdog: no answer for");
    let timeout = at("Watchdog timeout");
    let killed_after = Duration::from_micros(timeout - hung);
    // The last WATCHDOG=1 may follow the dump thread's last answer by a
    // scheduling delay, and systemd's timer fires up to 250 ms late.
    assert!(
        killed_after <= limit + Duration::from_secs(1),
        "systemd killed the daemon {killed_after:?} after the hang, beyond WatchdogSec"
    );
    assert!(
        hung < reason && reason < timeout,
        "the reason must come between the hang and the kill: {entries:#?}"
    );
    let reason_line = &entries
        .iter()
        .find(|(t, _)| *t == reason)
        .expect("reason")
        .1;
    assert!(
        reason_line.contains("the dump thread") && !reason_line.contains("the API ("),
        "the journal must name the dump thread (and only it): {reason_line}"
    );
    assert!(
        entries
            .iter()
            .any(|(_, m)| m.contains("Failed with result 'watchdog'")),
        "{entries:#?}"
    );
    assert_ne!(main_pid(&m), pid, "the daemon was not restarted");
    let status = caller.wait().expect("wait for snapctl");
    assert_eq!(status.code(), Some(3), "the hung dump's caller: {status}");
    // The restarted daemon dumps.
    let snap = m
        .ok("snapctl dump --label after-restart")
        .trim()
        .to_string();
    assert!(snap.ends_with("-after-restart.perf.data"), "{snap}");
    println!(
        "watchdog: killed {killed_after:?} after the hang (WatchdogSec {}s)",
        limit.as_secs()
    );
}
