//! End to end: what `--check-config` accepts the daemon starts with, a
//! reload never kills it, echoed values stay short, and the snapshot store
//! copes with kills, removed directories and group members.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use flightrec_tests::{Daemon, bin_path, flightrecd_to_end, require_root, test_config};
use serde_json::Value;

fn flightrecd(flag: &str, config: &Path) -> Output {
    flightrecd_to_end(flag, config)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn check_config_rejects_with_exit_2_what_the_daemon_rejects_at_start() {
    require_root("check_config_rejects_what_the_daemon_rejects");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let f = file.display().to_string();
    let base = test_config(dir.path(), "");
    let output_dir = format!("output_dir = \"{d}/snapshots\"");
    let socket = format!("socket = \"{d}/run/flightrecd.sock\"");
    // (what is wrong, replaced line, its replacement, position, message)
    let cases: Vec<(&str, String, String, &str, String)> = vec![
        (
            "ring over 2 GiB",
            "per_cpu = \"256KiB\"".into(),
            "per_cpu = \"4GiB\"".into(),
            "8:11",
            "buffers.per_cpu = 4GiB is above the 2GiB per-ring limit".into(),
        ),
        (
            "tracking log of 1 TiB",
            "tracking_log = \"4MiB\"".into(),
            "tracking_log = \"1TiB\"".into(),
            "10:16",
            "buffers.tracking_log = 1TiB is out of range: 64KiB to 4GiB".into(),
        ),
        (
            "filter the kernel refuses",
            "name = \"sched:sched_switch\"".into(),
            "name = \"sched:sched_switch\"\nfilter = \"no_such_field == 1\"".into(),
            "13:8",
            "filter 'no_such_field == 1' rejected for sched:sched_switch".into(),
        ),
        (
            "output_dir that is a file",
            output_dir.clone(),
            format!("output_dir = \"{f}\""),
            "4:14",
            format!("daemon.output_dir: \"{f}\" exists and is not a directory"),
        ),
        (
            "output_dir under a file",
            output_dir.clone(),
            format!("output_dir = \"{f}/snaps\""),
            "4:14",
            format!(
                "daemon.output_dir: \"{f}/snaps\" cannot be created: \"{f}\" is not a directory"
            ),
        ),
        (
            "socket under a file",
            socket.clone(),
            format!("socket = \"{f}/run/s.sock\""),
            "2:10",
            format!("daemon.socket: \"{f}/run\" cannot be created: \"{f}\" is not a directory"),
        ),
        (
            "socket that is a file",
            socket.clone(),
            format!("socket = \"{f}\""),
            "2:10",
            format!("daemon.socket: \"{f}\" exists and is not a socket"),
        ),
        (
            "empty socket path",
            socket.clone(),
            "socket = \"\"".into(),
            "2:10",
            "daemon.socket is empty".into(),
        ),
        (
            "NUL in a path",
            output_dir.clone(),
            format!("output_dir = \"{d}/a\\u0000b\""),
            "4:14",
            format!("daemon.output_dir \"{d}/a\\0b\" contains a NUL byte, which no path can hold"),
        ),
        (
            "socket_group that does not exist",
            "socket_group = \"root\"".into(),
            "socket_group = \"no-such-group-cfg\"".into(),
            "3:16",
            "daemon.socket_group: group \"no-such-group-cfg\" does not exist".into(),
        ),
    ];
    let config = dir.path().join("flightrec.toml");
    for (what, from, to, at, message) in &cases {
        assert!(base.contains(from.as_str()), "{what}: {from}");
        std::fs::write(&config, base.replacen(from.as_str(), to, 1)).unwrap();
        let expected = format!("{}:{at}: {message}", config.display());
        for flag in ["--check-config", "--config"] {
            let out = flightrecd(flag, &config);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{what}, {flag}: {}",
                stderr(&out)
            );
            assert!(
                stderr(&out).contains(&expected),
                "{what}, {flag}: expected {expected:?} in:\n{}",
                stderr(&out)
            );
        }
        assert!(file.is_file(), "{what}: the file was replaced");
    }
    // No socket was left behind by any of them.
    assert!(!dir.path().join("run").exists());
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn the_printed_config_is_accepted_back_and_the_shipped_one_passes() {
    require_root("the_printed_config_is_accepted_back");
    let group_exists = nix::unistd::Group::from_name("flightrec")
        .unwrap()
        .is_some();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flightrec.toml");
    // No socket_group: the default group, which may be absent.
    let text = test_config(dir.path(), "").replace("socket_group = \"root\"\n", "");
    std::fs::write(&config, text).unwrap();
    let first = flightrecd("--check-config", &config);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let printed = String::from_utf8(first.stdout).unwrap();
    let expected_group = if group_exists { "flightrec" } else { "" };
    assert!(
        printed.contains(&format!("socket_group = \"{expected_group}\"\n")),
        "{printed}"
    );
    let again = dir.path().join("printed.toml");
    std::fs::write(&again, &printed).unwrap();
    let second = flightrecd("--check-config", &again);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert_eq!(String::from_utf8(second.stdout).unwrap(), printed);

    // The shipped file with its paths moved into the test's directory: the
    // check looks at them, and the machine's may hold anything (the package
    // test checks the daemon on them, in a machine of its own).
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/flightrec.toml"),
    )
    .unwrap();
    let d = dir.path().display();
    let mut moved = shipped.clone();
    for (from, to) in [
        ("/run/flightrec/", format!("{d}/run/")),
        ("/var/lib/flightrec/", format!("{d}/lib/")),
    ] {
        assert!(moved.contains(from), "{from} not in config/flightrec.toml");
        moved = moved.replace(from, &to);
    }
    let machine_paths: Vec<&str> = moved
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("/flightrec/"))
        .collect();
    assert!(machine_paths.is_empty(), "{machine_paths:?}");
    let shipped = dir.path().join("shipped.toml");
    std::fs::write(&shipped, moved).unwrap();
    let out = flightrecd("--check-config", &shipped);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(
        printed.contains(&format!("socket_group = \"{expected_group}\"\n")),
        "{printed}"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_reload_with_a_tracking_log_too_large_is_rejected_and_the_daemon_lives() {
    require_root("a_reload_with_a_tracking_log_too_large");
    let mut d = Daemon::start("");
    let text = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(
        &d.config,
        text.replace("tracking_log = \"4MiB\"", "tracking_log = \"1TiB\""),
    )
    .unwrap();
    let out = d.snapctl(&["reload"]);
    assert!(!out.status.success());
    let msg = stderr(&out);
    assert!(
        msg.contains(&format!(
            "{}:10:16: buffers.tracking_log = 1TiB is out of range",
            d.config.display()
        )),
        "{msg}"
    );
    // SIGHUP the same: the daemon keeps running on the old config.
    d.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !d
        .log_text()
        .matches("config reload rejected")
        .count()
        .eq(&2)
    {
        assert!(Instant::now() < deadline, "{}", d.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = d.json(&["status"]);
    assert_eq!(
        status["tracking"]["log_capacity_bytes"],
        4 << 20,
        "{status}"
    );
    let v = d.json(&["dump"]);
    assert!(Path::new(v["path"].as_str().unwrap()).is_file());
    assert!(d.stop().success());
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn huge_values_are_cut_in_logs_and_replies() {
    require_root("huge_values_are_cut_in_logs_and_replies");
    let d = Daemon::start("");
    let text = std::fs::read_to_string(&d.config).unwrap();
    let huge = "x".repeat(10 << 20);
    std::fs::write(
        &d.config,
        text.replace("log_level = \"debug\"", &format!("log_level = \"{huge}\"")),
    )
    .unwrap();
    let log_before = std::fs::metadata(&d.log).unwrap().len();
    let out = d.snapctl(&["reload"]);
    assert!(!out.status.success());
    let msg = stderr(&out);
    assert!(msg.len() < 1500, "{} bytes", msg.len());
    assert!(
        msg.contains(&format!(
            "{}:5:13: daemon.log_level \"xxx",
            d.config.display()
        )),
        "{}",
        &msg[..msg.len().min(300)]
    );
    assert!(msg.contains("... (10485760 bytes)"), "{msg}");
    let logged = std::fs::metadata(&d.log).unwrap().len() - log_before;
    assert!(logged < 4096, "the rejected reload logged {logged} bytes");

    // A 100 kB label is INVALID_ARGUMENT with a short message (not a
    // metadata overflow reported as ResourceExhausted).
    let label = "l".repeat(100_000);
    let out = d.snapctl(&["--json", "dump", "--label", &label]);
    assert!(!out.status.success());
    let text = [out.stdout, out.stderr].concat();
    let reply: Value = serde_json::from_slice(&text).unwrap_or_else(|e| {
        panic!(
            "no JSON error ({e}): {}",
            String::from_utf8_lossy(&text[..text.len().min(300)])
        )
    });
    assert_eq!(reply["code"], "InvalidArgument", "{reply}");
    let error = reply["error"].as_str().unwrap();
    assert!(error.len() < 300, "{} bytes: {error}", error.len());
    assert!(
        error.contains("it is 100000 characters long, at most 64 are allowed"),
        "{error}"
    );
    assert!(d.list().is_empty());
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn sidecar_temp_files_left_by_kill_9_are_removed_at_start() {
    require_root("sidecar_temp_files_left_by_kill_9");
    let mut d = Daemon::start("");
    let v = d.json(&["dump"]);
    let id = v["id"].as_str().unwrap().to_string();
    d.kill9();
    // The sidecar of a dump killed between its write and its rename.
    let tmp = d.output.join(format!(".{id}-x.meta.tmp-4242"));
    std::fs::write(&tmp, b"{\"trigger\":\"api\"").unwrap();
    d.spawn();
    assert!(!tmp.exists(), "{} is still there", tmp.display());
    assert!(
        d.log_text().contains(&format!(
            "removed a temporary file left by an earlier crash path={}",
            tmp.display()
        )),
        "{}",
        d.log_text()
    );
    assert_eq!(d.list().len(), 1);
    assert!(d.output.join(format!(".{id}.meta")).exists());
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_removed_output_dir_is_recreated_by_the_next_dump_and_status_keeps_working() {
    require_root("a_removed_output_dir_is_recreated");
    let d = Daemon::start("");
    d.json(&["dump"]);
    std::fs::remove_dir_all(&d.output).unwrap();
    let status = d.json(&["status"]);
    assert_eq!(status["store"]["snapshots"], 0, "{status}");
    assert!(status["store"]["disk_free_bytes"].as_u64().unwrap() > 0);
    assert!(d.list().is_empty());
    let v = d.json(&["dump"]);
    let path = PathBuf::from(v["path"].as_str().unwrap());
    assert!(path.is_file());
    let md = std::fs::metadata(&d.output).unwrap();
    assert_eq!(md.permissions().mode() & 0o7777, 0o750);
    assert_eq!(d.json(&["status"])["store"]["snapshots"], 1);
}

/// A group and a user in it, removed when dropped.
struct TestUser {
    name: String,
}

impl TestUser {
    fn create() -> Self {
        let name = format!("frtest{}", std::process::id());
        let run = |args: &[&str]| {
            let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        };
        run(&["groupadd", &name]);
        let user = TestUser { name: name.clone() };
        run(&[
            "useradd",
            "--no-create-home",
            "--gid",
            &name,
            "--shell",
            "/bin/sh",
            &name,
        ]);
        user
    }

    /// Runs `args` as this user.
    fn run(&self, args: &[&str]) -> Output {
        Command::new("runuser")
            .args(["-u", &self.name, "--"])
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
        let _ = Command::new("groupdel").arg(&self.name).output();
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_socket_group_member_can_read_the_snapshots_it_dumps() {
    require_root("a_socket_group_member_can_read_the_snapshots");
    let user = TestUser::create();
    let gid = nix::unistd::Group::from_name(&user.name)
        .unwrap()
        .unwrap()
        .gid
        .as_raw();
    let mut d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n");
    // The test's private directory (0700) must let the member through.
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(
        &d.config,
        text.replace(
            "socket_group = \"root\"",
            &format!("socket_group = \"{}\"", user.name),
        ),
    )
    .unwrap();
    d.stop();
    // The socket's directory keeps the group it was created with; the
    // snapshot directory is given to the new group at start.
    std::fs::remove_dir_all(d.dir.path().join("run")).unwrap();
    d.spawn();

    let snapctl = bin_path("snapctl");
    let socket = d.socket.display().to_string();
    let as_member = |args: &[&str]| {
        let mut full = vec![snapctl.to_str().unwrap(), "--socket", &socket];
        full.extend_from_slice(args);
        let out = user.run(&full);
        assert!(out.status.success(), "snapctl {args:?}: {}", stderr(&out));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let path = as_member(&["dump", "--label", "member"]);
    let read = |path: &str| user.run(&["head", "-c", "8", path]);
    let out = read(&path);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"PERFILE2");
    for p in [d.output.clone(), PathBuf::from(&path)] {
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!((md.uid(), md.gid()), (0, gid), "{}", p.display());
    }
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o640
    );
    let id = flightrec_tests::snapshot_id(Path::new(&path));
    let sidecar = d.output.join(format!(".{id}.meta"));
    assert_eq!(std::fs::metadata(&sidecar).unwrap().gid(), gid);
    // A compressed snapshot is a new file: it is the group's too.
    as_member(&["compress", &id]);
    let out = read(&path);
    assert!(out.status.success(), "after compress: {}", stderr(&out));
    assert_eq!(std::fs::metadata(&path).unwrap().gid(), gid);
    drop(d);
}

/// A process group killed (SIGKILL) when dropped.
struct KillGroup(std::process::Child);

impl Drop for KillGroup {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(-(self.0.id() as i32));
        let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// Runs `packaging/quickstart` on the test binaries and a private config
/// (`inherits_ignored`: with SIGINT and SIGTERM ignored, as a script that
/// runs it in the background leaves them), waits for its first snapshot,
/// sends `signal` to the script alone, and checks that the daemon it
/// started is gone with its socket.
fn quickstart_stops_its_daemon_on(signal: nix::sys::signal::Signal, inherits_ignored: bool) {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flightrec.toml");
    std::fs::write(&config, test_config(dir.path(), "")).unwrap();
    let socket = dir.path().join("run/flightrecd.sock");
    let bin_dir = bin_path("flightrecd").parent().unwrap().to_path_buf();
    let _ = bin_path("snapctl");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let log = std::fs::File::create(dir.path().join("quickstart.log")).unwrap();
    let quickstart = repo.join("packaging/quickstart");
    let mut command = if inherits_ignored {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("trap '' INT TERM; exec \"$0\"")
            .arg(&quickstart);
        c
    } else {
        Command::new(&quickstart)
    };
    let script = command
        .env("FLIGHTREC_BIN_DIR", &bin_dir)
        .env("FLIGHTREC_CONFIG", &config)
        .env("FLIGHTREC_SOCKET", &socket)
        .stdout(Stdio::piped())
        .stderr(log)
        // Its own process group: only the script gets the signal, as from
        // `kill` or a supervisor, not a terminal's Ctrl-C to the group.
        .process_group(0)
        .spawn()
        .unwrap();
    // Whatever happens, nothing the script started outlives the test: the
    // daemon is in the script's process group.
    let mut script = KillGroup(script);
    let script = &mut script.0;
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = script.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("flightrecd keeps recording") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = script.kill();
        panic!(
            "quickstart did not take its first snapshot in 60s:\n{}",
            std::fs::read_to_string(dir.path().join("quickstart.log")).unwrap_or_default()
        );
    }
    let status = flightrec_tests::snapctl_command()
        .arg("--socket")
        .arg(&socket)
        .args(["--json", "status"])
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    let daemon = status["pid"].as_u64().unwrap();
    let script_pid = nix::unistd::Pid::from_raw(script.id() as i32);
    nix::sys::signal::kill(script_pid, signal).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let exited = loop {
        if let Some(s) = script.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = script.kill();
            panic!("quickstart ignored {signal} for 15s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let daemon_gone = !Path::new(&format!("/proc/{daemon}")).exists();
    if !daemon_gone {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(daemon as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        daemon_gone,
        "flightrecd {daemon} still runs after {signal} to quickstart"
    );
    assert!(!socket.exists(), "the socket is left after {signal}");
    assert!(!exited.success(), "{signal}: {exited}");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn sigterm_to_quickstart_stops_the_daemon() {
    require_root("sigterm_to_quickstart_stops_the_daemon");
    quickstart_stops_its_daemon_on(nix::sys::signal::Signal::SIGTERM, false);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn sigint_to_quickstart_stops_the_daemon() {
    require_root("sigint_to_quickstart_stops_the_daemon");
    quickstart_stops_its_daemon_on(nix::sys::signal::Signal::SIGINT, false);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn sigint_to_quickstart_started_with_it_ignored_stops_the_daemon() {
    require_root("sigint_to_quickstart_started_with_it_ignored_stops_the_daemon");
    quickstart_stops_its_daemon_on(nix::sys::signal::Signal::SIGINT, true);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_tracking_log_the_machine_cannot_grant_is_a_located_config_error() {
    require_root("a_tracking_log_the_machine_cannot_grant");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flightrec.toml");
    let text =
        test_config(dir.path(), "").replace("tracking_log = \"4MiB\"", "tracking_log = \"4GiB\"");
    std::fs::write(&config, text).unwrap();
    for flag in ["--check-config", "--config"] {
        // 3 GiB of address space: within the config's limit, not the process's.
        let out = Command::new("prlimit")
            .arg(format!("--as={}", 3u64 << 30))
            .arg(bin_path("flightrecd"))
            .arg(flag)
            .arg(&config)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", stderr(&out));
        let expected = format!(
            "{}:10:16: buffers.tracking_log = 4GiB: this machine does not grant that much memory",
            config.display()
        );
        assert!(stderr(&out).contains(&expected), "{flag}: {}", stderr(&out));
    }
    assert!(!dir.path().join("run").exists());
}
