//! flightrec-bench: flightrec side by side with perf's own flight recorder
//! (`perf record -a --overwrite --switch-output`), same events, same ring size
//! per CPU, alternating the tools run by run, printing one table of ratios.
//!
//! Run as root: `cargo run --release -p flightrec-tests --bin flightrec-bench`
//! (`-- --help` for options). Needs Debian's `linux-perf` and tracefs, as the
//! tests do (`tests/prepare-host`).

mod analysis;
mod cgroup;
mod cli;
mod procfs;
mod recorder;
mod report;
mod scenarios;
mod stats;
mod workload;

use anyhow::{Context, Result};
use clap::Parser;

use cli::Args;
use recorder::EventSet;
use workload::Workload;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.analyze {
        println!("{:#?}", analysis::analyze(path)?);
        return Ok(());
    }
    observe_at_realtime_priority();
    let mut sections = Vec::new();
    if args.wants("overhead") {
        for events in [EventSet::SwitchAndClock, EventSet::SwitchOnly] {
            for workload in [Workload::Messaging, Workload::Pipe] {
                sections.push(scenarios::overhead(&args, events, workload)?);
            }
        }
    }
    if args.wants("snapshot") {
        let sizes: &[u64] = if args.quick {
            &[256 * KIB, 4 * MIB]
        } else {
            &[256 * KIB, 4 * MIB, 32 * MIB]
        };
        for &ring in sizes {
            sections.push(scenarios::snapshot(&args, ring, EventSet::SwitchAndClock)?);
        }
    }
    if args.wants("write") {
        let sizes: &[u64] = if args.quick {
            &[256 * KIB, 4 * MIB]
        } else {
            &[256 * KIB, 4 * MIB, 32 * MIB]
        };
        // A weight sets the recorder's cgroup against the load's: with
        // the load in the recorder's cgroup it changes nothing.
        let placements: &[cgroup::Placement] = if args.recorder_cpu_weight.is_some() {
            &[cgroup::Placement::OwnCgroup]
        } else {
            &[
                cgroup::Placement::OwnCgroup,
                cgroup::Placement::RecorderCgroup,
            ]
        };
        for &groups in &args.write_groups {
            for &placement in placements {
                sections.push(scenarios::write(&args, groups, placement, sizes)?);
            }
        }
    }
    if args.wants("trigger") {
        sections.push(scenarios::trigger(&args)?);
    }
    if args.wants("compression") {
        sections.push(scenarios::compression(&args)?);
    }
    if args.wants("scaling") {
        sections.push(scenarios::scaling(&args)?);
    }
    if args.wants("memory") {
        sections.push(scenarios::memory(&args)?);
        sections.push(scenarios::dump_vs_log_fill(&args)?);
    }
    if args.wants("loss") {
        sections.push(scenarios::loss(&args)?);
    }
    if args.wants("lookback") {
        sections.push(scenarios::lookback(&args)?);
    }
    if args.wants("fleet") {
        sections.push(scenarios::fleet(&args)?);
    }
    if args.wants("compress-priority") {
        sections.push(scenarios::compress_priority(&args)?);
    }
    if args.wants("soak") {
        sections.push(scenarios::soak(&args)?);
    }
    if args.wants("history") {
        sections.push(scenarios::history(&args)?);
    }
    if args.wants("offcpu") {
        // What the two ways to off-CPU time cost, call chains on
        // sched_switch and switch records, against neither, in one run:
        // the tables of sections 1 and 2 for each.
        let sets = [
            EventSet::SwitchAndClock,
            EventSet::OffCpu,
            EventSet::SwitchRecords,
        ];
        for workload in [Workload::Messaging, Workload::Pipe] {
            for events in sets {
                sections.push(scenarios::overhead(&args, events, workload)?);
            }
        }
        for events in sets {
            sections.push(scenarios::snapshot(&args, 4 * MIB, events)?);
        }
    }
    if args.wants("snapshot-dwarf") {
        for ring in [4 * MIB, 32 * MIB] {
            sections.push(scenarios::snapshot(
                &args,
                ring,
                EventSet::SwitchAndClockDwarf,
            )?);
        }
    }
    if args.wants("history-dwarf") {
        sections.push(scenarios::history_dwarf(&args)?);
    }
    if args.wants("history-dump") {
        sections.push(scenarios::history_dump(&args)?);
    }
    if args.wants("cgroups") {
        sections.extend(scenarios::cgroups(&args)?);
    }
    if args.wants("report") {
        for ring in [4 * MIB, 32 * MIB] {
            sections.push(scenarios::report(&args, ring, EventSet::OffCpu)?);
        }
    }
    if args.wants("report-dwarf") {
        sections.push(scenarios::report(
            &args,
            32 * MIB,
            EventSet::SwitchAndClockDwarf,
        )?);
    }
    let report = report::render(&args, &sections);
    println!("{report}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, &report).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The harness times triggers by watching for the finished file. Under the
/// load a watcher at normal priority is starved and sees files late, for
/// both tools alike; at SCHED_FIFO (reset on fork, so perf, flightrecd,
/// snapctl and the workload all start at normal priority) it sees them when
/// they appear.
fn observe_at_realtime_priority() {
    let pid = std::process::id().to_string();
    let raised = std::process::Command::new("chrt")
        .args(["--reset-on-fork", "--fifo", "--pid", "1", &pid])
        .status()
        .is_ok_and(|s| s.success());
    if !raised {
        eprintln!(
            "warning: could not raise the harness to SCHED_FIFO; trigger times include its own wake-up delays"
        );
    }
}
