//! Scheduling of the threads that freeze the rings, and of everything else.
//!
//! A freeze is a few milliseconds of work, but on a loaded machine a thread
//! at normal priority shares the CPUs with every runnable task and waking
//! it takes milliseconds, during which the rings overwrite the moment of
//! the trigger (measured under `perf bench sched messaging`: 0.5 s for a
//! 4 MiB-per-CPU snapshot at normal priority, 20 ms under SCHED_FIFO). So
//! the threads on the way from a trigger to frozen rings run SCHED_FIFO for
//! the daemon's life: the signal thread, the condition thread, the dump
//! thread ([`run_realtime`]) and the workers of the [`freeze_pool`] that
//! switch the per-CPU rings ([`pin_freeze_workers`]). Asleep they cost
//! nothing, woken they run at once.
//!
//! Nothing else does: once the rings are frozen the dump thread drops to
//! the normal policy for the write and retention ([`NormalPriority`]), at
//! a nice of its own (`snapshot.writer_nice`, -20 by default): under a
//! load of hundreds of runnable tasks a write at nice 0 gets a few percent
//! of a CPU and takes ten times as long (BENCHMARKS.md section 18); at
//! -20 it gets about 87 times a normal task's share (at -10, nine times:
//! a 32 MiB file took twice as long in the daemon's cgroup, section 47),
//! and a realtime policy is still kept from everything but the freeze.
//! Only that thread is raised, and only while it writes: threads it
//! starts meanwhile begin at nice 0 (SCHED_RESET_ON_FORK). Compression
//! runs on rayon's global pool at nice 0, and a `Compress` asked over the
//! API runs on the [`background_pool`], whose workers are niced
//! ([`BACKGROUND_NICE`]) so a socket-group member cannot take the CPUs
//! from the machine's work.
//! The history's drain and writer run at `history.writer_nice` (-10 by
//! default) for their life, for the same reason as the dump's write.
//! Realtime and a negative nice need CAP_SYS_NICE; without it everything
//! runs at normal priority and a warning says so once.

use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The nice value of the [`background_pool`]'s workers: a tenth of a
/// normal task's share of a busy CPU.
pub const BACKGROUND_NICE: i32 = 10;

/// SCHED_FIFO at `priority` (1..=99) for the calling thread; children it
/// forks start at normal priority.
fn set_current_thread_fifo(priority: u8) -> io::Result<()> {
    set_current_thread_policy(
        libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK,
        i32::from(priority),
    )
}

/// SCHED_OTHER (the normal time-sharing policy) for the calling thread.
fn set_current_thread_normal() -> io::Result<()> {
    set_current_thread_policy(libc::SCHED_OTHER, 0)
}

/// SCHED_OTHER for the calling thread, its children started at nice 0
/// whatever its own nice.
fn set_current_thread_normal_reset_on_fork() -> io::Result<()> {
    set_current_thread_policy(libc::SCHED_OTHER | libc::SCHED_RESET_ON_FORK, 0)
}

fn set_current_thread_policy(policy: i32, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param
    // that the kernel only reads during the call.
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The nice value of the calling thread (Linux: per thread, by tid).
fn set_current_thread_nice(nice: i32) -> io::Result<()> {
    let tid = nix::unistd::gettid().as_raw();
    let tid = libc::id_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: setpriority takes no pointers; PRIO_PROCESS with a tid
    // changes that one thread of ours.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

static WARNED: AtomicBool = AtomicBool::new(false);
static WARNED_NICE: AtomicBool = AtomicBool::new(false);

fn warn_nice_refused(nice: i32, e: &io::Error) {
    if !WARNED_NICE.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "the dump's write runs at nice 0: nice {nice} refused ({e}); grant CAP_SYS_NICE \
             or set snapshot.writer_nice = 0"
        );
    }
}

fn warn_refused(priority: u8, e: &io::Error) {
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "triggers and freezes run at normal priority: SCHED_FIFO {priority} refused ({e}); \
             grant CAP_SYS_NICE or set snapshot.realtime_priority = 0"
        );
    }
}

