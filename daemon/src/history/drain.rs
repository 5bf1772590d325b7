//! The history's drain: one thread that copies every CPU's records out
//! of the recorder's record tap into a bounded queue the writer takes
//! from (`queue`; stack copies unwound on the way where the unwinder is
//! ready for them, see `unwind`), woken by the kernel when a quarter of a
//! ring is written (epoll on the rings' fds, as perf's reader waits on
//! its rings) and at least every [`ROUND`]. Where the wakeup was at half a
//! ring (the kernel's default) the drain needed a round every 200 ms to
//! keep ahead of a 4 MiB ring at 19999 Hz under a CPU-bound neighbour:
//! woken late, it had half a ring left before the kernel overwrote what it
//! had not read. A quarter leaves three quarters, and a round every
//! 500 ms then keeps ahead as well (every second did not, quite), for a
//! sixth less of the drain's CPU at 999 Hz and half of it idle: each round
//! has a cost of its own (BENCHMARKS.md section 49).
//!
//! A drain is a copy, a few hundred microseconds for a full ring (a few
//! milliseconds for a 16 MiB one of stack copies, ~3 µs each unwound),
//! so the rings are read before the kernel comes round to overwrite them
//! while the writer compresses or waits for the disk. Both run at `history.writer_nice` (-10): under a load of
//! hundreds of runnable tasks a nice-0 thread that has work waiting gets
//! a few milliseconds of CPU a second (measured at 19999 Hz: the writer
//! waited runnable 10.9 s of 14 s and the queue filled), and raising it
//! changes when the work is done, not how much of it there is.
//!
//! When the queue is full (the writer far behind) the drain leaves the
//! rings as they are: the kernel then overwrites records not read yet, and
//! the tap counts them in LOST records where they were (`recorder::tap`),
//! which the history counts. The queue's memory is bounded by the rings'
//! size, not by the load.

use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::EventFd;

use super::shared::{Shared, lock};
use crate::recorder::Recorder;

/// How often the rings are drained without a wakeup (the rings wake the
/// drain when a quarter of one is written, `perf::sample_ring`)...
const ROUND: Duration = Duration::from_millis(500);
/// ...and how soon again while the queue is full.
const FULL_ROUND: Duration = Duration::from_millis(20);
/// The writer is told once this many bytes wait for it.
pub(super) const WAKE_WRITER_AT: usize = 1 << 20;

/// The drain thread. Dropping it stops and joins it (what it has queued
/// stays for the writer).
pub(super) struct DrainThread {
    stop: Arc<EventFd>,
    handle: Option<JoinHandle<()>>,
}

/// Where the drain finds the recorder of the moment.
pub(super) type RecorderSource = Arc<dyn Fn() -> Option<Arc<Recorder>> + Send + Sync>;

impl DrainThread {
    pub(super) fn spawn(shared: Arc<Shared>, recorder: RecorderSource) -> io::Result<Self> {
        let stop = Arc::new(EventFd::new()?);
        let stop_in_thread = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("history-drain".into())
            .spawn(move || {
                let nice = shared.settings.writer_nice;
                if nice != 0 {
                    crate::perf::sched::run_at_nice(nice, "history.writer_nice");
                }
                if let Err(e) = run(&shared, &recorder, &stop_in_thread) {
                    // The writer still drains at each of its rounds.
                    tracing::error!(
                        "waiting for the rings' wakeups failed: {e}; the history now drains \
                         them only at its writer's rounds"
                    );
                }
            })?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for DrainThread {
    fn drop(&mut self) {
        let _ = self.stop.write(1);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// The rings being waited on: those of `recorder` with `ids` event ids.
struct Watched {
    recorder: Arc<Recorder>,
    ids: usize,
    epoll: Epoll,
}

const STOP: u64 = u64::MAX;

fn watch(recorder: &Arc<Recorder>, stop: &EventFd) -> nix::Result<Watched> {
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    epoll.add(stop.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, STOP))?;
    // Ids first: rings of a CPU that comes online meanwhile are watched
    // at the next round, when the count has grown.
    let ids = recorder.event_id_count();
    if let Some(tap) = recorder.tap() {
        tap.watch(&epoll)?;
    }
    Ok(Watched {
        recorder: Arc::clone(recorder),
        ids,
        epoll,
    })
}

fn run(shared: &Shared, source: &RecorderSource, stop: &EventFd) -> nix::Result<()> {
    let idle = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    idle.add(stop.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, STOP))?;
    let mut watched: Option<Watched> = None;
    let mut full = false;
    let mut events = [EpollEvent::empty(); 64];
    loop {
        let recorder = source().filter(|r| r.tap().is_some());
        let current = matches!(
            (&recorder, &watched),
            (Some(r), Some(w)) if Arc::ptr_eq(r, &w.recorder) && r.event_id_count() == w.ids
        );
        if !current {
            watched = match &recorder {
                Some(r) => Some(watch(r, stop)?),
                None => None,
            };
        }
        let epoll = watched.as_ref().map_or(&idle, |w| &w.epoll);
        let wait = if full { FULL_ROUND } else { ROUND };
        let timeout = EpollTimeout::try_from(wait).unwrap_or(EpollTimeout::NONE);
        let n = match epoll.wait(&mut events, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => return Err(e),
        };
        if events[..n].iter().any(|e| e.data() == STOP) {
            let _ = stop.read();
            return Ok(());
        }
        let Some(w) = &watched else {
            continue;
        };
        let mut queue = lock(&shared.drained);
        full = !queue.drain(&w.recorder, &shared.unwinder);
        let wake_writer = queue.bytes() >= WAKE_WRITER_AT;
        drop(queue);
        if wake_writer {
            // Said under the lock the writer waits with, so the wakeup
            // cannot fall between its look and its wait.
            lock(&shared.wake).queued = true;
            shared.woken.notify_all();
        }
    }
}
