//! Support for flightrec's end-to-end tests.
//!
//! # Finding the binaries
//! Cargo builds a binary (and sets `CARGO_BIN_EXE_<name>`) only for the
//! integration tests of the package that owns it, so this package cannot rely
//! on that for `flightrecd` and `snapctl`. Instead [`bin_path`] runs
//! `cargo build --bins -p flightrecd -p snapctl` once per test process, into
//! the same target directory and profile as the running test, and returns the
//! path. That works from a clean target dir and costs nothing when the
//! binaries are already fresh (cargo releases its lock before running tests).
//!
//! # Privileges
//! Kernel tests need root (perf_event_open on tracepoints, tracefs). Built
//! by a user that is not root outside CI they show as ignored ("needs
//! root"); under `CI=true` lacking root is a failure: see [`require_root`]
//! and build.rs.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub mod containers;
pub mod fleet;
pub mod layers;
mod nats;
pub mod pprof;
mod python;
mod s3;
pub mod systemd;
pub use nats::{NatsCluster, NatsServer, free_port};
pub use python::{GRPC_PYTHON, PythonClient};
pub use s3::{S3S_FS_VERSION, S3Server};

/// A python3 script for the hostile-tracking test and benchmark: maps
/// `sys.executable`'s first page `argv[1]` times with PROT_EXEC, forks
/// `argv[2]` children that exit at once (or, with `argv[3]` = "stay", wait
/// for stdin to close), prints "ready N" (N maps), then waits for stdin to
/// close. It needs no privilege: tests run it as nobody.
pub const FORK_STORM_PY: &str = r#"
import mmap, os, sys
fd = os.open(sys.executable, os.O_RDONLY)
maps = [mmap.mmap(fd, 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC)
        for _ in range(int(sys.argv[1]))]
stay = sys.argv[3] == "stay"
for _ in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        if stay:
            sys.stdin.read()
        os._exit(0)
    if not stay:
        os.waitpid(pid, 0)
print("ready", len(maps), flush=True)
sys.stdin.read()
"#;

/// The profile directory of the running binary: `<target>/<profile>` for a
/// test (`<target>/<profile>/deps/<test>`) or a binary of this package such
/// as the benchmark harness (`<target>/<profile>/<bin>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("the running binary has a parent dir");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent()
            .expect("deps dir has a parent (the profile dir)")
            .to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// Path of a workspace binary (`flightrecd` or `snapctl`), built on first use;
/// with `FLIGHTREC_TEST_BINARIES=DIR`, that directory's, built elsewhere (to
/// run today's tests against an older commit's daemon and client).
pub fn bin_path(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    if let Some(dir) = std::env::var_os("FLIGHTREC_TEST_BINARIES") {
        let path = PathBuf::from(dir).join(name);
        assert!(
            path.exists(),
            "FLIGHTREC_TEST_BINARIES has no {}",
            path.display()
        );
        return path;
    }
    let profile = profile_dir();
    BUILT
        .get_or_init(|| build_binaries(&profile))
        .as_ref()
        .unwrap_or_else(|e| panic!("building the workspace binaries failed: {e}"));
    let path = profile.join(name);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

fn build_binaries(profile: &Path) -> Result<(), String> {
    let (target_dir, profile_name) = target_and_profile(profile)?;
    let status = cargo_command("build")
        .args(["--bins", "-p", "flightrecd", "-p", "snapctl"])
        .arg("--profile")
        .arg(profile_name)
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .map_err(|e| format!("running cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build exited with {status}"))
    }
}

/// The target directory and cargo profile name of a profile dir.
fn target_and_profile(profile: &Path) -> Result<(&Path, &str), String> {
    let target_dir = profile.parent().ok_or("profile dir has no parent")?;
    let profile_name = match profile.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(other) => other,
        None => return Err("profile dir has no name".into()),
    };
    Ok((target_dir, profile_name))
}

