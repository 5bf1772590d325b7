//! Feature sections of a perf.data file, in the layouts perf's
//! tools/perf/util/header.c reads them. Pure encoders: bytes out.

use super::summary::DataSummary;
use crate::host::machine::{CacheLevel, CpuTopology, MemTopology, NumaNode};
use crate::host::{ClockReference, HostInfo, TracingSource};
use crate::recorder::{EventDescriptor, tracepoints_of};

pub use flightrec_perfdata::format::bit;

/// perf aligns feature strings (NUL included) to this.
const NAME_ALIGN: usize = 64;
/// `struct perf_event_attr` size written in EVENT_DESC.
const ATTR_SIZE: u32 = crate::abi::ATTR_SIZE as u32;

fn push_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// `do_write_string`: u32 length (NUL and padding included, a multiple of
/// 64), then the string NUL-padded to that length.
pub fn push_string(out: &mut Vec<u8>, s: &str) {
    // perf reads the string with strlen: an embedded NUL would cut it.
    let bytes: Vec<u8> = s.bytes().filter(|&b| b != 0).collect();
    let len = (bytes.len() + 1).next_multiple_of(NAME_ALIGN);
    push_u32(out, u32::try_from(len).unwrap_or(u32::MAX));
    out.extend_from_slice(&bytes);
    out.resize(out.len() + len - bytes.len(), 0);
}

pub fn string_section(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    push_string(&mut out, s);
    out
}

pub fn nrcpus(host: &HostInfo) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    push_u32(&mut out, host.nr_cpus_available);
    push_u32(&mut out, host.nr_cpus_online);
    out
}

pub fn cmdline(args: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    push_u32(&mut out, u32::try_from(args.len()).unwrap_or(u32::MAX));
    for a in args {
        push_string(&mut out, a);
    }
    out
}

/// EVENT_DESC: every attr with its name as the user wrote it and its ids.
pub fn event_desc(events: &[EventDescriptor]) -> Vec<u8> {
    let mut out = Vec::new();
    push_u32(&mut out, u32::try_from(events.len()).unwrap_or(u32::MAX));
    push_u32(&mut out, ATTR_SIZE);
    for e in events {
        out.extend_from_slice(&e.attr.to_bytes());
        push_u32(&mut out, u32::try_from(e.ids.len()).unwrap_or(u32::MAX));
        push_string(&mut out, &e.name);
        for id in &e.ids {
            push_u64(&mut out, *id);
        }
    }
    out
}

pub fn sample_time(first: u64, last: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    push_u64(&mut out, first);
    push_u64(&mut out, last);
    out
}

pub fn clockid(resolution_ns: u64) -> Vec<u8> {
    resolution_ns.to_le_bytes().to_vec()
}

pub fn total_mem(kb: u64) -> Vec<u8> {
    kb.to_le_bytes().to_vec()
}

/// CPU_TOPOLOGY: package (socket) lists, core (SMT sibling) lists, per CPU
/// core and socket id, then, where the machine has dies, the die lists and
/// per CPU die id.
pub fn cpu_topology(t: &CpuTopology) -> Vec<u8> {
    let mut out = Vec::new();
    for lists in [&t.package_lists, &t.core_lists] {
        push_u32(&mut out, u32::try_from(lists.len()).unwrap_or(u32::MAX));
        for l in lists {
            push_string(&mut out, l);
        }
    }
    for c in &t.cpus {
        out.extend_from_slice(&c.core_id.to_le_bytes());
        out.extend_from_slice(&c.socket_id.to_le_bytes());
    }
    if !t.die_lists.is_empty() {
        push_u32(
            &mut out,
            u32::try_from(t.die_lists.len()).unwrap_or(u32::MAX),
        );
        for l in &t.die_lists {
            push_string(&mut out, l);
        }
        for c in &t.cpus {
            out.extend_from_slice(&c.die_id.to_le_bytes());
        }
    }
    out
}

/// NUMA_TOPOLOGY: per node its number, total and free memory (kB) and CPUs.
pub fn numa_topology(nodes: &[NumaNode]) -> Vec<u8> {
    let mut out = Vec::new();
    push_u32(&mut out, u32::try_from(nodes.len()).unwrap_or(u32::MAX));
    for n in nodes {
        push_u32(&mut out, n.node);
        push_u64(&mut out, n.mem_total_kb);
        push_u64(&mut out, n.mem_free_kb);
        push_string(&mut out, &n.cpus);
    }
    out
}

