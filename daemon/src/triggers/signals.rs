//! Signals on a dedicated thread (signal-hook), not on the async runtime:
//! SIGUSR2 asks for a dump, SIGHUP for a reload, SIGTERM and SIGINT for a
//! clean shutdown. The thread turns each into a [`SignalRequest`] handed to
//! a callback at once, so a dump can be started (and rings frozen) from
//! here without waiting for an async worker.

use std::io;
use std::thread::JoinHandle;

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

/// Handles SIGUSR2, SIGHUP, SIGTERM and SIGINT from now on.
pub fn spawn(on_signal: impl Fn(SignalRequest) + Send + 'static) -> io::Result<SignalThread> {
    spawn_for(&[SIGUSR2, SIGHUP, SIGTERM, SIGINT], on_signal)
}

fn spawn_for(
    signals: &[i32],
    on_signal: impl Fn(SignalRequest) + Send + 'static,
) -> io::Result<SignalThread> {
    let mut signals = Signals::new(signals)?;
    let handle = signals.handle();
    let thread = std::thread::Builder::new()
        .name("flightrec-signals".into())
        .spawn(move || {
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
        let thread = spawn_for(&[SIGUSR2, SIGHUP], move |r| {
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
}
