//! The two recorders under test, driven as users drive them: `flightrecd`
//! with a config file, `snapctl` and SIGUSR2; `perf record -a --overwrite
//! --switch-output` and SIGUSR2.

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which events both tools record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSet {
    /// `sched:sched_switch` + `cpu-clock` at 999 Hz with call chains.
    SwitchAndClock,
    /// `sched:sched_switch` only.
    SwitchOnly,
    /// `sched:sched_switch` with call chains (the stacks off-CPU time is
    /// charged to) + `cpu-clock` at 999 Hz with call chains.
    OffCpu,
    /// `sched:sched_switch` + `cpu-clock` at 999 Hz with call chains, and a
    /// PERF_RECORD_SWITCH_CPU_WIDE record for every context switch (what
    /// samply and hotspot compute off-CPU time from).
    SwitchRecords,
    /// `sched:sched_switch` + `cpu-clock` at 999 Hz with the user stack
    /// copied (8 KiB, perf's default) for unwinding by DWARF tables:
    /// `callchain = "dwarf"`, `--call-graph dwarf`.
    SwitchAndClockDwarf,
}

impl EventSet {
    pub fn name(self) -> &'static str {
        match self {
            EventSet::SwitchAndClock => "sched_switch+cpu-clock/999Hz -g",
            EventSet::SwitchOnly => "sched_switch",
            EventSet::OffCpu => "sched_switch -g+cpu-clock/999Hz -g",
            EventSet::SwitchRecords => "sched_switch+cpu-clock/999Hz -g+switch records",
            EventSet::SwitchAndClockDwarf => "sched_switch+cpu-clock/999Hz --call-graph dwarf",
        }
    }

    fn perf_args(self) -> Vec<&'static str> {
        match self {
            EventSet::SwitchAndClock => vec![
                "-e",
                "sched:sched_switch",
                "-e",
                "cpu-clock/freq=999,call-graph=fp/",
            ],
            EventSet::SwitchOnly => vec!["-e", "sched:sched_switch"],
            EventSet::OffCpu => vec![
                "-e",
                "sched:sched_switch/call-graph=fp/",
                "-e",
                "cpu-clock/freq=999,call-graph=fp/",
            ],
            EventSet::SwitchRecords => vec![
                "--switch-events",
                "-e",
                "sched:sched_switch",
                "-e",
                "cpu-clock/freq=999,call-graph=fp/",
            ],
            EventSet::SwitchAndClockDwarf => vec![
                "-e",
                "sched:sched_switch",
                "-e",
                "cpu-clock/freq=999,call-graph=dwarf/",
            ],
        }
    }

    fn flightrec_toml(self) -> &'static str {
        match self {
            EventSet::SwitchAndClock => {
                "[[event]]\nname = \"sched:sched_switch\"\n\n[[event]]\nname = \"cpu-clock\"\nfrequency = 999\ncallchain = true\n"
            }
            EventSet::SwitchOnly => "[[event]]\nname = \"sched:sched_switch\"\n",
            EventSet::OffCpu => {
                "[[event]]\nname = \"sched:sched_switch\"\ncallchain = true\n\n[[event]]\nname = \"cpu-clock\"\nfrequency = 999\ncallchain = true\n"
            }
            EventSet::SwitchRecords => {
                "[[event]]\nname = \"sched:sched_switch\"\ncontext_switch = true\n\n[[event]]\nname = \"cpu-clock\"\nfrequency = 999\ncallchain = true\n"
            }
            EventSet::SwitchAndClockDwarf => {
                "[[event]]\nname = \"sched:sched_switch\"\n\n[[event]]\nname = \"cpu-clock\"\nfrequency = 999\ncallchain = \"dwarf\"\n"
            }
        }
    }
}

