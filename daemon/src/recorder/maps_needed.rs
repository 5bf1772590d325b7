//! Which processes' maps a snapshot carries: those with samples in the
//! window, and the ancestors that forked them inside it (perf gives a forked
//! child a copy of its parent's maps). Synthesizing the maps of the others
//! would only amplify the snapshot: thousands of idle processes with
//! thousands of maps each.

use std::collections::HashSet;

use super::CpuCapture;
use crate::abi::layout::RecordLayouts;
use crate::tracking::maps::Maps;
use crate::tracking::record::{TrackingRecord, parse};
use crate::tracking::state::ProcessState;

/// The processes whose maps a snapshot needs.
pub fn processes_needing_maps(
    cpus: &[CpuCapture],
    layouts: &RecordLayouts,
    tracking_records: &[u8],
) -> HashSet<u32> {
    let mut needed: HashSet<u32> = cpus
        .iter()
        .flat_map(|c| crate::ring::records(&c.records).map_while(Result::ok))
        .filter_map(|(_, r)| layouts.sample_pid(r))
        .collect();
    let forks: Vec<(u32, u32)> = crate::ring::records(tracking_records)
        .map_while(Result::ok)
        .filter_map(|(_, r)| match parse(r)?.record {
            TrackingRecord::Fork { pid, ppid, .. } if pid != ppid => Some((pid, ppid)),
            _ => None,
        })
        .collect();
    // Newest first, so a chain of forks inside the window reaches its root.
    for &(pid, ppid) in forks.iter().rev() {
        if needed.contains(&pid) {
            needed.insert(ppid);
        }
    }
    needed
}

/// Empties the maps of the processes not in `needed` (COMM stays for all).
pub fn keep_maps_of(processes: &mut [ProcessState], needed: &HashSet<u32>) {
    for p in processes {
        if !needed.contains(&p.pid) {
            p.maps = Maps::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: u64, time: u64) -> Vec<u8> {
        // identifier, tid, time, cpu
        crate::abi::test_records::with_words(crate::abi::record_type::SAMPLE, &[id, 1, time, 0])
    }

    #[test]
    fn maps_are_kept_for_sampled_processes_and_the_ancestors_that_forked_them() {
        use crate::abi::sample;
        use crate::tracking::record::build;
        let mut layouts = RecordLayouts::default();
        layouts.insert(
            5,
            sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU,
        );
        // identifier, pid/tid, time, cpu: samples of pids 30 and 40.
        let sample_of = |pid: u64| {
            let mut r = sample(5, 100);
            r[16..24].copy_from_slice(&(pid | (pid << 32)).to_le_bytes());
            r
        };
        let cpus = vec![CpuCapture {
            records: [sample_of(30), sample_of(40)].concat(),
            ..CpuCapture::default()
        }];
        // 10 forks 20 forks 30 in the window; 50 forks 60 (no samples);
        // 40 spawns a thread (pid == ppid).
        let tracking = [
            build::fork(20, 10, 20, 10, 1),
            build::fork(30, 20, 30, 20, 2),
            build::fork(60, 50, 60, 50, 3),
            build::fork(40, 40, 41, 40, 4),
        ]
        .concat();
        let needed = processes_needing_maps(&cpus, &layouts, &tracking);
        let mut got: Vec<u32> = needed.iter().copied().collect();
        got.sort_unstable();
        assert_eq!(got, vec![10, 20, 30, 40]);

        let map = crate::tracking::state::MapState {
            start: 0x1000,
            len: 0x1000,
            filename: "/x".into(),
            ..Default::default()
        };
        let state = |pid: u32| ProcessState {
            pid,
            tid: pid,
            comm: format!("p{pid}"),
            maps: vec![map.clone()].into(),
            ..ProcessState::default()
        };
        let mut processes = vec![state(10), state(50), state(40)];
        keep_maps_of(&mut processes, &needed);
        let kept: Vec<(u32, usize)> = processes.iter().map(|p| (p.pid, p.maps.len())).collect();
        assert_eq!(kept, vec![(10, 1), (50, 0), (40, 1)]);
        assert_eq!(processes[1].comm, "p50", "COMM stays for all");
    }
}
