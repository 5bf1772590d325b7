//! JIT frames named from perf maps (`/tmp/perf-PID.map`: one
//! `START SIZE NAME` line per piece of generated code, hex without `0x`, as
//! Node's `--perf-basic-prof`, Java agents, LuaJIT and Python's `-X perf`
//! write them), as the daemon copied them into the snapshot's sidecar.
//!
//! A map only grows: when code is moved or collected, the new code's line
//! comes later, so the last line covering an address names it (perf does
//! the same).

use std::collections::HashMap;

use base64::Engine;

/// Bytes a perf map may take once decompressed, at most.
const MAX_MAP_BYTES: usize = 64 << 20;

/// One process's perf map, as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitMap {
    pub pid: u32,
    pub text: Vec<u8>,
}

impl JitMap {
    /// A map as the sidecar keeps it (zstd, then standard base64).
    pub fn decode(pid: u32, zstd_base64: &str) -> Result<Self, String> {
        let packed = base64::engine::general_purpose::STANDARD
            .decode(zstd_base64)
            .map_err(|e| format!("the perf map of pid {pid}: {e}"))?;
        let text = zstd::bulk::decompress(&packed, MAX_MAP_BYTES)
            .map_err(|e| format!("the perf map of pid {pid}: {e}"))?;
        Ok(JitMap { pid, text })
    }
}

/// A piece of generated code.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    start: u64,
    end: u64,
    /// Its line in the map: later lines win.
    line: usize,
    name: String,
}

/// The code of one process, by address.
#[derive(Debug, Default)]
pub struct Symbols {
    /// Sorted by start.
    entries: Vec<Entry>,
    /// The longest entry, which bounds how far back a lookup looks.
    longest: u64,
}

impl Symbols {
    /// The entries of a perf map; lines that do not parse are skipped.
    pub fn parse(text: &[u8]) -> Self {
        let text = String::from_utf8_lossy(text);
        let mut entries: Vec<Entry> = text
            .lines()
            .enumerate()
            .filter_map(|(line, l)| {
                let (start, rest) = l.trim_start().split_once(' ')?;
                let (size, name) = rest.trim_start().split_once(' ')?;
                let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
                let (start, size) = (hex(start)?, hex(size)?);
                let name = name.trim();
                (size > 0 && !name.is_empty()).then(|| Entry {
                    start,
                    end: start.saturating_add(size),
                    line,
                    name: name.to_string(),
                })
            })
            .collect();
        entries.sort_by_key(|e| (e.start, e.line));
        let longest = entries.iter().map(|e| e.end - e.start).max().unwrap_or(0);
        Symbols { entries, longest }
    }

    /// The name of the code at `addr`: the last line that covers it.
    pub fn name(&self, addr: u64) -> Option<&str> {
        let upto = self.entries.partition_point(|e| e.start <= addr);
        self.entries[..upto]
            .iter()
            .rev()
            .take_while(|e| addr - e.start < self.longest)
            .filter(|e| addr < e.end)
            .max_by_key(|e| e.line)
            .map(|e| e.name.as_str())
    }
}

/// The perf maps of a snapshot, by pid.
#[derive(Debug, Default)]
pub struct JitSymbols {
    by_pid: HashMap<u32, Symbols>,
}

impl JitSymbols {
    pub fn new(maps: &[JitMap]) -> Self {
        JitSymbols {
            by_pid: maps
                .iter()
                .map(|m| (m.pid, Symbols::parse(&m.text)))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_pid.is_empty()
    }

    /// The name `pid`'s map gives `addr`.
    pub fn name(&self, pid: u32, addr: u64) -> Option<&str> {
        self.by_pid.get(&pid)?.name(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_covering_an_address_names_it() {
        let map = b"d6fb02cb39e 47 JS:~outer /a/loop.js:2:15\n\
                    7fe44c006340 2d8 JS:*hotLoop /a/loop.js:1:17\n\
                    not a line\n\
                    18c4000 300 Builtin:DeoptimizationEntry_Eager\n\
                    7fe44c006300 100 JS:*replaced /a/loop.js:9:1\n";
        let s = Symbols::parse(map);
        assert_eq!(s.name(0xd6fb02cb39e), Some("JS:~outer /a/loop.js:2:15"));
        assert_eq!(s.name(0xd6fb02cb39e + 0x47), None, "past its end");
        assert_eq!(s.name(0x18c42ff), Some("Builtin:DeoptimizationEntry_Eager"));
        // Both cover 0x7fe44c006350: the later line wins.
        assert_eq!(s.name(0x7fe44c006350), Some("JS:*replaced /a/loop.js:9:1"));
        assert_eq!(s.name(0x7fe44c006500), Some("JS:*hotLoop /a/loop.js:1:17"));
        assert_eq!(s.name(0x10), None);
    }

    #[test]
    fn maps_decode_as_the_sidecar_keeps_them() {
        let text = b"10 20 f\n".to_vec();
        let packed = zstd::bulk::compress(&text, 3).unwrap();
        let encoded = base64::engine::general_purpose::STANDARD.encode(packed);
        let m = JitMap::decode(7, &encoded).unwrap();
        assert_eq!(m, JitMap { pid: 7, text });
        assert_eq!(JitSymbols::new(&[m]).name(7, 0x15), Some("f"));
        assert!(JitMap::decode(7, "not base64!").is_err());
        assert!(JitMap::decode(7, "aGVsbG8=").is_err(), "not zstd");
    }
}
