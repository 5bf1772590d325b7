//! What /proc says about a recorder process: CPU time and RSS.

use anyhow::{Context, Result};

/// utime + stime of the whole thread group, in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The comm field may hold spaces and parentheses: split after the last ')'.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc/pid/stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5) are the 12th and 13th after the comm.
    let utime: f64 = fields.get(11).context("no utime")?.parse()?;
    let stime: f64 = fields.get(12).context("no stime")?.parse()?;
    Ok((utime + stime) / clock_ticks_per_second())
}

/// Peak resident set size (VmHWM), in bytes.
pub fn peak_rss_bytes(pid: u32) -> Result<u64> {
    Ok(status_kib(&read_status(pid)?, "VmHWM")? * 1024)
}

/// (VmRSS, VmHWM) in MiB.
pub fn rss_mib(pid: u32) -> Result<(f64, f64)> {
    let status = read_status(pid)?;
    let mib = |field| -> Result<f64> { Ok(status_kib(&status, field)? as f64 / 1024.0) };
    Ok((mib("VmRSS")?, mib("VmHWM")?))
}

/// A `/proc/<pid>/status` field given in kB (`VmPin`, `RssFile`...), in MiB.
pub fn status_mib(pid: u32, field: &str) -> Result<f64> {
    Ok(status_kib(&read_status(pid)?, field)? as f64 / 1024.0)
}

/// Resets VmHWM to the current RSS (clear_refs 5).
pub fn reset_peak_rss(pid: u32) -> Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").context("resetting VmHWM")
}

/// What the scheduler and the memory manager counted for one thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadCounts {
    /// Time on a CPU (ns), from /proc/<pid>/task/<tid>/schedstat.
    pub run_ns: u64,
    /// Time runnable but waiting for a CPU (ns).
    pub wait_ns: u64,
    /// Minor page faults (stat field 10).
    pub minor_faults: u64,
}

impl ThreadCounts {
    /// The counts between `earlier` and `self`.
    pub fn since(self, earlier: ThreadCounts) -> ThreadCounts {
        ThreadCounts {
            run_ns: self.run_ns.saturating_sub(earlier.run_ns),
            wait_ns: self.wait_ns.saturating_sub(earlier.wait_ns),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
        }
    }
}

/// Time on a CPU of the live threads of `pid`, in seconds, to the
/// nanosecond (schedstat): for recorders using a few milliseconds in a
/// second-long run, which [`cpu_seconds`]'s clock ticks (10 ms) read as 0
/// or one tick. Threads that exited are not counted: a recorder's
/// threads live as long as it.
pub fn live_threads_cpu_seconds(pid: u32) -> Result<f64> {
    let tasks = format!("/proc/{pid}/task");
    let mut ns: u64 = 0;
    for entry in std::fs::read_dir(&tasks).with_context(|| format!("listing {tasks}"))? {
        // A thread gone since the listing counts nothing.
        let Ok(schedstat) = std::fs::read_to_string(entry?.path().join("schedstat")) else {
            continue;
        };
        let run: u64 = schedstat
            .split_whitespace()
            .next()
            .context("no run time in schedstat")?
            .parse()?;
        ns += run;
    }
    Ok(ns as f64 / 1e9)
}

/// The counts of the thread of `pid` named `comm` (the first one).
pub fn thread_counts(pid: u32, comm: &str) -> Result<ThreadCounts> {
    let tasks = format!("/proc/{pid}/task");
    for entry in std::fs::read_dir(&tasks).with_context(|| format!("listing {tasks}"))? {
        let dir = entry?.path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if name.trim_end() != comm {
            continue;
        }
        let schedstat = std::fs::read_to_string(dir.join("schedstat"))?;
        let stat = std::fs::read_to_string(dir.join("stat"))?;
        return parse_thread_counts(&schedstat, &stat)
            .with_context(|| format!("reading {}", dir.display()));
    }
    anyhow::bail!("process {pid} has no thread named {comm}")
}

fn parse_thread_counts(schedstat: &str, stat: &str) -> Result<ThreadCounts> {
    let mut s = schedstat.split_whitespace();
    let run_ns = s.next().context("no run time")?.parse()?;
    let wait_ns = s.next().context("no wait time")?.parse()?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed stat")?;
    // minflt is field 10 of stat(5): the 8th after the comm.
    let minor_faults = after
        .split_whitespace()
        .nth(7)
        .context("no minflt")?
        .parse()?;
    Ok(ThreadCounts {
        run_ns,
        wait_ns,
        minor_faults,
    })
}

fn read_status(pid: u32) -> Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))
}

/// The value of a `Name:   1234 kB` line of /proc/<pid>/status, in KiB.
fn status_kib(status: &str, name: &str) -> Result<u64> {
    let value = status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .with_context(|| format!("no {name} in /proc/<pid>/status"))?;
    value
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("{name}: {value:?} is not a size in kB"))
}

/// USER_HZ: 100 on every Linux architecture flightrec runs on.
fn clock_ticks_per_second() -> f64 {
    100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_in_kib() {
        let status = "Name:\tflightrecd\nVmHWMx:\t1 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_kib(status, "VmHWM").unwrap(), 20480);
        assert_eq!(status_kib(status, "VmRSS").unwrap(), 10240);
        assert_eq!(
            status_kib(status, "VmSwap").unwrap_err().to_string(),
            "no VmSwap in /proc/<pid>/status"
        );
        assert_eq!(
            status_kib(status, "Name").unwrap_err().to_string(),
            "Name: \"\\tflightrecd\" is not a size in kB"
        );
    }

    #[test]
    fn thread_counts_are_read_from_schedstat_and_stat() {
        let stat = "42 (flightrec-dump) S 1 42 42 0 -1 4194624 2500 0 3 0 10 5";
        let c = parse_thread_counts("1500000 700000 12\n", stat).unwrap();
        assert_eq!(
            c,
            ThreadCounts {
                run_ns: 1_500_000,
                wait_ns: 700_000,
                minor_faults: 2500
            }
        );
        let later = ThreadCounts {
            run_ns: 2_000_000,
            wait_ns: 700_001,
            minor_faults: 2600,
        };
        assert_eq!(later.since(c).minor_faults, 100);
        assert!(parse_thread_counts("", stat).is_err());
        let me = std::process::id();
        let comm = std::fs::read_to_string(format!("/proc/{me}/comm")).unwrap();
        assert!(thread_counts(me, comm.trim_end()).is_ok());
    }

    #[test]
    fn this_process_has_a_resident_set() {
        let (rss, peak) = rss_mib(std::process::id()).unwrap();
        assert!(
            rss > 0.0 && peak >= rss,
            "VmRSS {rss} MiB, VmHWM {peak} MiB"
        );
        assert!(peak_rss_bytes(std::process::id()).unwrap() as f64 >= peak * 1024.0 * 1024.0);
    }
}
