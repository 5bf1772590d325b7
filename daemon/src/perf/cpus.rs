//! The online CPU list (`/sys/devices/system/cpu/online`, e.g. `0-3,8`).

use std::io;

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

/// The online CPUs, ascending.
pub fn online_cpus() -> Result<Vec<u32>, CpuListError> {
    let list = std::fs::read_to_string(ONLINE).map_err(CpuListError::Read)?;
    parse_cpu_list(&list)
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
}
