//! The BUILD_ID table of a snapshot: which files `perf report` and
//! `snapctl archive` need, with the build-id each was mapped with.

use std::collections::BTreeSet;

use super::features::BuildIdEntry;
use crate::host::HostInfo;
use crate::recorder::Capture;
use crate::tracking::record::{TrackingRecord, parse};
use crate::tracking::state::{BuildId, MapState};

/// HEADER_BUILD_ID entries: the kernel's, and the executable files mapped
/// by the processes that have samples (`sampled_pids`; `None`: every
/// process), at the window's start or during it, whose build-id is known.
pub fn build_id_entries(
    capture: &Capture,
    tracking_records: &[u8],
    host: &HostInfo,
    sampled_pids: Option<&BTreeSet<u32>>,
) -> Vec<BuildIdEntry> {
    let mut out = Vec::new();
    if let Some(id) = &host.kernel_build_id {
        out.push(BuildIdEntry {
            misc: crate::abi::misc::KERNEL,
            build_id: id.clone(),
            filename: "[kernel.kallsyms]".into(),
        });
    }
    let loaded = capture.loaded_modules.iter().map(|l| &l.module);
    for m in host.modules.iter().chain(loaded) {
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
    let sampled = |pid: u32| sampled_pids.is_none_or(|s| s.contains(&pid));
    let mut all: BTreeSet<(String, BuildId)> = BTreeSet::new();
    let mut add = |map: &MapState| {
        if let Some(id) = map.build_id
            && map.prot & crate::abi::mmap_prot::EXEC != 0
            && map.filename.starts_with('/')
        {
            all.insert((map.filename.to_string(), id));
        }
    };
    for p in capture.processes.iter().filter(|p| sampled(p.pid)) {
        p.maps.iter().for_each(&mut add);
    }
    for (_, record) in crate::ring::records(tracking_records).map_while(Result::ok) {
        if let Some(parsed) = parse(record)
            && let TrackingRecord::Mmap { pid, map, .. } = parsed.record
            && sampled(pid)
        {
            add(&map);
        }
    }
    out.extend(all.into_iter().map(|(filename, id)| BuildIdEntry {
        misc: crate::abi::misc::USER,
        build_id: id.as_bytes().to_vec(),
        filename,
    }));
    out
}