/// PMU_MAPPINGS: `(type, name)` of each PMU.
pub fn pmu_mappings(pmus: &[(u32, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    push_u32(&mut out, u32::try_from(pmus.len()).unwrap_or(u32::MAX));
    for (type_, name) in pmus {
        push_u32(&mut out, *type_);
        push_string(&mut out, name);
    }
    out
}

/// CACHE, version 1: per cache level, line size, sets, ways, then its
/// type, size and CPU list as strings.
pub fn cache(caches: &[CacheLevel]) -> Vec<u8> {
    let mut out = Vec::new();
    push_u32(&mut out, 1);
    push_u32(&mut out, u32::try_from(caches.len()).unwrap_or(u32::MAX));
    for c in caches {
        for v in [c.level, c.line_size, c.sets, c.ways] {
            push_u32(&mut out, v);
        }
        for s in [&c.kind, &c.size, &c.cpus] {
            push_string(&mut out, s);
        }
    }
    out
}

/// MEM_TOPOLOGY, version 1: block size, then per node its number and the
/// bitmap of its memory blocks (bit count, twice as perf writes it, then
/// the u64 words).
pub fn mem_topology(m: &MemTopology) -> Vec<u8> {
    let mut out = Vec::new();
    push_u64(&mut out, 1);
    push_u64(&mut out, m.block_size);
    push_u64(&mut out, m.nodes.len() as u64);
    for (node, blocks) in &m.nodes {
        let bits = blocks.iter().max().map_or(1, |&b| b + 1);
        let mut words = vec![0u64; bits.div_ceil(64) as usize];
        for &b in blocks {
            words[(b / 64) as usize] |= 1 << (b % 64);
        }
        push_u64(&mut out, *node);
        push_u64(&mut out, bits);
        push_u64(&mut out, bits);
        for w in words {
            push_u64(&mut out, w);
        }
    }
    out
}

/// CLOCK_DATA, version 1: the clockid, then a wall-clock time and the
/// sample-clock time of the same moment.
pub fn clock_data(c: &ClockReference) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    push_u32(&mut out, 1);
    push_u32(&mut out, c.clockid);
    push_u64(&mut out, c.tod_ns);
    push_u64(&mut out, c.clockid_ns);
    out
}

/// One HEADER_BUILD_ID entry: a DSO's build-id and the name perf finds
/// the DSO under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildIdEntry {
    /// `PERF_RECORD_MISC_KERNEL` (kernel, modules) or `_USER`.
    pub misc: u16,
    pub build_id: Vec<u8>,
    pub filename: String,
}

/// `struct perf_record_header_build_id` without its filename.
const BUILD_ID_EVENT_SIZE: usize = 36;

/// BUILD_ID: a `struct perf_record_header_build_id` per DSO (header, pid -1
/// for the host, the id in 20 bytes + its size, the filename padded to 64).
pub fn build_ids(entries: &[BuildIdEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let name: Vec<u8> = e.filename.bytes().filter(|&b| b != 0).collect();
        let name_len = (name.len() + 1).next_multiple_of(NAME_ALIGN);
        let size = BUILD_ID_EVENT_SIZE + name_len;
        let Ok(size) = u16::try_from(size) else {
            continue;
        };
        let id = &e.build_id[..e.build_id.len().min(20)];
        push_u32(&mut out, 0); // type: unused in the header table
        out.extend_from_slice(&(e.misc | crate::abi::misc::BUILD_ID_SIZE).to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&(-1i32).to_le_bytes());
        let mut id20 = [0u8; 20];
        id20[..id.len()].copy_from_slice(id);
        out.extend_from_slice(&id20);
        out.push(id.len() as u8);
        out.extend_from_slice(&[0, 0, 0]);
        out.extend_from_slice(&name);
        out.resize(out.len() + name_len - name.len(), 0);
    }
    out
}

/// COMPRESSED: version 0, type 1 (zstd), level, ratio, mmap_len (the
/// largest decompressed payload of one compressed record).
pub fn compressed(level: i32, ratio: u32, mmap_len: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(20);
    push_u32(&mut out, 0);
    push_u32(&mut out, 1);
    out.extend_from_slice(&level.to_le_bytes());
    push_u32(&mut out, ratio);
    push_u32(&mut out, mmap_len);
    out
}

