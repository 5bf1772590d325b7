//! The symbol maps JIT compilers write for perf (`/tmp/perf-PID.map`: Node
//! with `--perf-basic-prof`, Java agents, LuaJIT, Python 3.12 `-X perf`),
//! copied when a snapshot is written, so the snapshot's JIT frames can be
//! named after the process has gone (and its file with it, or with a
//! private /tmp) or its pid was reused.
//!
//! Each file is the choice of the process that writes it, so: it is opened
//! inside the process's own root (`/proc/PID/root`, its mount namespace's
//! /tmp, named by its pid there), without following any link and without
//! leaving that root; it must be a regular file owned by the process's
//! user; at most [`MAX_FILE_BYTES`] of it and [`MAX_DUMP_BYTES`] in all
//! are read, on a thread of its own given up after [`READ_DEADLINE`] (a
//! /tmp on a file system that never answers does not hold up the dump: the
//! maps read by then are kept).
//! The copies are kept zstd-compressed in the snapshot's sidecar, at most
//! [`MAX_PERF_MAPS_BYTES`] of them.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine;
use flightrec_files::untrusted::open_regular_beneath;
pub use flightrec_proto::sidecar::{MAX_PERF_MAPS_BYTES, PerfMap};

/// Bytes of one process's map read at most.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// Bytes of maps read for one snapshot at most.
pub const MAX_DUMP_BYTES: u64 = 16 << 20;
/// The reading of every map given up after this.
pub const READ_DEADLINE: Duration = Duration::from_secs(2);

/// The perf maps of the processes running now (from /proc), each
/// compressed: what a snapshot written now keeps of them.
pub fn collect() -> Vec<PerfMap> {
    collect_in(Path::new("/proc"), MAX_DUMP_BYTES)
}

/// As [`collect`], over `proc_root`, reading at most `budget` bytes.
pub fn collect_in(proc_root: &Path, budget: u64) -> Vec<PerfMap> {
    let (tx, rx) = mpsc::channel();
    let proc_root = proc_root.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("perf-map-reader".into())
        .spawn(move || scan(&proc_root, budget, &tx));
    if let Err(e) = spawned {
        tracing::warn!("no thread to read perf maps: {e}");
        return Vec::new();
    }
    let deadline = Instant::now() + READ_DEADLINE;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(map) => out.push(map),
            Err(mpsc::RecvTimeoutError::Disconnected) => return out,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                tracing::warn!(
                    "reading perf maps took more than {}s (a /tmp that does not answer?); the \
                     snapshot keeps the {} read by then",
                    READ_DEADLINE.as_secs(),
                    out.len()
                );
                return out;
            }
        }
    }
}

/// Sends the maps of the processes under `proc_root`, compressed, within
/// `budget` bytes read and [`MAX_PERF_MAPS_BYTES`] kept.
fn scan(proc_root: &Path, mut budget: u64, tx: &mpsc::Sender<PerfMap>) {
    let mut stored = 0usize;
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return;
    };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    for pid in pids {
        if budget == 0 {
            tracing::warn!(
                "perf maps past {MAX_DUMP_BYTES} bytes in all were left out of the snapshot"
            );
            return;
        }
        let dir = proc_root.join(pid.to_string());
        let Some(ids) = ProcessIds::read(&dir) else {
            continue;
        };
        let name = format!("tmp/perf-{}.map", ids.nspid);
        let read = match read_map(
            &dir.join("root"),
            Path::new(&name),
            ids,
            MAX_FILE_BYTES.min(budget),
        ) {
            Ok(read) => read,
            Err(None) => continue,
            Err(Some(why)) => {
                tracing::warn!(pid, "/{name} of pid {pid} not copied: {why}");
                continue;
            }
        };
        budget = budget.saturating_sub(read.bytes.len() as u64);
        let Ok(packed) = zstd::bulk::compress(&read.bytes, 3) else {
            continue;
        };
        let encoded = base64::engine::general_purpose::STANDARD.encode(packed);
        if stored + encoded.len() > MAX_PERF_MAPS_BYTES {
            tracing::warn!(
                pid,
                "the perf map of pid {pid} was left out: the snapshot's perf maps would take \
                 more than {MAX_PERF_MAPS_BYTES} bytes compressed"
            );
            continue;
        }
        stored += encoded.len();
        let map = PerfMap {
            pid,
            path: format!("/{name}"),
            bytes: read.bytes.len() as u64,
            truncated: read.truncated,
            zstd_base64: encoded,
        };
        if tx.send(map).is_err() {
            return;
        }
    }
}

/// What identifies a process's map and its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcessIds {
    /// Its pid in its own pid namespace (the name of its map).
    nspid: u32,
    /// Effective and file-system uids: who may own its map.
    euid: u32,
    fsuid: u32,
}

impl ProcessIds {
    fn read(dir: &Path) -> Option<Self> {
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        Self::parse(&status)
    }

    fn parse(status: &str) -> Option<Self> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.split_whitespace().collect::<Vec<_>>())
        };
        let uids = field("Uid:")?;
        let nspid = match field("NSpid:") {
            Some(ns) => ns.last()?.parse().ok()?,
            None => field("Pid:")?.first()?.parse().ok()?,
        };
        Some(ProcessIds {
            nspid,
            euid: uids.get(1)?.parse().ok()?,
            fsuid: uids.get(3)?.parse().ok()?,
        })
    }
}

