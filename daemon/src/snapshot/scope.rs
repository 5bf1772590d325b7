//! A snapshot of part of the machine (a service, a container, a pod):
//! which records it keeps, pure.
//!
//! Kept: the samples of its cgroups; the scheduler switches its tasks
//! appear in on either side, the other side's name, pid and stack left out
//! (a switch record is written for the task switched out: one out of scope
//! loses its call chain and its pid and tid become -1); the tracking
//! records of its processes and the CGROUP records of its cgroups.
//! Nothing of another container's stacks or names.

use std::collections::HashSet;

use crate::abi::layout::{RecordLayouts, SampleLayout};
use crate::abi::{HEADER_SIZE, RecordHeader, get_u32, record_type};
use crate::tracking::record::{TrackingRecord, parse};

/// What `perf script` shows for a task left out of a scope.
const LEFT_OUT_COMM: &[u8] = b"[other]";

/// Where the fields of `sched:sched_switch` are in its raw data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchFields {
    pub prev_comm: (usize, usize),
    pub prev_pid: (usize, usize),
    pub next_comm: (usize, usize),
    pub next_pid: (usize, usize),
}

/// What a scope holds, resolved: its cgroups and the processes seen in
/// them.
#[derive(Debug, Clone, Default)]
pub struct ScopeFilter {
    pub cgroups: HashSet<u64>,
    pub pids: HashSet<u32>,
    /// The ids of the `sched:sched_switch` event, and its fields.
    pub switch_ids: HashSet<u64>,
    pub switch: Option<SwitchFields>,
}

/// What becomes of one record.
#[derive(Debug, PartialEq, Eq)]
pub enum Kept {
    Whole,
    Rewritten(Vec<u8>),
    Dropped,
}

impl ScopeFilter {
    /// Adds the pid of every sample of `records` in one of the scope's
    /// cgroups.
    pub fn collect_pids(&mut self, records: &[u8], layouts: &RecordLayouts) {
        for (_, record) in crate::ring::records(records).map_while(Result::ok) {
            if let Some(layout) = layouts.layout(record)
                && layout
                    .sample_cgroup(record)
                    .is_some_and(|c| self.cgroups.contains(&c))
                && let Some(pid) = layout.sample_pid(record)
            {
                self.pids.insert(pid);
            }
        }
    }

    /// [`ScopeFilter::collect_pids`] over every CPU of a capture.
    pub fn collect_pids_of_ring(&mut self, capture: &crate::recorder::Capture) {
        let layouts = capture.layouts();
        for cpu in &capture.cpus {
            self.collect_pids(&cpu.records, &layouts);
        }
    }

    /// What becomes of a record of a sample ring.
    pub fn sample(&self, record: &[u8], layouts: &RecordLayouts) -> Kept {
        let Some(header) = RecordHeader::parse(record) else {
            return Kept::Dropped;
        };
        if header.type_ != record_type::SAMPLE {
            // LOST records: a CPU's losses, no one's name.
            return Kept::Whole;
        }
        let id = RecordLayouts::identifier(record);
        let Some(layout) = id.and_then(|id| layouts.by_id(id)) else {
            return Kept::Dropped;
        };
        let inside = layout
            .sample_cgroup(record)
            .is_some_and(|c| self.cgroups.contains(&c));
        let is_switch = id.is_some_and(|id| self.switch_ids.contains(&id));
        match (inside, is_switch, self.switch) {
            (true, false, _) => Kept::Whole,
            (true, true, Some(f)) => match self.raw_pid(record, &layout, f.next_pid) {
                Some(next) if !self.pids.contains(&next) => {
                    let mut r = record.to_vec();
                    self.left_out(&mut r, &layout, f.next_comm, f.next_pid);
                    Kept::Rewritten(r)
                }
                _ => Kept::Whole,
            },
            (false, true, Some(f)) => match self.raw_pid(record, &layout, f.next_pid) {
                Some(next) if self.pids.contains(&next) => {
                    Kept::Rewritten(self.switched_out_of_scope(record, &layout, f))
                }
                _ => Kept::Dropped,
            },
            (true, true, None) => Kept::Whole,
            (false, _, _) => Kept::Dropped,
        }
    }

    /// Whether a tracking record belongs in the scope: those of its
    /// processes and cgroups, and what no process owns (kernel modules).
    pub fn tracking(&self, record: &[u8]) -> bool {
        let Some(parsed) = parse(record) else {
            return false;
        };
        match parsed.record {
            TrackingRecord::Comm { pid, .. }
            | TrackingRecord::Exit { pid, .. }
            | TrackingRecord::Mmap { pid, .. } => pid == u32::MAX || self.pids.contains(&pid),
            TrackingRecord::Fork { pid, .. } => self.pids.contains(&pid),
            TrackingRecord::Cgroup { id, .. } => self.cgroups.contains(&id),
            TrackingRecord::Lost { .. } | TrackingRecord::Other { .. } => true,
        }
    }

