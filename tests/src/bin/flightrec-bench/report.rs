//! The results: one table per scenario, printed as Markdown with the
//! machine it ran on.

use std::fmt::Write as _;

use crate::cli::Args;
use crate::stats::Summary;
use crate::{KIB, MIB};

/// One line of the results table.
pub struct Row {
    pub metric: String,
    pub flightrec: String,
    pub perf: String,
    pub ratio: Option<f64>,
    pub target: &'static str,
}

/// One scenario's table.
pub struct Section {
    pub title: String,
    pub rows: Vec<Row>,
}

/// A summary as `median (min–max)`, or `-` when nothing was measured.
pub fn show(s: Option<Summary>, unit: &str, precision: usize) -> String {
    s.map(|s| s.show(unit, precision))
        .unwrap_or_else(|| "-".into())
}

/// A ring size in whole MiB or KiB.
pub fn human_bytes(b: u64) -> String {
    if b >= MIB {
        format!("{} MiB", b / MIB)
    } else {
        format!("{} KiB", b / KIB)
    }
}

/// CPUs, kernel and perf version, for the header of the report.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let run = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{} CPUs ({cpu}), Linux {}, {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        run("uname", &["-r"]),
        run("perf", &["--version"])
    )
}

/// The report of all `sections`, as Markdown.
pub fn render(args: &Args, sections: &[Section]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Machine: {}", machine());
    let _ = writeln!(
        out,
        "Runs per measurement: {}{}; figures are median (min–max); ratio = flightrec / perf.\n\
         The harness watches for finished files at SCHED_FIFO 1 (reset on fork: both recorders \
         and the workloads run at normal priority).\n",
        args.runs,
        if args.quick { " (quick mode)" } else { "" }
    );
    for section in sections {
        let _ = writeln!(out, "### {}\n", section.title);
        let _ = writeln!(out, "| metric | flightrec | perf | ratio | target |");
        let _ = writeln!(out, "|---|---|---|---|---|");
        for row in &section.rows {
            let ratio = row
                .ratio
                .map(|r| format!("{r:.3}"))
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "| {} | {} | {} | {ratio} | {} |",
                row.metric, row.flightrec, row.perf, row.target
            );
        }
        let _ = writeln!(out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_summaries_print_as_in_the_report() {
        assert_eq!(human_bytes(256 * KIB), "256 KiB");
        assert_eq!(human_bytes(32 * MIB), "32 MiB");
        assert_eq!(show(None, " ms", 1), "-");
        assert_eq!(
            show(Summary::of(&[1.0, 2.0, 4.0]), " ms", 1),
            "2.0 ms (1.0–4.0)"
        );
    }
}
