//! Scheduling of the threads that run a dump.
//!
//! A dump is a few milliseconds of work, but on a loaded machine a thread at
//! normal priority shares the CPUs with every runnable task and the same
//! dump takes seconds (measured under `perf bench sched messaging`: 0.5 s
//! for a 4 MiB-per-CPU snapshot, 20 ms under SCHED_FIFO). So while a dump
//! or a compression runs, its thread and every rayon worker (the per-CPU
//! copies, the parallel compression) run SCHED_FIFO, and go back to
//! SCHED_OTHER when it ends. Needs CAP_SYS_NICE; without it dumps run at
//! normal priority and a warning says so once.

use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Runs the calling thread and the rayon workers at SCHED_FIFO while alive.
#[must_use = "the priority drops back when the guard is dropped"]
pub struct RealtimeDump {
    raised: bool,
}

impl RealtimeDump {
    /// Raises to `priority`; 0 leaves everything at normal priority. A
    /// refusal (no CAP_SYS_NICE, RT throttling limits) is logged once and
    /// the dump goes on at normal priority.
    pub fn enter(priority: u8) -> Self {
        if priority == 0 {
            return Self { raised: false };
        }
        if let Err(e) = set_current_thread_fifo(priority) {
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "dumps run at normal priority: SCHED_FIFO {priority} refused ({e}); \
                     grant CAP_SYS_NICE or set snapshot.realtime_priority = 0"
                );
            }
            return Self { raised: false };
        }
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        if *active == 0 {
            rayon::broadcast(|_| {
                let _ = set_current_thread_fifo(priority);
            });
        }
        *active += 1;
        Self { raised: true }
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
        let _ = set_current_thread_normal();
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        *active -= 1;
        if *active == 0 {
            rayon::broadcast(|_| {
                let _ = set_current_thread_normal();
            });
        }
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

    #[test]
    #[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
    fn guard_raises_this_thread_and_the_rayon_workers_then_restores_them() {
        // CAP_SYS_NICE.
        flightrec_tests::require_root("guard_raises_this_thread_and_the_rayon_workers");
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
    fn priority_zero_changes_nothing() {
        let guard = RealtimeDump::enter(0);
        assert!(!guard.is_raised());
        assert_eq!(current_thread_policy().unwrap(), libc::SCHED_OTHER);
    }
}
