//! Feature sections of a perf.data file, in the layouts perf's
//! tools/perf/util/header.c reads them. Pure encoders: bytes out.

use crate::recorder::EventDescriptor;
use crate::recorder::host::{HostInfo, TracingSource};

/// Feature bits (`enum HEADER_FEAT`).
pub mod bit {
    pub const TRACING_DATA: u32 = 1;
    pub const HOSTNAME: u32 = 3;
    pub const OSRELEASE: u32 = 4;
    pub const VERSION: u32 = 5;
    pub const ARCH: u32 = 6;
    pub const NRCPUS: u32 = 7;
    pub const CMDLINE: u32 = 11;
    pub const EVENT_DESC: u32 = 12;
    pub const SAMPLE_TIME: u32 = 21;
    pub const CLOCKID: u32 = 23;
    pub const COMPRESSED: u32 = 27;
    /// Size of the header's feature bitmap in bits.
    pub const BITMAP_BITS: u32 = 256;
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::get_u32;
    use crate::recorder::host::TracepointFormat;

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
