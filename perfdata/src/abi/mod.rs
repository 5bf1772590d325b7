//! The kernel's perf_event ABI (include/uapi/linux/perf_event.h), from the
//! `perf-event-open-sys` bindings, as plain data.
//!
//! Pure and shared: the kernel module opens events with the crate's
//! `perf_event_attr` built from an [`EventAttr`], the ring walks read
//! [`RecordHeader`]s, and the perf.data writer stores the same attrs cut to
//! the 128 bytes perf 6.1 accepts. [`layout`] finds time and CPU in records.

mod attr;
pub mod layout;
#[cfg(any(test, feature = "testing"))]
pub mod test_records;

use perf_event_open_sys::bindings;

pub use attr::{ATTR_SIZE, EventAttr, KERNEL_ATTR_SIZE, attr_flag};

/// The clock every event is opened on (`use_clockid`, perf's
/// `-k monotonic`): sample times then line up with CLOCK_MONOTONIC readings
/// of applications, and CLOCK_DATA maps them to wall-clock time. All events
/// of one file must share it.
pub const SAMPLE_CLOCKID: i32 = libc::CLOCK_MONOTONIC;

/// Size of `struct perf_event_header`.
pub const HEADER_SIZE: usize = std::mem::size_of::<bindings::perf_event_header>();

/// A kernel `u32` constant that fits a `u16` field (`header.misc`).
const fn narrow_u16(v: u32) -> u16 {
    assert!(v <= u16::MAX as u32);
    v as u16
}

/// Record types (`enum perf_event_type`), kernel and user-space ones.
pub mod record_type {
    use super::bindings as b;

    pub const MMAP: u32 = b::PERF_RECORD_MMAP;
    pub const LOST: u32 = b::PERF_RECORD_LOST;
    pub const COMM: u32 = b::PERF_RECORD_COMM;
    pub const EXIT: u32 = b::PERF_RECORD_EXIT;
    pub const THROTTLE: u32 = b::PERF_RECORD_THROTTLE;
    pub const UNTHROTTLE: u32 = b::PERF_RECORD_UNTHROTTLE;
    pub const FORK: u32 = b::PERF_RECORD_FORK;
    pub const READ: u32 = b::PERF_RECORD_READ;
    pub const SAMPLE: u32 = b::PERF_RECORD_SAMPLE;
    pub const MMAP2: u32 = b::PERF_RECORD_MMAP2;
    pub const AUX: u32 = b::PERF_RECORD_AUX;
    pub const ITRACE_START: u32 = b::PERF_RECORD_ITRACE_START;
    pub const LOST_SAMPLES: u32 = b::PERF_RECORD_LOST_SAMPLES;
    pub const SWITCH: u32 = b::PERF_RECORD_SWITCH;
    pub const SWITCH_CPU_WIDE: u32 = b::PERF_RECORD_SWITCH_CPU_WIDE;
    pub const NAMESPACES: u32 = b::PERF_RECORD_NAMESPACES;
    pub const KSYMBOL: u32 = b::PERF_RECORD_KSYMBOL;
    pub const BPF_EVENT: u32 = b::PERF_RECORD_BPF_EVENT;
    pub const CGROUP: u32 = b::PERF_RECORD_CGROUP;
    pub const TEXT_POKE: u32 = b::PERF_RECORD_TEXT_POKE;
    pub const AUX_OUTPUT_HW_ID: u32 = b::PERF_RECORD_AUX_OUTPUT_HW_ID;
    /// Largest kernel record type flightrec accepts in a ring (newer ones,
    /// such as CALLCHAIN_DEFERRED, are not requested and not expected).
    pub const KERNEL_MAX: u32 = AUX_OUTPUT_HW_ID;
    /// User-space records of the perf tool (tools/perf/util/event.h
    /// `enum perf_user_event_type`), used in perf.data files only: not in
    /// the kernel header, so not in the bindings.
    pub const FINISHED_ROUND: u32 = 68;
    pub const COMPRESSED: u32 = 81;
    /// COMPRESSED with the zstd bytes' length after the header (perf since
    /// Linux 6.16), so the record can be padded to 8 bytes.
    pub const COMPRESSED2: u32 = 83;
}

/// `header.misc` values.
pub mod misc {
    use super::{bindings as b, narrow_u16};

    pub const CPUMODE_MASK: u16 = narrow_u16(b::PERF_RECORD_MISC_CPUMODE_MASK);
    pub const KERNEL: u16 = narrow_u16(b::PERF_RECORD_MISC_KERNEL);
    pub const USER: u16 = narrow_u16(b::PERF_RECORD_MISC_USER);
    /// On COMM records: the comm changed because of exec.
    pub const COMM_EXEC: u16 = narrow_u16(b::PERF_RECORD_MISC_COMM_EXEC);
    /// On MMAP2 records: build id instead of maj/min/ino.
    pub const MMAP_BUILD_ID: u16 = narrow_u16(b::PERF_RECORD_MISC_MMAP_BUILD_ID);
    /// On MMAP/MMAP2 records: a mapping without `PROT_EXEC`.
    pub const MMAP_DATA: u16 = narrow_u16(b::PERF_RECORD_MISC_MMAP_DATA);
    /// On a perf.data BUILD_ID entry (the perf tool's
    /// `PERF_RECORD_MISC_BUILD_ID_SIZE`, not in the kernel header): the
    /// entry's size byte is valid.
    pub const BUILD_ID_SIZE: u16 = 1 << 15;
}