    fn raw_pid(
        &self,
        record: &[u8],
        layout: &SampleLayout,
        (off, size): (usize, usize),
    ) -> Option<u32> {
        let (raw, len) = layout.callchain_and_raw(record)?.raw?;
        (size == 4 && off + 4 <= len).then(|| get_u32(record, raw + off))
    }

    /// Blanks a comm and sets a pid to -1 in a switch's raw data.
    fn left_out(
        &self,
        record: &mut [u8],
        layout: &SampleLayout,
        comm: (usize, usize),
        pid: (usize, usize),
    ) {
        let Some((raw, len)) = layout.callchain_and_raw(record).and_then(|f| f.raw) else {
            return;
        };
        if comm.0 + comm.1 <= len {
            let field = &mut record[raw + comm.0..raw + comm.0 + comm.1];
            field.fill(0);
            let n = LEFT_OUT_COMM.len().min(field.len().saturating_sub(1));
            field[..n].copy_from_slice(&LEFT_OUT_COMM[..n]);
        }
        if pid.1 == 4 && pid.0 + 4 <= len {
            record[raw + pid.0..raw + pid.0 + 4].copy_from_slice(&(-1i32).to_le_bytes());
        }
    }

    /// A switch from a task out of the scope to one in it: the record
    /// without the call chain of the task switched out, its pid and tid
    /// -1, its name and pid blanked in the raw data.
    fn switched_out_of_scope(
        &self,
        record: &[u8],
        layout: &SampleLayout,
        f: SwitchFields,
    ) -> Vec<u8> {
        let mut r = match layout.callchain_and_raw(record).and_then(|s| s.callchain) {
            Some((at, nr)) if nr > 0 => {
                let mut r = Vec::with_capacity(record.len() - nr * 8);
                r.extend_from_slice(&record[..at]);
                r.extend_from_slice(&0u64.to_le_bytes());
                r.extend_from_slice(&record[at + 8 + nr * 8..]);
                let size = u16::try_from(r.len()).unwrap_or(u16::MAX);
                r[6..8].copy_from_slice(&size.to_le_bytes());
                r
            }
            _ => record.to_vec(),
        };
        // Nor its user registers and stack copy (a dwarf call chain's): the
        // sizes stay, the bytes are zeroed and the stack said empty.
        if let Some(fields) = layout.callchain_and_raw(&r) {
            if let Some((at, n)) = fields.user_regs {
                r[at..at + 8 * n].fill(0);
            }
            if let Some((at, len)) = fields.user_stack
                && len > 0
            {
                r[at..at + len + 8].fill(0);
            }
        }
        if let Some(tid) = layout.sample_tid_offset()
            && tid + 8 <= r.len()
        {
            r[tid..tid + 8].copy_from_slice(&[0xff; 8]);
        }
        self.left_out(&mut r, layout, f.prev_comm, f.prev_pid);
        debug_assert!(r.len() >= HEADER_SIZE);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::sample;

    const SWITCH: u64 = sample::IDENTIFIER
        | sample::IP
        | sample::TID
        | sample::TIME
        | sample::CPU
        | sample::CALLCHAIN
        | sample::RAW
        | sample::CGROUP;
    const CLOCK: u64 =
        sample::IDENTIFIER | sample::IP | sample::TID | sample::TIME | sample::CPU | sample::CGROUP;
    const FIELDS: SwitchFields = SwitchFields {
        prev_comm: (8, 16),
        prev_pid: (24, 4),
        next_comm: (40, 16),
        next_pid: (56, 4),
    };

    fn layouts() -> RecordLayouts {
        RecordLayouts::of_events([
            (&[7u64][..], SampleLayout::new(SWITCH)),
            (&[8u64][..], SampleLayout::new(CLOCK)),
        ])
    }

    fn comm(name: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..name.len()].copy_from_slice(name.as_bytes());
        c
    }

