//! The kernel's perf_event ABI as plain data (include/uapi/linux/perf_event.h).
//!
//! Pure and shared: the kernel module serializes [`EventAttr`] for
//! `perf_event_open`, the ring walks read [`RecordHeader`]s, and the perf.data
//! writer stores the same 128-byte attrs perf 6.1 accepts.

/// Size of `struct perf_event_header`.
pub const HEADER_SIZE: usize = 8;

/// `PERF_ATTR_SIZE_VER7`: the largest attr perf 6.1 reads from a file, and
/// the size flightrec passes to the kernel (which zero-extends it).
pub const ATTR_SIZE: usize = 128;

/// Record types (`enum perf_event_type`), kernel and user-space ones.
pub mod record_type {
    pub const MMAP: u32 = 1;
    pub const LOST: u32 = 2;
    pub const COMM: u32 = 3;
    pub const EXIT: u32 = 4;
    pub const THROTTLE: u32 = 5;
    pub const UNTHROTTLE: u32 = 6;
    pub const FORK: u32 = 7;
    pub const READ: u32 = 8;
    pub const SAMPLE: u32 = 9;
    pub const MMAP2: u32 = 10;
    pub const AUX: u32 = 11;
    pub const ITRACE_START: u32 = 12;
    pub const LOST_SAMPLES: u32 = 13;
    pub const SWITCH: u32 = 14;
    pub const SWITCH_CPU_WIDE: u32 = 15;
    pub const NAMESPACES: u32 = 16;
    pub const KSYMBOL: u32 = 17;
    pub const BPF_EVENT: u32 = 18;
    pub const CGROUP: u32 = 19;
    pub const TEXT_POKE: u32 = 20;
    pub const AUX_OUTPUT_HW_ID: u32 = 21;
    /// Largest kernel record type flightrec accepts in a ring.
    pub const KERNEL_MAX: u32 = 21;
    /// User-space (perf tool) records used in perf.data files.
    pub const FINISHED_ROUND: u32 = 68;
    pub const COMPRESSED: u32 = 81;
}

/// `header.misc` values.
pub mod misc {
    pub const CPUMODE_MASK: u16 = 0x7;
    pub const KERNEL: u16 = 1;
    pub const USER: u16 = 2;
    /// On COMM records: the comm changed because of exec.
    pub const COMM_EXEC: u16 = 1 << 13;
    /// On MMAP2 records: build id instead of maj/min/ino.
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
}

/// `enum perf_type_id`.
pub mod event_type {
    pub const HARDWARE: u32 = 0;
    pub const SOFTWARE: u32 = 1;
    pub const TRACEPOINT: u32 = 2;
    pub const HW_CACHE: u32 = 3;
    pub const RAW: u32 = 4;
}

/// `enum perf_sw_ids`.
pub mod sw_event {
    pub const CPU_CLOCK: u64 = 0;
    pub const TASK_CLOCK: u64 = 1;
    pub const PAGE_FAULTS: u64 = 2;
    pub const CONTEXT_SWITCHES: u64 = 3;
    pub const CPU_MIGRATIONS: u64 = 4;
    pub const PAGE_FAULTS_MIN: u64 = 5;
    pub const PAGE_FAULTS_MAJ: u64 = 6;
    pub const ALIGNMENT_FAULTS: u64 = 7;
    pub const EMULATION_FAULTS: u64 = 8;
    pub const DUMMY: u64 = 9;
}

/// `enum perf_hw_id`.
pub mod hw_event {
    pub const CPU_CYCLES: u64 = 0;
    pub const INSTRUCTIONS: u64 = 1;
    pub const CACHE_REFERENCES: u64 = 2;
    pub const CACHE_MISSES: u64 = 3;
    pub const BRANCH_INSTRUCTIONS: u64 = 4;
    pub const BRANCH_MISSES: u64 = 5;
    pub const BUS_CYCLES: u64 = 6;
    pub const STALLED_CYCLES_FRONTEND: u64 = 7;
    pub const STALLED_CYCLES_BACKEND: u64 = 8;
    pub const REF_CPU_CYCLES: u64 = 9;
}

/// `enum perf_event_sample_format` bits.
pub mod sample {
    pub const IP: u64 = 1 << 0;
    pub const TID: u64 = 1 << 1;
    pub const TIME: u64 = 1 << 2;
    pub const ADDR: u64 = 1 << 3;
    pub const READ: u64 = 1 << 4;
    pub const CALLCHAIN: u64 = 1 << 5;
    pub const ID: u64 = 1 << 6;
    pub const CPU: u64 = 1 << 7;
    pub const PERIOD: u64 = 1 << 8;
    pub const STREAM_ID: u64 = 1 << 9;
    pub const RAW: u64 = 1 << 10;
    pub const IDENTIFIER: u64 = 1 << 16;
}

/// `enum perf_event_read_format` bits.
pub mod read_format {
    pub const TOTAL_TIME_ENABLED: u64 = 1 << 0;
    pub const TOTAL_TIME_RUNNING: u64 = 1 << 1;
    pub const ID: u64 = 1 << 2;
    pub const GROUP: u64 = 1 << 3;
    pub const LOST: u64 = 1 << 4;
}

