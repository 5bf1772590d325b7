//! The raw syscalls and ioctls: perf_event_open and the perf ioctls through
//! perf-event-open-sys's typed wrappers (request codes right for every
//! architecture), the rest through libc/nix. Every call goes through
//! [`check`], so errno handling is written once; fds come back as
//! [`OwnedFd`] so Drop closes them.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use perf_event_open_sys::{bindings, ioctls};

use crate::abi::EventAttr;

/// Integer results of syscalls, where `-1` means "see errno".
trait SyscallResult: Copy + PartialEq {
    const FAILED: Self;
}

impl SyscallResult for i32 {
    const FAILED: Self = -1;
}

impl SyscallResult for isize {
    const FAILED: Self = -1;
}

/// The one errno check: a syscall's `-1` becomes the thread's errno.
fn check<T: SyscallResult>(ret: T) -> io::Result<T> {
    if ret == T::FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `perf_event_open(attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)`.
pub fn perf_event_open(attr: &EventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let mut kernel_attr = attr.to_kernel();
    let group_fd: libc::c_int = -1;
    let flags = libc::c_ulong::from(bindings::PERF_FLAG_FD_CLOEXEC);
    // SAFETY: `kernel_attr` is a local perf_event_attr we own, as large as
    // its `size` field announces, and outlives the call (on E2BIG the kernel
    // writes the size it wants back into it, which is fine for a local).
    let ret = unsafe {
        perf_event_open_sys::perf_event_open(&raw mut kernel_attr, pid, cpu, group_fd, flags)
    };
    let fd = RawFd::from(check(ret)?);
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn enable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: an integer-argument request on a live fd.
    check(unsafe { ioctls::ENABLE(fd.as_raw_fd(), 0) }).map(drop)
}

pub fn disable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: an integer-argument request on a live fd.
    check(unsafe { ioctls::DISABLE(fd.as_raw_fd(), 0) }).map(drop)
}

/// Redirects `fd`'s output into the ring of `target` (same CPU, same clock,
/// same `write_backward`).
pub fn set_output(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: an integer-argument request (the target fd number), both fds
    // live.
    check(unsafe { ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) }).map(drop)
}

/// Pauses (true) or resumes (false) the ring `fd` writes to.
pub fn pause_output(fd: BorrowedFd<'_>, pause: bool) -> io::Result<()> {
    // SAFETY: PAUSE_OUTPUT takes the value itself, not a pointer.
    check(unsafe { ioctls::PAUSE_OUTPUT(fd.as_raw_fd(), u32::from(pause)) }).map(drop)
}

pub fn set_filter(fd: BorrowedFd<'_>, filter: &str) -> io::Result<()> {
    let filter = CString::new(filter).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: the kernel only reads a NUL-terminated string through the
    // pointer (the binding's `*mut` is the header's `char *`); `filter` is
    // one and outlives the call.
    check(unsafe { ioctls::SET_FILTER(fd.as_raw_fd(), filter.as_ptr().cast_mut()) }).map(drop)
}

/// The kernel's id of the event (what IDENTIFIER samples carry).
pub fn event_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut id: u64 = 0;
    // SAFETY: the kernel writes one u64 through the pointer; `id` is a u64
    // that outlives the call.
    check(unsafe { ioctls::ID(fd.as_raw_fd(), &raw mut id) })?;
    Ok(id)
}

/// `read(2)` into `buf`; returns the bytes read.
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid writable buffer of `buf.len()` bytes for the
    // duration of the call.
    let ret = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = check(ret)?;
    usize::try_from(n).map_err(|_| io::Error::other("read returned a negative count"))
}

/// The system page size: the one place it is asked for (rings, the output
/// file's chunks, the perf.data header). Falls back to 4 KiB if sysconf
/// fails or answers something that is not a power of two.
pub fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| n.is_power_of_two())
        .unwrap_or(4096)
}

/// `mount -t tracefs nodev <target>`.
pub fn mount_tracefs(target: &str) -> io::Result<()> {
    let source = c"nodev";
    let fstype = c"tracefs";
    let target = CString::new(target).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: all three strings are NUL-terminated and live across the call;
    // no mount data is passed.
    let ret = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    check(ret).map(|_| ())
}

/// The reason a perf_event_open failure is worth telling the user, in words.
pub fn open_failure_reason(err: &io::Error, hardware: bool) -> String {
    match err.raw_os_error() {
        Some(libc::ENOENT | libc::EOPNOTSUPP) if hardware => {
            "the kernel has no hardware PMU for it (no hardware counters on this machine)"
                .to_string()
        }
        Some(libc::ENOENT) => "the kernel does not know this event".to_string(),
        Some(libc::EOPNOTSUPP) => "the kernel does not support this event here".to_string(),
        Some(libc::EACCES | libc::EPERM) => {
            "permission denied (needs root or CAP_PERFMON, and CAP_SYS_ADMIN for tracepoints)"
                .to_string()
        }
        Some(libc::EMFILE) => "too many open files (raise RLIMIT_NOFILE)".to_string(),
        Some(libc::EINVAL) => "the kernel rejected the attributes (EINVAL)".to_string(),
        _ => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::bindings;

    /// The crate's request codes, as `u64` for comparison.
    fn crate_codes() -> [u64; 6] {
        [
            bindings::ENABLE,
            bindings::DISABLE,
            bindings::SET_OUTPUT,
            bindings::SET_FILTER,
            bindings::ID,
            bindings::PAUSE_OUTPUT,
        ]
        .map(u64::from)
    }

    #[test]
    fn ioctl_codes_are_the_kernels_for_this_architecture() {
        // The _IO/_IOW/_IOR encodings of include/uapi/linux/perf_event.h, as
        // nix computes them for the target (direction bits and argument size
        // differ on powerpc and mips).
        let kernel = [
            nix::request_code_none!(b'$', 0),
            nix::request_code_none!(b'$', 1),
            nix::request_code_none!(b'$', 5),
            nix::request_code_write!(b'$', 6, size_of::<*mut libc::c_char>()),
            nix::request_code_read!(b'$', 7, size_of::<*mut u64>()),
            nix::request_code_write!(b'$', 9, size_of::<u32>()),
        ]
        .map(u64::from);
        assert_eq!(crate_codes(), kernel);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn ioctl_codes_are_the_x86_64_numbers() {
        assert_eq!(
            crate_codes(),
            [
                0x2400,
                0x2401,
                0x2405,
                0x4008_2406,
                0x8008_2407,
                0x4004_2409
            ]
        );
    }

    #[test]
    fn page_size_is_the_kernels() {
        // The kernel's own word, independent of sysconf: the page size of
        // this process's first mapping (its executable), in kB.
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let kb: usize = smaps
            .lines()
            .find_map(|l| l.strip_prefix("KernelPageSize:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        assert_eq!(super::page_size(), kb * 1024);
    }
}