/// `cargo` (the one running the tests) on the workspace manifest, without
/// the variables `cargo test` sets for this test: a build script that
/// watches one (ring's watches OUT_DIR and CARGO_MANIFEST_DIR) would rerun,
/// and everything above it be rebuilt here and again by the next plain
/// `cargo build`.
fn cargo_command(subcommand: &str) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_by_cargo = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CFG_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|p| name.starts_with(p))
            || [
                "OUT_DIR",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
            ]
            .contains(&&*name);
        if set_by_cargo {
            command.env_remove(&*name);
        }
    }
    command.arg(subcommand).arg("--manifest-path").arg(manifest);
    command
}

/// The Debian package as `cargo deb -p flightrecd` builds it (cargo-deb,
/// installed by tests/prepare-host), into `<target>/debian/` of the running
/// test: a release build, once per test process. `FLIGHTREC_TEST_DEB`
/// names a package built beforehand instead.
pub fn debian_package() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(deb) = std::env::var_os("FLIGHTREC_TEST_DEB") {
                let deb = PathBuf::from(deb);
                return if deb.is_file() {
                    Ok(deb)
                } else {
                    Err(format!(
                        "FLIGHTREC_TEST_DEB={} is not a file",
                        deb.display()
                    ))
                };
            }
            let profile = profile_dir();
            let (target_dir, _) = target_and_profile(&profile)?;
            let out = target_dir.join("debian");
            let _ = std::fs::remove_dir_all(&out);
            // cargo-deb finds the target directory as cargo does.
            let status = cargo_command("deb")
                .args(["-p", "flightrecd", "--locked", "--output"])
                .arg(&out)
                .env("CARGO_TARGET_DIR", target_dir)
                .status()
                .map_err(|e| format!("running cargo deb: {e}"))?;
            if !status.success() {
                return Err(format!(
                    "cargo deb exited with {status} (tests/prepare-host installs cargo-deb)"
                ));
            }
            std::fs::read_dir(&out)
                .map_err(|e| format!("{}: {e}", out.display()))?
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.extension().is_some_and(|x| x == "deb")
                        && p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("flightrecd_"))
                })
                .ok_or_else(|| format!("no flightrecd_*.deb in {}", out.display()))
        })
        .clone()
        .unwrap_or_else(|e| panic!("building the Debian package failed: {e}"))
}

/// A `flightrecd` built with the `testing` feature (its fault switches, see
/// `flightrecd::control::HANG_DUMP_LABEL`), copied out of the target
/// directory, where the next [`bin_path`] puts the plain build back.
pub fn testing_flightrecd() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let profile = profile_dir();
            let (target_dir, profile_name) = target_and_profile(&profile)?;
            let status = cargo_command("build")
                .args(["-p", "flightrecd", "--bin", "flightrecd"])
                .args(["--features", "testing", "--profile", profile_name])
                .arg("--target-dir")
                .arg(target_dir)
                .status()
                .map_err(|e| format!("running cargo: {e}"))?;
            if !status.success() {
                return Err(format!(
                    "cargo build --features testing exited with {status}"
                ));
            }
            let copy = target_dir.join("flightrecd-testing");
            copy_executable(profile.join("flightrecd"), &copy);
            Ok(copy)
        })
        .clone()
        .unwrap_or_else(|e| panic!("building flightrecd with the testing feature failed: {e}"))
}

/// Whether `tool args` runs and succeeds: a test that needs it fails under
/// `CI=true` when it does not, and is skipped (said on stderr) elsewhere.
pub fn have(test: &str, tool: &str, args: &[&str]) -> bool {
    if Command::new(tool)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return true;
    }
    let why = format!("no working {tool} (run tests/prepare-host)");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// Fails the calling test unless it runs as root (perf events on every
/// CPU, tracefs). Tests that need root are also marked
/// `#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]`: built by a
/// user that is not root outside CI they are reported ignored and never get
/// here. Reaching it without root therefore means `CI=true` (where a missing
/// permission is a failure) or a test binary built as root and run as a
/// user (rebuild it as that user to have the tests ignored).
pub fn require_root(test: &str) {
    let euid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
        })
        .unwrap_or_else(|| "unknown".into());
    if euid == "0" {
        return;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: needs root (perf events, tracefs) and CI=true forbids skipping");
    }
    panic!(
        "{test}: needs root (perf events, tracefs); this test binary was built as root, so it \
         was not marked ignored, but runs as uid {euid}: rebuild it as this user to skip it"
    );
}

