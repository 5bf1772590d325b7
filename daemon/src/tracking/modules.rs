//! Kernel modules loaded after the daemon started.
//!
//! The kernel writes no tracking record for a module load (perf itself only
//! synthesizes module maps when it starts), so without this a snapshot's
//! samples in a module loaded later resolve to nothing. The drain thread
//! re-reads /proc/modules at most once per [`POLL_INTERVAL`] and turns each
//! module that appeared into the MMAP record perf synthesizes for modules
//! (the same record a snapshot carries for the modules of the start),
//! appended to the tracking log like a kernel record.
//!
//! Why polling and not the `module:module_load` tracepoint: the tracepoint
//! needs one more event per CPU, and a drain round to read it anyway, to save
//! a read of a few KiB once a second; a kernel without module support (this
//! project's CI VM) has neither the tracepoint nor /proc/modules, and there
//! the watch stops at the first failed read and costs nothing after.
//!
//! A load is seen up to one interval late, so its record is dated at the
//! previous read (the last moment it was surely absent): samples taken in
//! the module right after it was loaded resolve too. Unloads are noted in
//! the daemon's log only: a stale map is what perf keeps for start-time
//! modules as well, and a later load at the same address replaces it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::abi::EventAttr;
use crate::host::{KernelModule, PROC_MODULES, describe_modules, parse_proc_modules};
use flightrec_perfdata::encode::{SampleId, push_module_mmap};

/// How often /proc/modules is re-read at most.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// `(name, size, address)`, as [`parse_proc_modules`] returns them.
pub type ProcModule = (String, u64, u64);

/// What changed between two readings of /proc/modules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleChanges {
    /// Modules in the second reading with no identical entry (name, size,
    /// address) in the first: new, or reloaded elsewhere.
    pub loaded: Vec<ProcModule>,
    /// Names of the first reading's modules with no identical entry in the
    /// second.
    pub unloaded: Vec<String>,
}

/// The modules loaded and unloaded between readings `before` and `after`.
pub fn module_changes(before: &[ProcModule], after: &[ProcModule]) -> ModuleChanges {
    ModuleChanges {
        loaded: after
            .iter()
            .filter(|m| !before.contains(m))
            .cloned()
            .collect(),
        unloaded: before
            .iter()
            .filter(|m| !after.contains(m))
            .map(|(name, _, _)| name.clone())
            .collect(),
    }
}

/// A module found loaded after start, with the time its MMAP record carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedModule {
    pub module: KernelModule,
    /// Sample-clock ns of its tracking record.
    pub time_ns: u64,
}

