//! The least any writer pays for a file of a snapshot's size on this
//! machine, under the same load: `dd` writing that many bytes, from a
//! process in the recorder's cgroup at the dump thread's nice, once to the
//! page cache only (what perf does: it never syncs) and once with direct
//! I/O and a final fsync (what flightrec does before it names a file).
//! dd's own clock is read (from its first write to its last, the fsync
//! included), so its start-up is not counted: a floor, not a rival.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cgroup::BenchCgroups;

/// How the floor's bytes are written.
#[derive(Clone, Copy)]
pub(super) enum FloorWrite {
    /// To the page cache, never synced.
    PageCache,
    /// `O_DIRECT`, then fsync.
    DirectSynced,
}

/// dd's time to write `bytes` (rounded up to whole MiB) into a new file
/// in `dir` as `how` says, run in `cgroup` at `nice`.
pub(super) fn write_floor(
    dir: &Path,
    bytes: u64,
    how: FloorWrite,
    cgroup: &Path,
    nice: i32,
) -> Result<Duration> {
    let mib = bytes.div_ceil(1 << 20).max(1);
    let path = dir.join(".write-floor");
    let _ = std::fs::remove_file(&path);
    let mut dd = format!(
        "exec nice -n {nice} dd if=/dev/zero of={} bs=1M count={mib}",
        path.display()
    );
    if let FloorWrite::DirectSynced = how {
        dd += " oflag=direct conv=fsync";
    }
    // The shell waits for a line, so it is in the cgroup before dd starts.
    let mut child = Command::new("sh")
        .args(["-c", &format!("read go && {dd}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting dd for the write floor")?;
    BenchCgroups::enter(cgroup, child.id())?;
    child
        .stdin
        .take()
        .context("dd's stdin")?
        .write_all(b"go\n")?;
    let out = child.wait_with_output()?;
    let _ = std::fs::remove_file(&path);
    if !out.status.success() {
        bail!(
            "dd for the write floor failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    dd_seconds(&String::from_utf8_lossy(&out.stderr))
        .map(Duration::from_secs_f64)
        .context("dd printed no time")
}

/// The seconds in dd's last line of statistics (`N bytes (...) copied,
/// 0.0185 s, 3.7 GB/s`).
fn dd_seconds(stderr: &str) -> Option<f64> {
    let line = stderr.lines().rev().find(|l| l.contains(" copied, "))?;
    let (_, after) = line.split_once(" copied, ")?;
    after.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::dd_seconds;

    #[test]
    fn dd_time_is_read_from_its_statistics() {
        let stderr = "65+0 records in\n65+0 records out\n\
                      68157440 bytes (68 MB, 65 MiB) copied, 0.0185123 s, 3.7 GB/s\n";
        assert_eq!(dd_seconds(stderr), Some(0.0185123));
        assert_eq!(dd_seconds("dd: failed to open\n"), None);
    }
}
