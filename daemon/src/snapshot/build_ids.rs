//! The BUILD_ID table of a snapshot: which files `perf report` and
//! `snapctl archive` need, with the build-id each was mapped with.
//!
//! Gathered as the data section is written (the state at the window's
//! start, then every MMAP2 among the tracking records), and cut at the end
//! to the processes that have samples: the table names what the samples
//! need, not every library of every idle process. Memory grows with the
//! distinct files and the processes mapping them, never with the records.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::features::BuildIdEntry;
use crate::host::HostInfo;
use crate::tracking::modules::LoadedModule;
use crate::tracking::record::{TrackingRecord, parse};
use crate::tracking::state::{BuildId, MapState, ProcessState};

/// Executable files with a build-id, and which processes mapped each.
#[derive(Debug, Default)]
pub struct BuildIdTable {
    /// Keyed by the maps' own names (shared, not copied per map).
    files: BTreeMap<(Arc<str>, BuildId), BTreeSet<u32>>,
}

impl BuildIdTable {
    fn add(&mut self, pid: u32, map: &MapState) {
        if let Some(id) = map.build_id
            && map.prot & crate::abi::mmap_prot::EXEC != 0
            && map.filename.starts_with('/')
        {
            self.files
                .entry((Arc::clone(&map.filename), id))
                .or_default()
                .insert(pid);
        }
    }

    /// The maps of every process at the window's start.
    pub fn add_processes(&mut self, processes: &[ProcessState]) {
        for p in processes {
            for map in &p.maps {
                self.add(p.pid, map);
            }
        }
    }

    /// The MMAP2 records among `tracking_records`.
    pub fn add_tracking(&mut self, tracking_records: &[u8]) {
        for (_, record) in crate::ring::records(tracking_records).map_while(Result::ok) {
            if let Some(parsed) = parse(record)
                && let TrackingRecord::Mmap { pid, map, .. } = parsed.record
            {
                self.add(pid, &map);
            }
        }
    }

    /// HEADER_BUILD_ID entries: the kernel's and its modules' (those of
    /// the start and `loaded` later), then the files mapped by the
    /// processes that have samples (`sampled`; None: every process).
    pub fn entries(
        &self,
        host: &HostInfo,
        loaded: &[LoadedModule],
        sampled: Option<&BTreeSet<u32>>,
    ) -> Vec<BuildIdEntry> {
        let mut out = Vec::new();
        if let Some(id) = &host.kernel_build_id {
            out.push(BuildIdEntry {
                misc: crate::abi::misc::KERNEL,
                build_id: id.clone(),
                filename: "[kernel.kallsyms]".into(),
            });
        }
        for m in host.modules.iter().chain(loaded.iter().map(|l| &l.module)) {
            if let Some(id) = &m.build_id
                && !out
                    .iter()
                    .any(|e| e.filename == m.path && e.build_id == *id)
            {
                out.push(BuildIdEntry {
                    misc: crate::abi::misc::KERNEL,
                    build_id: id.clone(),
                    filename: m.path.clone(),
                });
            }
        }
        for ((filename, id), pids) in &self.files {
            if sampled.is_none_or(|s| pids.iter().any(|p| s.contains(p))) {
                out.push(BuildIdEntry {
                    misc: crate::abi::misc::USER,
                    build_id: id.as_bytes().to_vec(),
                    filename: filename.to_string(),
                });
            }
        }
        out
    }
}