/// Modules of `loaded` a window starting at `window_start_ns` still needs:
/// drops each load that a later load of the same name replaced before the
/// window began (its map is no longer the module's).
pub fn prune_replaced(loaded: &mut Vec<LoadedModule>, window_start_ns: u64) {
    let replaced = |i: usize, l: &LoadedModule| {
        loaded[i + 1..]
            .iter()
            .any(|n| n.module.name == l.module.name && n.time_ns < window_start_ns)
    };
    let keep: Vec<bool> = loaded
        .iter()
        .enumerate()
        .map(|(i, l)| !replaced(i, l))
        .collect();
    let mut keep = keep.into_iter();
    loaded.retain(|_| keep.next().unwrap_or(true));
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchState {
    Polling,
    /// The file could not be read: no module support, or not allowed; both
    /// last as long as the kernel runs, so it is not read again.
    Stopped,
}

/// Re-reads /proc/modules and makes MMAP records of the modules it finds
/// new. Owned by the tracking drain (under its lock).
pub struct ModuleWatch {
    source: PathBuf,
    known: Vec<ProcModule>,
    loaded: Vec<LoadedModule>,
    last_poll: Instant,
    last_poll_ns: u64,
    state: WatchState,
    attr: EventAttr,
    event_id: u64,
}

impl ModuleWatch {
    /// A watch of /proc/modules whose previous reading was `known` (the
    /// modules a snapshot already describes), taken at `since_ns`; records
    /// are written for the tracking event `attr` whose id is `event_id`.
    pub fn new(known: &[KernelModule], since_ns: u64, attr: EventAttr, event_id: u64) -> Self {
        Self::reading(PROC_MODULES.into(), known, since_ns, attr, event_id)
    }

    /// As [`ModuleWatch::new`], reading `source` instead of /proc/modules.
    pub fn reading(
        source: PathBuf,
        known: &[KernelModule],
        since_ns: u64,
        attr: EventAttr,
        event_id: u64,
    ) -> Self {
        Self {
            source,
            known: known
                .iter()
                .map(|m| (m.name.clone(), m.size, m.start))
                .collect(),
            loaded: Vec::new(),
            last_poll: Instant::now(),
            last_poll_ns: since_ns,
            state: WatchState::Polling,
            attr,
            event_id,
        }
    }

    /// Modules found loaded since start, oldest first.
    pub fn loaded(&self) -> &[LoadedModule] {
        &self.loaded
    }

    /// Whether the watch still reads its file.
    pub fn is_polling(&self) -> bool {
        self.state == WatchState::Polling
    }

    /// No window will start before `window_start_ns` again.
    pub fn prune(&mut self, window_start_ns: u64) {
        prune_replaced(&mut self.loaded, window_start_ns);
    }

    /// Re-reads the file if [`POLL_INTERVAL`] has passed since the last
    /// read (`now`, `now_ns`: the monotonic and sample clocks now) and
    /// appends an MMAP record to `out` for each module that appeared.
    /// Returns how many it appended.
    pub fn poll(&mut self, now: Instant, now_ns: u64, out: &mut Vec<u8>) -> usize {
        if self.state != WatchState::Polling || now.duration_since(self.last_poll) < POLL_INTERVAL {
            return 0;
        }
        let text = match std::fs::read_to_string(&self.source) {
            Ok(text) => text,
            Err(e) => {
                self.state = WatchState::Stopped;
                if e.kind() == std::io::ErrorKind::NotFound {
                    tracing::debug!(
                        "{} is absent (no module support): modules are not watched",
                        self.source.display()
                    );
                } else {
                    tracing::warn!(
                        "reading {} failed ({e}): modules loaded from now on get no MMAP record",
                        self.source.display()
                    );
                }
                return 0;
            }
        };
        let since_ns = self.last_poll_ns;
        self.last_poll = now;
        self.last_poll_ns = now_ns;
        let now_known = parse_proc_modules(&text);
        let changes = module_changes(&self.known, &now_known);
        self.known = now_known;
        for name in &changes.unloaded {
            tracing::info!(module = %name, "kernel module unloaded");
        }
        let mut appended = 0;
        for module in describe_modules(changes.loaded) {
            let id = SampleId {
                pid: u32::MAX,
                tid: 0,
                time: since_ns,
                id: self.event_id,
                cpu: 0,
            };
            push_module_mmap(
                out,
                &self.attr,
                module.start,
                module.size,
                &module.path,
                &id,
            );
            tracing::info!(
                module = %module.name,
                path = %module.path,
                build_id = module.build_id.is_some(),
                "kernel module loaded: MMAP record added to the tracking log"
            );
            self.loaded.push(LoadedModule {
                module,
                time_ns: since_ns,
            });
            appended += 1;
        }
        appended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::bare_modules;
    use crate::perf::tracking_ring::{TrackingOptions, tracking_attr};
    use crate::tracking::record::{TrackingRecord, parse};

    const BEFORE: &str = "\
ext4 1200128 1 - Live 0xffffffffc0a00000
crc16 16384 1 ext4, Live 0xffffffffc0900000
";
    const AFTER: &str = "\
fr_watch_test 348160 0 - Live 0xffffffffc0b00000
ext4 1200128 1 - Live 0xffffffffc0a00000
loop 36864 0 - Loading 0xffffffffc0c00000
";

    fn module(name: &str, start: u64) -> LoadedModule {
        LoadedModule {
            module: KernelModule {
                name: name.into(),
                start,
                size: 4096,
                path: format!("[{name}]"),
                build_id: None,
            },
            time_ns: 0,
        }
    }

    #[test]
    fn changes_name_the_modules_loaded_and_unloaded() {
        let changes = module_changes(&parse_proc_modules(BEFORE), &parse_proc_modules(AFTER));
        assert_eq!(
            changes,
            ModuleChanges {
                loaded: vec![("fr_watch_test".into(), 348_160, 0xffff_ffff_c0b0_0000)],
                unloaded: vec!["crc16".into()],
            },
            "a module still loading has no final map yet: not loaded"
        );
        // Reloaded elsewhere: both an unload and a load.
        let moved = module_changes(
            &parse_proc_modules(BEFORE),
            &parse_proc_modules(&BEFORE.replace("c0a00000", "c0d00000")),
        );
        assert_eq!(
            moved.loaded,
            vec![("ext4".into(), 1_200_128, 0xffff_ffff_c0d0_0000)]
        );
        assert_eq!(moved.unloaded, vec!["ext4".to_string()]);
        assert_eq!(
            module_changes(&parse_proc_modules(AFTER), &parse_proc_modules(AFTER)),
            ModuleChanges::default()
        );
    }

    #[test]
    fn a_load_replaced_before_the_window_is_pruned() {
        let mut loaded = vec![
            LoadedModule {
                time_ns: 10,
                ..module("a", 0x1000)
            },
            LoadedModule {
                time_ns: 20,
                ..module("b", 0x2000)
            },
            LoadedModule {
                time_ns: 30,
                ..module("a", 0x3000)
            },
        ];
        prune_replaced(&mut loaded, 30);
        assert_eq!(loaded.len(), 3, "the reload at 30 is not before 30");
        prune_replaced(&mut loaded, 31);
        let kept: Vec<(String, u64)> = loaded
            .iter()
            .map(|l| (l.module.name.clone(), l.module.start))
            .collect();
        assert_eq!(kept, vec![("b".into(), 0x2000), ("a".into(), 0x3000)]);
    }

    #[test]
    fn a_module_appearing_in_the_file_becomes_an_mmap_record_dated_at_the_previous_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("modules");
        std::fs::write(&file, BEFORE).unwrap();
        let known = bare_modules(BEFORE);
        let attr = tracking_attr(4096, TrackingOptions::default());
        let mut watch = ModuleWatch::reading(file.clone(), &known, 1_000, attr, 77);
        let t0 = Instant::now();
        let mut out = Vec::new();
        assert_eq!(watch.poll(t0, 2_000, &mut out), 0, "within the interval");
        assert_eq!(watch.poll(t0 + POLL_INTERVAL, 2_000, &mut out), 0);
        assert!(out.is_empty(), "nothing new");

        std::fs::write(&file, AFTER).unwrap();
        let n = watch.poll(t0 + 2 * POLL_INTERVAL, 3_000, &mut out);
        assert_eq!(n, 1);
        let parsed = parse(&out).expect("a tracking record");
        assert_eq!(parsed.time, 2_000, "dated at the read that did not see it");
        let TrackingRecord::Mmap { pid, map, .. } = parsed.record else {
            panic!("not an MMAP: {parsed:?}");
        };
        assert_eq!(pid, u32::MAX);
        assert_eq!(
            (map.start, map.len, &*map.filename),
            (0xffff_ffff_c0b0_0000, 348_160, "[fr_watch_test]")
        );
        assert_eq!(crate::abi::get_u64(&out, out.len() - 8), 77, "event id");
        assert_eq!(watch.loaded().len(), 1);
        assert_eq!(watch.loaded()[0].time_ns, 2_000);

        // Gone: the watch stops reading and stays quiet.
        std::fs::remove_file(&file).unwrap();
        out.clear();
        assert_eq!(watch.poll(t0 + 3 * POLL_INTERVAL, 4_000, &mut out), 0);
        assert!(!watch.is_polling());
        std::fs::write(
            &file,
            format!("{AFTER}new 4096 0 - Live 0xffffffffc0e00000\n"),
        )
        .unwrap();
        assert_eq!(watch.poll(t0 + 4 * POLL_INTERVAL, 5_000, &mut out), 0);
        assert!(out.is_empty());
    }
}
