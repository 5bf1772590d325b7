//! Where windows cut from the history are written: a thread of its own at
//! normal priority, so a dump of minutes of history (seconds of reading
//! and writing) never delays the freeze of another trigger's rings.
//!
//! One job runs and at most one waits: a job frozen while another waits
//! joins it, taking the newer capture (its rings reach later; what the
//! older capture held after the history is in the history by then), so
//! triggers that arrive during a long dump are served by one follow-up
//! and the memory held is that of two captures at most.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::request::Waiting;
use super::write::{Job, Pipeline};

#[derive(Default)]
struct Lane {
    waiting: Option<Job>,
    closed: bool,
}

/// The history's writer thread and the job waiting for it.
pub(super) struct HistoryLane {
    lane: Arc<(Mutex<Lane>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

fn lock(m: &Mutex<Lane>) -> std::sync::MutexGuard<'_, Lane> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HistoryLane {
    pub(super) fn start(pipeline: Arc<Pipeline>) -> std::io::Result<Self> {
        let lane: Arc<(Mutex<Lane>, Condvar)> = Arc::default();
        let l2 = Arc::clone(&lane);
        let thread = std::thread::Builder::new()
            .name("flightrec-history-dump".into())
            .spawn(move || run(&l2, &pipeline))?;
        Ok(HistoryLane {
            lane,
            thread: Some(thread),
        })
    }

    /// Queues `job`, joining the one waiting if there is one.
    pub(super) fn push(&self, job: Job) {
        let (m, woken) = &*self.lane;
        let mut lane = lock(m);
        lane.waiting = Some(match lane.waiting.take() {
            None => job,
            Some(mut older) => {
                older.members.extend(job.members);
                Job {
                    members: older.members,
                    wait: older.wait.max(job.wait),
                    ..job
                }
            }
        });
        woken.notify_all();
    }

    /// Serves the job running and the one waiting, then stops.
    pub(super) fn close(&mut self) {
        let (m, woken) = &*self.lane;
        lock(m).closed = true;
        woken.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HistoryLane {
    fn drop(&mut self) {
        self.close();
    }
}

fn run(lane: &(Mutex<Lane>, Condvar), pipeline: &Pipeline) {
    let (m, woken) = lane;
    loop {
        let job = {
            let mut l = lock(m);
            loop {
                if let Some(job) = l.waiting.take() {
                    break job;
                }
                if l.closed {
                    return;
                }
                l = woken.wait(l).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let mut job = job;
        // Callers that went away while it waited are not served.
        job.members
            .retain(|m| !m.waiter.as_ref().is_some_and(Waiting::gone));
        if job.members.is_empty() {
            continue;
        }
        match (pipeline.hooks.setup)() {
            Some(setup) => pipeline.write_history(&setup, job),
            None => {
                let spec = super::spec::Spec::of(&job.members);
                pipeline.fail(job.members, &spec, super::error::DumpError::ShuttingDown);
            }
        }
    }
}
