//! Build-ids of mapped files, for MMAP2 records the kernel wrote without
//! one (kernels before 5.12, or an ELF file whose note the kernel could not
//! find in its first page).
//!
//! The paths come from processes the daemon does not trust, and reading a
//! file can be slow or never end (a FUSE file whose reads never return, a
//! sparse file with a 4 GiB note section). So no file is read on the drain
//! or under any lock a dump, `Status` or the API takes: the drain asks
//! [`BuildIds`] and goes on; a reader thread reads the file's ELF notes (a
//! few KiB at most, `flightrec_files::elf`), only if, opened without
//! blocking and without following a final symlink, it is the regular file
//! on the device and inode the kernel reported; the answer is cached by
//! device, inode, generation and path. The drain fills records from the
//! cache as it appends them; a capture fills the records and maps of its
//! window that were appended before their answer came.
//!
//! A read that takes longer than [`READ_DEADLINE`] is given up: the file
//! counts as having no build-id (`timed_out` in `Status`) and a new reader
//! takes over the queue. At most [`MAX_STUCK_READERS`] readers may hang at
//! once; beyond that, and beyond [`MAX_QUEUED`] files waiting, files are
//! not read (`dropped`).
//!
//! The maps read from /proc at start have no record to fill: the files of
//! every process already running are [`BuildIds::seed`]ed, in a queue of
//! their own (a host's few thousand files do not crowd out the drain's),
//! and their answers are kept for the daemon's life, since those maps
//! never come again. A process in another mount namespace names its files
//! by paths of its own: a file whose path does not lead to the mapped
//! inode on the host is read through the process, `/proc/PID/map_files`
//! (the kernel's own link to the mapped file) or `/proc/PID/root`, and
//! used only if it is that inode there too.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use flightrec_files::{Links, open_regular};

use crate::abi::{misc, record_type};
use crate::log_limit::RateLimitedWarning;

use super::state::{BuildId, MapState};

/// A file read for longer than this is given up.
pub const READ_DEADLINE: Duration = Duration::from_secs(1);
/// Readers that may hang in a read at once before files stop being read.
pub const MAX_STUCK_READERS: usize = 4;
/// Files waiting to be read at most.
pub const MAX_QUEUED: usize = 1024;
/// Answers kept before the cache starts over (bounds its memory).
const MAX_CACHED: usize = 8192;
/// Files of the processes running at start read at most (their answers
/// are kept for good: they stay fewer than [`MAX_CACHED`]).
pub const MAX_SEEDED: usize = 4096;
/// MMAP2 body offsets (after the 8-byte header).
const MMAP2_DEV: usize = 40;
const MMAP2_PROT: usize = 64;
const MMAP2_FILENAME: usize = 72;

/// A mapped file as an MMAP2 record names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MappedFile {
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub ino_generation: u64,
    pub path: Arc<str>,
}

impl MappedFile {
    pub fn of(map: &MapState) -> Self {
        MappedFile {
            maj: map.maj,
            min: map.min,
            ino: map.ino,
            ino_generation: map.ino_generation,
            path: map.filename.clone(),
        }
    }
}

/// A process that maps a file, and where: how to reach the file when its
/// path means something else on the host (another mount namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappedBy {
    pub pid: u32,
    pub start: u64,
    pub end: u64,
}

/// What became of the files asked about, since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildIdStats {
    /// Files read that had a build-id.
    pub found: u64,
    /// Files read that had none, or were not the mapped regular file.
    pub absent: u64,
    /// Reads given up after [`READ_DEADLINE`].
    pub timed_out: u64,
    /// Files not read: the queue was full or too many readers hung.
    pub dropped: u64,
    /// Files waiting to be read now.
    pub queued: u64,
    /// Readers hanging in a read now.
    pub stuck_readers: u64,
}

/// Reads the build-id of a mapped file (the real one, or a test's).
type ReadFn = dyn Fn(&MappedFile, Option<MappedBy>) -> Option<BuildId> + Send + Sync;

/// One reader's current file.
struct Reading {
    file: MappedFile,
    since: Instant,
}

