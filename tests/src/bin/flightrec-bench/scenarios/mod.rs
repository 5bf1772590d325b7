//! The scenarios, each measuring both recorders the same way and returning
//! one table.

mod cgroups;
mod compress_priority;
mod compression;
mod fleet;
mod history;
mod history_dump;
mod history_dwarf;
mod lookback;
mod loss;
mod memory;
mod overhead;
mod report;
mod scaling;
mod snapshot;
mod soak;
mod trigger;
mod write;
mod write_floor;

use std::time::Duration;

use anyhow::Result;

use crate::MIB;
use crate::recorder::Kind;
use crate::report::{Row, show};
use crate::stats::{Summary, ratio};
use crate::workload::BackgroundLoad;

pub use cgroups::cgroups;
pub use compress_priority::compress_priority;
pub use compression::compression;
pub use fleet::fleet;
pub use history::history;
pub use history_dump::history_dump;
pub use history_dwarf::history_dwarf;
pub use lookback::lookback;
pub use loss::loss;
pub use memory::{dump_vs_log_fill, memory};
pub use overhead::{overhead, overhead_of};
pub use report::report;
pub use scaling::scaling;
pub use snapshot::{snapshot, snapshot_of};
pub use soak::soak;
pub use trigger::trigger;
pub use write::write;

/// The tools in an order that rotates with `run`, so neither tool
/// always runs first (warm caches, thermal drift).
pub fn alternate<T>(run: usize, tools: &[T]) -> Vec<&T> {
    let n = tools.len();
    (0..n).map(|i| &tools[(i + run) % n]).collect()
}

/// What a fixed workload runs under in the overhead measurements.
#[derive(Clone, Copy, PartialEq)]
enum Under {
    Bare,
    Tool(Kind),
}

/// Bare, then each tool (in turns, see [`alternate`]).
const UNDER: [Under; 3] = [
    Under::Bare,
    Under::Tool(Kind::Flightrec),
    Under::Tool(Kind::Perf),
];

/// The workload's wall time bare, under flightrec and under perf, and
/// each tool's slowdown against bare: the first rows of the overhead
/// tables.
fn wall_time_rows(bare: Option<Summary>, fr: Option<Summary>, pf: Option<Summary>) -> [Row; 2] {
    let slowdown = |s: Option<Summary>| {
        ratio(s, bare)
            .map(|r| format!("{r:.3}x"))
            .unwrap_or_default()
    };
    [
        Row {
            metric: format!("workload wall time (bare {})", show(bare, "s", 3)),
            flightrec: show(fr, "s", 3),
            perf: show(pf, "s", 3),
            ratio: ratio(fr, pf),
            target: "<= 1.0",
        },
        Row {
            metric: "slowdown vs bare".into(),
            flightrec: slowdown(fr),
            perf: slowdown(pf),
            ratio: ratio(fr, bare).zip(ratio(pf, bare)).map(|(a, b)| a / b),
            target: "<= 1.0",
        },
    ]
}

/// Time a ring of `ring` bytes per CPU needs to wrap under the messaging
/// load: sched_switch + cpu-clock records arrive at about 1 MiB/s per CPU
/// on the reference machine; half again for margin.
pub fn fill_time(ring: u64) -> Duration {
    Duration::from_millis(1500 + ring * 1500 / MIB)
}

/// Starts the messaging load and waits until rings of `ring` bytes per CPU
/// have wrapped under it.
pub fn wrap_rings_under_load(ring: u64) -> Result<BackgroundLoad> {
    let load = BackgroundLoad::start()?;
    std::thread::sleep(fill_time(ring));
    Ok(load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_runs_first_in_turn() {
        let tools = ["bare", "flightrec", "perf"];
        let firsts: Vec<&str> = (0..4).map(|run| *alternate(run, &tools)[0]).collect();
        assert_eq!(firsts, ["bare", "flightrec", "perf", "bare"]);
        assert_eq!(alternate(1, &tools), [&"flightrec", &"perf", &"bare"]);
    }
}
