//! What is read from the machine: the facts a snapshot says about the
//! machine it was taken on, the sample clock, the loaded kernel modules and
//! the tracefs formats.
//!
//! Gathering ([`HostInfo::gather`]) reads /proc, sysfs and tracefs once, at
//! daemon start (or on reload); encoding a snapshot only reads the cached
//! value, so writing a perf.data file needs no I/O besides the output itself.

pub mod cgroups;
mod clock;
pub mod machine;
mod modules;
mod tracing;

use std::fs;
use std::path::{Path, PathBuf};

use thiserror::Error;

pub use clock::{ClockReference, sample_clock_now};
pub use flightrec_perfdata::kallsyms::kallsyms_text;
pub use machine::MachineFacts;
pub use modules::{
    KernelModule, PROC_MODULES, bare_modules, describe_modules, parse_build_id_note,
    parse_modules_dep, parse_proc_modules,
};
pub use tracing::{TracepointFormat, TracingSource, format_field, format_id};

#[derive(Debug, Error)]
pub enum HostInfoError {
    #[error("no tracefs found (tried {tried}); mount it at /sys/kernel/tracing")]
    NoTracefs { tried: String },
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is empty", path.display())]
    Empty { path: PathBuf },
}

/// Host facts written into every snapshot's feature sections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostInfo {
    pub hostname: String,
    pub os_release: String,
    /// flightrec's version (perf shows it as "perf version").
    pub version: String,
    pub arch: String,
    pub nr_cpus_available: u32,
    pub nr_cpus_online: u32,
    /// The daemon's command line.
    pub cmdline: Vec<String>,
    pub page_size: u32,
    /// Resolution of the sample clock in ns (CLOCKID feature).
    pub clock_resolution_ns: u64,
    /// Wall-clock and sample-clock readings taken together (CLOCK_DATA).
    pub clock: Option<ClockReference>,
    /// The running kernel's GNU build-id, from /sys/kernel/notes.
    pub kernel_build_id: Option<Vec<u8>>,
    /// CPU, memory, cache and PMU facts (CPUDESC, CPUID, TOTAL_MEM, ...).
    pub machine: MachineFacts,
    /// Loaded kernel modules, for their MMAP records and build-ids.
    pub modules: Vec<KernelModule>,
    pub tracing: TracingSource,
}

impl HostInfo {
    /// Reads the host facts and the tracefs formats of `tracepoints`
    /// (`(system, name)` pairs). I/O: call once and keep the result.
    pub fn gather(tracepoints: &[(String, String)]) -> Result<Self, HostInfoError> {
        let tracing = if tracepoints.is_empty() {
            TracingSource::default()
        } else {
            tracing::gather_tracing(tracepoints)?
        };
        let nr_online = read_cpu_count("/sys/devices/system/cpu/online")
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32));
        let nr_available = read_cpu_count("/sys/devices/system/cpu/present").unwrap_or(nr_online);
        Ok(Self {
            hostname: read_trimmed("/proc/sys/kernel/hostname")?,
            os_release: read_trimmed("/proc/sys/kernel/osrelease")?,
            version: format!("flightrec {}", env!("CARGO_PKG_VERSION")),
            arch: std::env::consts::ARCH.to_string(),
            nr_cpus_available: nr_available,
            nr_cpus_online: nr_online,
            cmdline: std::env::args().collect(),
            page_size: u32::try_from(crate::perf::page_size()).unwrap_or(u32::MAX),
            clock_resolution_ns: clock::sample_clock_resolution_ns(),
            clock: ClockReference::now(),
            kernel_build_id: fs::read("/sys/kernel/notes")
                .ok()
                .and_then(|n| parse_build_id_note(&n)),
            modules: modules::gather_modules(),
            machine: MachineFacts::gather(
                Path::new("/proc"),
                Path::new("/sys"),
                nr_available,
                std::env::consts::ARCH,
            ),
            tracing,
        })
    }
}

fn read_trimmed(path: &str) -> Result<String, HostInfoError> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| HostInfoError::Read {
            path: path.into(),
            source,
        })
}

/// Counts the CPUs of a sysfs CPU list such as `0-3,8,10-11`.
fn read_cpu_count(path: &str) -> Option<u32> {
    parse_cpu_list(&fs::read_to_string(path).ok()?)
}

pub(crate) fn parse_cpu_list(text: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.trim().parse().ok()?;
                let b: u32 = b.trim().parse().ok()?;
                n = n.checked_add(b.checked_sub(a)?.checked_add(1)?)?;
            }
            None => {
                part.trim().parse::<u32>().ok()?;
                n = n.checked_add(1)?;
            }
        }
    }
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count_ranges_and_singles() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(parse_cpu_list("5"), Some(1));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
