//! What a snapshot says about the machine it was taken on.
//!
//! Gathering ([`HostInfo::gather`]) reads /proc, sysfs and tracefs once, at
//! daemon start (or on reload); encoding a snapshot only reads the cached
//! value, so writing a perf.data file needs no I/O besides the output itself.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::EventDescriptor;
use super::machine::MachineFacts;

/// Where tracefs lives, newest convention first.
const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

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

/// The tracefs text perf needs to decode tracepoint samples (TRACING_DATA).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TracingSource {
    /// `events/header_page`.
    pub header_page: Vec<u8>,
    /// `events/header_event`.
    pub header_event: Vec<u8>,
    /// `events/<system>/<name>/format` of every tracepoint gathered.
    pub formats: Vec<TracepointFormat>,
    /// `printk_formats` (lets perf print `%s` arguments given as pointers).
    pub printk_formats: Vec<u8>,
}

/// One tracepoint's format file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracepointFormat {
    pub system: String,
    pub name: String,
    /// The `ID:` line of the format: the attr's `config` must equal it.
    pub id: Option<u64>,
    pub format: Vec<u8>,
}

impl TracingSource {
    /// The format gathered for `system:name`, if any.
    pub fn format(&self, system: &str, name: &str) -> Option<&TracepointFormat> {
        self.formats
            .iter()
            .find(|f| f.system == system && f.name == name)
    }
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

/// The sample clock related to the wall clock, as perf's CLOCK_DATA
/// feature holds it: lets `perf script -F+tod` print wall-clock times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockReference {
    /// The `clockid` the events were opened with.
    pub clockid: u32,
    /// CLOCK_REALTIME in ns since the epoch...
    pub tod_ns: u64,
    /// ... and the sample clock at the same moment.
    pub clockid_ns: u64,
}

impl ClockReference {
    /// Reads CLOCK_REALTIME and the sample clock back to back, taking the
    /// pair with the shortest gap of a few tries.
    pub fn now() -> Option<Self> {
        use nix::time::{ClockId, clock_gettime};
        let ns = |t: nix::sys::time::TimeSpec| {
            u64::try_from(t.tv_sec())
                .ok()?
                .checked_mul(1_000_000_000)?
                .checked_add(u64::try_from(t.tv_nsec()).ok()?)
        };
        let sample_clock = ClockId::from_raw(crate::abi::SAMPLE_CLOCKID);
        let mut best: Option<(u64, Self)> = None;
        for _ in 0..5 {
            let before = ns(clock_gettime(sample_clock).ok()?)?;
            let tod = ns(clock_gettime(ClockId::CLOCK_REALTIME).ok()?)?;
            let after = ns(clock_gettime(sample_clock).ok()?)?;
            let gap = after.saturating_sub(before);
            if best.is_none_or(|(g, _)| gap < g) {
                best = Some((
                    gap,
                    Self {
                        clockid: crate::abi::SAMPLE_CLOCKID.cast_unsigned(),
                        tod_ns: tod,
                        clockid_ns: before + gap / 2,
                    },
                ));
            }
        }
        best.map(|(_, r)| r)
    }
}

/// The sample clock now, in ns (the time base of every record).
pub fn sample_clock_ns() -> Option<u64> {
    use nix::time::{ClockId, clock_gettime};
    let t = clock_gettime(ClockId::from_raw(crate::abi::SAMPLE_CLOCKID)).ok()?;
    u64::try_from(t.tv_sec())
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(t.tv_nsec()).ok()?)
}

/// The resolution of the sample clock in ns (CLOCKID feature).
fn sample_clock_resolution_ns() -> u64 {
    use nix::time::{ClockId, clock_getres};
    clock_getres(ClockId::from_raw(crate::abi::SAMPLE_CLOCKID))
        .ok()
        .and_then(|t| u64::try_from(t.tv_nsec()).ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

/// A loaded kernel module as perf synthesizes its map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelModule {
    pub name: String,
    pub start: u64,
    pub size: u64,
    /// The `.ko` file (from modules.dep), else `[name]` as perf names it.
    pub path: String,
    /// /sys/module/NAME/notes/.note.gnu.build-id.
    pub build_id: Option<Vec<u8>>,
}

/// `(name, size, address)` of each live module of /proc/modules (`name
/// size refcount deps state address`); none when the addresses are hidden.
pub fn parse_proc_modules(text: &str) -> Vec<(String, u64, u64)> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let addr = u64::from_str_radix(f.get(5)?.trim_start_matches("0x"), 16).ok()?;
            (f.get(4) == Some(&"Live") && addr != 0)
                .then(|| Some((f[0].to_string(), f[1].parse().ok()?, addr)))
                .flatten()
        })
        .collect()
}

