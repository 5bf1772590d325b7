//! Where the time and CPU of a record are, given the `sample_type` of the
//! event that wrote it: in a SAMPLE record they follow IDENTIFIER, IP and TID
//! at the front; in any other record they sit in the `sample_id_all` trailer
//! (TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER) at the end. Pure.

use crate::abi::{HEADER_SIZE, RecordHeader, get_u32, get_u64, record_type, sample};

/// Field offsets for one `sample_type`, worked out once: a dump asks them
/// of every record of a window (millions of records under load).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleLayout {
    sample_type: u64,
    /// How many user registers a REGS_USER field holds (the bits of
    /// `sample_regs_user`).
    user_regs: u32,
    /// Offsets of TIME, CPU and TID (its pid half) from a SAMPLE record's
    /// start.
    sample_time: Option<u16>,
    sample_cpu: Option<u16>,
    sample_tid: Option<u16>,
    /// Offsets of TIME and CPU back from the end of any other record (the
    /// `sample_id_all` trailer).
    trailer_time: Option<u16>,
    trailer_cpu: Option<u16>,
}

impl SampleLayout {
    pub fn new(sample_type: u64) -> Self {
        let has = |bit: u64| sample_type & bit != 0;
        let words = |bits: &[u64]| 8 * bits.iter().filter(|&&b| has(b)).count() as u16;
        let header = HEADER_SIZE as u16;
        // A SAMPLE record: IDENTIFIER, IP, TID, TIME, ADDR, ID, STREAM_ID, CPU.
        let tid_at = header + words(&[sample::IDENTIFIER, sample::IP]);
        let time_at = tid_at + words(&[sample::TID]);
        let cpu_at = time_at + words(&[sample::TIME, sample::ADDR, sample::ID, sample::STREAM_ID]);
        // The trailer, from its end: IDENTIFIER, CPU, STREAM_ID, ID, TIME.
        let cpu_back = words(&[sample::IDENTIFIER]) + 8;
        let time_back = words(&[
            sample::IDENTIFIER,
            sample::CPU,
            sample::STREAM_ID,
            sample::ID,
        ]) + 8;
        Self {
            sample_type,
            user_regs: 0,
            sample_time: has(sample::TIME).then_some(time_at),
            sample_cpu: has(sample::CPU).then_some(cpu_at),
            sample_tid: has(sample::TID).then_some(tid_at),
            trailer_time: has(sample::TIME).then_some(time_back),
            trailer_cpu: has(sample::CPU).then_some(cpu_back),
        }
    }

    /// The layout of an event that samples the user registers of
    /// `sample_regs_user`.
    pub fn with_user_regs(self, sample_regs_user: u64) -> Self {
        Self {
            user_regs: sample_regs_user.count_ones(),
            ..self
        }
    }

    fn has(&self, bit: u64) -> bool {
        self.sample_type & bit != 0
    }

    /// Offset of the TID field in a SAMPLE record.
    pub fn sample_tid_offset(&self) -> Option<usize> {
        self.sample_tid.map(usize::from)
    }