/// TRACING_DATA (trace-event-read.c, version 0.6) for `tracepoints`,
/// grouped by system in first-seen order. `None` names a tracepoint whose
/// format was not gathered.
pub fn tracing_data<'a>(
    source: &TracingSource,
    page_size: u32,
    tracepoints: &'a [(String, String)],
) -> Result<Vec<u8>, &'a (String, String)> {
    let mut out = Vec::new();
    out.extend_from_slice(b"\x17\x08\x44tracing");
    out.extend_from_slice(b"0.6\0");
    out.push(0); // little endian
    out.push(8); // sizeof(long)
    push_u32(&mut out, page_size);
    out.extend_from_slice(b"header_page\0");
    push_u64(&mut out, source.header_page.len() as u64);
    out.extend_from_slice(&source.header_page);
    out.extend_from_slice(b"header_event\0");
    push_u64(&mut out, source.header_event.len() as u64);
    out.extend_from_slice(&source.header_event);
    push_u32(&mut out, 0); // ftrace formats

    let mut systems: Vec<(&str, Vec<&[u8]>)> = Vec::new();
    for tp in tracepoints {
        let format = source.format(&tp.0, &tp.1).ok_or(tp)?;
        match systems.iter_mut().find(|(s, _)| *s == tp.0) {
            Some((_, formats)) => formats.push(&format.format),
            None => systems.push((&tp.0, vec![&format.format])),
        }
    }
    push_u32(&mut out, u32::try_from(systems.len()).unwrap_or(u32::MAX));
    for (system, formats) in systems {
        out.extend_from_slice(system.as_bytes());
        out.push(0);
        push_u32(&mut out, u32::try_from(formats.len()).unwrap_or(u32::MAX));
        for f in formats {
            push_u64(&mut out, f.len() as u64);
            out.extend_from_slice(f);
        }
    }
    push_u32(&mut out, 0); // kallsyms: perf reads /proc/kallsyms itself
    push_u32(
        &mut out,
        u32::try_from(source.printk_formats.len()).unwrap_or(0),
    );
    if u32::try_from(source.printk_formats.len()).is_ok() {
        out.extend_from_slice(&source.printk_formats);
    }
    push_u64(&mut out, 0); // saved cmdlines
    Ok(out)
}