struct State {
    known: HashMap<MappedFile, Option<BuildId>>,
    queue: VecDeque<(MappedFile, Option<MappedBy>)>,
    /// The files of the processes running at start, read after `queue`.
    seed_queue: VecDeque<(MappedFile, Option<MappedBy>)>,
    queued: HashSet<MappedFile>,
    /// Seeded files: their answers survive the cache starting over.
    pinned: HashSet<MappedFile>,
    /// What each reader reads now, by reader number.
    reading: HashMap<u64, Reading>,
    /// Readers given up on (they exit when their read returns).
    abandoned: HashSet<u64>,
    next_reader: u64,
    stats: BuildIdStats,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
    read: Box<ReadFn>,
}

/// The build-id cache and its reader threads (see the module docs).
/// Dropping it stops the readers that are not stuck.
pub struct BuildIds {
    shared: Arc<Shared>,
}

impl Default for BuildIds {
    fn default() -> Self {
        Self::with_reader(Box::new(read_build_id))
    }
}

impl std::fmt::Debug for BuildIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildIds")
            .field("stats", &self.stats())
            .finish()
    }
}

/// Reads `file`'s build-id if it is still the file the kernel mapped:
/// at its path, else (for a process in another mount namespace, or a file
/// since replaced) through the process that maps it.
pub fn read_build_id(file: &MappedFile, by: Option<MappedBy>) -> Option<BuildId> {
    mapped_candidates(file, by)
        .into_iter()
        .find_map(|(at, links)| {
            let f = open_mapped(&at, links, file)?;
            BuildId::new(&flightrec_files::elf::build_id(&f)?)
        })
}

/// `file` opened, found as [`read_build_id`] finds it, if it has the
/// build-id `build_id` (what the history's unwinder reads tables from).
/// An MMAP2 record that carries a build-id carries no device and inode
/// (they share its bytes): the build-id is then the only check.
pub fn open_mapped_file(
    file: &MappedFile,
    by: Option<MappedBy>,
    build_id: &BuildId,
) -> Option<std::fs::File> {
    let unknown_inode = file.ino == 0 && file.maj == 0 && file.min == 0;
    mapped_candidates(file, by)
        .into_iter()
        .find_map(|(at, links)| {
            let f = if unknown_inode {
                open_regular(&at, links).ok()?.0
            } else {
                open_mapped(&at, links, file)?
            };
            let id = BuildId::new(&flightrec_files::elf::build_id(&f)?)?;
            (id == *build_id).then_some(f)
        })
}

/// Where a mapped file may be opened: its path, then through the process.
fn mapped_candidates(file: &MappedFile, by: Option<MappedBy>) -> Vec<(std::path::PathBuf, Links)> {
    let path = Path::new(&*file.path);
    let mut candidates = vec![(path.to_path_buf(), Links::Refuse)];
    if let Some(by) = by {
        // The kernel's link to the mapped file itself (needs
        // CAP_SYS_ADMIN), then the path inside the process's root: both
        // checked against the inode the kernel reported, as the path is.
        candidates.push((
            format!("/proc/{}/map_files/{:x}-{:x}", by.pid, by.start, by.end).into(),
            Links::Follow,
        ));
        let inside = path.strip_prefix("/").unwrap_or(path);
        candidates.push((
            Path::new(&format!("/proc/{}/root", by.pid)).join(inside),
            Links::Refuse,
        ));
    }
    candidates
}

/// `at`, opened if it is the regular file on the device and inode `file`
/// names.
fn open_mapped(at: &Path, links: Links, file: &MappedFile) -> Option<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let (f, md) = open_regular(at, links).ok()?;
    let dev = md.dev();
    let same = md.ino() == file.ino
        && nix::sys::stat::major(dev) as u32 == file.maj
        && nix::sys::stat::minor(dev) as u32 == file.min;
    same.then_some(f)
}