    /// Where the CALLCHAIN, RAW, REGS_USER and STACK_USER fields of a
    /// SAMPLE record are: the offset of the callchain's `nr` and the
    /// entries it counts, the offset and length of the raw data (after its
    /// u32 size), of the user registers (after their ABI word) and of the
    /// stack copy (after its size). `None` for a field the layout lacks,
    /// or a record too short to hold what its fields say. The layouts
    /// flightrec opens have no READ or BRANCH_STACK field.
    pub fn callchain_and_raw(&self, record: &[u8]) -> Option<SampleFields> {
        let header = RecordHeader::parse(record)?;
        if header.type_ != record_type::SAMPLE
            || self.has(sample::READ)
            || self.has(sample::BRANCH_STACK)
        {
            return None;
        }
        let size = usize::from(header.size).min(record.len());
        let mut off = HEADER_SIZE;
        for bit in [
            sample::IDENTIFIER,
            sample::IP,
            sample::TID,
            sample::TIME,
            sample::ADDR,
            sample::ID,
            sample::STREAM_ID,
            sample::CPU,
            sample::PERIOD,
        ] {
            if self.has(bit) {
                off += 8;
            }
        }
        let mut fields = SampleFields::default();
        if self.has(sample::CALLCHAIN) {
            if off + 8 > size {
                return None;
            }
            let nr = usize::try_from(get_u64(record, off)).ok()?;
            let end = nr.checked_mul(8)?.checked_add(off + 8)?;
            if end > size {
                return None;
            }
            fields.callchain = Some((off, nr));
            off = end;
        }
        if self.has(sample::RAW) {
            if off + 4 > size {
                return None;
            }
            let len = get_u32(record, off) as usize;
            if off + 4 + len > size {
                return None;
            }
            fields.raw = Some((off + 4, len));
            off += 4 + len;
        }
        if self.has(sample::REGS_USER) {
            if off + 8 > size {
                return None;
            }
            // ABI 0: the task had no user registers (a kernel thread).
            let n = if get_u64(record, off) == 0 {
                0
            } else {
                self.user_regs as usize
            };
            off += 8;
            if off + 8 * n > size {
                return None;
            }
            fields.user_regs = Some((off, n));
            off += 8 * n;
        }
        if self.has(sample::STACK_USER) {
            if off + 8 > size {
                return None;
            }
            let len = usize::try_from(get_u64(record, off)).ok()?;
            off += 8;
            // Then `dyn_size`, the bytes of it that hold stack, when any.
            let end = if len == 0 {
                off
            } else {
                off.checked_add(len)?.checked_add(8)?
            };
            if end > size {
                return None;
            }
            fields.user_stack = Some((off, len));
        }
        Some(fields)
    }

    /// The pid of a SAMPLE record (the TID field's first half), `None` for
    /// other records or layouts without TID.
    pub fn sample_pid(&self, record: &[u8]) -> Option<u32> {
        let header = RecordHeader::parse(record)?;
        if header.type_ != record_type::SAMPLE {
            return None;
        }
        let off = usize::from(self.sample_tid?);
        let size = usize::from(header.size).min(record.len());
        (off + 4 <= size).then(|| get_u32(record, off))
    }

    /// The cgroup id of a SAMPLE record: its last u64 when CGROUP is
    /// sampled and nothing after it is (see [`sample::AFTER_CGROUP`]).
    pub fn sample_cgroup(&self, record: &[u8]) -> Option<u64> {
        let header = RecordHeader::parse(record)?;
        if header.type_ != record_type::SAMPLE
            || !self.has(sample::CGROUP)
            || self.has(sample::AFTER_CGROUP)
        {
            return None;
        }
        let size = usize::from(header.size).min(record.len());
        (size >= HEADER_SIZE + 8).then(|| get_u64(record, size - 8))
    }

    /// `(time, cpu)` of a whole record, `None` where the record lacks them
    /// or is too short to hold them.
    pub fn time_and_cpu(&self, record: &[u8]) -> (Option<u64>, Option<u32>) {
        let Some(header) = RecordHeader::parse(record) else {
            return (None, None);
        };
        let size = usize::from(header.size).min(record.len());
        if header.type_ == record_type::SAMPLE {
            let at =
                |off: Option<u16>, len: usize| off.map(usize::from).filter(|o| o + len <= size);
            let time = at(self.sample_time, 8).map(|o| get_u64(record, o));
            let cpu = at(self.sample_cpu, 4).map(|o| get_u32(record, o));
            (time, cpu)
        } else {
            let at = |back: Option<u16>| {
                size.checked_sub(usize::from(back?))
                    .filter(|&o| o >= HEADER_SIZE)
            };
            let time = at(self.trailer_time).map(|o| get_u64(record, o));
            let cpu = at(self.trailer_cpu).map(|o| get_u32(record, o));
            (time, cpu)
        }
    }
}

/// Where a SAMPLE record's variable fields are (see
/// [`SampleLayout::callchain_and_raw`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleFields {
    /// Offset of the callchain's `nr`, and `nr`.
    pub callchain: Option<(usize, usize)>,
    /// Offset and length of the raw tracepoint data.
    pub raw: Option<(usize, usize)>,
    /// Offset of the user registers and how many there are (0: the task
    /// had none).
    pub user_regs: Option<(usize, usize)>,
    /// Offset and length of the user stack copy; its `dyn_size` follows
    /// it when the length is not 0.
    pub user_stack: Option<(usize, usize)>,
}

/// The layouts of every event writing into a ring, by kernel id: records
/// name their event with the IDENTIFIER field (first u64 of a sample, last
/// u64 of any other record), so rings may mix events of different layouts.
/// Kept sorted by id and searched: a few events per CPU, looked up once
/// per record, where hashing each id cost more than the search.
#[derive(Debug, Clone, Default)]
pub struct RecordLayouts {
    by_id: Vec<(u64, SampleLayout)>,
}