/// Runs the calling thread at SCHED_FIFO `priority` from now on (0: normal
/// priority). Returns whether it is raised; a refusal is logged once.
pub fn run_realtime(priority: u8) -> bool {
    if priority == 0 {
        let _ = set_current_thread_normal();
        return false;
    }
    match set_current_thread_fifo(priority) {
        Ok(()) => true,
        Err(e) => {
            warn_refused(priority, &e);
            false
        }
    }
}

/// One worker per CPU, for the per-CPU freeze and copy of a capture only.
pub fn freeze_pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
            .thread_name(|i| format!("flightrec-freeze-{i}"))
            .build()
            .unwrap_or_else(|e| panic!("cannot start the freeze workers: {e}"))
    })
}

/// Runs every [`freeze_pool`] worker at SCHED_FIFO `priority` from now on
/// (0: back to normal), so the per-CPU freezes of a capture start together.
pub fn pin_freeze_workers(priority: u8) {
    freeze_pool().broadcast(|_| {
        if priority == 0 {
            let _ = set_current_thread_normal();
        } else if let Err(e) = set_current_thread_fifo(priority) {
            warn_refused(priority, &e);
        }
    });
}

/// Workers at nice [`BACKGROUND_NICE`] for work others ask for that may
/// take long (a `Compress`): it progresses on a busy machine without
/// taking the CPUs from it.
pub fn background_pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
            .thread_name(|i| format!("flightrec-background-{i}"))
            .start_handler(|_| {
                if let Err(e) = set_current_thread_nice(BACKGROUND_NICE) {
                    tracing::warn!("cannot lower the priority of a background worker: {e}");
                }
            })
            .build()
            .unwrap_or_else(|e| panic!("cannot start the background workers: {e}"))
    })
}

/// Runs the calling thread with the normal policy at nice `nice` for the
/// rest of its life (the history's drain and writer, which must keep up
/// with the rings under load; their children start at nice 0).
/// Returns whether it got that nice; a refusal is logged once, naming the
/// config key that sets it (`key`), and the thread stays at its nice.
pub fn run_at_nice(nice: i32, key: &str) -> bool {
    let _ = set_current_thread_normal_reset_on_fork();
    match set_current_thread_nice(nice) {
        Ok(()) => true,
        Err(e) => {
            static WARNED_KEY: AtomicBool = AtomicBool::new(false);
            if !WARNED_KEY.swap(true, Ordering::Relaxed) {
                tracing::warn!("nice {nice} refused ({e}); grant CAP_SYS_NICE or set {key} = 0");
            }
            false
        }
    }
}

/// Runs the calling thread with the normal policy at nice `nice` while
/// alive (the dump thread's write, once the rings are frozen), then as it
/// was before. Threads it starts meanwhile begin at nice 0 with the
/// normal policy (SCHED_RESET_ON_FORK): rayon's workers, created on first
/// use, may be started by the write and must not inherit its nice.
#[must_use = "the priority comes back when the guard is dropped"]
pub struct NormalPriority {
    /// The thread's policy (flags such as SCHED_RESET_ON_FORK kept) and
    /// priority before.
    previous: Option<(i32, i32)>,
    /// Its nice before, when it was changed.
    previous_nice: Option<i32>,
}

impl NormalPriority {
    /// A negative `nice` needs CAP_SYS_NICE: refused, the thread stays at
    /// its nice and a warning says so once.
    pub fn enter(nice: i32) -> Self {
        let previous = current_thread_param().ok();
        let _ = set_current_thread_normal_reset_on_fork();
        let before = current_thread_nice().ok();
        let previous_nice = match before {
            Some(b) if b != nice => match set_current_thread_nice(nice) {
                Ok(()) => Some(b),
                Err(e) => {
                    warn_nice_refused(nice, &e);
                    None
                }
            },
            _ => None,
        };
        NormalPriority {
            previous,
            previous_nice,
        }
    }

    /// Runs `f` with the normal policy at `nice`, then returns to the
    /// priority before.
    pub fn run<T>(nice: i32, f: impl FnOnce() -> T) -> T {
        let _normal = Self::enter(nice);
        f()
    }
}

impl Drop for NormalPriority {
    fn drop(&mut self) {
        // Back up (allowed without privilege) before the policy: a
        // realtime policy ignores the nice, but the next write starts from
        // the one left here.
        if let Some(nice) = self.previous_nice {
            let _ = set_current_thread_nice(nice);
        }
        if let Some((policy, priority)) = self.previous {
            let _ = set_current_thread_policy(policy, priority);
        }
    }
}

