//! The online CPU list (`/sys/devices/system/cpu/online`, e.g. `0-3,8`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

const ONLINE: &str = "/sys/devices/system/cpu/online";

#[derive(Debug, thiserror::Error)]
pub enum CpuListError {
    #[error("reading {ONLINE} failed: {0}")]
    Read(#[source] io::Error),
    #[error("CPU list '{list}' is malformed at '{part}'")]
    Parse { list: String, part: String },
    #[error("CPU list '{list}' names no CPU")]
    Empty { list: String },
}

/// The online CPUs, ascending (a fresh open; [`OnlineCpus`] to look again
/// and again).
pub fn online_cpus() -> Result<Vec<u32>, CpuListError> {
    OnlineCpus::open()?.read()
}

/// The online CPU list read again and again through one open file: a
/// read at offset 0 of a sysfs attribute is the kernel's answer of the
/// moment, and the open (a path walk through sysfs) was most of what the
/// hot-plug check a few times a second cost an idle daemon.
pub struct OnlineCpus {
    file: File,
    buf: Vec<u8>,
}

impl OnlineCpus {
    /// sysfs answers with one page at most.
    const MAX_BYTES: usize = 4096;

    pub fn open() -> Result<Self, CpuListError> {
        Ok(Self {
            file: File::open(ONLINE).map_err(CpuListError::Read)?,
            buf: vec![0; Self::MAX_BYTES],
        })
    }

    /// The online CPUs now, ascending.
    pub fn read(&mut self) -> Result<Vec<u32>, CpuListError> {
        let mut len = 0;
        while len < self.buf.len() {
            match self.file.read_at(&mut self.buf[len..], len as u64) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CpuListError::Read(e)),
            }
        }
        let list = std::str::from_utf8(&self.buf[..len]).map_err(|_| CpuListError::Parse {
            list: String::from_utf8_lossy(&self.buf[..len]).into_owned(),
            part: "(not UTF-8)".into(),
        })?;
        parse_cpu_list(list)
    }
}

/// Parses the kernel's cpulist format: comma-separated CPUs and inclusive
/// ranges; the result is sorted and deduplicated.
pub fn parse_cpu_list(list: &str) -> Result<Vec<u32>, CpuListError> {
    let trimmed = list.trim();
    let bad = |part: &str| CpuListError::Parse {
        list: trimmed.to_string(),
        part: part.to_string(),
    };
    let mut cpus = Vec::new();
    for part in trimmed.split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let lo: u32 = lo.parse().map_err(|_| bad(part))?;
        let hi: u32 = hi.parse().map_err(|_| bad(part))?;
        // Bound ranges so a corrupt file cannot make us allocate wildly.
        if lo > hi || hi - lo > 65_536 {
            return Err(bad(part));
        }
        cpus.extend(lo..=hi);
    }
    if cpus.is_empty() {
        return Err(CpuListError::Empty {
            list: trimmed.to_string(),
        });
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles() {
        assert_eq!(parse_cpu_list("0-3,8\n").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("0-1").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpu_list("5,2-3,2").unwrap(), vec![2, 3, 5]);
    }

    #[test]
    fn rejects_malformed_lists() {
        for bad in ["", "\n", "a", "3-1", "1-", "-1", "0-2,x", "0-999999"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?} accepted");
        }
        let msg = parse_cpu_list("0-2,x").unwrap_err().to_string();
        assert_eq!(msg, "CPU list '0-2,x' is malformed at 'x'");
    }

    #[test]
    fn this_machine_has_an_online_cpu() {
        let cpus = online_cpus().unwrap();
        assert!(cpus.contains(&0));
    }

    #[test]
    fn the_open_list_reads_what_a_fresh_open_reads_every_time() {
        let mut online = OnlineCpus::open().unwrap();
        let fresh = online_cpus().unwrap();
        assert_eq!(online.read().unwrap(), fresh);
        // A second read starts again at the beginning, not at the end.
        assert_eq!(online.read().unwrap(), fresh);
        assert_eq!(
            fresh.len(),
            std::thread::available_parallelism().unwrap().get()
        );
    }
}
