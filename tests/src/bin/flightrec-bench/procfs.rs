//! What /proc says about a recorder process: CPU time and peak RSS.

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
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .context("no VmHWM")?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib * 1024)
}

/// USER_HZ: 100 on every Linux architecture flightrec runs on.
fn clock_ticks_per_second() -> f64 {
    100.0
}
