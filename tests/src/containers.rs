//! Real containers and cgroups for the tests: Podman (Debian's, with
//! runc and the cgroupfs manager, as it runs on these machines), an image
//! made here from busybox-static (no registry is reachable), and plain
//! cgroups made under the cgroup2 mount.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The image every test container runs.
pub const IMAGE: &str = "localhost/flightrec-busybox:latest";

fn podman() -> Command {
    let mut c = Command::new("podman");
    // crun refuses the hybrid cgroup layout of these machines; raising
    // rlimits is not permitted here (runc fails without the two --ulimit).
    c.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"]);
    c
}

/// Makes [`IMAGE`] once per process: busybox-static's binary and a few
/// applets, imported. Panics with podman's own words when it cannot.
pub fn ensure_image() {
    static MADE: OnceLock<Result<(), String>> = OnceLock::new();
    MADE.get_or_init(|| {
        let have = podman()
            .args(["image", "exists", IMAGE])
            .status()
            .map_err(|e| format!("podman: {e}"))?;
        if have.success() {
            return Ok(());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let root = dir.path().join("rootfs");
        for d in ["bin", "proc", "sys", "dev", "tmp", "etc"] {
            std::fs::create_dir_all(root.join(d)).map_err(|e| e.to_string())?;
        }
        std::fs::copy("/bin/busybox", root.join("bin/busybox"))
            .map_err(|e| format!("/bin/busybox (busybox-static): {e}"))?;
        for applet in ["sh", "yes", "cat", "sleep", "ls"] {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet))
                .map_err(|e| e.to_string())?;
        }
        let tar = dir.path().join("rootfs.tar");
        let out = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("tar: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let out = podman()
            .arg("import")
            .arg(&tar)
            .arg(IMAGE)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "podman import: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    })
    .as_ref()
    .unwrap_or_else(|e| panic!("the test image cannot be made: {e}"));
}

/// A running container; removed (at once) when dropped.
pub struct Container {
    pub name: String,
    pub id: String,
}

impl Container {
    /// Runs `script` in busybox's sh in a new container named `name`, with
    /// `labels`.
    pub fn run(name: &str, labels: &[&str], script: &str) -> Self {
        let labels: Vec<&str> = labels.iter().flat_map(|l| ["--label", l]).collect();
        Self::run_with(name, &labels, script)
    }

    /// Runs `script` as [`Container::run`] does, with more of `podman
    /// run`'s options (`-v HOST:INSIDE`...).
    pub fn run_with(name: &str, options: &[&str], script: &str) -> Self {
        ensure_image();
        let _ = podman().args(["rm", "-f", "-t", "0", name]).output();
        let mut c = podman();
        c.args(["run", "-d", "--name", name]);
        c.args(options);
        c.args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=4096:4096",
        ]);
        c.args([IMAGE, "/bin/sh", "-c", script]);
        let out = c.output().expect("run podman");
        assert!(
            out.status.success(),
            "podman run {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Container {
            name: name.to_string(),
            id,
        }
    }

    /// The container's first process, as the host sees it.
    pub fn pid(&self) -> u32 {
        let out = podman()
            .args(["inspect", "-f", "{{.State.Pid}}", &self.name])
            .output()
            .expect("podman inspect");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no pid for {}: {out:?}", self.name))
    }

    /// Its cgroup2 path (relative to the mount), from its first process.
    pub fn cgroup(&self) -> String {
        cgroup_of(self.pid())
    }

    /// Stops and removes it now.
    pub fn remove(&self) {
        let _ = podman().args(["rm", "-f", "-t", "0", &self.name]).output();
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The cgroup2 path of process `pid` (the `0::` line of its cgroup file).
pub fn cgroup_of(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup file");
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_else(|| panic!("no cgroup2 line in /proc/{pid}/cgroup: {text}"))
        .to_string()
}

/// Where cgroup2 is mounted: /sys/fs/cgroup, or /sys/fs/cgroup/unified
/// beside v1 controllers.
pub fn cgroup2_mount() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .expect("a cgroup2 mount")
}

/// A cgroup made under the cgroup2 mount; its processes are killed and
/// it is removed when dropped.
pub struct Cgroup {
    pub path: String,
    dir: PathBuf,
}

impl Cgroup {
    /// Makes `path` (relative to the mount, e.g. "/fr-e2e/web.service").
    pub fn make(path: &str) -> Self {
        let dir = cgroup2_mount().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Cgroup {
            path: path.to_string(),
            dir,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts `program args` inside the cgroup (it moves itself there
    /// before exec, so nothing of it runs outside).
    pub fn spawn(&self, program: &Path, args: &[&str]) -> std::process::Child {
        let procs = self.dir.join("cgroup.procs");
        Command::new("sh")
            .arg("-c")
            .arg(r#"echo $$ > "$0" && exec "$@""#)
            .arg(procs)
            .arg(program)
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn into the cgroup")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        // The kernel empties it when the last process is reaped.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}