/// `prot` bits of an MMAP2 record (the mmap(2) `PROT_*` values).
pub mod mmap_prot {
    pub const READ: u32 = libc::PROT_READ as u32;
    pub const WRITE: u32 = libc::PROT_WRITE as u32;
    pub const EXEC: u32 = libc::PROT_EXEC as u32;
}

/// `enum perf_type_id`.
pub mod event_type {
    use super::bindings as b;

    pub const HARDWARE: u32 = b::PERF_TYPE_HARDWARE;
    pub const SOFTWARE: u32 = b::PERF_TYPE_SOFTWARE;
    pub const TRACEPOINT: u32 = b::PERF_TYPE_TRACEPOINT;
    pub const HW_CACHE: u32 = b::PERF_TYPE_HW_CACHE;
    pub const RAW: u32 = b::PERF_TYPE_RAW;
}

/// `enum perf_sw_ids`, as the `config` values they are.
pub mod sw_event {
    use super::bindings as b;

    pub const CPU_CLOCK: u64 = b::PERF_COUNT_SW_CPU_CLOCK as u64;
    pub const TASK_CLOCK: u64 = b::PERF_COUNT_SW_TASK_CLOCK as u64;
    pub const PAGE_FAULTS: u64 = b::PERF_COUNT_SW_PAGE_FAULTS as u64;
    pub const CONTEXT_SWITCHES: u64 = b::PERF_COUNT_SW_CONTEXT_SWITCHES as u64;
    pub const CPU_MIGRATIONS: u64 = b::PERF_COUNT_SW_CPU_MIGRATIONS as u64;
    pub const PAGE_FAULTS_MIN: u64 = b::PERF_COUNT_SW_PAGE_FAULTS_MIN as u64;
    pub const PAGE_FAULTS_MAJ: u64 = b::PERF_COUNT_SW_PAGE_FAULTS_MAJ as u64;
    pub const ALIGNMENT_FAULTS: u64 = b::PERF_COUNT_SW_ALIGNMENT_FAULTS as u64;
    pub const EMULATION_FAULTS: u64 = b::PERF_COUNT_SW_EMULATION_FAULTS as u64;
    pub const DUMMY: u64 = b::PERF_COUNT_SW_DUMMY as u64;
}

/// `enum perf_hw_id`, as the `config` values they are.
pub mod hw_event {
    use super::bindings as b;

    pub const CPU_CYCLES: u64 = b::PERF_COUNT_HW_CPU_CYCLES as u64;
    pub const INSTRUCTIONS: u64 = b::PERF_COUNT_HW_INSTRUCTIONS as u64;
    pub const CACHE_REFERENCES: u64 = b::PERF_COUNT_HW_CACHE_REFERENCES as u64;
    pub const CACHE_MISSES: u64 = b::PERF_COUNT_HW_CACHE_MISSES as u64;
    pub const BRANCH_INSTRUCTIONS: u64 = b::PERF_COUNT_HW_BRANCH_INSTRUCTIONS as u64;
    pub const BRANCH_MISSES: u64 = b::PERF_COUNT_HW_BRANCH_MISSES as u64;
    pub const BUS_CYCLES: u64 = b::PERF_COUNT_HW_BUS_CYCLES as u64;
    pub const STALLED_CYCLES_FRONTEND: u64 = b::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND as u64;
    pub const STALLED_CYCLES_BACKEND: u64 = b::PERF_COUNT_HW_STALLED_CYCLES_BACKEND as u64;
    pub const REF_CPU_CYCLES: u64 = b::PERF_COUNT_HW_REF_CPU_CYCLES as u64;
}

/// `enum perf_event_sample_format` bits, as the `sample_type` word they go in.
pub mod sample {
    use super::bindings as b;

