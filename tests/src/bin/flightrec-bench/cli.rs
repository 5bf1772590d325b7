//! The command line.

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "flightrec-bench",
    about = "flightrec vs perf record --overwrite, side by side"
)]
pub struct Args {
    /// Repetitions of every measurement (alternating the tools).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Shorter workloads and fewer sizes: a smoke run, not figures to quote.
    #[arg(long)]
    pub quick: bool,
    /// Scenarios to run (overhead, snapshot, trigger, compression, scaling,
    /// memory, loss, lookback, fleet; compress-priority, history (about
    /// 20 minutes), soak (20 minutes), offcpu (the cost of off-CPU stacks:
    /// sched_switch call chains or switch records), report (`snapctl report`/`export` vs `perf report`)
    /// cgroups (cgroup ids on and off, a dump scoped to one cgroup, memory
    /// for 1,000 cgroups), write (SIGUSR2 → complete file with the load in
    /// a cgroup of its own and in the recorder's, about 12 minutes a run)
    /// report-dwarf (`report` of a 32 MiB-per-CPU snapshot of stack copies),
    /// snapshot-dwarf (`snapshot` with `--call-graph dwarf`, 4 and 32 MiB),
    /// history-dump (a dump of a whole history of `--history-mib`) and
    /// history-dwarf (the history's disk and CPU with `callchain =
    /// "dwarf"` against frame pointers, and perf's with `--call-graph
    /// dwarf`), only when named).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "overhead,snapshot,trigger,compression,scaling,memory,loss,lookback,fleet"
    )]
    pub only: Vec<String>,
    /// Minutes of history the history scenario records before it cuts
    /// windows (default 11, 1 with --quick).
    #[arg(long, value_name = "N")]
    pub history_minutes: Option<u64>,
    /// MiB of history on disk the history-dump scenario fills before it
    /// dumps all of it (default 360, 40 with --quick).
    #[arg(long, value_name = "N")]
    pub history_mib: Option<u64>,
    /// Length of the soak in minutes (default 20, 2 with --quick).
    #[arg(long, value_name = "N")]
    pub soak_minutes: Option<u64>,
    /// The soak with flightrec's `[history]` on as well (a budget of
    /// 64 MiB, so segments are dropped as it runs); perf's side stays its
    /// overwritable ring, as it cannot keep both.
    #[arg(long)]
    pub soak_history: bool,
    /// The `messaging -g` groups the write scenario loads the machine with.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "4,10",
        value_name = "N,..."
    )]
    pub write_groups: Vec<u32>,
    /// The write scenario's recorder cgroup at this CPU weight (systemd's
    /// `CPUWeight=`, 1 to 10000; 100, the default, is every cgroup's).
    /// Only the load in a cgroup of its own is run then.
    #[arg(long, value_name = "W", value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub recorder_cpu_weight: Option<u32>,
    /// The write scenario's recorders started under `nice -n N`
    /// (systemd's `Nice=`: every thread).
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = clap::value_parser!(i32).range(-20..=19))]
    pub recorder_nice: Option<i32>,
    /// flightrec's `snapshot.writer_nice` in the write scenario (its
    /// default, -10, when not given).
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = clap::value_parser!(i32).range(-20..=19))]
    pub writer_nice: Option<i32>,
    /// Also write the results as Markdown to this file.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Only print what a snapshot file holds (samples, bytes per CPU, span,
    /// comm resolution, compression) and exit.
    #[arg(long, value_name = "FILE")]
    pub analyze: Option<PathBuf>,
}

impl Args {
    /// Whether scenario `name` is among those asked for.
    pub fn wants(&self, name: &str) -> bool {
        self.only.iter().any(|o| o == name)
    }
}
