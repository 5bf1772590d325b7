//! Linux native AIO (`io_submit`) for a snapshot's direct writes: the
//! dump thread hands a full buffer to the kernel and fills the next one
//! while the device writes it (seed 03's asynchronous writing, without a
//! second thread to wake: BENCHMARKS.md section 44 found a writer thread
//! 2-4× slower under load, each buffer needing two threads woken in turn).
//!
//! The kernel writes a direct AIO asynchronously only where it neither
//! extends the file nor is unaligned; ext4 makes an extending one wait
//! (`IOMAP_DIO_FORCE_WAIT`), so the caller reserves the file's blocks
//! ahead with `fallocate` first (`snapshot::output`).
//!
//! [`DirectWrites`] owns every buffer the kernel may still read from: one
//! is given back only from its completion event, and dropping the queue
//! waits for what is in flight (or, if a wait fails, destroys the context,
//! which waits), so no buffer is freed or reused under a write.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;

/// `struct iocb` of include/uapi/linux/aio_abi.h. `aio_key` and
/// `aio_rw_flags` share a padded 64-bit word whose order depends on the
/// byte order; both are always zero here.
#[repr(C)]
#[derive(Default)]
struct Iocb {
    aio_data: u64,
    aio_key_and_rw_flags: u64,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

/// `struct io_event`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PWRITE: u16 = 1;

/// A write the kernel has, with the buffer it reads from.
struct Flight {
    id: u64,
    buf: Vec<u8>,
    range: Range<usize>,
    offset: u64,
}

/// A finished write: its buffer back, and how it went.
pub struct Done {
    pub buf: Vec<u8>,
    /// The part of `buf` that was to be written.
    pub range: Range<usize>,
    pub offset: u64,
    /// Bytes written, or the error.
    pub result: io::Result<usize>,
}

/// The most writes a [`DirectWrites`] keeps in flight.
pub const MAX_DEPTH: usize = 8;

/// An AIO context of the kernel. One is kept per thread for the thread's
/// life and lent to each file it writes: destroying a context waits for
/// an RCU grace period, 30-40 ms on these machines, idle or not, longer
/// than a whole 256 KiB-per-CPU dump.
struct Context {
    id: libc::c_ulong,
}

impl Context {
    fn new() -> io::Result<Self> {
        let mut id: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context's id to `id`, a live
        // local of the type the syscall takes (aio_context_t).
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_setup,
                MAX_DEPTH as libc::c_long,
                &mut id as *mut libc::c_ulong,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { id })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context is this value's own. io_destroy waits for
        // the writes still in flight before it returns (fs/aio.c), so the
        // buffers a queue frees after it ([`DirectWrites::abandon`]) are
        // no longer read; a queue lent back has none in flight.
        unsafe {
            libc::syscall(libc::SYS_io_destroy, self.id);
        }
    }
}

thread_local! {
    /// The thread's context while no file borrows it.
    static IDLE_CONTEXT: std::cell::RefCell<Option<Context>> =
        const { std::cell::RefCell::new(None) };
}

/// Writes to one file in flight at once, up to a depth.
pub struct DirectWrites<'f> {
    file: &'f File,
    /// Borrowed from the thread ([`IDLE_CONTEXT`]) and lent back on drop,
    /// with nothing in flight.
    context: Option<Context>,
    depth: usize,
    next_id: u64,
    in_flight: VecDeque<Flight>,
}

impl<'f> DirectWrites<'f> {
    /// A queue of up to `depth` (at most [`MAX_DEPTH`]) writes to `file`,
    /// on the calling thread's context. Fails where the kernel has no AIO
    /// (`ENOSYS`) or its system-wide limit is reached (`EAGAIN`,
    /// `fs.aio-max-nr`): the caller writes synchronously.
    pub fn new(file: &'f File, depth: usize) -> io::Result<Self> {
        let context = match IDLE_CONTEXT.with(|idle| idle.borrow_mut().take()) {
            Some(context) => context,
            None => Context::new()?,
        };
        Ok(Self {
            file,
            context: Some(context),
            depth: depth.clamp(1, MAX_DEPTH),
            next_id: 0,
            in_flight: VecDeque::new(),
        })
    }

    /// Destroys the context, which waits for every write in flight, and
    /// then frees their buffers; later submissions are refused.
    fn abandon(&mut self) {
        self.context = None;
        self.in_flight.clear();
    }

    fn context_id(&self) -> libc::c_ulong {
        self.context.as_ref().map_or(0, |c| c.id)
    }

    /// Writes in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether another write can be submitted without waiting.
    pub fn has_room(&self) -> bool {
        self.in_flight.len() < self.depth
    }

