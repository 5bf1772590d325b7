//! CPU cgroups for the recorder and the load, as systemd places a service
//! and the work beside it: each in a cgroup of its own (siblings of equal
//! weight, as two services of system.slice), or the load in the
//! recorder's. Under CFS a cgroup's weight is shared by its runnable
//! tasks: a recorder in a cgroup of its own gets that cgroup's share
//! however many tasks the load has.
//!
//! The cpu controller is found where the machine has it: cgroup v2
//! (`cpu.weight`, at /sys/fs/cgroup or /sys/fs/cgroup/unified) or v1
//! (`cpu.shares`, at /sys/fs/cgroup/cpu).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Where the load runs, against the recorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The load in a cgroup of its own, beside the recorder's (as under
    /// systemd: a service, and sessions or other services).
    OwnCgroup,
    /// The load in the recorder's cgroup.
    RecorderCgroup,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::OwnCgroup => "load in a cgroup of its own",
            Placement::RecorderCgroup => "load in the recorder's cgroup",
        }
    }
}

/// Which cgroup version holds the cpu controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// Two sibling cgroups under `flightrec-bench`: `recorder` and `load`,
/// removed on drop.
pub struct BenchCgroups {
    parent: PathBuf,
    version: Version,
}

/// v2 roots whose `cgroup.controllers` name `cpu`, then the v1 cpu
/// hierarchy.
fn cpu_hierarchy() -> Result<(PathBuf, Version)> {
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let controllers = std::fs::read_to_string(Path::new(root).join("cgroup.controllers"));
        if controllers.is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu")) {
            return Ok((root.into(), Version::V2));
        }
    }
    let v1 = Path::new("/sys/fs/cgroup/cpu");
    if v1.join("cpu.shares").exists() {
        return Ok((v1.into(), Version::V1));
    }
    bail!("no cpu cgroup controller: neither cgroup v2 with cpu nor /sys/fs/cgroup/cpu")
}

impl BenchCgroups {
    /// Creates (or reuses) the two cgroups at the default weight, the
    /// recorder's at `recorder_weight` when given (systemd's `CPUWeight=`,
    /// 1 to 10000, 100 the default; on v1 `cpu.shares` = weight × 1024 / 100).
    pub fn create(recorder_weight: Option<u32>) -> Result<Self> {
        let (root, version) = cpu_hierarchy()?;
        let parent = root.join("flightrec-bench");
        let cgroups = Self { parent, version };
        if version == Version::V2 {
            std::fs::create_dir_all(&cgroups.parent)?;
            // The children may use the cpu controller.
            std::fs::write(root.join("cgroup.subtree_control"), "+cpu")
                .context("enabling the cpu controller below the root")?;
            std::fs::write(cgroups.parent.join("cgroup.subtree_control"), "+cpu")
                .context("enabling the cpu controller below flightrec-bench")?;
        }
        std::fs::create_dir_all(&cgroups.parent)
            .with_context(|| format!("creating {}", cgroups.parent.display()))?;
        cgroups.allow_realtime(&cgroups.parent)?;
        for child in ["recorder", "load"] {
            let dir = cgroups.parent.join(child);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            cgroups.set_weight(&dir, 100)?;
        }
        cgroups.allow_realtime(&cgroups.recorder())?;
        if let Some(w) = recorder_weight {
            cgroups.set_weight(&cgroups.parent.join("recorder"), w)?;
        }
        Ok(cgroups)
    }

    /// With realtime group scheduling (v1 `cpu.rt_runtime_us`), a cgroup
    /// starts with no realtime time and refuses a process with SCHED_FIFO
    /// threads (flightrecd's way to frozen rings): `dir` is given 100 ms a
    /// second, the recorder's from its parent's. Without it (v2, or a
    /// kernel without RT_GROUP_SCHED) realtime threads go anywhere.
    fn allow_realtime(&self, dir: &Path) -> Result<()> {
        let file = dir.join("cpu.rt_runtime_us");
        if self.version == Version::V2 || !file.exists() {
            return Ok(());
        }
        std::fs::write(&file, "100000").with_context(|| format!("setting {}", file.display()))
    }

    fn set_weight(&self, dir: &Path, weight: u32) -> Result<()> {
        let (file, value) = match self.version {
            Version::V2 => ("cpu.weight", weight.to_string()),
            Version::V1 => ("cpu.shares", (u64::from(weight) * 1024 / 100).to_string()),
        };
        std::fs::write(dir.join(file), value)
            .with_context(|| format!("setting {}/{file}", dir.display()))
    }

    /// The cgroup the recorder runs in.
    pub fn recorder(&self) -> PathBuf {
        self.parent.join("recorder")
    }

    /// The cgroup the load runs in under `placement`.
    pub fn load(&self, placement: Placement) -> PathBuf {
        match placement {
            Placement::OwnCgroup => self.parent.join("load"),
            Placement::RecorderCgroup => self.recorder(),
        }
    }

    /// Moves process `pid` (every thread of it) into `cgroup`.
    pub fn enter(cgroup: &Path, pid: u32) -> Result<()> {
        std::fs::write(cgroup.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {pid} into {}", cgroup.display()))
    }
}

impl Drop for BenchCgroups {
    /// Removes the cgroups once empty (their processes are gone by then);
    /// one still in use is left for the next run to reuse.
    fn drop(&mut self) {
        for child in ["recorder", "load"] {
            let _ = std::fs::remove_dir(self.parent.join(child));
        }
        let _ = std::fs::remove_dir(&self.parent);
    }
}