impl RecordLayouts {
    /// The layouts of events given as `(their ids, their layout)`: the one
    /// way a set of events becomes its layouts.
    pub fn of_events<'a>(events: impl IntoIterator<Item = (&'a [u64], SampleLayout)>) -> Self {
        let mut layouts = RecordLayouts::default();
        for (ids, layout) in events {
            for &id in ids {
                layouts.set(id, layout);
            }
        }
        layouts
    }

    /// Gives `id` the layout `layout`, in place of any it had.
    fn set(&mut self, id: u64, layout: SampleLayout) {
        match self.position(id) {
            Ok(i) => self.by_id[i].1 = layout,
            Err(i) => self.by_id.insert(i, (id, layout)),
        }
    }

    pub fn insert(&mut self, id: u64, sample_type: u64) {
        self.set(id, SampleLayout::new(sample_type));
    }

    /// [`RecordLayouts::insert`] for an event that also samples the user
    /// registers of `sample_regs_user`.
    pub fn insert_with_user_regs(&mut self, id: u64, sample_type: u64, sample_regs_user: u64) {
        self.set(
            id,
            SampleLayout::new(sample_type).with_user_regs(sample_regs_user),
        );
    }

    /// The id a record carries in its IDENTIFIER field.
    pub fn identifier(record: &[u8]) -> Option<u64> {
        let header = RecordHeader::parse(record)?;
        let size = usize::from(header.size).min(record.len());
        if header.type_ == record_type::SAMPLE {
            (size >= HEADER_SIZE + 8).then(|| get_u64(record, HEADER_SIZE))
        } else {
            (size >= HEADER_SIZE + 8).then(|| get_u64(record, size - 8))
        }
    }

    /// The layout of the event with kernel id `id`.
    pub fn by_id(&self, id: u64) -> Option<SampleLayout> {
        let i = self.position(id).ok()?;
        Some(self.by_id[i].1)
    }

    /// Where `id` is in the sorted list, or where it would go.
    fn position(&self, id: u64) -> Result<usize, usize> {
        self.by_id.binary_search_by_key(&id, |&(id, _)| id)
    }

    /// The layout of the event that wrote `record`.
    pub fn layout(&self, record: &[u8]) -> Option<SampleLayout> {
        self.by_id(Self::identifier(record)?)
    }

    /// The cgroup id of a SAMPLE `record`, looked up by its identifier.
    pub fn sample_cgroup(&self, record: &[u8]) -> Option<u64> {
        self.layout(record)?.sample_cgroup(record)
    }

    /// The pid of a SAMPLE `record`, looked up by its identifier.
    pub fn sample_pid(&self, record: &[u8]) -> Option<u32> {
        self.layout(record)?.sample_pid(record)
    }

    /// `(time, cpu)` of `record`, looked up by its identifier.
    pub fn time_and_cpu(&self, record: &[u8]) -> (Option<u64>, Option<u32>) {
        self.layout(record)
            .map_or((None, None), |l| l.time_and_cpu(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(type_: u32, words: &[u64]) -> Vec<u8> {
        crate::abi::test_records::with_words(type_, words)
    }

    const TRACEPOINT: u64 =
        sample::IDENTIFIER | sample::TID | sample::TIME | sample::CPU | sample::RAW;
    const CLOCK: u64 = TRACEPOINT & !sample::RAW | sample::IP | sample::PERIOD;

    #[test]
    fn finds_time_and_cpu_in_samples_of_each_layout() {
        let mut layouts = RecordLayouts::default();
        layouts.insert(7, TRACEPOINT);
        layouts.insert(8, CLOCK);
        // identifier, tid, time, cpu, raw...
        let tp = record(record_type::SAMPLE, &[7, 0x1_0000_0002, 1234, 1, 0]);
        assert_eq!(layouts.time_and_cpu(&tp), (Some(1234), Some(1)));
        // identifier, ip, tid, time, cpu, period
        let clk = record(record_type::SAMPLE, &[8, 0xffff_8000, 5, 999, 3, 250_000]);
        assert_eq!(layouts.time_and_cpu(&clk), (Some(999), Some(3)));
        // Unknown id: nothing.
        let other = record(record_type::SAMPLE, &[9, 0, 1, 2]);
        assert_eq!(layouts.time_and_cpu(&other), (None, None));
        // pid: the first half of TID, wherever IP puts it.
        assert_eq!(layouts.sample_pid(&tp), Some(2));
        assert_eq!(layouts.sample_pid(&clk), Some(5));
        assert_eq!(layouts.sample_pid(&other), None);
        let lost = record(record_type::LOST, &[7, 12, 0, 4321, 1, 7]);
        assert_eq!(layouts.sample_pid(&lost), None);
    }

    #[test]
    fn finds_the_user_registers_and_stack_of_a_dwarf_sample() {
        const DWARF: u64 =
            CLOCK | sample::CALLCHAIN | sample::REGS_USER | sample::STACK_USER | sample::CGROUP;
        let layout = SampleLayout::new(DWARF).with_user_regs(0b111);
        let mut layouts = RecordLayouts::default();
        layouts.insert_with_user_regs(8, DWARF, 0b111);
        // identifier, ip, tid, time, cpu, period; callchain nr 2; regs abi
        // 2 and three of them; a 16-byte stack and its dyn_size; cgroup.
        let words = [
            8, 0x1000, 5, 999, 3, 250_000, 2, 0xf001, 0xf002, 2, 11, 12, 13, 16, 21, 22, 16, 77,
        ];
        let r = record(record_type::SAMPLE, &words);
        let word = |i: usize| HEADER_SIZE + 8 * i;
        let fields = layout.callchain_and_raw(&r).unwrap();
        assert_eq!(fields.callchain, Some((word(6), 2)));
        assert_eq!(fields.user_regs, Some((word(10), 3)));
        assert_eq!(fields.user_stack, Some((word(14), 16)));
        assert_eq!(layouts.sample_cgroup(&r), Some(77));
        // A kernel thread: ABI 0, no registers, an empty stack.
        let words = [8, 0x1000, 5, 999, 3, 250_000, 0, 0, 0, 77];
        let r = record(record_type::SAMPLE, &words);
        let fields = layout.callchain_and_raw(&r).unwrap();
        assert_eq!(fields.user_regs, Some((word(8), 0)));
        assert_eq!(fields.user_stack, Some((word(9), 0)));
        // A stack longer than the record: nothing rather than a wrong field.
        let words = [8, 0x1000, 5, 999, 3, 250_000, 0, 0, 4096, 1, 2];
        let r = record(record_type::SAMPLE, &words);
        assert_eq!(layout.callchain_and_raw(&r), None);
    }

    #[test]
    fn finds_time_in_the_trailer_of_other_records() {
        let mut layouts = RecordLayouts::default();
        layouts.insert(7, TRACEPOINT);
        // LOST: id, lost, then trailer pid/tid, time, cpu/res, identifier.
        let lost = record(record_type::LOST, &[7, 12, 0, 4321, 1, 7]);
        assert_eq!(layouts.time_and_cpu(&lost), (Some(4321), Some(1)));
        // Too short for its trailer: no time rather than a wrong one.
        let short = record(record_type::LOST, &[7]);
        assert_eq!(
            SampleLayout::new(TRACEPOINT).time_and_cpu(&short),
            (None, None)
        );
    }

    #[test]
    fn each_id_finds_its_own_layout_however_the_ids_came() {
        // Ids given out of order, one given again: the last layout stands.
        let mut layouts = RecordLayouts::default();
        for id in [40, 3, 17, 900, 5] {
            layouts.insert(id, TRACEPOINT);
        }
        layouts.insert(17, CLOCK);
        for (id, want) in [
            (40, TRACEPOINT),
            (3, TRACEPOINT),
            (17, CLOCK),
            (900, TRACEPOINT),
        ] {
            assert_eq!(layouts.by_id(id), Some(SampleLayout::new(want)), "id {id}");
        }
        for id in [0, 4, 18, 901, u64::MAX] {
            assert_eq!(layouts.by_id(id), None, "id {id}");
        }
        let many = RecordLayouts::of_events([
            (&[9u64, 1][..], SampleLayout::new(CLOCK)),
            (&[4u64, 12][..], SampleLayout::new(TRACEPOINT)),
        ]);
        assert_eq!(many.by_id(12), Some(SampleLayout::new(TRACEPOINT)));
        assert_eq!(many.by_id(1), Some(SampleLayout::new(CLOCK)));
    }
}