    /// Hands `buf[range]` to the kernel, to be written at `offset`. On a
    /// refusal at submission the buffer comes back with the error. The
    /// caller waits ([`Self::wait_one`]) when there is no room.
    pub fn submit(
        &mut self,
        buf: Vec<u8>,
        range: Range<usize>,
        offset: u64,
    ) -> Result<(), (Vec<u8>, io::Error)> {
        let bytes = match buf.get(range.clone()) {
            Some(bytes) if self.has_room() => bytes,
            Some(_) => return Err((buf, io::Error::other("no room for another write"))),
            None => return Err((buf, io::Error::from_raw_os_error(libc::EINVAL))),
        };
        let (Ok(fd), Ok(at)) = (u32::try_from(self.file.as_raw_fd()), i64::try_from(offset)) else {
            return Err((buf, io::Error::from_raw_os_error(libc::EINVAL)));
        };
        let id = self.next_id;
        let mut iocb = Iocb {
            aio_data: id,
            aio_lio_opcode: IOCB_CMD_PWRITE,
            aio_fildes: fd,
            aio_buf: bytes.as_ptr() as u64,
            aio_nbytes: bytes.len() as u64,
            aio_offset: at,
            ..Iocb::default()
        };
        let mut list = [&mut iocb as *mut Iocb];
        // SAFETY: the kernel copies the one iocb the list points to before
        // returning; the bytes it names are the heap memory of `buf`, which
        // moves into `in_flight` below and stays there (its heap memory
        // unmoved, unchanged) until its completion event is read, or the
        // drop waits for it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_submit,
                self.context_id(),
                1 as libc::c_long,
                list.as_mut_ptr(),
            )
        };
        if r != 1 {
            let e = if r < 0 {
                io::Error::last_os_error()
            } else {
                io::Error::from_raw_os_error(libc::EAGAIN)
            };
            return Err((buf, e));
        }
        self.next_id += 1;
        self.in_flight.push_back(Flight {
            id,
            buf,
            range,
            offset,
        });
        Ok(())
    }

    /// Waits for one write in flight to finish (any: the kernel's order),
    /// and gives its buffer back. `None` when nothing is in flight.
    pub fn wait_one(&mut self) -> Option<Done> {
        if self.in_flight.is_empty() {
            return None;
        }
        let event = loop {
            let mut event = IoEvent::default();
            // SAFETY: io_getevents writes at most 1 event to `event`, a
            // live local of the kernel's struct io_event layout; no timeout.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    self.context_id(),
                    1 as libc::c_long,
                    1 as libc::c_long,
                    &mut event as *mut IoEvent,
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            if r == 1 {
                break event;
            }
            let e = io::Error::last_os_error();
            if r < 0 && e.kind() != io::ErrorKind::Interrupted {
                // The context is this queue's and the count is in range:
                // nothing but a signal makes the wait fail.
                tracing::error!("io_getevents: {e}");
                self.abandon();
                return None;
            }
        };
        let Some(at) = self.in_flight.iter().position(|f| f.id == event.data) else {
            tracing::error!("io_getevents gave an event of no write in flight");
            self.abandon();
            return None;
        };
        let flight = self.in_flight.remove(at)?;
        let result = if event.res < 0 {
            Err(io::Error::from_raw_os_error(
                i32::try_from(-event.res).unwrap_or(libc::EIO),
            ))
        } else {
            Ok(usize::try_from(event.res).unwrap_or(0))
        };
        Some(Done {
            buf: flight.buf,
            range: flight.range,
            offset: flight.offset,
            result,
        })
    }
}

impl Drop for DirectWrites<'_> {
    fn drop(&mut self) {
        while self.wait_one().is_some() {}
        if let Some(context) = self.context.take() {
            // A second queue on the same thread made its own context: the
            // one left over is destroyed.
            let extra = IDLE_CONTEXT.with(|idle| idle.borrow_mut().replace(context));
            drop(extra);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn writes_in_flight_land_where_they_were_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .or_else(|_| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .read(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)
            })
            .unwrap();
        let page = crate::perf::page_size();
        let piece = 64 * 1024;
        file.set_len(4 * piece as u64).unwrap();
        let mut aio = DirectWrites::new(&file, 2).unwrap();
        let mut spare: Vec<Vec<u8>> = Vec::new();
        // Written out of order, two at a time.
        for (n, at) in [3usize, 0, 2, 1].into_iter().enumerate() {
            let mut buf = spare.pop().unwrap_or_else(|| vec![0u8; piece + page]);
            let start = buf.as_ptr().align_offset(page);
            buf[start..start + piece].fill(b'a' + at as u8);
            if !aio.has_room() {
                let done = aio.wait_one().unwrap();
                assert_eq!(done.result.unwrap(), piece);
                spare.push(done.buf);
            }
            aio.submit(buf, start..start + piece, (at * piece) as u64)
                .map_err(|(_, e)| e)
                .unwrap();
            assert_eq!(aio.in_flight(), (n + 1).min(2));
        }
        while let Some(done) = aio.wait_one() {
            assert_eq!(done.result.unwrap(), piece);
            assert_eq!(done.range.len(), piece);
        }
        assert!(aio.wait_one().is_none());
        drop(aio);
        let bytes = std::fs::read(&path).unwrap();
        for at in 0..4 {
            let part = &bytes[at * piece..(at + 1) * piece];
            assert!(part.iter().all(|&b| b == b'a' + at as u8), "piece {at}");
        }
    }

    #[test]
    fn a_write_past_its_buffer_or_without_room_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("out")).unwrap();
        let mut aio = DirectWrites::new(&file, 1).unwrap();
        let (buf, e) = aio.submit(vec![0u8; 16], 8..32, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        aio.submit(buf, 0..16, 0).map_err(|(_, e)| e).unwrap();
        let (_, e) = aio.submit(vec![1u8; 16], 0..16, 16).unwrap_err();
        assert!(e.to_string().contains("no room"), "{e}");
        let done = aio.wait_one().unwrap();
        assert_eq!(done.result.unwrap(), 16);
        drop(aio);
        assert_eq!(
            std::fs::read(dir.path().join("out")).unwrap(),
            vec![0u8; 16]
        );
    }
}