impl BuildIds {
    /// With `read` instead of [`read_build_id`] (tests hang or slow it).
    pub fn with_reader(read: Box<ReadFn>) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                known: HashMap::new(),
                queue: VecDeque::new(),
                seed_queue: VecDeque::new(),
                queued: HashSet::new(),
                pinned: HashSet::new(),
                reading: HashMap::new(),
                abandoned: HashSet::new(),
                next_reader: 0,
                stats: BuildIdStats::default(),
                stop: false,
            }),
            work: Condvar::new(),
            read,
        });
        let ids = BuildIds { shared };
        let mut state = ids.lock();
        spawn_reader(&ids.shared, &mut state);
        drop(state);
        ids
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The build-id of `file` if it was read; `None` if not (yet), and
    /// then it is queued for a reader. Never waits on a file.
    pub fn lookup(&self, file: &MappedFile) -> Option<BuildId> {
        self.lookup_mapped(file, None)
    }

    /// As [`BuildIds::lookup`], knowing a process that maps the file.
    pub fn lookup_mapped(&self, file: &MappedFile, by: Option<MappedBy>) -> Option<BuildId> {
        let mut state = self.lock();
        if let Some(known) = state.known.get(file) {
            return *known;
        }
        if state.queued.contains(file) {
            return None;
        }
        if state.queue.len() >= MAX_QUEUED || state.abandoned.len() >= MAX_STUCK_READERS {
            state.stats.dropped += 1;
            return None;
        }
        state.queued.insert(file.clone());
        state.queue.push_back((file.clone(), by));
        self.shared.work.notify_one();
        None
    }

    /// Queues the files of maps that no record will ever fill (the maps of
    /// the processes running at start), each once, with a process mapping
    /// it; their answers are kept for good. Past [`MAX_SEEDED`] files the
    /// rest are counted `dropped`. Never waits on a file.
    pub fn seed(&self, maps: impl IntoIterator<Item = (MappedFile, MappedBy)>) {
        let mut state = self.lock();
        for (file, by) in maps {
            if state.pinned.contains(&file) {
                continue;
            }
            if state.pinned.len() >= MAX_SEEDED {
                state.stats.dropped += 1;
                continue;
            }
            state.pinned.insert(file.clone());
            if state.known.contains_key(&file) || !state.queued.insert(file.clone()) {
                continue;
            }
            state.seed_queue.push_back((file, Some(by)));
        }
        self.shared.work.notify_all();
    }

    /// The build-id of `file` if it was read; queues nothing.
    pub fn known(&self, file: &MappedFile) -> Option<BuildId> {
        self.lock().known.get(file).copied().flatten()
    }

    /// Gives up the reads older than [`READ_DEADLINE`] and starts a reader
    /// in place of each (while fewer than [`MAX_STUCK_READERS`] hang). The
    /// drain calls it on every round.
    pub fn check_deadlines(&self, now: Instant) {
        let mut state = self.lock();
        let late: Vec<u64> = state
            .reading
            .iter()
            .filter(|(n, r)| {
                !state.abandoned.contains(n) && now.duration_since(r.since) > READ_DEADLINE
            })
            .map(|(&n, _)| n)
            .collect();
        for n in late {
            let Some(file) = state.reading.get(&n).map(|r| r.file.clone()) else {
                continue;
            };
            static GIVEN_UP: RateLimitedWarning = RateLimitedWarning::per_minute();
            GIVEN_UP.warn(|| {
                format!(
                    "reading the build-id of {} took more than {}s; given up (its records go \
                     without one)",
                    flightrec_config::quoted(&file.path),
                    READ_DEADLINE.as_secs()
                )
            });
            state.abandoned.insert(n);
            state.stats.timed_out += 1;
            remember(&mut state, file, None);
            if state.abandoned.len() < MAX_STUCK_READERS {
                spawn_reader(&self.shared, &mut state);
            }
        }
    }

    pub fn stats(&self) -> BuildIdStats {
        let state = self.lock();
        BuildIdStats {
            queued: (state.queue.len() + state.seed_queue.len()) as u64,
            stuck_readers: state.abandoned.len() as u64,
            ..state.stats
        }
    }

    /// Gives an executable file MMAP2 record without a build-id the
    /// file's build-id, in place, as the kernel writes it (MISC_MMAP_BUILD_ID:
    /// u8 size, 3 reserved bytes, 20 id bytes where maj/min/ino/generation
    /// were; the record keeps its size). `queue`: ask for it when it is not
    /// known yet. Returns whether it did.
    pub fn fill_mmap2(&self, record: &mut [u8], queue: bool) -> bool {
        let Some((file, by)) = mmap2_file(record) else {
            return false;
        };
        let id = if queue {
            self.lookup_mapped(&file, Some(by))
        } else {
            self.known(&file)
        };
        let Some(id) = id else {
            return false;
        };
        let misc_bits = u16::from_le_bytes([record[4], record[5]]) | misc::MMAP_BUILD_ID;
        record[4..6].copy_from_slice(&misc_bits.to_le_bytes());
        let area = &mut record[MMAP2_DEV..MMAP2_DEV + 24];
        area.fill(0);
        area[0] = id.as_bytes().len() as u8;
        area[4..4 + id.as_bytes().len()].copy_from_slice(id.as_bytes());
        true
    }

    /// Fills, from what is known, every MMAP2 record of `records` (whole
    /// records laid end to end) that still lacks a build-id.
    pub fn fill_records(&self, records: &mut [u8]) {
        let mut at = 0;
        while at + 8 <= records.len() {
            let size = usize::from(u16::from_le_bytes([records[at + 6], records[at + 7]]));
            if size < 8 || at + size > records.len() {
                return;
            }
            self.fill_mmap2(&mut records[at..at + size], false);
            at += size;
        }
    }

    /// The build-id a map without one should have, if known now.
    pub fn for_map(&self, map: &MapState) -> Option<BuildId> {
        (map.build_id.is_none() && map.prot & PROT_EXEC != 0 && map.filename.starts_with('/'))
            .then(|| self.known(&MappedFile::of(map)))
            .flatten()
    }
}

