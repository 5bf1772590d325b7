//! The fixed workloads recorders are measured under (perf's own benchmarks).

use anyhow::{Context, Result, bail};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// `perf bench sched messaging`: many processes, heavy context switching.
    Messaging,
    /// `perf bench sched pipe`: two tasks ping-ponging over a pipe.
    Pipe,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Messaging => "sched messaging",
            Workload::Pipe => "sched pipe",
        }
    }

    fn args(self, quick: bool) -> Vec<String> {
        let (what, loops) = match self {
            Workload::Messaging => ("messaging", if quick { "100" } else { "400" }),
            Workload::Pipe => ("pipe", if quick { "20000" } else { "100000" }),
        };
        let mut args = vec!["bench".into(), "sched".into(), what.into()];
        match self {
            Workload::Messaging => args.extend(["-g".into(), "10".into()]),
            Workload::Pipe => {}
        }
        args.extend(["-l".into(), loops.into()]);
        args
    }

    /// Runs the workload to completion and returns its wall time.
    pub fn run(self, quick: bool) -> Result<Duration> {
        let start = Instant::now();
        let status = Command::new("perf")
            .args(self.args(quick))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running perf bench")?;
        let elapsed = start.elapsed();
        if !status.success() {
            bail!("perf bench {} failed: {status}", self.name());
        }
        Ok(elapsed)
    }
}

/// A long-running messaging load in its own process group, killed on drop.
pub struct BackgroundLoad {
    child: Child,
}

impl BackgroundLoad {
    pub fn start() -> Result<Self> {
        Self::messaging(10)
    }

    /// One round of `perf bench sched messaging -g 1` every 0.3 s: a load
    /// that takes seconds to fill a 4 MiB ring.
    pub fn light() -> Result<Self> {
        use std::os::unix::process::CommandExt;
        let child = Command::new("sh")
            .args([
                "-c",
                "while :; do perf bench sched messaging -g 1 >/dev/null 2>&1; sleep 0.3; done",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting the light load")?;
        Ok(Self { child })
    }

    /// `perf bench sched messaging -g GROUPS`, looping until dropped, in
    /// `cgroup` (the cgroup v1 or v2 directory) from its first task on.
    pub fn messaging_in(groups: u32, cgroup: &std::path::Path) -> Result<Self> {
        use std::os::unix::process::CommandExt;
        let child = Command::new("sh")
            .args([
                "-c",
                "echo $$ > \"$1/cgroup.procs\" && exec perf bench sched messaging -g \"$2\" -l 100000000",
                "sh",
            ])
            .arg(cgroup)
            .arg(groups.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting background load")?;
        Ok(Self { child })
    }

    /// `perf bench sched messaging -g GROUPS`, looping until dropped.
    pub fn messaging(groups: u32) -> Result<Self> {
        use std::os::unix::process::CommandExt;
        let groups = groups.to_string();
        let child = Command::new("perf")
            .args([
                "bench",
                "sched",
                "messaging",
                "-g",
                &groups,
                "-l",
                "100000000",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting background load")?;
        Ok(Self { child })
    }
}

impl Drop for BackgroundLoad {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}