/// A running `flightrecd` on a private config: temp socket and output dir.
/// Stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub output: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
    pub child: Option<std::process::Child>,
    /// A command that runs flightrecd (it must exec it, keeping the pid),
    /// e.g. `prlimit --nofile=1024:1024 --`; empty: none.
    pub wrapper: Vec<String>,
}

/// Config text for a test daemon in `dir`: small rings, the given extra
/// sections (`[snapshot]`, `[retention]`...) appended verbatim.
pub fn test_config(dir: &Path, extra: &str) -> String {
    format!(
        r#"[daemon]
socket = "{dir}/run/flightrecd.sock"
socket_group = "root"
output_dir = "{dir}/snapshots"
log_level = "debug"

[buffers]
per_cpu = "256KiB"
tracking = "256KiB"
tracking_log = "4MiB"

[[event]]
name = "sched:sched_switch"

[[event]]
name = "cpu-clock"
frequency = 999
callchain = true

{extra}
"#,
        dir = dir.display()
    )
}

impl Daemon {
    /// Starts the daemon on `test_config(dir, extra)` and waits until it
    /// answers `status`.
    pub fn start(extra: &str) -> Self {
        Self::start_wrapped(extra, &[])
    }

    /// As [`Daemon::start`], run through `wrapper` (see [`Daemon::wrapper`]).
    pub fn start_wrapped(extra: &str, wrapper: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = test_config(dir.path(), extra);
        Self::start_in(dir, &text, wrapper)
    }

    /// Starts the daemon in `dir` on the config `text` (made with
    /// [`test_config`] for that dir, edited as a test needs).
    pub fn start_in(dir: tempfile::TempDir, text: &str, wrapper: &[&str]) -> Self {
        let config = dir.path().join("flightrec.toml");
        std::fs::write(&config, text).expect("write config");
        let mut d = Daemon {
            socket: dir.path().join("run/flightrecd.sock"),
            output: dir.path().join("snapshots"),
            log: dir.path().join("flightrecd.log"),
            config,
            dir,
            child: None,
            wrapper: wrapper.iter().map(|w| w.to_string()).collect(),
        };
        d.spawn();
        d
    }