use crate::abi::mmap_prot::EXEC as PROT_EXEC;

/// MMAP2 body offsets of the pid and the mapping.
const MMAP2_PID: usize = 8;
const MMAP2_ADDR: usize = 16;
const MMAP2_LEN: usize = 24;

/// The file an executable MMAP2 record without a build-id names, and the
/// process that maps it.
fn mmap2_file(record: &[u8]) -> Option<(MappedFile, MappedBy)> {
    let u16_at = |at: usize| u16::from_le_bytes([record[at], record[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(record[at..at + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().unwrap_or([0; 8]));
    if record.len() <= MMAP2_FILENAME
        || u32_at(0) != record_type::MMAP2
        || u16_at(4) & misc::MMAP_BUILD_ID != 0
        || u32_at(MMAP2_PROT) & PROT_EXEC == 0
    {
        return None;
    }
    let size = usize::from(u16_at(6)).min(record.len());
    let name = &record[MMAP2_FILENAME..size];
    let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
    let path = std::str::from_utf8(name).ok()?;
    if !path.starts_with('/') {
        return None;
    }
    let start = u64_at(MMAP2_ADDR);
    let by = MappedBy {
        pid: u32_at(MMAP2_PID),
        start,
        end: start.saturating_add(u64_at(MMAP2_LEN)),
    };
    let file = MappedFile {
        maj: u32_at(MMAP2_DEV),
        min: u32_at(MMAP2_DEV + 4),
        ino: u64_at(MMAP2_DEV + 8),
        ino_generation: u64_at(MMAP2_DEV + 16),
        path: path.into(),
    };
    Some((file, by))
}

fn remember(state: &mut State, file: MappedFile, id: Option<BuildId>) {
    if state.known.len() >= MAX_CACHED {
        let pinned = &state.pinned;
        state.known.retain(|f, _| pinned.contains(f));
    }
    state.known.entry(file).or_insert(id);
}

/// Starts reader number `state.next_reader`.
fn spawn_reader(shared: &Arc<Shared>, state: &mut State) {
    let n = state.next_reader;
    state.next_reader += 1;
    let shared_in_thread = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("build-id-reader".into())
        .spawn(move || reader_loop(&shared_in_thread, n));
    if let Err(e) = spawned {
        tracing::warn!("cannot start a build-id reader thread: {e}");
    }
}

fn reader_loop(shared: &Shared, n: u64) {
    let lock = || shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    let mut state = lock();
    loop {
        if state.stop || state.abandoned.contains(&n) {
            state.abandoned.remove(&n);
            return;
        }
        // The drain's files first: they fill records as they go by.
        let next = match state.queue.pop_front() {
            Some(next) => Some(next),
            None => state.seed_queue.pop_front(),
        };
        let Some((file, by)) = next else {
            state = shared
                .work
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            continue;
        };
        state.queued.remove(&file);
        state.reading.insert(
            n,
            Reading {
                file: file.clone(),
                since: Instant::now(),
            },
        );
        drop(state);
        let id = (shared.read)(&file, by);
        state = lock();
        state.reading.remove(&n);
        if state.abandoned.contains(&n) {
            // Too late to count, but a late answer is still an answer.
            if let Some(id) = id {
                state.known.insert(file, Some(id));
            }
            continue;
        }
        if id.is_some() {
            state.stats.found += 1;
        } else {
            state.stats.absent += 1;
        }
        remember(&mut state, file, id);
    }
}

impl Drop for BuildIds {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.work.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::sync::mpsc;

    use super::*;
    use crate::tracking::record::{TrackingRecord, build, parse};

    fn own_exe() -> (String, std::fs::Metadata) {
        let path = std::env::current_exe().unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        (path.to_str().unwrap().to_string(), meta)
    }

    fn mapped(path: &str, meta: &std::fs::Metadata) -> MapState {
        MapState {
            start: 0x1000,
            len: 0x2000,
            prot: PROT_EXEC | 1,
            flags: 2,
            maj: nix::sys::stat::major(meta.dev()) as u32,
            min: nix::sys::stat::minor(meta.dev()) as u32,
            ino: meta.ino(),
            filename: path.into(),
            ..MapState::default()
        }
    }

    /// Waits until `ids` answered `n` files.
    fn wait_answers(ids: &BuildIds, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while {
            let s = ids.stats();
            s.found + s.absent + s.timed_out < n
        } {
            assert!(Instant::now() < deadline, "{:?}", ids.stats());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until a reader not given up on is in a read.
    fn wait_reading(ids: &BuildIds) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            {
                let state = ids.lock();
                if state.reading.keys().any(|n| !state.abandoned.contains(n)) {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "no reader took the file");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn an_mmap2_record_of_this_test_binary_gets_its_build_id_once_read() {
        let (path, meta) = own_exe();
        let expected = flightrec_files::elf::build_id(&std::fs::File::open(&path).unwrap());
        let map = mapped(&path, &meta);
        let mut rec = build::mmap2(7, 7, &map, 99);
        let before = rec.len();
        let ids = BuildIds::default();
        // Not known yet: queued, the record goes on without one.
        assert!(!ids.fill_mmap2(&mut rec, true));
        wait_answers(&ids, 1);
        assert!(ids.fill_mmap2(&mut rec, true));
        assert_eq!(rec.len(), before);
        let parsed = parse(&rec).unwrap();
        let TrackingRecord::Mmap { map: got, .. } = parsed.record else {
            panic!("not an mmap: {parsed:?}")
        };
        assert_eq!(
            got.build_id.map(|b| b.as_bytes().to_vec()),
            expected,
            "the id readelf shows"
        );
        assert_eq!(
            (got.start, got.len, &*got.filename),
            (0x1000, 0x2000, path.as_str())
        );
        assert_eq!(parsed.time, 99, "the trailer is untouched");
        // Once filled, a record is left alone; the file was read once.
        assert!(!ids.fill_mmap2(&mut rec, true));
        assert_eq!(ids.stats().found, 1);
        // A capture fills records appended before the answer from the cache.
        let mut late = [
            build::mmap2(7, 7, &map, 100),
            build::comm(7, 7, "x", false, 101),
        ]
        .concat();
        ids.fill_records(&mut late);
        assert!(matches!(
            parse(&late).unwrap().record,
            TrackingRecord::Mmap {
                map: MapState {
                    build_id: Some(_),
                    ..
                },
                ..
            }
        ));
        assert!(ids.for_map(&map).is_some());
    }

    #[test]
    fn a_file_that_is_not_the_mapped_inode_is_not_read() {
        let (path, meta) = own_exe();
        let map = mapped(&path, &meta);
        assert!(read_build_id(&MappedFile::of(&map), None).is_some());
        let other = MapState {
            ino: meta.ino() + 1,
            ..map.clone()
        };
        assert_eq!(read_build_id(&MappedFile::of(&other), None), None);
        // A symlink to the right file is not followed.
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let linked = MapState {
            filename: link.to_str().unwrap().into(),
            ..map
        };
        assert_eq!(read_build_id(&MappedFile::of(&linked), None), None);
        // A FIFO does not block.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let fifo_map = MapState {
            filename: fifo.to_str().unwrap().into(),
            ..MapState::default()
        };
        assert_eq!(read_build_id(&MappedFile::of(&fifo_map), None), None);
    }

    fn file(n: u64) -> MappedFile {
        MappedFile {
            maj: 0,
            min: 0,
            ino: n,
            ino_generation: 0,
            path: format!("/f{n}").into(),
        }
    }

    #[test]
    fn a_read_that_never_returns_is_given_up_and_another_reader_takes_over() {
        // Reads of inode 1 hang until the test ends; the others answer.
        let (release, hang) = mpsc::channel::<()>();
        let hang = Mutex::new(hang);
        let ids = BuildIds::with_reader(Box::new(move |f, _| {
            if f.ino == 1 {
                let _ = hang.lock().unwrap().recv();
            }
            BuildId::new(&[f.ino as u8; 20])
        }));
        assert_eq!(ids.lookup(&file(1)), None);
        wait_reading(&ids);
        assert_eq!(ids.lookup(&file(2)), None);
        // The one reader hangs on file 1: file 2 waits.
        assert_eq!(ids.stats().queued, 1);
        // Lookups never wait, whatever the readers do.
        let asked = Instant::now();
        assert_eq!(ids.lookup(&file(3)), None);
        assert!(asked.elapsed() < Duration::from_millis(100));
        // Past the deadline: given up, and a new reader reads 2 and 3.
        ids.check_deadlines(Instant::now() + READ_DEADLINE + Duration::from_millis(1));
        wait_answers(&ids, 3);
        let s = ids.stats();
        assert_eq!((s.timed_out, s.found, s.stuck_readers), (1, 2, 1), "{s:?}");
        assert_eq!(ids.lookup(&file(1)), None, "given up: no build-id");
        assert_eq!(ids.lookup(&file(3)), BuildId::new(&[3; 20]));
        drop(release);
    }

    #[test]
    fn too_many_stuck_readers_stop_the_reading_but_never_the_caller() {
        let (release, hang) = mpsc::channel::<()>();
        let hang = Mutex::new(hang);
        let ids = BuildIds::with_reader(Box::new(move |_, _| {
            let _ = hang.lock().unwrap().recv();
            None
        }));
        for n in 0..MAX_STUCK_READERS as u64 {
            assert_eq!(ids.lookup(&file(n)), None);
            wait_reading(&ids);
            ids.check_deadlines(Instant::now() + READ_DEADLINE + Duration::from_millis(1));
        }
        let s = ids.stats();
        assert_eq!(s.stuck_readers, MAX_STUCK_READERS as u64, "{s:?}");
        assert_eq!(ids.lookup(&file(100)), None);
        assert_eq!(ids.stats().dropped, 1);
        drop(release);
    }

    /// The first executable mapping of this process's own binary, from
    /// /proc/self/maps: `(start, end)`.
    fn own_exec_mapping(path: &str) -> (u64, u64) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .find(|l| {
                l.ends_with(path) && l.split_whitespace().nth(1).is_some_and(|p| p.contains('x'))
            })
            .and_then(|l| {
                let (s, e) = l.split_whitespace().next()?.split_once('-')?;
                Some((
                    u64::from_str_radix(s, 16).ok()?,
                    u64::from_str_radix(e, 16).ok()?,
                ))
            })
            .expect("this test binary is mapped executable")
    }

    #[test]
    fn a_file_whose_path_means_another_file_here_is_read_through_the_process() {
        // As for a process in another mount namespace: the path it names
        // is not the mapped inode on the host.
        let (path, meta) = own_exe();
        let expected = read_build_id(&MappedFile::of(&mapped(&path, &meta)), None);
        assert!(expected.is_some());
        let elsewhere = MappedFile {
            path: "/flightrec-test/not/here".into(),
            ..MappedFile::of(&mapped(&path, &meta))
        };
        assert_eq!(read_build_id(&elsewhere, None), None);
        let (start, end) = own_exec_mapping(&path);
        let by = MappedBy {
            pid: std::process::id(),
            start,
            end,
        };
        if nix::unistd::geteuid().is_root() {
            // /proc/self/map_files needs CAP_SYS_ADMIN.
            assert_eq!(read_build_id(&elsewhere, Some(by)), expected);
        }
        // Through the process's root: the same path, the same inode.
        let inside = MappedFile::of(&mapped(&path, &meta));
        let wrong_range = MappedBy {
            start: 1,
            end: 2,
            ..by
        };
        assert_eq!(read_build_id(&inside, Some(wrong_range)), expected);
        // A map range that holds another file is not taken for it.
        let other_inode = MappedFile {
            ino: meta.ino() + 1,
            ..elsewhere
        };
        assert_eq!(read_build_id(&other_inode, Some(by)), None);
    }

    #[test]
    fn seeded_files_are_read_once_and_their_answers_outlive_the_cache() {
        let ids = BuildIds::with_reader(Box::new(|f, _| BuildId::new(&[f.ino as u8; 20])));
        let by = MappedBy {
            pid: 7,
            start: 0x1000,
            end: 0x2000,
        };
        // Two processes mapping the same two files: two reads.
        ids.seed([(file(1), by), (file(2), by), (file(1), by), (file(2), by)]);
        wait_answers(&ids, 2);
        assert_eq!(ids.stats().found, 2);
        assert_eq!(ids.known(&file(1)), BuildId::new(&[1; 20]));
        // Far more files than the cache keeps come and go...
        for i in 0..MAX_CACHED as u64 + 10 {
            ids.lookup(&file(1_000_000 + i));
            if i % 512 == 511 {
                wait_answers(&ids, i + 3);
            }
        }
        wait_answers(&ids, MAX_CACHED as u64 + 12);
        // ...and the seeded answers are still there (no record will ask
        // again for those maps).
        assert_eq!(ids.known(&file(1)), BuildId::new(&[1; 20]));
        assert_eq!(ids.known(&file(2)), BuildId::new(&[2; 20]));
        assert_eq!(ids.known(&file(1_000_000)), None, "the cache started over");
    }

    #[test]
    fn the_seed_is_bounded_and_waits_behind_the_drains_files() {
        let (release, hang) = mpsc::channel::<()>();
        let hang = Mutex::new(Some(hang));
        let order = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&order);
        let ids = BuildIds::with_reader(Box::new(move |f, _| {
            if f.ino == 0 {
                // The first read waits until both queues are filled.
                if let Some(h) = hang.lock().unwrap().take() {
                    let _ = h.recv();
                }
            }
            seen.lock().unwrap().push(f.ino);
            None
        }));
        let by = MappedBy {
            pid: 1,
            start: 0,
            end: 1,
        };
        ids.lookup(&file(0));
        wait_reading(&ids);
        ids.seed((10..10 + MAX_SEEDED as u64 + 5).map(|n| (file(n), by)));
        assert_eq!(ids.stats().dropped, 5);
        ids.lookup(&file(1));
        drop(release);
        wait_answers(&ids, MAX_SEEDED as u64 + 2);
        let order = order.lock().unwrap();
        assert_eq!(&order[..3], &[0, 1, 10], "the drain's file before the seed");
    }
}