/// Bit positions in the attr's flag word (offset 40).
pub mod attr_flag {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const PINNED: u64 = 1 << 2;
    pub const EXCLUSIVE: u64 = 1 << 3;
    pub const EXCLUDE_USER: u64 = 1 << 4;
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    pub const EXCLUDE_HV: u64 = 1 << 6;
    pub const EXCLUDE_IDLE: u64 = 1 << 7;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const FREQ: u64 = 1 << 10;
    pub const INHERIT_STAT: u64 = 1 << 11;
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    pub const TASK: u64 = 1 << 13;
    pub const WATERMARK: u64 = 1 << 14;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const EXCLUDE_HOST: u64 = 1 << 19;
    pub const EXCLUDE_GUEST: u64 = 1 << 20;
    pub const EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
    pub const EXCLUDE_CALLCHAIN_USER: u64 = 1 << 22;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const USE_CLOCKID: u64 = 1 << 25;
    pub const CONTEXT_SWITCH: u64 = 1 << 26;
    pub const WRITE_BACKWARD: u64 = 1 << 27;
}

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER7` (128 bytes), as plain
/// fields. `sample_period` doubles as `sample_freq` when `FREQ` is set, and
/// `wakeup` as `wakeup_watermark` when `WATERMARK` is set, as in the kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventAttr {
    pub type_: u32,
    pub config: u64,
    pub sample_period_or_freq: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub aux_sample_size: u32,
    pub sig_data: u64,
}

impl EventAttr {
    /// The attr as the kernel and perf.data lay it out, `size` = 128.
    pub fn to_bytes(&self) -> [u8; ATTR_SIZE] {
        let mut b = [0u8; ATTR_SIZE];
        put_u32(&mut b, 0, self.type_);
        put_u32(&mut b, 4, ATTR_SIZE as u32);
        put_u64(&mut b, 8, self.config);
        put_u64(&mut b, 16, self.sample_period_or_freq);
        put_u64(&mut b, 24, self.sample_type);
        put_u64(&mut b, 32, self.read_format);
        put_u64(&mut b, 40, self.flags);
        put_u32(&mut b, 48, self.wakeup);
        put_u32(&mut b, 52, self.bp_type);
        put_u64(&mut b, 56, self.config1);
        put_u64(&mut b, 64, self.config2);
        put_u64(&mut b, 72, self.branch_sample_type);
        put_u64(&mut b, 80, self.sample_regs_user);
        put_u32(&mut b, 88, self.sample_stack_user);
        b[92..96].copy_from_slice(&self.clockid.to_le_bytes());
        put_u64(&mut b, 96, self.sample_regs_intr);
        put_u32(&mut b, 104, self.aux_watermark);
        b[108..110].copy_from_slice(&self.sample_max_stack.to_le_bytes());
        put_u32(&mut b, 112, self.aux_sample_size);
        put_u64(&mut b, 120, self.sig_data);
        b
    }

    /// Reads an attr of at least 128 bytes (fields past 128 are ignored).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < ATTR_SIZE {
            return None;
        }
        Some(Self {
            type_: get_u32(b, 0),
            config: get_u64(b, 8),
            sample_period_or_freq: get_u64(b, 16),
            sample_type: get_u64(b, 24),
            read_format: get_u64(b, 32),
            flags: get_u64(b, 40),
            wakeup: get_u32(b, 48),
            bp_type: get_u32(b, 52),
            config1: get_u64(b, 56),
            config2: get_u64(b, 64),
            branch_sample_type: get_u64(b, 72),
            sample_regs_user: get_u64(b, 80),
            sample_stack_user: get_u32(b, 88),
            clockid: i32::from_le_bytes([b[92], b[93], b[94], b[95]]),
            sample_regs_intr: get_u64(b, 96),
            aux_watermark: get_u32(b, 104),
            sample_max_stack: u16::from_le_bytes([b[108], b[109]]),
            aux_sample_size: get_u32(b, 112),
            sig_data: get_u64(b, 120),
        })
    }

    pub fn has_flag(&self, flag: u64) -> bool {
        self.flags & flag != 0
    }
}

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
            type_: get_u32(h, 0),
            misc: u16::from_le_bytes([h[4], h[5]]),
            size: u16::from_le_bytes([h[6], h[7]]),
        })
    }

    pub fn to_bytes(self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        put_u32(&mut b, 0, self.type_);
        b[4..6].copy_from_slice(&self.misc.to_le_bytes());
        b[6..8].copy_from_slice(&self.size.to_le_bytes());
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

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_round_trips_and_lands_at_documented_offsets() {
        let attr = EventAttr {
            type_: event_type::TRACEPOINT,
            config: 317,
            sample_period_or_freq: 1,
            sample_type: sample::IDENTIFIER | sample::TID | sample::TIME | sample::RAW,
            read_format: read_format::ID | read_format::LOST,
            flags: attr_flag::SAMPLE_ID_ALL | attr_flag::WRITE_BACKWARD,
            clockid: 1,
            sample_max_stack: 127,
            ..Default::default()
        };
        let b = attr.to_bytes();
        assert_eq!(get_u32(&b, 0), 2);
        assert_eq!(get_u32(&b, 4), 128);
        assert_eq!(get_u64(&b, 8), 317);
        assert_eq!(get_u64(&b, 40), (1 << 18) | (1 << 27));
        assert_eq!(u16::from_le_bytes([b[108], b[109]]), 127);
        assert_eq!(EventAttr::from_bytes(&b), Some(attr));
        assert_eq!(EventAttr::from_bytes(&b[..127]), None);
    }

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