    /// A switch sample from (prev, pid) to (next, pid) in `cgroup`, with a
    /// call chain of two frames.
    fn switch(prev: (&str, u32), next: (&str, u32), cgroup: u64) -> Vec<u8> {
        let mut raw = vec![0u8; 64];
        raw[8..24].copy_from_slice(&comm(prev.0));
        raw[24..28].copy_from_slice(&prev.1.to_le_bytes());
        raw[40..56].copy_from_slice(&comm(next.0));
        raw[56..60].copy_from_slice(&next.1.to_le_bytes());
        let mut body: Vec<u8> = Vec::new();
        for w in [
            7u64,
            0xffff_0000,
            u64::from(prev.1) | (u64::from(prev.1) << 32),
            100,
            0,
            2,
            0xaaaa,
            0xbbbb,
        ] {
            body.extend_from_slice(&w.to_le_bytes());
        }
        body.extend_from_slice(&(raw.len() as u32 + 4).to_le_bytes());
        body.extend_from_slice(&raw);
        body.extend_from_slice(&[0u8; 4]);
        body.extend_from_slice(&cgroup.to_le_bytes());
        let mut r = RecordHeader {
            type_: record_type::SAMPLE,
            misc: 0,
            size: (8 + body.len()) as u16,
        }
        .to_bytes()
        .to_vec();
        r.extend(body);
        r
    }

    fn filter() -> ScopeFilter {
        ScopeFilter {
            cgroups: [101].into(),
            pids: [42].into(),
            switch_ids: [7].into(),
            switch: Some(FIELDS),
        }
    }

    fn text(record: &[u8]) -> String {
        String::from_utf8_lossy(record).into_owned()
    }

    #[test]
    fn samples_of_the_scope_are_kept_and_others_dropped() {
        let l = layouts();
        let f = filter();
        let clock = |pid: u32, cgroup: u64| {
            crate::abi::test_records::with_words(
                record_type::SAMPLE,
                &[
                    8,
                    0x1234,
                    u64::from(pid) | (u64::from(pid) << 32),
                    5,
                    0,
                    cgroup,
                ],
            )
        };
        assert_eq!(f.sample(&clock(42, 101), &l), Kept::Whole);
        assert_eq!(f.sample(&clock(9, 55), &l), Kept::Dropped);
        let lost = crate::abi::test_records::with_words(record_type::LOST, &[8, 3]);
        assert_eq!(f.sample(&lost, &l), Kept::Whole);
    }

    #[test]
    fn a_switch_keeps_the_scope_side_and_blanks_the_other() {
        let l = layouts();
        let f = filter();
        // In scope to in scope: whole.
        let both = switch(("app", 42), ("app", 42), 101);
        assert_eq!(f.sample(&both, &l), Kept::Whole);
        // In scope to another container: its name and pid left out.
        let Kept::Rewritten(out) = f.sample(&switch(("app", 42), ("secret", 9), 101), &l) else {
            panic!("rewritten")
        };
        assert!(!text(&out).contains("secret") && text(&out).contains("app"));
        assert!(text(&out).contains("[other]"));
        // Another container to the scope: its stack, pid and name go.
        let from = switch(("secret", 9), ("app", 42), 55);
        let Kept::Rewritten(out) = f.sample(&from, &l) else {
            panic!("rewritten")
        };
        assert!(!text(&out).contains("secret"));
        assert_eq!(out.len(), from.len() - 16, "the two frames left out");
        assert_eq!(
            u16::from_le_bytes([out[6], out[7]]) as usize,
            out.len(),
            "the header's size follows"
        );
        let layout = l.by_id(7).unwrap();
        assert_eq!(layout.sample_pid(&out), Some(u32::MAX));
        assert_eq!(layout.sample_cgroup(&out), Some(55));
        // Neither side in scope: dropped.
        assert_eq!(f.sample(&switch(("a", 1), ("b", 2), 55), &l), Kept::Dropped);
    }

    #[test]
    fn tracking_records_of_other_processes_and_cgroups_are_left_out() {
        let f = filter();
        let attr = crate::snapshot::testing::tracking_attr();
        let id = crate::snapshot::synth::SampleId {
            pid: 0,
            tid: 0,
            time: 1,
            id: 1,
            cpu: 0,
        };
        let mut ours = Vec::new();
        crate::snapshot::synth::push_comm(&mut ours, &attr, 42, 42, "app", &id);
        let mut theirs = Vec::new();
        crate::snapshot::synth::push_comm(&mut theirs, &attr, 9, 9, "secret", &id);
        let mut cg_in = Vec::new();
        crate::snapshot::synth::push_cgroup(&mut cg_in, &attr, 101, "/libpod_parent/libpod-x", &id);
        let mut cg_out = Vec::new();
        crate::snapshot::synth::push_cgroup(&mut cg_out, &attr, 55, "/other", &id);
        assert!(f.tracking(&ours) && f.tracking(&cg_in));
        assert!(!f.tracking(&theirs) && !f.tracking(&cg_out));
    }
}