/// What a recorder run is configured with.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub events: EventSet,
    pub ring_bytes_per_cpu: u64,
    /// zstd level: perf compresses every dump (`-z`); flightrec compresses
    /// the dumps asked for with `snapctl dump --compress`.
    pub compression: Option<i32>,
    /// Also record `sched:sched_process_exec` and dump on the exec of a
    /// program named this: a `[[trigger]]` for flightrec,
    /// `--switch-output-event` for perf (which takes no filter: any exec).
    pub exec_trigger: Option<&'static str>,
    /// Sample times on CLOCK_MONOTONIC (perf: `-k monotonic`; flightrec
    /// always is when the kernel supports use_clockid).
    pub monotonic: bool,
    /// flightrec's `buffers.lossless_freeze` (standby rings); false pauses
    /// the rings for the copy, as perf does.
    pub lossless_freeze: bool,
    /// Join a fleet: `[fleet]` on this loopback NATS port as this host
    /// (flightrec only).
    pub fleet: Option<FleetSetup>,
    /// Keep the past on disk in a budget of this many bytes: flightrec's
    /// `[history]` (zstd level 1), perf's ring of files
    /// (`perf record -a -z --switch-output=SIZE --switch-max-files=N`, no
    /// `--overwrite`).
    pub disk_ring: Option<u64>,
    /// `cpu-clock`'s frequency instead of 999 Hz (both tools).
    pub clock_hz: Option<u32>,
    /// flightrec's `snapshot.writer_nice` (its default when `None`).
    pub writer_nice: Option<i32>,
    /// Both recorders started under `nice -n N` (systemd's `Nice=`: every
    /// thread of the process).
    pub nice: Option<i32>,
    /// Every sample's cgroup id and the cgroups named in the snapshot:
    /// flightrec's `[containers] cgroups` (on by default), perf's
    /// `--all-cgroups`.
    pub cgroups: bool,
}

/// Files in perf's disk ring (`--switch-max-files`).
pub const PERF_DISK_RING_FILES: u64 = 8;

#[derive(Debug, Clone, Copy)]
pub struct FleetSetup {
    pub nats_port: u16,
    pub host: &'static str,
}

impl Setup {
    /// sched_switch and cpu-clock, `ring` bytes per CPU, no compression:
    /// what most scenarios record.
    pub fn switch_and_clock(ring: u64) -> Self {
        Self {
            events: EventSet::SwitchAndClock,
            ring_bytes_per_cpu: ring,
            compression: None,
            exec_trigger: None,
            monotonic: false,
            lossless_freeze: true,
            fleet: None,
            disk_ring: None,
            clock_hz: None,
            writer_nice: None,
            nice: None,
            cgroups: true,
        }
    }

    /// The events' flightrec config, at `clock_hz`.
    fn flightrec_events(&self) -> String {
        let toml = self.events.flightrec_toml();
        match self.clock_hz {
            Some(hz) => toml.replace("frequency = 999", &format!("frequency = {hz}")),
            None => toml.to_string(),
        }
    }

    /// The events' perf arguments, at `clock_hz`.
    fn perf_events(&self) -> Vec<String> {
        let args = self.events.perf_args().into_iter();
        match self.clock_hz {
            Some(hz) => args
                .map(|a| a.replace("freq=999", &format!("freq={hz}")))
                .collect(),
            None => args.map(str::to_string).collect(),
        }
    }
}

