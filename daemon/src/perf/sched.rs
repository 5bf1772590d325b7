//! Scheduling of the threads that freeze and write snapshots.
//!
//! A dump is a few milliseconds of work, but on a loaded machine a thread at
//! normal priority shares the CPUs with every runnable task and the same
//! dump takes seconds (measured under `perf bench sched messaging`: 0.5 s
//! for a 4 MiB-per-CPU snapshot, 20 ms under SCHED_FIFO), and waking it
//! takes milliseconds, during which the rings overwrite the moment of the
//! trigger. So the threads on the way from a trigger to the freeze (the
//! signal thread, the condition thread, the dump thread and the rayon
//! workers that pause the per-CPU rings) run SCHED_FIFO for the daemon's
//! life ([`run_realtime`], [`pin_rayon_workers`]): asleep they cost
//! nothing, woken they run at once. A Compress runs under a
//! [`RealtimeDump`] guard. Needs CAP_SYS_NICE; without it everything runs
//! at normal priority and a warning says so once.

use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

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

/// How many guards are alive, so the rayon workers are raised by the first
/// and lowered by the last (a Compress may overlap a dump).
static ACTIVE: Mutex<usize> = Mutex::new(0);
static WARNED: AtomicBool = AtomicBool::new(false);
/// The priority the rayon workers are pinned at (0: not pinned); guards
/// leave pinned workers as they are.
static PINNED: AtomicU8 = AtomicU8::new(0);

fn warn_refused(priority: u8, e: &io::Error) {
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "triggers and dumps run at normal priority: SCHED_FIFO {priority} refused ({e}); \
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

/// Runs every rayon worker at SCHED_FIFO `priority` from now on (0: back to
/// normal), so the per-CPU pauses of a freeze start together.
pub fn pin_rayon_workers(priority: u8) {
    let _active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
    PINNED.store(priority, Ordering::SeqCst);
    rayon::broadcast(|_| {
        if priority == 0 {
            let _ = set_current_thread_normal();
        } else if let Err(e) = set_current_thread_fifo(priority) {
            warn_refused(priority, &e);
        }
    });
}

/// Runs the calling thread and the rayon workers at SCHED_FIFO while alive.
#[must_use = "the priority drops back when the guard is dropped"]
pub struct RealtimeDump {
    raised: bool,
    /// The thread's policy and priority before, restored on drop (a thread
    /// already pinned by [`run_realtime`] stays raised).
    previous: (i32, i32),
}

impl RealtimeDump {
    /// Raises to `priority`; 0 leaves everything at normal priority. A
    /// refusal (no CAP_SYS_NICE, RT throttling limits) is logged once and
    /// the dump goes on at normal priority.
    pub fn enter(priority: u8) -> Self {
        let previous = current_thread_param().unwrap_or((libc::SCHED_OTHER, 0));
        if priority == 0 {
            return Self {
                raised: false,
                previous,
            };
        }
        if let Err(e) = set_current_thread_fifo(priority) {
            warn_refused(priority, &e);
            return Self {
                raised: false,
                previous,
            };
        }
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        if *active == 0 && PINNED.load(Ordering::SeqCst) == 0 {
            rayon::broadcast(|_| {
                let _ = set_current_thread_fifo(priority);
            });
        }
        *active += 1;
        Self {
            raised: true,
            previous,
        }
    }

    /// Whether this guard raised the priority.
    pub fn is_raised(&self) -> bool {
        self.raised
    }
}

impl Drop for RealtimeDump {
    fn drop(&mut self) {
        if !self.raised {
            return;
        }
        let _ = set_current_thread_policy(self.previous.0, self.previous.1);
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        *active -= 1;
        if *active == 0 && PINNED.load(Ordering::SeqCst) == 0 {
            rayon::broadcast(|_| {
                let _ = set_current_thread_normal();
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The rayon workers are shared by the whole test binary: the tests
    /// that raise them take turns.
    static RAYON_POLICY: Mutex<()> = Mutex::new(());

    #[test]
    #[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
    fn guard_raises_this_thread_and_the_rayon_workers_then_restores_them() {
        // CAP_SYS_NICE.
        flightrec_tests::require_root("guard_raises_this_thread_and_the_rayon_workers");
        let _turn = RAYON_POLICY.lock().unwrap_or_else(|p| p.into_inner());
        let workers = || rayon::broadcast(|_| current_thread_policy().unwrap());
        let before = workers();
        assert!(before.iter().all(|&p| p == libc::SCHED_OTHER), "{before:?}");
        {
            let guard = RealtimeDump::enter(1);
            assert!(guard.is_raised());
            // SCHED_RESET_ON_FORK is reported as part of the policy.
            let fifo = |p: i32| p & !libc::SCHED_RESET_ON_FORK == libc::SCHED_FIFO;
            assert!(fifo(current_thread_policy().unwrap()));
            let during = workers();
            assert!(during.iter().all(|&p| fifo(p)), "{during:?}");
        }
        assert_eq!(current_thread_policy().unwrap(), libc::SCHED_OTHER);
        let after = workers();
        assert!(after.iter().all(|&p| p == libc::SCHED_OTHER), "{after:?}");
    }

    #[test]
    #[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
    fn a_guard_on_a_realtime_thread_leaves_it_realtime() {
        flightrec_tests::require_root("a_guard_on_a_realtime_thread_leaves_it_realtime");
        let _turn = RAYON_POLICY.lock().unwrap_or_else(|p| p.into_inner());
        std::thread::spawn(|| {
            let fifo = |p: i32| p & !libc::SCHED_RESET_ON_FORK == libc::SCHED_FIFO;
            assert!(run_realtime(2));
            assert!(fifo(current_thread_policy().unwrap()));
            drop(RealtimeDump::enter(1));
            assert!(fifo(current_thread_policy().unwrap()));
            assert_eq!(current_thread_param().unwrap().1, 2);
            assert!(!run_realtime(0));
            assert_eq!(current_thread_policy().unwrap(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn priority_zero_changes_nothing() {
        let guard = RealtimeDump::enter(0);
        assert!(!guard.is_raised());
        assert_eq!(current_thread_policy().unwrap(), libc::SCHED_OTHER);
    }
}
