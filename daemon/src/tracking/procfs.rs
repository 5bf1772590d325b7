//! The start-up scan of /proc that seeds the process table: per thread its
//! comm, per process its parent and executable mappings (what the kernel's
//! MMAP2 records describe), and its files' data mappings when the tracking
//! event asks for those too (`dwarf` call chains).

use std::path::Path;

use super::process_table::ProcessTable;
use crate::tracking::maps::Maps;
use crate::tracking::state::{MapState, ProcessState};

use crate::abi::mmap_prot::{EXEC as PROT_EXEC, READ as PROT_READ, WRITE as PROT_WRITE};
const MAP_SHARED: u32 = 1;
const MAP_PRIVATE: u32 = 2;

/// The parent pid from `/proc/<pid>/stat` (the field after `(comm) state`;
/// the comm may itself contain spaces and parentheses).
pub fn parse_stat_ppid(stat: &str) -> Option<u32> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// Executable mappings from `/proc/<pid>/maps`, and with `data_maps` the
/// other mappings of files. Anonymous executable mappings (JIT code) are
/// named `//anon`, as perf names them.
pub fn parse_maps(maps: &str, data_maps: bool) -> Vec<MapState> {
    maps.lines()
        .filter_map(|l| parse_maps_line(l, data_maps))
        .collect()
}

fn parse_maps_line(line: &str, data_maps: bool) -> Option<MapState> {
    // start-end perms offset maj:min inode [path, which may hold spaces]
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
        let (f, r) = trimmed.split_at(end);
        rest = r;
        (!f.is_empty()).then_some(f)
    };
    let range = field()?;
    let perms = field()?.as_bytes();
    let offset = field()?;
    let dev = field()?;
    let inode = field()?;
    let path = rest.trim();
    if perms.len() < 4 || (perms[2] != b'x' && !(data_maps && path.starts_with('/'))) {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let (maj, min) = dev.split_once(':')?;
    let mut prot = if perms[2] == b'x' { PROT_EXEC } else { 0 };
    if perms[0] == b'r' {
        prot |= PROT_READ;
    }
    if perms[1] == b'w' {
        prot |= PROT_WRITE;
    }
    Some(MapState {
        start,
        len: end.checked_sub(start)?,
        pgoff: u64::from_str_radix(offset, 16).ok()?,
        maj: u32::from_str_radix(maj, 16).ok()?,
        min: u32::from_str_radix(min, 16).ok()?,
        ino: inode.parse().ok()?,
        ino_generation: 0,
        prot,
        flags: if perms[3] == b's' {
            MAP_SHARED
        } else {
            MAP_PRIVATE
        },
        filename: if path.is_empty() {
            "//anon".into()
        } else {
            path.into()
        },
        build_id: None,
    })
}

fn numeric_entries(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Scans `proc_root` (normally `/proc`). Processes that vanish while being
/// read are skipped: the tracking rings, already enabled, saw them go.
pub fn seed_from_proc(proc_root: &Path, table: &mut ProcessTable, data_maps: bool) -> usize {
    let mut threads = 0;
    for pid in numeric_entries(proc_root) {
        let dir = proc_root.join(pid.to_string());
        let Some(ppid) = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| parse_stat_ppid(&s))
        else {
            continue;
        };
        let maps = std::fs::read_to_string(dir.join("maps"))
            .map(|m| parse_maps(&m, data_maps))
            .unwrap_or_default();
        let mut tids = numeric_entries(&dir.join("task"));
        tids.sort_unstable();
        // The leader first, carrying the maps.
        tids.retain(|&t| t != pid);
        tids.insert(0, pid);
        let mut maps = Some(maps);
        for tid in tids {
            let comm_path = dir.join("task").join(tid.to_string()).join("comm");
            let Ok(comm) = std::fs::read_to_string(comm_path) else {
                continue;
            };
            table.insert(ProcessState {
                pid,
                tid,
                ppid,
                comm: comm.trim_end_matches('\n').to_string(),
                maps: if tid == pid {
                    maps.take().unwrap_or_default().into()
                } else {
                    Maps::new()
                },
            });
            threads += 1;
        }
    }
    threads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppid_survives_odd_comms() {
        assert_eq!(parse_stat_ppid("42 (bash) S 7 42 42 0"), Some(7));
        assert_eq!(parse_stat_ppid("42 (a) b) (c) R 9 1"), Some(9));
        assert_eq!(parse_stat_ppid("42 (x"), None);
        assert_eq!(parse_stat_ppid("42 (x) S"), None);
    }

    #[test]
    fn keeps_executable_maps_with_their_fields() {
        let maps = "\
55d0c8a00000-55d0c8a28000 r--p 00000000 08:01 1835032    /usr/bin/bash
55d0c8a28000-55d0c8ad9000 r-xp 00028000 08:01 1835032    /usr/bin/bash
7f00aa000000-7f00aa100000 rwxp 00000000 00:00 0 
7f00ab000000-7f00ab001000 r-xs 00001000 fd:02 77    /tmp/with space.so
7ffd1000-7ffd2000 r-xp 00000000 00:00 0                  [vdso]
garbage line
";
        let got = parse_maps(maps, false);
        assert_eq!(got.len(), 4);
        assert_eq!(
            got[0],
            MapState {
                start: 0x55d0_c8a2_8000,
                len: 0xb1000,
                pgoff: 0x28000,
                maj: 8,
                min: 1,
                ino: 1_835_032,
                ino_generation: 0,
                prot: PROT_READ | PROT_EXEC,
                flags: MAP_PRIVATE,
                filename: "/usr/bin/bash".into(),
                build_id: None,
            }
        );
        assert_eq!(&*got[1].filename, "//anon");
        assert_eq!(got[1].prot, PROT_READ | PROT_WRITE | PROT_EXEC);
        assert_eq!(
            (got[2].maj, got[2].min, got[2].flags),
            (0xfd, 2, MAP_SHARED)
        );
        assert_eq!(&*got[2].filename, "/tmp/with space.so");
        assert_eq!(&*got[3].filename, "[vdso]");
        // For dwarf call chains, the file's read-only map too (its
        // .eh_frame_hdr), never an anonymous one.
        let with_data = parse_maps(maps, true);
        assert_eq!(with_data.len(), 5);
        assert_eq!(
            (
                with_data[0].start,
                with_data[0].prot,
                &*with_data[0].filename
            ),
            (0x55d0_c8a0_0000, PROT_READ, "/usr/bin/bash")
        );
        assert_eq!(with_data[1..], got[..]);
    }

    #[test]
    fn seeds_this_process_from_proc() {
        let mut table = ProcessTable::default();
        let n = seed_from_proc(Path::new("/proc"), &mut table, false);
        assert!(n > 0);
        let me = std::process::id();
        let state = table.lookup(me).expect("this process is in /proc");
        assert_eq!(state.pid, me);
        let comm = std::fs::read_to_string(format!("/proc/{me}/comm")).unwrap();
        assert_eq!(state.comm, comm.trim_end());
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(
            state.maps.iter().any(|m| Path::new(&*m.filename) == exe),
            "own executable mapped: {:?}",
            state.maps
        );
    }
}