/// The live modules of a /proc/modules text as perf names them without
/// their files (`[name]`) and build-ids: what a watch starts from.
pub fn bare_modules(text: &str) -> Vec<KernelModule> {
    parse_proc_modules(text)
        .into_iter()
        .map(|(name, size, start)| KernelModule {
            path: format!("[{name}]"),
            name,
            start,
            size,
            build_id: None,
        })
        .collect()
}

/// Module name -> `.ko` path (under `dir`) from a modules.dep text: the
/// file name without `.ko*`, with `-` read as `_` as the kernel does.
pub fn parse_modules_dep(text: &str, dir: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let file = line.split(':').next()?.trim();
            let base = file.rsplit('/').next()?;
            let name = &base[..base.find(".ko")?];
            Some((name.replace('-', "_"), format!("{dir}/{file}")))
        })
        .collect()
}

fn gather_modules() -> Vec<KernelModule> {
    let Ok(text) = fs::read_to_string(PROC_MODULES) else {
        return Vec::new();
    };
    describe_modules(parse_proc_modules(&text))
}

/// Where the kernel lists its loaded modules (absent without module support).
pub const PROC_MODULES: &str = "/proc/modules";

/// Each `(name, size, address)` of /proc/modules with its `.ko` path (from
/// modules.dep) and build-id (from sysfs), as perf names and identifies it.
pub fn describe_modules(live: Vec<(String, u64, u64)>) -> Vec<KernelModule> {
    if live.is_empty() {
        return Vec::new();
    }
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let dir = format!("/lib/modules/{}", release.trim());
    let paths = fs::read_to_string(format!("{dir}/modules.dep"))
        .map(|t| parse_modules_dep(&t, &dir))
        .unwrap_or_default();
    live.into_iter()
        .map(|(name, size, start)| KernelModule {
            path: paths
                .get(&name)
                .cloned()
                .unwrap_or_else(|| format!("[{name}]")),
            build_id: fs::read(format!("/sys/module/{name}/notes/.note.gnu.build-id"))
                .ok()
                .and_then(|n| parse_build_id_note(&n)),
            name,
            start,
            size,
        })
        .collect()
}

/// The GNU build-id among ELF notes laid end to end (the format of
/// /sys/kernel/notes and /sys/module/*/notes/.note.gnu.build-id).
pub fn parse_build_id_note(notes: &[u8]) -> Option<Vec<u8>> {
    flightrec_files::elf::build_id_in_notes(notes).filter(|id| id.len() <= 20)
}

impl HostInfo {
    /// Reads the host facts and the tracefs formats of `tracepoints`
    /// (`(system, name)` pairs). I/O: call once and keep the result.
    pub fn gather(tracepoints: &[(String, String)]) -> Result<Self, HostInfoError> {
        let tracing = if tracepoints.is_empty() {
            TracingSource::default()
        } else {
            gather_tracing(tracepoints)?
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
            clock_resolution_ns: sample_clock_resolution_ns(),
            clock: ClockReference::now(),
            kernel_build_id: fs::read("/sys/kernel/notes")
                .ok()
                .and_then(|n| parse_build_id_note(&n)),
            modules: gather_modules(),
            machine: MachineFacts::gather(
                Path::new("/proc"),
                Path::new("/sys"),
                nr_available,
                std::env::consts::ARCH,
            ),
            tracing,
        })
    }

    /// [`HostInfo::gather`] for the tracepoints among `events`.
    pub fn gather_for(events: &[EventDescriptor]) -> Result<Self, HostInfoError> {
        Self::gather(&tracepoints_of(events))
    }
}

/// The `(system, name)` of every tracepoint event, in event order.
pub fn tracepoints_of(events: &[EventDescriptor]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for tp in events.iter().filter_map(|e| e.tracepoint.clone()) {
        if !out.contains(&tp) {
            out.push(tp);
        }
    }
    out
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

fn tracefs_root() -> Result<&'static Path, HostInfoError> {
    TRACEFS_ROOTS
        .iter()
        .map(Path::new)
        .find(|root| root.join("events/header_page").exists())
        .ok_or_else(|| HostInfoError::NoTracefs {
            tried: TRACEFS_ROOTS.join(", "),
        })
}