    pub const IP: u64 = b::PERF_SAMPLE_IP as u64;
    pub const TID: u64 = b::PERF_SAMPLE_TID as u64;
    pub const TIME: u64 = b::PERF_SAMPLE_TIME as u64;
    pub const ADDR: u64 = b::PERF_SAMPLE_ADDR as u64;
    pub const READ: u64 = b::PERF_SAMPLE_READ as u64;
    pub const CALLCHAIN: u64 = b::PERF_SAMPLE_CALLCHAIN as u64;
    pub const ID: u64 = b::PERF_SAMPLE_ID as u64;
    pub const CPU: u64 = b::PERF_SAMPLE_CPU as u64;
    pub const PERIOD: u64 = b::PERF_SAMPLE_PERIOD as u64;
    pub const STREAM_ID: u64 = b::PERF_SAMPLE_STREAM_ID as u64;
    pub const RAW: u64 = b::PERF_SAMPLE_RAW as u64;
    pub const IDENTIFIER: u64 = b::PERF_SAMPLE_IDENTIFIER as u64;
    pub const BRANCH_STACK: u64 = b::PERF_SAMPLE_BRANCH_STACK as u64;
    /// The user registers at the sample (`sample_regs_user` says which).
    pub const REGS_USER: u64 = b::PERF_SAMPLE_REGS_USER as u64;
    /// A copy of the user stack from the stack pointer up
    /// (`sample_stack_user` bytes).
    pub const STACK_USER: u64 = b::PERF_SAMPLE_STACK_USER as u64;
    /// The sampled task's cgroup id, in the hierarchy of the perf_event
    /// controller (Linux 5.7).
    pub const CGROUP: u64 = b::PERF_SAMPLE_CGROUP as u64;
    /// Fields that come after CGROUP in a sample: with none of them, the
    /// cgroup id is a sample's last u64.
    pub const AFTER_CGROUP: u64 =
        (b::PERF_SAMPLE_DATA_PAGE_SIZE | b::PERF_SAMPLE_CODE_PAGE_SIZE | b::PERF_SAMPLE_AUX) as u64;
}

/// Markers in a sample's call chain: the entries after one are kernel
/// (`PERF_CONTEXT_KERNEL`) or user (`PERF_CONTEXT_USER`) addresses.
pub const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
pub const PERF_CONTEXT_USER: u64 = -512i64 as u64;

/// The user registers a `--call-graph dwarf` sample carries, as perf asks
/// for them (`PERF_REGS_MASK`): on x86_64 all general registers but the
/// segment registers DS, ES, FS and GS; on arm64 x0-x30, sp and pc.
#[cfg(target_arch = "x86_64")]
pub const USER_REGS_MASK: u64 = 0xff_0fff;
#[cfg(target_arch = "aarch64")]
pub const USER_REGS_MASK: u64 = (1 << 33) - 1;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const USER_REGS_MASK: u64 = 0;

/// `enum perf_event_read_format` bits, as the `read_format` word they go in.
pub mod read_format {
    use super::bindings as b;

    pub const TOTAL_TIME_ENABLED: u64 = b::PERF_FORMAT_TOTAL_TIME_ENABLED as u64;
    pub const TOTAL_TIME_RUNNING: u64 = b::PERF_FORMAT_TOTAL_TIME_RUNNING as u64;
    pub const ID: u64 = b::PERF_FORMAT_ID as u64;
    pub const GROUP: u64 = b::PERF_FORMAT_GROUP as u64;
    pub const LOST: u64 = b::PERF_FORMAT_LOST as u64;
}

/// Field offsets in `struct perf_event_header`.
const HEADER_TYPE: usize = std::mem::offset_of!(bindings::perf_event_header, type_);
const HEADER_MISC: usize = std::mem::offset_of!(bindings::perf_event_header, misc);
const HEADER_RECORD_SIZE: usize = std::mem::offset_of!(bindings::perf_event_header, size);

/// `struct perf_event_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub type_: u32,
    pub misc: u16,
    pub size: u16,
}

impl RecordHeader {
    /// Parses the first 8 bytes of `b`; `None` if `b` is shorter.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let h = b.get(..HEADER_SIZE)?;
        Some(Self {
            type_: get_u32(h, HEADER_TYPE),
            misc: get_u16(h, HEADER_MISC),
            size: get_u16(h, HEADER_RECORD_SIZE),
        })
    }

    pub fn to_bytes(self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        put_u32(&mut b, HEADER_TYPE, self.type_);
        b[HEADER_MISC..HEADER_MISC + 2].copy_from_slice(&self.misc.to_le_bytes());
        b[HEADER_RECORD_SIZE..HEADER_RECORD_SIZE + 2].copy_from_slice(&self.size.to_le_bytes());
        b
    }

    /// A type the kernel writes into a perf ring (1..=KERNEL_MAX).
    pub fn is_kernel_type(&self) -> bool {
        (1..=record_type::KERNEL_MAX).contains(&self.type_)
    }
}

/// Little-endian u64 at `off`. Panics if out of bounds: callers check lengths.
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Little-endian u32 at `off`. Panics if out of bounds: callers check lengths.
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

/// Little-endian u16 at `off`. Panics if out of bounds: callers check lengths.
pub(crate) fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_parse_needs_eight_bytes() {
        let h = RecordHeader {
            type_: record_type::SAMPLE,
            misc: misc::KERNEL,
            size: 48,
        };
        assert_eq!(RecordHeader::parse(&h.to_bytes()), Some(h));
        assert_eq!(RecordHeader::parse(&h.to_bytes()[..7]), None);
        assert!(h.is_kernel_type());
        let bogus = RecordHeader { type_: 0, ..h };
        assert!(!bogus.is_kernel_type());
    }
}