/// The calling thread's policy (flags such as SCHED_RESET_ON_FORK kept)
/// and priority.
fn current_thread_param() -> io::Result<(i32, i32)> {
    let policy = current_thread_policy()?;
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid, writable
    // sched_param the kernel fills during the call.
    let rc = unsafe { libc::sched_getparam(0, &mut param) };
    if rc == 0 {
        Ok((policy, param.sched_priority))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread's scheduling policy (`libc::SCHED_*`).
pub fn current_thread_policy() -> io::Result<i32> {
    // SAFETY: sched_getscheduler takes no pointers; pid 0 is the caller.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(policy)
    }
}

/// The calling thread's nice value.
pub fn current_thread_nice() -> io::Result<i32> {
    let tid = nix::unistd::gettid().as_raw();
    let tid = libc::id_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    nix::errno::Errno::clear();
    // SAFETY: getpriority takes no pointers; PRIO_PROCESS with a tid reads
    // that one thread of ours. -1 is a valid answer: errno tells.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
    match nix::errno::Errno::last_raw() {
        0 => Ok(nice),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(p: i32) -> bool {
        p & !libc::SCHED_RESET_ON_FORK == libc::SCHED_FIFO
    }

    #[test]
    #[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
    fn freeze_workers_are_realtime_and_nothing_else_is() {
        // CAP_SYS_NICE.
        flightrec_tests::require_root("freeze_workers_are_realtime_and_nothing_else_is");
        pin_freeze_workers(1);
        let freezers = freeze_pool().broadcast(|_| current_thread_policy().unwrap());
        assert!(freezers.iter().all(|&p| fifo(p)), "{freezers:?}");
        let global = rayon::broadcast(|_| current_thread_policy().unwrap());
        assert!(global.iter().all(|&p| p == libc::SCHED_OTHER), "{global:?}");
        let background = background_pool().broadcast(|_| {
            (
                current_thread_policy().unwrap(),
                current_thread_nice().unwrap(),
            )
        });
        assert!(
            background
                .iter()
                .all(|&(p, n)| p == libc::SCHED_OTHER && n == BACKGROUND_NICE),
            "{background:?}"
        );
        pin_freeze_workers(0);
        let freezers = freeze_pool().broadcast(|_| current_thread_policy().unwrap());
        assert!(
            freezers.iter().all(|&p| p == libc::SCHED_OTHER),
            "{freezers:?}"
        );
    }

    #[test]
    #[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
    fn a_realtime_thread_runs_normal_under_the_guard_and_realtime_after() {
        flightrec_tests::require_root("a_realtime_thread_runs_normal_under_the_guard");
        std::thread::spawn(|| {
            assert!(run_realtime(2));
            assert!(fifo(current_thread_policy().unwrap()));
            {
                let _normal = NormalPriority::enter(-7);
                assert_eq!(
                    current_thread_policy().unwrap(),
                    libc::SCHED_OTHER | libc::SCHED_RESET_ON_FORK
                );
                assert_eq!(current_thread_nice().unwrap(), -7);
                // A thread started meanwhile is not raised.
                let child = std::thread::spawn(|| {
                    (
                        current_thread_policy().unwrap(),
                        current_thread_nice().unwrap(),
                    )
                })
                .join()
                .unwrap();
                assert_eq!(child, (libc::SCHED_OTHER, 0));
            }
            assert!(fifo(current_thread_policy().unwrap()));
            assert_eq!(current_thread_param().unwrap().1, 2);
            assert_eq!(current_thread_nice().unwrap(), 0);
            assert!(!run_realtime(0));
            assert_eq!(current_thread_policy().unwrap(), libc::SCHED_OTHER);
            // A normal thread stays normal, at the nice it had.
            NormalPriority::run(-3, || assert_eq!(current_thread_nice().unwrap(), -3));
            assert_eq!(current_thread_policy().unwrap(), libc::SCHED_OTHER);
            assert_eq!(current_thread_nice().unwrap(), 0);
        })
        .join()
        .unwrap();
    }
}
