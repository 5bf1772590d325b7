//! `struct perf_event_attr`: [`EventAttr`], the project's typed description,
//! and its two renderings, both laid out by the crate's
//! `bindings::perf_event_attr`: the struct the kernel gets
//! ([`EventAttr::to_kernel`]) and the 128-byte attr of perf.data files
//! ([`EventAttr::to_bytes`]).

use std::mem::{offset_of, size_of};

use perf_event_open_sys::bindings::{self, __BindgenBitfieldUnit, perf_event_attr};

/// `PERF_ATTR_SIZE_VER7`: the largest attr perf 6.1 reads from a file, so
/// the size of the attrs flightrec writes to perf.data files.
pub const ATTR_SIZE: usize = bindings::PERF_ATTR_SIZE_VER7 as usize;

/// The attr the kernel gets: the crate's whole struct. Kernels older than it
/// accept it as long as the fields they do not know are zero, which they are
/// (flightrec sets nothing past [`ATTR_SIZE`]).
pub const KERNEL_ATTR_SIZE: usize = size_of::<perf_event_attr>();

// The file attr is the kernel one cut before `config3`: every field
// [`EventAttr`] has lies in the first ATTR_SIZE bytes.
const _: () = assert!(offset_of!(perf_event_attr, config3) == ATTR_SIZE);

/// The single-bit flags of the attr's bitfield word, as bits of
/// [`EventAttr::flags`]. Each bit is the one the crate's setter of that
/// flag sets (see [`FLAG_FIELDS`] and its test), so a flags word reads the
/// same as the kernel's.
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
    /// MMAP records of data (non-executable) mappings too.
    pub const MMAP_DATA: u64 = 1 << 17;
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
    /// CGROUP records for every cgroup created (kernel >= 5.7).
    pub const CGROUP: u64 = 1 << 32;
    /// MMAP2 records carry the mapped file's build-id (kernel >= 5.12).
    pub const BUILD_ID: u64 = 1 << 34;
}

type FlagGetter = fn(&perf_event_attr) -> u64;
type FlagSetter = fn(&mut perf_event_attr, u64);

/// Each [`attr_flag`] with the crate's accessors of its bitfield member.
const FLAG_FIELDS: [(u64, FlagGetter, FlagSetter); 28] = {
    use attr_flag as f;
    type A = perf_event_attr;
    [
        (f::DISABLED, A::disabled, A::set_disabled),
        (f::INHERIT, A::inherit, A::set_inherit),
        (f::PINNED, A::pinned, A::set_pinned),
        (f::EXCLUSIVE, A::exclusive, A::set_exclusive),
        (f::EXCLUDE_USER, A::exclude_user, A::set_exclude_user),
        (f::EXCLUDE_KERNEL, A::exclude_kernel, A::set_exclude_kernel),
        (f::EXCLUDE_HV, A::exclude_hv, A::set_exclude_hv),
        (f::EXCLUDE_IDLE, A::exclude_idle, A::set_exclude_idle),
        (f::MMAP, A::mmap, A::set_mmap),
        (f::COMM, A::comm, A::set_comm),
        (f::FREQ, A::freq, A::set_freq),
        (f::INHERIT_STAT, A::inherit_stat, A::set_inherit_stat),
        (f::ENABLE_ON_EXEC, A::enable_on_exec, A::set_enable_on_exec),
        (f::TASK, A::task, A::set_task),
        (f::WATERMARK, A::watermark, A::set_watermark),
        (f::MMAP_DATA, A::mmap_data, A::set_mmap_data),
        (f::SAMPLE_ID_ALL, A::sample_id_all, A::set_sample_id_all),
        (f::EXCLUDE_HOST, A::exclude_host, A::set_exclude_host),
        (f::EXCLUDE_GUEST, A::exclude_guest, A::set_exclude_guest),
        (
            f::EXCLUDE_CALLCHAIN_KERNEL,
            A::exclude_callchain_kernel,
            A::set_exclude_callchain_kernel,
        ),
        (
            f::EXCLUDE_CALLCHAIN_USER,
            A::exclude_callchain_user,
            A::set_exclude_callchain_user,
        ),
        (f::MMAP2, A::mmap2, A::set_mmap2),
        (f::COMM_EXEC, A::comm_exec, A::set_comm_exec),
        (f::USE_CLOCKID, A::use_clockid, A::set_use_clockid),
        (f::CONTEXT_SWITCH, A::context_switch, A::set_context_switch),
        (f::WRITE_BACKWARD, A::write_backward, A::set_write_backward),
        (f::CGROUP, A::cgroup, A::set_cgroup),
        (f::BUILD_ID, A::build_id, A::set_build_id),
    ]
};

