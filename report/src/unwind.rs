//! User stacks of `callchain = "dwarf"` samples, unwound after the fact
//! (`flightrec_unwind`) from the unwind tables of the files the snapshot
//! names by build-id, found and checked as symbols' are
//! ([`crate::symbols::find_binary`]).

use flightrec_unwind::{Limits, MapView, TableSource, UnwindTables};

use crate::model::MapInfo;
use crate::symbols::SymbolSources;

/// What a snapshot's unwinding may read and keep: a snapshot is read
/// once, by a user who asked for it.
const LIMITS: Limits = Limits {
    max_section_bytes: 256 << 20,
    max_text_bytes: 256 << 20,
    max_cached_bytes: usize::MAX,
    max_modules: 100_000,
};

/// A live map of a process, as the loader keeps it.
#[derive(Debug, Clone, Copy)]
pub struct LiveMapView {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    /// Index into `Snapshot::maps`.
    pub map: usize,
}

/// Files by build-id, as symbols find them.
struct SnapshotFiles(SymbolSources);

impl TableSource for SnapshotFiles {
    fn tables(&mut self, pid: i32, map: &MapView<'_>, limits: &Limits) -> Option<UnwindTables> {
        let pid = u32::try_from(pid).ok();
        let file = crate::symbols::find_binary(map.path, map.build_id, pid, &self.0)?;
        UnwindTables::read(&file, limits)
    }
}

/// Unwinds the user stacks of one snapshot's samples.
pub struct Unwinding(flightrec_unwind::Unwinding<SnapshotFiles>);

impl Unwinding {
    pub fn new(sources: &SymbolSources) -> Self {
        Unwinding(flightrec_unwind::Unwinding::new(
            SnapshotFiles(sources.clone()),
            LIMITS,
        ))
    }

    /// Process `pid` mapped something: its unwinder is made again.
    pub fn forget(&mut self, pid: i32) {
        self.0.forget(pid as u64);
    }

    /// The user frames of a sample of `pid` (leaf first), from its
    /// registers and the first `dyn_size` bytes of `stack`; `maps` are the
    /// process's maps of the moment.
    pub fn unwind(
        &mut self,
        pid: i32,
        reg: impl Fn(u64) -> Option<u64>,
        stack: &[u8],
        dyn_size: u64,
        maps: &[LiveMapView],
        all_maps: &[MapInfo],
    ) -> Option<Vec<u64>> {
        self.0.unwind(pid as u64, pid, reg, stack, dyn_size, || {
            maps.iter()
                .filter_map(|view| {
                    let info = all_maps.get(view.map)?;
                    Some(MapView {
                        start: view.start,
                        end: view.end,
                        pgoff: view.pgoff,
                        path: &info.path,
                        build_id: info.build_id.as_deref()?,
                        tag: view.map,
                    })
                })
                .collect()
        })
    }
}
