//! CPUs that come and go (cloud VMs hot-plug vCPUs). The perf events of a
//! CPU that went offline never record again when it comes back, so the
//! recorder opens new rings for a CPU as it comes online, in place of its
//! old ones. The rings of a CPU that went away are kept until then: what
//! they recorded before is still in the next snapshot. The drain thread
//! reads the online list at most every [`CHECK_EVERY`] (a small sysfs
//! file, kept open), and says in the log what changed.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};

use super::forget::{FORGET_EXITED_EVERY, forget_some_exited, forgettable_now, look_for_exited};
use super::rings::{Live, lock};
use super::tap::FollowRings;
use crate::log_limit::RateLimitedWarning;
use crate::perf::PerfError;
use crate::perf::cpus::OnlineCpus;

/// How often the online CPU list is read.
pub const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Freed heap memory is given back to the kernel at least this often, also
/// when no dump does it (the drain's process table churns on its own).
pub const RELEASE_MEMORY_EVERY: Duration = Duration::from_secs(60);

/// What the drain thread calls after each round: follows the online list,
/// forgets exited threads no capture can reach, and gives freed memory
/// back now and then.
pub(super) fn follower(
    live: &Arc<Live>,
    tap: Option<Arc<FollowRings>>,
) -> Box<dyn FnMut(&Epoll) + Send> {
    let live = Arc::clone(live);
    let mut last_check = Instant::now();
    let mut online = OnlineCpus::open().ok();
    let mut last_forget = Instant::now();
    let mut last_release = Instant::now();
    // What the last looks allow to forget and is not forgotten yet (a
    // bound once allowed stays so: the rings' oldest record only moves on),
    // and the last bound forgotten to its end.
    let mut forget_before: Option<u64> = None;
    let mut forgotten_before: Option<u64> = None;
    Box::new(move |epoll| {
        if last_check.elapsed() >= CHECK_EVERY {
            last_check = Instant::now();
            // Kept open; opened again at the next look after a failed read.
            if online.is_none() {
                online = OnlineCpus::open().ok();
            }
            match online.as_mut().map(OnlineCpus::read) {
                Some(Ok(now)) => follow(&live, epoll, now),
                Some(Err(_)) => online = None,
                None => {}
            }
        }
        let allowed = if last_forget.elapsed() >= FORGET_EXITED_EVERY {
            last_forget = Instant::now();
            look_for_exited(&live, tap.as_deref())
        } else {
            tap.as_deref().and_then(|tap| forgettable_now(&live, tap))
        };
        if allowed > forgotten_before {
            forget_before = forget_before.max(allowed);
        }
        if let Some(before) = forget_before
            && forget_some_exited(&live, before)
        {
            forgotten_before = forget_before.take();
        }
        if last_release.elapsed() >= RELEASE_MEMORY_EVERY {
            last_release = Instant::now();
            crate::perf::heap::release_free_memory();
        }
    })
}

/// Opens rings for the CPUs online `now` that were not at the last look.
fn follow(live: &Live, epoll: &Epoll, now: Vec<u32>) {
    let mut online = lock(&live.online);
    if *online == now {
        return;
    }
    for cpu in online.iter().filter(|c| !now.contains(c)) {
        tracing::info!(
            cpu,
            "CPU went offline: what its rings recorded stays in the next snapshot; it is \
             recorded again when it comes back"
        );
    }
    let mut recorded: Vec<u32> = now.iter().filter(|c| online.contains(c)).copied().collect();
    for &cpu in now.iter().filter(|c| !online.contains(c)) {
        match open_cpu(live, cpu, epoll) {
            Ok(()) => {
                tracing::info!(cpu, "CPU came online: recording it (rings opened)");
                recorded.push(cpu);
            }
            Err(e) => {
                // Tried again at the next look.
                static FAILED: RateLimitedWarning = RateLimitedWarning::per_minute();
                FAILED.warn(|| format!("CPU {cpu} came online but cannot be recorded: {e}"));
            }
        }
    }
    recorded.sort_unstable();
    *online = recorded;
}

/// Opens, enables and puts in the rings of `cpu`, replacing its old ones.
fn open_cpu(live: &Live, cpu: u32, epoll: &Epoll) -> Result<(), PerfError> {
    let tracking = live.opener.tracking(cpu)?;
    let samples = live.opener.samples(cpu)?;
    let tracking_id = tracking.id();
    // No capture while the rings change.
    let _no_capture = lock(&live.capture_lock);
    tracking.enable()?;
    {
        let mut t = lock(&live.tracking);
        let (index, old) = t.put_ring(tracking);
        if let Some(old) = old {
            let _ = epoll.delete(old.fd());
        }
        let event = EpollEvent::new(EpollFlags::EPOLLIN, index as u64);
        if let Err(e) = epoll.add(t.rings()[index].fd().as_fd(), event) {
            // The periodic drain still empties it.
            tracing::warn!(cpu, "cannot wait for the tracking ring's wakeups: {e}");
        }
    }
    samples.enable()?;
    {
        let mut rings = live
            .rings
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rings.put(samples, tracking_id);
    }
    Ok(())
}