/// Every feature section a snapshot carries, in ascending bit order: what
/// `perf report --header` shows, from the host facts gathered at start,
/// the events, the build-id table and what the data section holds. A
/// tracepoint without a gathered format is an error naming it.
pub fn sections(
    host: &HostInfo,
    events: &[EventDescriptor],
    build_id_table: &[BuildIdEntry],
    summary: &DataSummary,
) -> Result<Vec<(u32, Vec<u8>)>, String> {
    let mut feats: Vec<(u32, Vec<u8>)> = Vec::new();
    let tracepoints = tracepoints_of(events);
    if !tracepoints.is_empty() {
        let body = tracing_data(&host.tracing, host.page_size, &tracepoints)
            .map_err(|tp| format!("{}:{}", tp.0, tp.1))?;
        feats.push((bit::TRACING_DATA, body));
    }
    if !build_id_table.is_empty() {
        feats.push((bit::BUILD_ID, build_ids(build_id_table)));
    }
    feats.push((bit::HOSTNAME, string_section(&host.hostname)));
    feats.push((bit::OSRELEASE, string_section(&host.os_release)));
    feats.push((bit::VERSION, string_section(&host.version)));
    feats.push((bit::ARCH, string_section(&host.arch)));
    feats.push((bit::NRCPUS, nrcpus(host)));
    let m = &host.machine;
    if let Some(desc) = &m.cpu_desc {
        feats.push((bit::CPUDESC, string_section(desc)));
    }
    if let Some(cpuid) = &m.cpuid {
        feats.push((bit::CPUID, string_section(cpuid)));
    }
    if let Some(kb) = m.total_mem_kb {
        feats.push((bit::TOTAL_MEM, total_mem(kb)));
    }
    feats.push((bit::CMDLINE, cmdline(&host.cmdline)));
    feats.push((bit::EVENT_DESC, event_desc(events)));
    // perf reads one core/socket id pair per NRCPUS CPU.
    if let Some(t) = m
        .topology
        .as_ref()
        .filter(|t| t.cpus.len() == host.nr_cpus_available as usize)
    {
        feats.push((bit::CPU_TOPOLOGY, cpu_topology(t)));
    }
    if !m.numa_nodes.is_empty() {
        feats.push((bit::NUMA_TOPOLOGY, numa_topology(&m.numa_nodes)));
    }
    if !m.pmus.is_empty() {
        feats.push((bit::PMU_MAPPINGS, pmu_mappings(&m.pmus)));
    }
    if !m.caches.is_empty() {
        feats.push((bit::CACHE, cache(&m.caches)));
    }
    if let (Some(first), Some(last)) = (summary.first_sample, summary.last_sample) {
        feats.push((
            bit::SAMPLE_TIME,
            sample_time(first.as_nanos(), last.as_nanos()),
        ));
    }
    if let Some(mem) = &m.mem_topology {
        feats.push((bit::MEM_TOPOLOGY, mem_topology(mem)));
    }
    feats.push((bit::CLOCKID, clockid(host.clock_resolution_ns)));
    if let Some(c) = &summary.compression {
        let ratio = c.input_bytes.checked_div(c.output_bytes).unwrap_or(0);
        feats.push((
            bit::COMPRESSED,
            compressed(
                c.level,
                u32::try_from(ratio).unwrap_or(u32::MAX),
                c.mmap_len,
            ),
        ));
    }

    if let Some(clock) = &host.clock {
        feats.push((bit::CLOCK_DATA, clock_data(clock)));
    }
    Ok(feats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::get_u32;
    use crate::host::TracepointFormat;

    #[test]
    fn strings_are_padded_to_64_with_their_nul() {
        let s = string_section("host");
        assert_eq!(get_u32(&s, 0), 64);
        assert_eq!(s.len(), 68);
        assert_eq!(&s[4..9], b"host\0");
        let s = string_section(&"x".repeat(64));
        assert_eq!(get_u32(&s, 0), 128);
    }

    #[test]
    fn build_id_entries_are_perfs_struct() {
        let b = build_ids(&[BuildIdEntry {
            misc: 1,
            build_id: vec![0xab; 20],
            filename: "[kernel.kallsyms]".into(),
        }]);
        assert_eq!(b.len(), 36 + 64);
        assert_eq!(u16::from_le_bytes([b[6], b[7]]) as usize, b.len());
        assert_eq!(u16::from_le_bytes([b[4], b[5]]), 1 | (1 << 15));
        assert_eq!(get_u32(&b, 8), u32::MAX, "pid -1");
        assert_eq!(&b[12..32], &[0xab; 20]);
        assert_eq!(b[32], 20);
        assert_eq!(&b[36..54], b"[kernel.kallsyms]\0");
    }

    #[test]
    fn mem_topology_writes_the_bit_count_twice_then_the_words() {
        let b = mem_topology(&MemTopology {
            block_size: 0x800_0000,
            nodes: vec![(0, vec![0, 65])],
        });
        let words: Vec<u64> = b
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [1, 0x800_0000, 1, 0, 66, 66, 1, 2]);
    }

    #[test]
    fn tracing_data_groups_by_system_and_names_missing_formats() {
        let fmt = |s: &str, n: &str| TracepointFormat {
            system: s.into(),
            name: n.into(),
            id: Some(1),
            format: format!("name: {n}\n").into_bytes(),
        };
        let source = TracingSource {
            header_page: b"hp".to_vec(),
            header_event: b"he".to_vec(),
            formats: vec![fmt("sched", "a"), fmt("irq", "b"), fmt("sched", "c")],
            printk_formats: b"pk".to_vec(),
        };
        let tps = [
            ("sched".to_string(), "a".to_string()),
            ("irq".to_string(), "b".to_string()),
            ("sched".to_string(), "c".to_string()),
        ];
        let b = tracing_data(&source, 4096, &tps).unwrap();
        assert!(b.starts_with(b"\x17\x08Dtracing0.6\0\0\x08"));
        let text = String::from_utf8_lossy(&b);
        let sched = text.find("sched\0").unwrap();
        let irq = text.find("irq\0").unwrap();
        assert!(sched < irq);
        // both sched formats come right after "sched\0" + u32 count 2
        assert_eq!(get_u32(&b, sched + 6), 2);
        let missing = [("x".to_string(), "y".to_string())];
        assert_eq!(tracing_data(&source, 4096, &missing).unwrap_err().1, "y");
    }
}
