//! A throwaway machine with a real systemd as PID 1 (`tests/boot-systemd`:
//! namespaces over an overlay of the host's root with a tmpfs on top), for
//! the tests of the Debian package and its unit. It starts without the
//! host's /var/lib/flightrec, /etc/flightrec and /run, so what flightrec
//! left on the host never shows inside. Whatever a test installs or
//! changes inside goes when the machine is dropped: systemd is killed (and
//! every process inside with it), the mounts vanish with its mount
//! namespace, and its cgroup directories are removed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Where the machine sees [`Machine::share`].
pub const SHARE_INSIDE: &str = "/srv/flightrec-test";

/// The environment of commands run inside: what a root login has, nothing
/// of the test's.
const INSIDE_ENV: [&str; 5] = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/root",
    "LANG=C.UTF-8",
    "TERM=dumb",
    "SYSTEMD_PAGER=",
];

pub struct Machine {
    /// The mount points (empty on the host).
    dir: tempfile::TempDir,
    /// A host directory the machine sees at [`SHARE_INSIDE`].
    pub share: tempfile::TempDir,
    /// The boot script, become `unshare`.
    boot: Child,
    /// systemd, PID 1 inside, as the host numbers it.
    pid: i32,
    cgroup: PathBuf,
}

impl Machine {
    /// Boots a machine and waits until systemd has reached its target.
    pub fn boot() -> Self {
        Self::boot_with(None)
    }

    /// As [`Machine::boot`], with the files of `leftovers` copied over
    /// the machine's root first, as if the host held them.
    pub fn boot_over(leftovers: &Path) -> Self {
        Self::boot_with(Some(leftovers))
    }

    fn boot_with(leftovers: Option<&Path>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("flightrec-machine-")
            .tempdir()
            .expect("tempdir");
        let share = tempfile::Builder::new()
            .prefix("flightrec-share-")
            .tempdir()
            .expect("tempdir");
        // apt's sandbox user reads packages from here.
        set_mode(share.path(), 0o755);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("boot-systemd");
        let log = std::fs::File::create(dir.path().join("boot.log")).expect("boot log");
        let boot = Command::new(&script)
            .arg(dir.path())
            .arg(share.path())
            .args(leftovers)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        let name = dir
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 dir name")
            .to_string();
        let cgroup = if Path::new("/sys/fs/cgroup/cgroup.procs").exists() {
            Path::new("/sys/fs/cgroup").join(&name)
        } else {
            Path::new("/sys/fs/cgroup/unified").join(&name)
        };
        let mut machine = Machine {
            dir,
            share,
            boot,
            pid: 0,
            cgroup,
        };
        machine.pid = machine.wait_for_systemd();
        // systemctl talks to systemd on its private socket, made early in
        // its start-up.
        let private = machine.path("/run/systemd/private");
        machine.wait_for("systemd's socket", Duration::from_secs(60), || {
            private.exists().then_some(())
        });
        let out = machine.run(&["systemctl", "is-system-running", "--wait"]);
        let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            state == "running",
            "the machine's systemd reached {state:?}, not running:\n{}",
            machine.sh("systemctl --failed --no-pager; journalctl -b --no-pager | tail -50")
        );
        machine
    }

    /// The host pid of systemd once the boot script has exec'ed it.
    fn wait_for_systemd(&mut self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(60);
        let unshare = self.boot.id();
        loop {
            let children =
                std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
                    .unwrap_or_default();
            if let Some(pid) = children
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
                && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "systemd")
            {
                return pid;
            }
            if let Ok(Some(status)) = self.boot.try_wait() {
                panic!(
                    "tests/boot-systemd exited with {status}:\n{}",
                    std::fs::read_to_string(self.dir.path().join("boot.log")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "systemd did not start within 60s:\n{}",
                std::fs::read_to_string(self.dir.path().join("boot.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// systemd's pid as the host sees it.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// A command run inside the machine (every namespace of its systemd),
    /// as root with a login's environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(self.pid.to_string())
            .args(["-m", "-u", "-i", "-p", "-C", "--", "env", "-i"])
            .args(INSIDE_ENV)
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `args` inside to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run nsenter")
    }

    /// Runs a bash script inside; stdout and stderr together.
    pub fn sh(&self, script: &str) -> String {
        let out = self.run(&["bash", "-c", &format!("{{ {script}\n}} 2>&1")]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs a bash script inside, asserting it succeeds; its stdout.
    pub fn ok(&self, script: &str) -> String {
        let out = self.run(&["bash", "-euo", "pipefail", "-c", script]);
        assert!(
            out.status.success(),
            "inside the machine, `{script}` failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A path inside the machine, as the host reaches it.
    pub fn path(&self, inside: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{inside}", self.pid))
    }

    /// `systemctl show -p PROPERTY --value UNIT`.
    pub fn property(&self, unit: &str, property: &str) -> String {
        self.ok(&format!("systemctl show -p {property} --value {unit}"))
            .trim()
            .to_string()
    }

    /// The journal's current end, for [`Machine::journal_since`].
    pub fn cursor(&self) -> String {
        let text = self.ok("journalctl -q -n 0 --show-cursor");
        text.lines()
            .find_map(|l| l.strip_prefix("-- cursor: "))
            .unwrap_or_else(|| panic!("no cursor in {text:?}"))
            .trim()
            .to_string()
    }

    /// Journal lines of `unit` (and systemd's about it) after `cursor`,
    /// as `journalctl -o short-precise` prints them.
    pub fn journal_since(&self, cursor: &str, unit: &str) -> String {
        self.ok(&format!(
            "journalctl --no-pager -q -o short-precise --after-cursor='{cursor}' -u {unit}"
        ))
    }

    /// Waits up to `within` for a journal line of `unit` after `cursor`
    /// containing `needle`; returns that line.
    pub fn wait_journal(&self, cursor: &str, unit: &str, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let text = self.journal_since(cursor, unit);
            if let Some(line) = text.lines().find(|l| l.contains(needle)) {
                return line.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no journal line of {unit} with {needle:?} within {within:?}; the journal since:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Polls `check` every 100 ms until it returns Some, for at most
    /// `within`; `what` names the witness in the failure.
    pub fn wait_for<T>(
        &self,
        what: &str,
        within: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + within;
        loop {
            if let Some(v) = check() {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {within:?}; the machine's journal ends with:\n{}",
                self.sh("journalctl -b --no-pager -n 60")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        // PID 1 of the namespace: SIGKILL ends every process inside, and
        // the last of them takes the mount namespace with its mounts.
        if self.pid > 0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.boot.kill();
        let _ = self.boot.wait();
        // Cgroups empty once their processes are reaped; deepest first.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cgroup.exists() && Instant::now() < deadline {
            remove_cgroup_tree(&self.cgroup);
            if self.cgroup.exists() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}