/// A map's first bytes, cut after its last whole line.
struct MapRead {
    bytes: Vec<u8>,
    truncated: bool,
}

/// Why a map was not read: `None` when there is none (nothing to say).
type NotRead = Option<String>;

fn read_map(root: &Path, name: &Path, ids: ProcessIds, cap: u64) -> Result<MapRead, NotRead> {
    let (file, md) = match open_regular_beneath(root, name) {
        Ok(opened) => opened,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
        // The process is gone, or its root is not ours to enter (a process
        // of another user namespace, or one ptrace rules keep us out of,
        // such as a sandbox's init): nothing to say on every dump.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(nix::libc::ESRCH | nix::libc::EACCES | nix::libc::EPERM)
            ) =>
        {
            return Err(None);
        }
        Err(e) => return Err(Some(e.to_string())),
    };
    if md.uid() != ids.euid && md.uid() != ids.fsuid {
        return Err(Some(format!(
            "owned by uid {}, not by the process's user ({})",
            md.uid(),
            ids.euid
        )));
    }
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Some(e.to_string()))?;
    let mut truncated = false;
    if bytes.len() as u64 > cap {
        truncated = true;
        bytes.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
    }
    // A line being written as it was read is left out.
    match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => {
            truncated |= end + 1 < bytes.len();
            bytes.truncate(end + 1);
        }
        None => bytes.clear(),
    }
    if bytes.is_empty() {
        return Err(None);
    }
    Ok(MapRead { bytes, truncated })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_gives_the_pid_in_its_namespace_and_the_uids() {
        let status = "Name:\tnode\nPid:\t4242\nUid:\t1000\t1001\t1002\t1003\n\
                      NSpid:\t4242\t7\n";
        assert_eq!(
            ProcessIds::parse(status),
            Some(ProcessIds {
                nspid: 7,
                euid: 1001,
                fsuid: 1003
            })
        );
        let old_kernel = "Pid:\t9\nUid:\t0\t0\t0\t0\n";
        assert_eq!(ProcessIds::parse(old_kernel).map(|i| i.nspid), Some(9));
        assert_eq!(ProcessIds::parse("Pid:\t9\n"), None);
    }

    /// A fake /proc with one process `pid` whose root holds `map`.
    fn fake_proc(pid: u32, uid: u32, map: Option<&[u8]>) -> tempfile::TempDir {
        let proc_root = tempfile::tempdir().unwrap();
        let dir = proc_root.path().join(pid.to_string());
        std::fs::create_dir_all(dir.join("root/tmp")).unwrap();
        std::fs::write(
            dir.join("status"),
            format!("Pid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{pid}\n"),
        )
        .unwrap();
        if let Some(map) = map {
            std::fs::write(dir.join(format!("root/tmp/perf-{pid}.map")), map).unwrap();
        }
        proc_root
    }

    fn unpacked(m: &PerfMap) -> Vec<u8> {
        let packed = base64::engine::general_purpose::STANDARD
            .decode(&m.zstd_base64)
            .unwrap();
        zstd::bulk::decompress(&packed, 1 << 30).unwrap()
    }

    #[test]
    fn a_map_is_copied_whole_lines_only_and_within_the_budget() {
        let own = nix::unistd::geteuid().as_raw();
        let text = b"7f00 10 JS:*hot /a.js:1:1\n7f10 20 JS:~cold /a.js:2:1\n7f30 8 half";
        let proc_root = fake_proc(77, own, Some(text));
        let maps = collect_in(proc_root.path(), MAX_DUMP_BYTES);
        assert_eq!(maps.len(), 1);
        assert_eq!(
            (maps[0].pid, maps[0].path.as_str()),
            (77, "/tmp/perf-77.map")
        );
        let whole_lines = text.iter().rposition(|&b| b == b'\n').unwrap() + 1;
        assert_eq!(unpacked(&maps[0]), &text[..whole_lines]);
        assert!(maps[0].truncated, "the half line is left out");
        // A budget shorter than the file: its first whole lines.
        let maps = collect_in(proc_root.path(), 30);
        assert_eq!(unpacked(&maps[0]), &text[..26]);
        assert!(maps[0].truncated);
    }

    #[test]
    fn a_map_of_another_user_or_behind_a_link_is_not_copied() {
        let own = nix::unistd::geteuid().as_raw();
        let proc_root = fake_proc(78, own + 1, Some(b"1 2 f\n"));
        assert!(collect_in(proc_root.path(), MAX_DUMP_BYTES).is_empty());
        // A link planted at the map's name (to a file the daemon could
        // read) is not followed.
        let proc_root = fake_proc(79, own, None);
        let secret = proc_root.path().join("secret");
        std::fs::write(&secret, b"1 2 secret\n").unwrap();
        std::os::unix::fs::symlink(&secret, proc_root.path().join("79/root/tmp/perf-79.map"))
            .unwrap();
        assert!(collect_in(proc_root.path(), MAX_DUMP_BYTES).is_empty());
        // Nor is a /tmp that is a link out of the process's root.
        let proc_root = fake_proc(80, own, None);
        std::fs::remove_dir(proc_root.path().join("80/root/tmp")).unwrap();
        let elsewhere = proc_root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("perf-80.map"), b"1 2 f\n").unwrap();
        std::os::unix::fs::symlink(&elsewhere, proc_root.path().join("80/root/tmp")).unwrap();
        assert!(collect_in(proc_root.path(), MAX_DUMP_BYTES).is_empty());
    }
}