/// Reads a tracefs file with large reads: some tracefs files (6.x
/// `events/header_page`) answer a short first read and then report EOF,
/// which `fs::read`'s small probing read would hit.
fn read_tracefs(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = fs::File::open(path)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn read_nonempty(path: PathBuf) -> Result<Vec<u8>, HostInfoError> {
    match read_tracefs(&path) {
        Ok(b) if b.is_empty() => Err(HostInfoError::Empty { path }),
        Ok(b) => Ok(b),
        Err(source) => Err(HostInfoError::Read { path, source }),
    }
}

fn gather_tracing(tracepoints: &[(String, String)]) -> Result<TracingSource, HostInfoError> {
    let root = tracefs_root()?;
    let mut formats = Vec::with_capacity(tracepoints.len());
    for (system, name) in tracepoints {
        let format = read_nonempty(root.join("events").join(system).join(name).join("format"))?;
        formats.push(TracepointFormat {
            system: system.clone(),
            name: name.clone(),
            id: format_id(&format),
            format,
        });
    }
    // printk_formats may be missing (old kernels, lockdown): perf copes.
    let printk_formats = read_tracefs(&root.join("printk_formats")).unwrap_or_default();
    Ok(TracingSource {
        header_page: read_nonempty(root.join("events/header_page"))?,
        header_event: read_nonempty(root.join("events/header_event"))?,
        formats,
        printk_formats,
    })
}

/// The number on the `ID: n` line of a tracepoint format.
pub fn format_id(format: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(format).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("ID:"))
        .and_then(|v| v.trim().parse().ok())
}

/// `_text` from /proc/kallsyms (`ffffffff81000000 T _text`); `None` when
/// absent or hidden (kptr_restrict shows zeros).
pub fn parse_kallsyms_text(kallsyms: &str) -> Option<u64> {
    kallsyms.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let addr = f.next()?;
        let _kind = f.next()?;
        (f.next()? == "_text")
            .then(|| u64::from_str_radix(addr, 16).ok())
            .flatten()
            .filter(|&a| a != 0)
    })
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

    #[test]
    fn format_id_reads_the_id_line() {
        assert_eq!(
            format_id(b"name: sched_switch\nID: 372\nformat:\n"),
            Some(372)
        );
        assert_eq!(format_id(b"name: x\nformat:\n"), None);
    }

    #[test]
    fn build_id_is_found_among_notes() {
        // /sys/kernel/notes of a 6.x kernel: a Xen note, then the build-id.
        let mut notes = Vec::new();
        for (name, kind, desc) in [
            (&b"Xen\0"[..], 6u32, vec![1u8; 6]),
            (&b"GNU\0"[..], 3, (1..=20).collect()),
        ] {
            notes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            notes.extend_from_slice(&kind.to_le_bytes());
            notes.extend_from_slice(name);
            notes.extend_from_slice(&desc);
            notes.resize(notes.len().next_multiple_of(4), 0);
        }
        assert_eq!(parse_build_id_note(&notes), Some((1..=20).collect()));
        assert_eq!(parse_build_id_note(&notes[..notes.len() - 4]), None);
        assert_eq!(parse_build_id_note(&notes[..20]), None);
    }

    #[test]
    fn modules_are_read_as_perf_synthesizes_them() {
        let text = "nf_tables 372736 0 - Live 0xffffffffc0a00000\n\
                    loading 16384 0 - Loading 0xffffffffc0b00000\n\
                    ext4 1200128 1 mbcache, Live 0xffffffffc0c00000 (E)\n";
        assert_eq!(
            parse_proc_modules(text),
            [
                ("nf_tables".to_string(), 372_736, 0xffff_ffff_c0a0_0000),
                ("ext4".to_string(), 1_200_128, 0xffff_ffff_c0c0_0000)
            ]
        );
        // kptr_restrict hides the addresses: no maps then.
        assert!(parse_proc_modules("ext4 1200128 1 - Live 0x0000000000000000\n").is_empty());
        let dep = parse_modules_dep(
            "kernel/net/netfilter/nf_tables.ko.zst: kernel/lib/x.ko\nkernel/drivers/a/snd-hda.ko:\n",
            "/lib/modules/6.1",
        );
        assert_eq!(
            dep["nf_tables"],
            "/lib/modules/6.1/kernel/net/netfilter/nf_tables.ko.zst"
        );
        assert_eq!(
            dep["snd_hda"],
            "/lib/modules/6.1/kernel/drivers/a/snd-hda.ko"
        );
    }

    #[test]
    fn clock_reference_pairs_the_two_clocks() {
        let r = ClockReference::now().unwrap();
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(unix - r.tod_ns < 1_000_000_000, "{r:?} vs {unix}");
        assert_eq!(r.clockid, libc::CLOCK_MONOTONIC as u32);
        assert!(r.clockid_ns > 0 && r.clockid_ns < r.tod_ns);
    }

    #[test]
    fn kallsyms_text_is_found_and_zero_means_hidden() {
        let k = "ffffffff81000000 T startup_64\nffffffff81000000 T _text\n";
        assert_eq!(parse_kallsyms_text(k), Some(0xffff_ffff_8100_0000));
        assert_eq!(parse_kallsyms_text("0000000000000000 T _text\n"), None);
        assert_eq!(parse_kallsyms_text("ffffffff81000000 T _stext\n"), None);
    }
}