/// The fields of `struct perf_event_attr` flightrec uses (those of
/// `PERF_ATTR_SIZE_VER7` but `aux_action`). `sample_period_or_freq` doubles
/// as `sample_freq` when `FREQ` is set, and `wakeup` as `wakeup_watermark`
/// when `WATERMARK` is set, as in the kernel. `flags` holds [`attr_flag`]
/// bits only.
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
    /// The attr for `perf_event_open`, `size` = [`KERNEL_ATTR_SIZE`].
    pub fn to_kernel(&self) -> perf_event_attr {
        let mut a = perf_event_attr {
            type_: self.type_,
            size: KERNEL_ATTR_SIZE as u32,
            config: self.config,
            sample_type: self.sample_type,
            read_format: self.read_format,
            bp_type: self.bp_type,
            branch_sample_type: self.branch_sample_type,
            sample_regs_user: self.sample_regs_user,
            sample_stack_user: self.sample_stack_user,
            clockid: self.clockid,
            sample_regs_intr: self.sample_regs_intr,
            aux_watermark: self.aux_watermark,
            sample_max_stack: self.sample_max_stack,
            aux_sample_size: self.aux_sample_size,
            sig_data: self.sig_data,
            ..perf_event_attr::default()
        };
        // The unions, through the crate's named views of them.
        a.sample_period = self.sample_period_or_freq;
        a.wakeup_events = self.wakeup;
        a.config1 = self.config1;
        a.config2 = self.config2;
        for (flag, _, set) in FLAG_FIELDS {
            set(&mut a, u64::from(self.has_flag(flag)));
        }
        a
    }

    /// Reads back the fields of a crate attr (flags other than
    /// [`attr_flag`]'s and fields past `sig_data` are dropped).
    pub fn from_kernel(a: &perf_event_attr) -> Self {
        let flags = FLAG_FIELDS
            .iter()
            .filter(|(_, get, _)| get(a) != 0)
            .fold(0, |flags, (flag, _, _)| flags | flag);
        Self {
            type_: a.type_,
            config: a.config,
            sample_period_or_freq: a.sample_period,
            sample_type: a.sample_type,
            read_format: a.read_format,
            flags,
            wakeup: a.wakeup_events,
            bp_type: a.bp_type,
            config1: a.config1,
            config2: a.config2,
            branch_sample_type: a.branch_sample_type,
            sample_regs_user: a.sample_regs_user,
            sample_stack_user: a.sample_stack_user,
            clockid: a.clockid,
            sample_regs_intr: a.sample_regs_intr,
            aux_watermark: a.aux_watermark,
            sample_max_stack: a.sample_max_stack,
            aux_sample_size: a.aux_sample_size,
            sig_data: a.sig_data,
        }
    }

    /// The attr as perf.data stores it: the kernel struct's first
    /// [`ATTR_SIZE`] bytes (little-endian), `size` = 128.
    pub fn to_bytes(&self) -> [u8; ATTR_SIZE] {
        let a = self.to_kernel();
        let mut b = [0u8; ATTR_SIZE];
        let mut put = |off: usize, bytes: &[u8]| b[off..off + bytes.len()].copy_from_slice(bytes);
        put(offset_of!(perf_event_attr, type_), &a.type_.to_le_bytes());
        put(
            offset_of!(perf_event_attr, size),
            &(ATTR_SIZE as u32).to_le_bytes(),
        );
        put(offset_of!(perf_event_attr, config), &a.config.to_le_bytes());
        put(
            offset_of!(perf_event_attr, __bindgen_anon_1),
            &a.sample_period.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, sample_type),
            &a.sample_type.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, read_format),
            &a.read_format.to_le_bytes(),
        );
        // The whole bitfield word, bit i being the member the crate puts at i.
        put(
            offset_of!(perf_event_attr, _bitfield_1),
            &a._bitfield_1.get(0, 64).to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, __bindgen_anon_2),
            &a.wakeup_events.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, bp_type),
            &a.bp_type.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, __bindgen_anon_3),
            &a.config1.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, __bindgen_anon_4),
            &a.config2.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, branch_sample_type),
            &a.branch_sample_type.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, sample_regs_user),
            &a.sample_regs_user.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, sample_stack_user),
            &a.sample_stack_user.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, clockid),
            &a.clockid.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, sample_regs_intr),
            &a.sample_regs_intr.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, aux_watermark),
            &a.aux_watermark.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, sample_max_stack),
            &a.sample_max_stack.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, aux_sample_size),
            &a.aux_sample_size.to_le_bytes(),
        );
        put(
            offset_of!(perf_event_attr, sig_data),
            &a.sig_data.to_le_bytes(),
        );
        b
    }

    /// Reads a file attr of at least [`ATTR_SIZE`] bytes (fields past it are
    /// ignored), `None` if `b` is shorter.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b = b.get(..ATTR_SIZE)?;
        let u64_at = |off: usize| crate::abi::get_u64(b, off);
        let u32_at = |off: usize| crate::abi::get_u32(b, off);
        let bitfield_at = offset_of!(perf_event_attr, _bitfield_1);
        let bitfield_bytes: [u8; 8] = b[bitfield_at..bitfield_at + 8].try_into().ok()?;
        let mut a = perf_event_attr {
            type_: u32_at(offset_of!(perf_event_attr, type_)),
            size: u32_at(offset_of!(perf_event_attr, size)),
            config: u64_at(offset_of!(perf_event_attr, config)),
            sample_type: u64_at(offset_of!(perf_event_attr, sample_type)),
            read_format: u64_at(offset_of!(perf_event_attr, read_format)),
            // The bitfield word as stored: the storage is its bytes.
            _bitfield_1: __BindgenBitfieldUnit::new(bitfield_bytes),
            bp_type: u32_at(offset_of!(perf_event_attr, bp_type)),
            branch_sample_type: u64_at(offset_of!(perf_event_attr, branch_sample_type)),
            sample_regs_user: u64_at(offset_of!(perf_event_attr, sample_regs_user)),
            sample_stack_user: u32_at(offset_of!(perf_event_attr, sample_stack_user)),
            clockid: u32_at(offset_of!(perf_event_attr, clockid)).cast_signed(),
            sample_regs_intr: u64_at(offset_of!(perf_event_attr, sample_regs_intr)),
            aux_watermark: u32_at(offset_of!(perf_event_attr, aux_watermark)),
            sample_max_stack: crate::abi::get_u16(b, offset_of!(perf_event_attr, sample_max_stack)),
            aux_sample_size: u32_at(offset_of!(perf_event_attr, aux_sample_size)),
            sig_data: u64_at(offset_of!(perf_event_attr, sig_data)),
            ..perf_event_attr::default()
        };
        a.sample_period = u64_at(offset_of!(perf_event_attr, __bindgen_anon_1));
        a.wakeup_events = u32_at(offset_of!(perf_event_attr, __bindgen_anon_2));
        a.config1 = u64_at(offset_of!(perf_event_attr, __bindgen_anon_3));
        a.config2 = u64_at(offset_of!(perf_event_attr, __bindgen_anon_4));
        Some(Self::from_kernel(&a))
    }

    pub fn has_flag(&self, flag: u64) -> bool {
        self.flags & flag != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{event_type, get_u16, get_u32, get_u64, read_format, sample};

    /// Every field set to a value no other field has.
    fn distinct_attr() -> EventAttr {
        EventAttr {
            type_: event_type::TRACEPOINT,
            config: 317,
            sample_period_or_freq: 0x1111,
            sample_type: sample::IDENTIFIER | sample::TID | sample::TIME | sample::RAW,
            read_format: read_format::ID | read_format::LOST,
            flags: attr_flag::SAMPLE_ID_ALL | attr_flag::WRITE_BACKWARD | attr_flag::FREQ,
            wakeup: 0x2222,
            bp_type: 0x3333,
            config1: 0x4444,
            config2: 0x5555,
            branch_sample_type: 0x6666,
            sample_regs_user: 0x7777,
            sample_stack_user: 0x8888,
            clockid: -7,
            sample_regs_intr: 0x9999,
            aux_watermark: 0xaaaa,
            sample_max_stack: 127,
            aux_sample_size: 0xbbbb,
            sig_data: 0xcccc,
        }
    }

    #[test]
    fn file_attr_fields_sit_where_perf_6_1_reads_them() {
        let attr = distinct_attr();
        let b = attr.to_bytes();
        // Offsets from perf 6.1's struct perf_event_attr (PERF_ATTR_SIZE_VER7).
        assert_eq!(get_u32(&b, 0), 2, "type");
        assert_eq!(get_u32(&b, 4), 128, "size");
        assert_eq!(get_u64(&b, 8), 317, "config");
        assert_eq!(get_u64(&b, 16), 0x1111, "sample_period/freq");
        assert_eq!(get_u64(&b, 24), attr.sample_type, "sample_type");
        assert_eq!(get_u64(&b, 32), (1 << 2) | (1 << 4), "read_format");
        assert_eq!(get_u64(&b, 40), (1 << 18) | (1 << 27) | (1 << 10), "flags");
        assert_eq!(get_u32(&b, 48), 0x2222, "wakeup");
        assert_eq!(get_u32(&b, 52), 0x3333, "bp_type");
        assert_eq!(get_u64(&b, 56), 0x4444, "config1");
        assert_eq!(get_u64(&b, 64), 0x5555, "config2");
        assert_eq!(get_u64(&b, 72), 0x6666, "branch_sample_type");
        assert_eq!(get_u64(&b, 80), 0x7777, "sample_regs_user");
        assert_eq!(get_u32(&b, 88), 0x8888, "sample_stack_user");
        assert_eq!(get_u32(&b, 92), (-7i32).cast_unsigned(), "clockid");
        assert_eq!(get_u64(&b, 96), 0x9999, "sample_regs_intr");
        assert_eq!(get_u32(&b, 104), 0xaaaa, "aux_watermark");
        assert_eq!(get_u16(&b, 108), 127, "sample_max_stack");
        assert_eq!(get_u16(&b, 110), 0, "__reserved_2");
        assert_eq!(get_u32(&b, 112), 0xbbbb, "aux_sample_size");
        assert_eq!(get_u32(&b, 116), 0, "aux_action");
        assert_eq!(get_u64(&b, 120), 0xcccc, "sig_data");
        assert_eq!(EventAttr::from_bytes(&b), Some(attr));
        assert_eq!(EventAttr::from_bytes(&b[..127]), None);
    }

    #[test]
    fn kernel_attr_is_the_crates_whole_struct() {
        // PERF_ATTR_SIZE_VER9 for perf-event-open-sys 7: a crate update that
        // grows the struct shows up here.
        assert_eq!(KERNEL_ATTR_SIZE, 144);
        assert_eq!(ATTR_SIZE, 128);
        let attr = distinct_attr();
        let k = attr.to_kernel();
        assert_eq!(k.size, 144);
        assert_eq!((k.type_, k.config), (2, 317));
        assert_eq!(k.sample_freq, 0x1111);
        assert_eq!(k.wakeup_watermark, 0x2222);
        assert_eq!((k.config1, k.config2), (0x4444, 0x5555));
        assert_eq!(
            (
                k.freq(),
                k.sample_id_all(),
                k.write_backward(),
                k.disabled()
            ),
            (1, 1, 1, 0)
        );
        assert_eq!((k.config3, k.config4), (0, 0));
        assert_eq!(EventAttr::from_kernel(&k), attr);
    }

    #[test]
    fn each_flag_is_the_bit_the_crates_setter_sets() {
        let mut all = 0;
        for (flag, get, set) in FLAG_FIELDS {
            let mut a = perf_event_attr::default();
            set(&mut a, 1);
            assert_eq!(a._bitfield_1.get(0, 64), flag, "flag {flag:#x}");
            assert_eq!(get(&a), 1);
            assert_eq!(all & flag, 0, "flag {flag:#x} listed twice");
            all |= flag;
        }
        let every = EventAttr {
            flags: all,
            ..EventAttr::default()
        };
        assert_eq!(EventAttr::from_kernel(&every.to_kernel()).flags, all);
        assert_eq!(get_u64(&every.to_bytes(), 40), all);
    }
}
