//! The raw syscalls and ioctls. Every call goes through [`check`], so errno
//! handling is written once; fds come back as [`OwnedFd`] so Drop closes them.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::abi::{ATTR_SIZE, EventAttr};

/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// ioctl numbers from include/uapi/linux/perf_event.h (`'$'` = 0x24).
mod ioc {
    /// `_IO('$', 0)`
    pub const ENABLE: u64 = 0x2400;
    /// `_IO('$', 1)`
    pub const DISABLE: u64 = 0x2401;
    /// `_IO('$', 5)`
    pub const SET_OUTPUT: u64 = 0x2405;
    /// `_IOW('$', 6, char *)`
    pub const SET_FILTER: u64 = 0x4008_2406;
    /// `_IOR('$', 7, __u64 *)`
    pub const ID: u64 = 0x8008_2407;
    /// `_IOW('$', 9, __u32)`: the argument is the value, not a pointer.
    pub const PAUSE_OUTPUT: u64 = 0x4004_2409;
}

/// Integer results of syscalls, where `-1` means "see errno".
trait SyscallResult: Copy + PartialEq {
    const FAILED: Self;
}

impl SyscallResult for i32 {
    const FAILED: Self = -1;
}

impl SyscallResult for i64 {
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

/// The attr as the kernel reads it: 128 bytes, aligned for its u64 fields.
#[repr(C, align(8))]
struct AttrBytes([u8; ATTR_SIZE]);

/// `perf_event_open(attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)`.
pub fn perf_event_open(attr: &EventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let mut bytes = AttrBytes(attr.to_bytes());
    let group_fd: libc::c_int = -1;
    // SAFETY: the attr buffer is a local we own, valid for the ATTR_SIZE bytes
    // its `size` field announces, and outlives the call (on E2BIG the kernel
    // writes the size it wants back into it, which is fine for a local).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            bytes.0.as_mut_ptr(),
            pid,
            cpu,
            group_fd,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    let fd = RawFd::try_from(check(ret)?)
        .map_err(|_| io::Error::other("perf_event_open returned an out-of-range fd"))?;
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// # Safety
/// When `request` takes a pointer, `arg` must be a pointer valid for what the
/// kernel reads or writes through it, for the duration of the call.
unsafe fn ioctl(fd: BorrowedFd<'_>, request: u64, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: `fd` is a live fd (borrowed); pointer validity is the caller's
    // contract above.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), request as libc::Ioctl, arg) };
    check(ret).map(|_| ())
}

pub fn enable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: an integer-argument request.
    unsafe { ioctl(fd, ioc::ENABLE, 0) }
}

pub fn disable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: an integer-argument request.
    unsafe { ioctl(fd, ioc::DISABLE, 0) }
}

/// Redirects `fd`'s output into the ring of `target` (same CPU, same clock,
/// same `write_backward`).
pub fn set_output(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    let target = libc::c_ulong::try_from(target.as_raw_fd())
        .map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: an integer-argument request (the target fd number).
    unsafe { ioctl(fd, ioc::SET_OUTPUT, target) }
}

/// Pauses (true) or resumes (false) the ring `fd` writes to.
pub fn pause_output(fd: BorrowedFd<'_>, pause: bool) -> io::Result<()> {
    // SAFETY: PAUSE_OUTPUT takes the value itself, not a pointer.
    unsafe { ioctl(fd, ioc::PAUSE_OUTPUT, libc::c_ulong::from(pause)) }
}

pub fn set_filter(fd: BorrowedFd<'_>, filter: &str) -> io::Result<()> {
    let filter = CString::new(filter).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: the kernel reads a NUL-terminated string through the pointer;
    // `filter` is one and outlives the call.
    unsafe { ioctl(fd, ioc::SET_FILTER, filter.as_ptr() as libc::c_ulong) }
}

/// The kernel's id of the event (what IDENTIFIER samples carry).
pub fn event_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut id: u64 = 0;
    // SAFETY: the kernel writes one u64 through the pointer; `id` is a u64
    // that outlives the call.
    unsafe { ioctl(fd, ioc::ID, std::ptr::from_mut(&mut id) as libc::c_ulong)? };
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

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; _SC_PAGESIZE is always valid.
    let ret = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    check(ret)
        .ok()
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
