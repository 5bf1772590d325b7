//! Signals on a dedicated thread (signal-hook), not on the async runtime:
//! SIGUSR2 asks for a dump, SIGHUP for a reload, SIGTERM and SIGINT for a
//! clean shutdown. The thread turns each into a [`SignalRequest`] handed to
//! a callback at once, so a dump can be started (and rings frozen) from
//! here without waiting for an async worker. The daemon blocks these
//! signals in every other thread ([`block_in_this_thread`] before any
//! thread starts), so the kernel delivers them to this one, which runs at
//! the snapshot's realtime priority: a SIGUSR2 is handled at once even when
//! every CPU is busy.

use std::io;
use std::thread::JoinHandle;

use nix::sys::signal::{SigSet, Signal};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR2};
use signal_hook::iterator::{Handle, Signals};

/// What a signal asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalRequest {
    Dump,
    Reload,
    /// Names the signal, for the log.
    Shutdown(&'static str),
}

/// The request a signal number stands for.
pub fn request_of(signal: i32) -> Option<SignalRequest> {
    match signal {
        SIGUSR2 => Some(SignalRequest::Dump),
        SIGHUP => Some(SignalRequest::Reload),
        SIGTERM => Some(SignalRequest::Shutdown("SIGTERM")),
        SIGINT => Some(SignalRequest::Shutdown("SIGINT")),
        _ => None,
    }
}

/// The signal thread; dropping it unregisters the handlers and joins it.
pub struct SignalThread {
    handle: Handle,
    thread: Option<JoinHandle<()>>,
}

/// The signals the daemon handles.
const HANDLED: [i32; 4] = [SIGUSR2, SIGHUP, SIGTERM, SIGINT];

fn sig_set(signals: &[i32]) -> SigSet {
    let mut set = SigSet::empty();
    for &s in signals {
        if let Ok(sig) = Signal::try_from(s) {
            set.add(sig);
        }
    }
    set
}

/// Blocks the handled signals in the calling thread, and so in every
/// thread it starts from now on (the runtime's workers, rayon's): only the
/// signal thread receives them.
pub fn block_in_this_thread() -> io::Result<()> {
    sig_set(&HANDLED).thread_block().map_err(io::Error::from)
}

/// Handles SIGUSR2, SIGHUP, SIGTERM and SIGINT from now on, on a thread at
/// SCHED_FIFO `priority` (0: normal).
pub fn spawn(
    priority: u8,
    on_signal: impl Fn(SignalRequest) + Send + 'static,
) -> io::Result<SignalThread> {
    spawn_for(&HANDLED, priority, on_signal)
}

fn spawn_for(
    signals: &[i32],
    priority: u8,
    on_signal: impl Fn(SignalRequest) + Send + 'static,
) -> io::Result<SignalThread> {
    let unblock = sig_set(signals);
    let mut signals = Signals::new(signals)?;
    let handle = signals.handle();
    let thread = std::thread::Builder::new()
        .name("flightrec-signals".into())
        .spawn(move || {
            if let Err(e) = unblock.thread_unblock() {
                tracing::error!("the signal thread cannot unblock its signals: {e}");
            }
            crate::perf::sched::run_realtime(priority);
            for signal in signals.forever() {
                if let Some(request) = request_of(signal) {
                    on_signal(request);
                }
            }
        })?;
    Ok(SignalThread {
        handle,
        thread: Some(thread),
    })
}

impl Drop for SignalThread {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn each_signal_stands_for_its_request() {
        assert_eq!(request_of(SIGUSR2), Some(SignalRequest::Dump));
        assert_eq!(request_of(SIGHUP), Some(SignalRequest::Reload));
        assert_eq!(
            request_of(SIGTERM),
            Some(SignalRequest::Shutdown("SIGTERM"))
        );
        assert_eq!(request_of(SIGINT), Some(SignalRequest::Shutdown("SIGINT")));
        assert_eq!(request_of(signal_hook::consts::SIGUSR1), None);
    }

    #[test]
    fn a_raised_signal_reaches_the_callback_on_the_signal_thread() {
        // SIGUSR2 and SIGHUP only: the test harness keeps SIGINT/SIGTERM.
        let (tx, rx) = mpsc::channel();
        let thread = spawn_for(&[SIGUSR2, SIGHUP], 0, move |r| {
            let name = std::thread::current().name().map(String::from);
            let _ = tx.send((r, name));
        })
        .unwrap();
        signal_hook::low_level::raise(SIGUSR2).unwrap();
        let (request, name) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(request, SignalRequest::Dump);
        assert_eq!(name.as_deref(), Some("flightrec-signals"));
        signal_hook::low_level::raise(SIGHUP).unwrap();
        let (request, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(request, SignalRequest::Reload);
        drop(thread);
    }

    #[test]
    fn a_process_signal_reaches_the_callback_while_the_sender_blocks_it() {
        // On a thread of its own, so the test harness keeps its mask.
        std::thread::spawn(|| {
            sig_set(&[SIGUSR2]).thread_block().unwrap();
            let (tx, rx) = mpsc::channel();
            let thread = spawn_for(&[SIGUSR2], 0, move |r| {
                let _ = tx.send(r);
            })
            .unwrap();
            // Sent to the process: any thread that does not block it may
            // take it; this one blocks it.
            nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGUSR2).unwrap();
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(5)).unwrap(),
                SignalRequest::Dump
            );
            drop(thread);
        })
        .join()
        .unwrap();
    }
}