/// `program`, under `nice -n N` when `nice` is given (the pid stays the
/// program's: nice execs it).
fn niced(nice: Option<i32>, program: PathBuf) -> Command {
    match nice {
        Some(n) => {
            let mut cmd = Command::new("nice");
            cmd.arg("-n").arg(n.to_string()).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// A running recorder.
pub struct Recorder {
    pub kind: Kind,
    child: Child,
    dir: tempfile::TempDir,
    snapctl: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Flightrec,
    Perf,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Flightrec => "flightrec",
            Kind::Perf => "perf",
        }
    }
}

/// Whether a new snapshot is the one a trigger made.
pub type Accept<'a> = &'a dyn Fn(&Path) -> Result<bool>;

/// A snapshot produced by a trigger, with how long it took to be complete.
pub struct Triggered {
    pub path: PathBuf,
    pub elapsed: Duration,
    /// The daemon's JSON reply, for `snapctl dump` triggers.
    pub reply: Option<serde_json::Value>,
}

impl Triggered {
    /// The daemon's capture time (`timings.capture_ns` of a `snapctl dump`
    /// reply).
    pub fn capture_ns(&self) -> Result<u64> {
        self.reply.as_ref().context("no dump reply")?["timings"]["capture_ns"]
            .as_u64()
            .context("the dump reply has no timings.capture_ns")
    }
}

impl Recorder {
    pub fn start(kind: Kind, setup: Setup) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("bench-{}-", kind.name()))
            .tempdir()?;
        let snapshots = dir.path().join("snapshots");
        std::fs::create_dir(&snapshots)?;
        let log = std::fs::File::create(dir.path().join("recorder.log"))?;
        let child = match kind {
            Kind::Flightrec => {
                let config = dir.path().join("flightrec.toml");
                // Dumps stay uncompressed unless asked (`snapctl dump
                // --compress`), at the configured level, so one run yields
                // both kinds of snapshot.
                let compression = match setup.compression {
                    Some(level) => format!("compression = \"none\"\nlevel = {level}\n"),
                    None => "compression = \"none\"\n".into(),
                };
                let trigger = match setup.exec_trigger {
                    Some(name) => format!(
                        "[[event]]\nname = \"sched:sched_process_exec\"\n\n\
                         [[trigger]]\nname = \"exec\"\non = \"tracepoint\"\n\
                         event = \"sched:sched_process_exec\"\n\
                         filter = 'filename ~ \"*{name}\"'\ncooldown = \"0s\"\n\
                         max_per_hour = 3600\n"
                    ),
                    None => String::new(),
                };
                let history = match setup.disk_ring {
                    Some(bytes) => format!(
                        "[history]\nenabled = true\nmax_bytes = {bytes}\nmax_age = \"7days\"\n\
                         dir = \"{}\"\nlevel = 1\n\n",
                        dir.path().join("history").display()
                    ),
                    None => String::new(),
                };
                let writer_nice = setup
                    .writer_nice
                    .map(|n| format!("writer_nice = {n}\n"))
                    .unwrap_or_default();
                let fleet = match setup.fleet {
                    Some(f) => format!(
                        "[fleet]\nnats = \"nats://127.0.0.1:{}\"\nhost = \"{}\"\n\n",
                        f.nats_port, f.host
                    ),
                    None => String::new(),
                };
                std::fs::write(
                    &config,
                    format!(
                        "[daemon]\nsocket = \"{sock}\"\noutput_dir = \"{out}\"\n\n\
                         [buffers]\nper_cpu = \"{ring}\"\nlossless_freeze = {lossless}\n\n{events}\n{trigger}\n\
                         [snapshot]\n{compression}min_interval = \"0s\"\n{writer_nice}\n\
                         [retention]\nmax_snapshots = 10000\nmax_bytes = \"1000GiB\"\n\n\
                         [containers]\ncgroups = {cgroups}\nruntime_sockets = []\n\n{history}{fleet}",
                        sock = dir.path().join("flightrecd.sock").display(),
                        out = snapshots.display(),
                        ring = setup.ring_bytes_per_cpu,
                        lossless = setup.lossless_freeze,
                        events = setup.flightrec_events(),
                        cgroups = setup.cgroups,
                    ),
                )?;
                niced(setup.nice, flightrec_tests::bin_path("flightrecd"))
                    .arg("--config")
                    .arg(&config)
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .context("starting flightrecd")?
            }
            Kind::Perf => {
                let pages = (setup.ring_bytes_per_cpu / 4096).max(1);
                let mut cmd = niced(setup.nice, "perf".into());
                let cmd = match setup.disk_ring {
                    Some(bytes) => cmd
                        // perf 6.1 refuses --switch-output with --threads
                        // ("not available in parallel streaming mode").
                        .args(["record", "-a", "-z", "-q"])
                        .arg(format!(
                            "--switch-output={}K",
                            bytes / PERF_DISK_RING_FILES / 1024
                        ))
                        .arg(format!("--switch-max-files={PERF_DISK_RING_FILES}")),
                    None => cmd.args(["record", "-a", "--overwrite", "--switch-output", "-q"]),
                };
                cmd.arg("-m")
                    .arg(pages.to_string())
                    .args(setup.perf_events())
                    .arg("-o")
                    .arg(snapshots.join("perf.data"));
                if let Some(level) = setup.compression {
                    cmd.arg(format!("--compression-level={level}"));
                }
                if setup.exec_trigger.is_some() {
                    cmd.args([
                        "-e",
                        "sched:sched_process_exec",
                        "--switch-output-event",
                        "sched:sched_process_exec",
                    ]);
                }
                if setup.monotonic {
                    cmd.args(["-k", "monotonic"]);
                }
                if setup.cgroups {
                    cmd.arg("--all-cgroups");
                }
                cmd.stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .context("starting perf record")?
            }
        };
        let recorder = Self {
            kind,
            child,
            dir,
            snapctl: flightrec_tests::bin_path("snapctl"),
        };
        recorder.wait_ready()?;
        Ok(recorder)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `snapctl --json ARGS` (flightrec only), timed.
    pub fn snapctl_json(&self, args: &[&str]) -> Result<(serde_json::Value, Duration)> {
        let start = Instant::now();
        let out = Command::new(&self.snapctl)
            .arg("--socket")
            .arg(self.socket())
            .arg("--json")
            .args(args)
            .output()
            .context("running snapctl")?;
        let elapsed = start.elapsed();
        if !out.status.success() {
            bail!(
                "snapctl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok((serde_json::from_slice(&out.stdout)?, elapsed))
    }

    fn snapshots_dir(&self) -> PathBuf {
        self.dir.path().join("snapshots")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("flightrecd.sock")
    }

    fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = match self.kind {
                Kind::Flightrec => {
                    self.socket().exists()
                        && Command::new(&self.snapctl)
                            .arg("--socket")
                            .arg(self.socket())
                            .arg("status")
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status()
                            .is_ok_and(|s| s.success())
                }
                Kind::Perf => self.snapshots_dir().join("perf.data").exists(),
            };
            if ready {
                // perf creates its file before every ring is enabled.
                std::thread::sleep(Duration::from_millis(300));
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{} did not become ready: {}", self.kind.name(), self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The recorder's stderr so far, for error messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("recorder.log")).unwrap_or_default()
    }

    fn complete_snapshots(&self) -> Result<BTreeSet<PathBuf>> {
        let mut found = BTreeSet::new();
        for entry in std::fs::read_dir(self.snapshots_dir())? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let complete = match self.kind {
                // Written under a dot-name, renamed when complete.
                Kind::Flightrec => name.ends_with(".perf.data") && !name.starts_with('.'),
                // perf renames perf.data to perf.data.<timestamp> when done.
                Kind::Perf => name.starts_with("perf.data."),
            };
            if complete {
                found.insert(path);
            }
        }
        Ok(found)
    }

    /// SIGUSR2, then waits until a new complete snapshot file exists.
    pub fn trigger_signal(&mut self) -> Result<Triggered> {
        self.trigger_signal_until(&|_| Ok(true))
    }

    /// SIGUSR2, then waits for the first new complete snapshot that
    /// `accept` takes (perf also switches files on other triggers).
    pub fn trigger_signal_until(&mut self, accept: Accept<'_>) -> Result<Triggered> {
        let before = self.complete_snapshots()?;
        let start = Instant::now();
        kill(Pid::from_raw(self.pid() as i32), Signal::SIGUSR2)?;
        self.wait_accepted(before, start, "SIGUSR2", accept)
    }

    /// Runs `program` (whose exec is the trigger of
    /// [`Setup::exec_trigger`]), then waits for the first new snapshot that
    /// `accept` takes (perf's `--switch-output-event` takes no filter, so
    /// any exec, such as the harness's own `perf script`, switches too).
    pub fn trigger_exec(&mut self, program: &Path, accept: Accept<'_>) -> Result<Triggered> {
        let before = self.complete_snapshots()?;
        let start = Instant::now();
        let status = Command::new(program).status()?;
        if !status.success() {
            bail!("{} failed: {status}", program.display());
        }
        self.wait_accepted(before, start, "the exec", accept)
    }

    /// Waits until no new snapshot has appeared for `quiet` (at most 20 s):
    /// perf switches files on any exec, the harness's own `perf script`
    /// among them, and a late one must not pass for the next trigger's.
    pub fn settle(&self, quiet: Duration) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut last = self.complete_snapshots()?;
        let mut since = Instant::now();
        while since.elapsed() < quiet && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            let now = self.complete_snapshots()?;
            if now != last {
                last = now;
                since = Instant::now();
            }
        }
        Ok(())
    }

    /// Elapsed is taken when the accepted file was first seen complete.
    fn wait_accepted(
        &self,
        mut seen: BTreeSet<PathBuf>,
        start: Instant,
        what: &str,
        accept: Accept<'_>,
    ) -> Result<Triggered> {
        let deadline = start + Duration::from_secs(120);
        loop {
            let now = self.complete_snapshots()?;
            let found_at = start.elapsed();
            let new: Vec<PathBuf> = now.difference(&seen).cloned().collect();
            for path in new {
                seen.insert(path.clone());
                if accept(&path)? {
                    return Ok(Triggered {
                        path,
                        elapsed: found_at,
                        reply: None,
                    });
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "{}: no snapshot 120 s after {what}; its log:\n{}",
                    self.kind.name(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// `snapctl --json dump` (flightrec only): returns when the file is complete.
    pub fn trigger_snapctl(&mut self, compress: bool) -> Result<Triggered> {
        let start = Instant::now();
        let mut cmd = Command::new(&self.snapctl);
        cmd.arg("--socket")
            .arg(self.socket())
            .args(["--json", "dump"]);
        if compress {
            cmd.arg("--compress");
        }
        let out = cmd.output().context("running snapctl dump")?;
        let elapsed = start.elapsed();
        if !out.status.success() {
            bail!(
                "snapctl dump failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let reply: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let path = PathBuf::from(reply["path"].as_str().context("dump reply has no path")?);
        Ok(Triggered {
            path,
            elapsed,
            reply: Some(reply),
        })
    }

    /// `snapctl --json status` (flightrec only).
    pub fn status(&self) -> Result<serde_json::Value> {
        let out = Command::new(&self.snapctl)
            .arg("--socket")
            .arg(self.socket())
            .args(["--json", "status"])
            .output()
            .context("running snapctl status")?;
        if !out.status.success() {
            bail!(
                "snapctl status failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// `snapctl compress ID --level N`; returns the wall time of the call.
    pub fn compress(&self, snapshot: &Path, level: i32) -> Result<Duration> {
        let id = snapshot
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".perf.data"))
            .context("snapshot name")?;
        let start = Instant::now();
        let out = Command::new(&self.snapctl)
            .arg("--socket")
            .arg(self.socket())
            .args(["--json", "compress", id, "--level", &level.to_string()])
            .output()?;
        if !out.status.success() {
            bail!(
                "snapctl compress failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(start.elapsed())
    }

    /// Stops the recorder (SIGTERM for flightrecd, SIGINT for perf) and waits.
    pub fn stop(mut self) -> Result<()> {
        self.halt()
    }

    /// Stops the recorder and returns its complete snapshots (perf's last
    /// one, written at exit, among them), with the directory holding them.
    pub fn stop_keeping_files(mut self) -> Result<(tempfile::TempDir, BTreeSet<PathBuf>)> {
        self.halt()?;
        self.take_files()
    }

    /// As [`Recorder::stop_keeping_files`], with the CPU seconds the
    /// recorder ran from its start to its exit, read off the exited
    /// process before it is reaped: what it does on the way out counts
    /// (perf reads and compresses what its rings still hold when stopped).
    pub fn stop_keeping_files_with_cpu(
        mut self,
    ) -> Result<(tempfile::TempDir, BTreeSet<PathBuf>, f64)> {
        self.stop_unreaped()?;
        // The zombie's own thread to the nanosecond; its threads that
        // exited before it only in the group's clock ticks.
        let cpu = crate::procfs::live_threads_cpu_seconds(self.pid())?
            .max(crate::procfs::cpu_seconds(self.pid())?);
        self.child.wait()?;
        let (dir, files) = self.take_files()?;
        Ok((dir, files, cpu))
    }

    /// The complete snapshots, and the directory holding them taken out
    /// of a recorder that is dropped (and would remove it); an empty
    /// directory is left in its place.
    fn take_files(&mut self) -> Result<(tempfile::TempDir, BTreeSet<PathBuf>)> {
        let files = self.complete_snapshots()?;
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir()?);
        Ok((dir, files))
    }

    fn signal_stop(&self) -> Result<()> {
        let signal = match self.kind {
            Kind::Flightrec => Signal::SIGTERM,
            Kind::Perf => Signal::SIGINT,
        };
        kill(Pid::from_raw(self.pid() as i32), signal)?;
        Ok(())
    }

    /// Signals the recorder to stop and waits until it has exited, without
    /// reaping it, so what it used can still be read.
    fn stop_unreaped(&mut self) -> Result<()> {
        self.signal_stop()?;
        let pid = Pid::from_raw(self.pid() as i32);
        let deadline = Instant::now() + Duration::from_secs(60);
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
        while waitid(Id::Pid(pid), flags)? == WaitStatus::StillAlive {
            if Instant::now() > deadline {
                self.child.kill()?;
                bail!("{} did not stop within 60 s", self.kind.name());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    fn halt(&mut self) -> Result<()> {
        self.stop_unreaped()?;
        self.child.wait()?;
        Ok(())
    }
}

/// A recorder left running by an error is killed, not left behind (it
/// would hold whatever the harness held, such as a lock file's fd).
impl Drop for Recorder {
    fn drop(&mut self) {
        if self.child.try_wait().is_ok_and(|s| s.is_none()) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