    /// (Re)starts the process on the same config and waits for it.
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open log");
        let mut cmd = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin_path("flightrecd"));
                c
            }
            None => Command::new(bin_path("flightrecd")),
        };
        let child = cmd
            .arg("--config")
            .arg(&self.config)
            .stderr(log)
            .spawn()
            .expect("spawn flightrecd");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if self.snapctl(&["status"]).status.success() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "flightrecd exited with {status} at start:\n{}",
                    self.log_text()
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "flightrecd did not answer in 20s:\n{}",
                self.log_text()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> i32 {
        let id = self.child.as_ref().expect("daemon running").id();
        i32::try_from(id).expect("pid fits i32")
    }

    /// Sends `signal` (e.g. "USR2") with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs `snapctl --socket SOCKET ARGS...`.
    pub fn snapctl(&self, args: &[&str]) -> std::process::Output {
        self.snapctl_cmd(args).output().expect("run snapctl")
    }

    pub fn snapctl_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = snapctl_command();
        cmd.arg("--socket").arg(&self.socket).args(args);
        cmd
    }

    /// `snapctl --json ARGS...`, asserting success, parsed.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = self.snapctl(&full);
        assert!(
            out.status.success(),
            "snapctl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "snapctl {args:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// The snapshots `snapctl list` shows, oldest first.
    pub fn list(&self) -> Vec<serde_json::Value> {
        self.json(&["list"])["snapshots"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Stops with SIGTERM and returns the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let status = child.wait().expect("wait");
                panic!(
                    "flightrecd ignored SIGTERM for 15s ({status}):\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// SIGKILL, no clean-up.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop();
        }
    }
}

/// `snapctl`, built on first use ([`bin_path`]), that reads nothing of
/// the machine's own flightrec: `FLIGHTREC_CONFIG` names /dev/null, which
/// reads as an empty config (the built-in defaults), so neither a socket
/// nor a `[fleet]` comes from /etc/flightrec/flightrec.toml; and the
/// caller's `FLIGHTREC_SOCKET` and `FLIGHTREC_TIMEOUT` are dropped (a test
/// sets what it means).
pub fn snapctl_command() -> Command {
    let mut cmd = Command::new(bin_path("snapctl"));
    cmd.env("FLIGHTREC_CONFIG", "/dev/null")
        .env_remove("FLIGHTREC_SOCKET")
        .env_remove("FLIGHTREC_TIMEOUT");
    cmd
}

/// Runs `flightrecd FLAG CONFIG` (`--check-config`, or `--config` for a
/// daemon that must refuse to start) to its end, killing it and failing
/// if it still runs after 20 s.
pub fn flightrecd_to_end(flag: &str, config: &Path) -> std::process::Output {
    let mut child = Command::new(bin_path("flightrecd"))
        .arg(flag)
        .arg(config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn flightrecd");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().expect("try_wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "flightrecd {flag} was still running after 20s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("wait")
}

/// The id of a snapshot file: its name without `.perf.data`.
pub fn snapshot_id(path: &Path) -> String {
    path.file_name()
        .and_then(|n| n.to_str())
        .expect("a snapshot file name")
        .trim_end_matches(".perf.data")
        .to_string()
}

/// `perf script -i PATH ARGS...`: stdout, asserting perf succeeded.
pub fn perf_script(path: &Path, args: &[&str]) -> String {
    let out = Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(path)
        .args(args)
        .output()
        .expect("run perf script");
    assert!(
        out.status.success(),
        "perf script -i {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `perf script --show-lost-events` reads in the file at `path`: the
/// samples it holds and the samples its LOST records say were dropped
/// (the sum of their counts, perf report's "Total Lost Samples"). Not
/// `perf report --stats`, whose "LOST events" counts LOST records, each
/// of which may stand for thousands of samples.
pub fn perf_lost_samples(path: &Path) -> Result<(u64, u64), String> {
    let out = Command::new("perf")
        .args(["script", "--show-lost-events", "-F", "time", "-i"])
        .arg(path)
        .output()
        .map_err(|e| format!("perf script: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "perf script -i {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let (mut samples, mut lost) = (0, 0);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "PERF_RECORD_LOST lost N": the kernel's, for a full ring. Not
        // LOST_SAMPLES, which flightrec's snapshots add to sum up the
        // LOST records of each CPU (counted twice otherwise).
        match line.split_once("PERF_RECORD_LOST lost ") {
            Some((_, rest)) => {
                let n = rest.trim().parse::<u64>().ok();
                lost += n.ok_or_else(|| format!("a LOST record without a count: {line}"))?;
            }
            None if line.trim().ends_with(':') => samples += 1,
            None => {}
        }
    }
    Ok((samples, lost))
}

/// Busy work on every CPU (scheduler switches, samples) until dropped.
pub struct Load(Vec<std::process::Child>);

impl Load {
    pub fn start() -> Self {
        Self::shells(1, "while :; do ls -R /usr/share/doc >/dev/null; done")
    }

    /// `per_cpu` shells per CPU running `script`.
    pub fn shells(per_cpu: usize, script: &str) -> Self {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get()) * per_cpu;
        Load(
            (0..n)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", script])
                        .stdout(std::process::Stdio::null())
                        .spawn()
                        .expect("spawn load")
                })
                .collect(),
        )
    }
}

/// One process, killed and reaped when dropped.
impl From<std::process::Child> for Load {
    fn from(child: std::process::Child) -> Self {
        Load(vec![child])
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `snapctl --json watch` running in the background; its events are read
/// on a thread so a test can wait for the one it expects and pass over
/// unrelated ones (loss reports arrive whenever the rings lose samples).
pub struct Watcher {
    child: std::process::Child,
    events: std::sync::mpsc::Receiver<serde_json::Value>,
}

impl Watcher {
    /// `snapctl --json watch` on `daemon`, returned once the daemon says
    /// (in its debug log) that the stream is subscribed: no event sent
    /// after this returns is missed.
    pub fn start(daemon: &Daemon) -> Self {
        use std::io::BufRead;
        let opened = || daemon.log_text().matches("watch stream opened").count();
        let before = opened();
        let mut child = daemon
            .snapctl_cmd(&["--json", "watch"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn snapctl watch");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, events) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let event = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("watch printed a line that is not JSON ({e}): {line}")
                });
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while opened() == before {
            assert!(
                std::time::Instant::now() < deadline,
                "the watch stream never opened (is the daemon's log_level debug?):\n{}",
                daemon.log_text()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Watcher { child, events }
    }

    /// The first event named `name` (the JSON `event` key) within `within`,
    /// skipping others.
    pub fn wait_for(&self, name: &str, within: std::time::Duration) -> Option<serde_json::Value> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(std::time::Instant::now())?;
            match self.events.recv_timeout(left) {
                Ok(e) if e["event"] == name => return Some(e),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small tmpfs mounted for a test (a disk that fills), unmounted when
/// dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as mount(8) takes it: "3m", "128k") on
    /// `path`, created if missing.
    pub fn mount(path: &Path, size: &str) -> Self {
        std::fs::create_dir_all(path).expect("create the mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0750")])
            .arg("flightrec-test")
            .arg(path)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mounting a tmpfs on {} failed",
            path.display()
        );
        Tmpfs(path.to_path_buf())
    }

    /// Remounts it with `kib` KiB of room beyond what it holds now: a disk
    /// that fills soon after, whatever was written before. A writer that
    /// added more than `kib` between the look and the remount makes the
    /// kernel refuse a size below what is held: it is looked at again.
    pub fn shrink_to_used_and(&self, kib: u64) {
        const TRIES: usize = 10;
        for tried in 1.. {
            let fs = nix::sys::statvfs::statvfs(&self.0).expect("statvfs");
            let used = (fs.blocks() - fs.blocks_free()) * fs.fragment_size();
            let size = used.div_ceil(1024) + kib;
            let status = Command::new("mount")
                .args(["-o", &format!("remount,size={size}k")])
                .arg(&self.0)
                .status()
                .expect("run mount");
            if status.success() {
                return;
            }
            assert!(
                tried < TRIES,
                "remounting {} at {size} KiB ({tried} tries)",
                self.0.display()
            );
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Unpacks the tarball `tarball` (an archive `snapctl archive` wrote) into
/// the new directory `into`, with tar(1).
pub fn unpack(tarball: &Path, into: &Path) {
    std::fs::create_dir(into).expect("create the directory to unpack into");
    let out = Command::new("tar")
        .arg("xf")
        .arg(tarball)
        .arg("-C")
        .arg(into)
        .output()
        .expect("run tar");
    assert!(
        out.status.success(),
        "tar xf {}: {}",
        tarball.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// VmRSS of `pid` in bytes.
pub fn rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
        * 1024
}

/// Copies an executable to `to` with `cp`, so that this process never holds
/// a descriptor open for writing on it. Copied in process, the descriptor
/// is inherited by whatever child another test thread forks at that moment
/// (until it execs), and executing the copy then fails with "Text file
/// busy".
pub fn copy_executable(from: impl AsRef<Path>, to: impl AsRef<Path>) {
    let (from, to) = (from.as_ref(), to.as_ref());
    let status = std::process::Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .status()
        .unwrap_or_else(|e| panic!("running cp: {e}"));
    assert!(
        status.success(),
        "cp {} {} exited with {status}",
        from.display(),
        to.display()
    );
}

/// Now, in ns since the Unix epoch (the daemon's instants).
pub fn unix_now_ns() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock");
    i64::try_from(since.as_nanos()).expect("ns since the epoch fit an i64")
}
