//! The systemd watchdog (`WatchdogSec=` in the unit).
//!
//! `WATCHDOG=1` goes out only after three probes have answered, every half
//! of WatchdogSec (sd_watchdog_enabled(3)):
//! - the dump thread: a [`Message::Ping`](crate::triggers::Message) it
//!   answers between dumps, so a dump that hangs leaves it unanswered;
//! - the tracking drain thread: its count of drain rounds grows (a round
//!   runs at least every 250 ms);
//! - the API: a `Status` call over the daemon's own socket, as snapctl
//!   makes it (accept, peer check, dispatcher, reply).
//!
//! A probe still silent when two thirds of WatchdogSec have passed since
//! the last `WATCHDOG=1` is named in the log, so the journal says why
//! systemd is about to kill and restart the daemon.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flightrec_proto::FlightRecorderClient;
use flightrec_proto::v1 as pb;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::time::Instant;
use tonic::transport::Endpoint;
use tower::service_fn;

use super::notify::notify;
use crate::control::Control;

/// How often the drain probe looks at the drain's round counter.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// The three probes of one round: None until a probe is asked, then
/// `Err(why it is silent)` until it answers.
struct Round {
    dump_thread: Mutex<Option<Result<(), String>>>,
    tracking_drain: Mutex<Option<Result<(), String>>>,
    api: Mutex<Option<Result<(), String>>>,
}

fn set(slot: &Mutex<Option<Result<(), String>>>, value: Result<(), String>) {
    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
}

impl Round {
    /// A round whose drain and API probes are asked at once (the dump
    /// thread is asked after them).
    fn new() -> Self {
        let silent = |why: &str| Mutex::new(Some(Err(why.to_string())));
        Round {
            dump_thread: Mutex::new(None),
            tracking_drain: silent("no drain round completed"),
            api: silent("no answer to a Status call"),
        }
    }

    /// The probes asked that have not answered, each with why, e.g. "the
    /// dump thread (a dump under way does not end)".
    fn silent(&self) -> Vec<String> {
        [
            ("the dump thread", &self.dump_thread),
            ("the tracking drain", &self.tracking_drain),
            ("the API", &self.api),
        ]
        .into_iter()
        .filter_map(
            |(name, slot)| match &*slot.lock().unwrap_or_else(PoisonError::into_inner) {
                Some(Err(e)) => Some(format!("{name} ({e})")),
                Some(Ok(())) | None => None,
            },
        )
        .collect()
    }
}

/// Sends `WATCHDOG=1` every `limit / 2` while the probes answer, until the
/// task is aborted (at shutdown). `limit` is WatchdogSec.
pub async fn run(state: Arc<Control>, limit: Duration) {
    let period = limit / 2;
    // systemd counts from READY=1, sent just before this task starts.
    let mut last_sent = Instant::now();
    loop {
        tokio::time::sleep_until(last_sent + period).await;
        let round = Arc::new(Round::new());
        let probes = probe_all(&state, &round);
        tokio::pin!(probes);
        let warn_at = last_sent + limit * 2 / 3;
        let mut warned = false;
        tokio::select! {
            () = &mut probes => {}
            () = tokio::time::sleep_until(warn_at) => {
                tracing::error!(
                    "watchdog: no answer for {}s from {}; systemd restarts flightrecd when \
                     WatchdogSec ({}s) passes without one",
                    last_sent.elapsed().as_secs(),
                    round.silent().join(", "),
                    limit.as_secs()
                );
                warned = true;
                probes.await;
            }
        }
        notify(sd_notify::NotifyState::Watchdog);
        if warned {
            tracing::info!(
                "watchdog: every probe answers again after {}s",
                last_sent.elapsed().as_secs()
            );
        }
        last_sent = Instant::now();
    }
}

/// Resolves once all three probes have answered (never, if one does not).
/// The dump thread is asked last, so that WATCHDOG=1 follows its answer at
/// once: a dump that hangs after answering gets the daemon killed within
/// WatchdogSec of the hang, not of a slower probe's answer.
async fn probe_all(state: &Arc<Control>, round: &Round) {
    tokio::join!(
        async {
            drain_answers(state, round).await;
            set(&round.tracking_drain, Ok(()));
        },
        async {
            let socket = state.socket_path.clone();
            loop {
                match api_answers(&socket).await {
                    Ok(()) => break,
                    Err(e) => set(&round.api, Err(e)),
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            set(&round.api, Ok(()));
        },
    );
    // An ended dump thread never answers again: its probe stays silent, as
    // for a hung one.
    set(
        &round.dump_thread,
        Err("a dump under way does not end".into()),
    );
    match state.dumps.ping().await {
        Ok(()) => set(&round.dump_thread, Ok(())),
        Err(_) => {
            set(&round.dump_thread, Err("the thread has ended".into()));
            std::future::pending::<()>().await;
        }
    }
}

/// Resolves once the drain thread of the current recorder completes a
/// round (a reload may replace the recorder meanwhile: its drain counts).
async fn drain_answers(state: &Control, round: &Round) {
    let mut seen: Option<(usize, u64)> = None;
    loop {
        let current = state.live.current();
        let recorder = Arc::as_ptr(&current.recorder) as usize;
        match current.recorder.tracking_drain_rounds() {
            None => set(
                &round.tracking_drain,
                Err("the thread is not running".into()),
            ),
            Some(rounds) => match seen {
                Some((r, before)) if r == recorder && rounds > before => return,
                Some((r, _)) if r == recorder => {}
                _ => seen = Some((recorder, rounds)),
            },
        }
        drop(current);
        tokio::time::sleep(DRAIN_POLL).await;
    }
}

/// One `Status` call on `socket`, as a client makes it.
async fn api_answers(socket: &Path) -> Result<(), String> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
    let slot = Arc::new(Mutex::new(Some(stream)));
    let channel = Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(service_fn(move |_| {
            let stream = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
            async move {
                stream
                    .map(TokioIo::new)
                    .ok_or_else(|| io::Error::other("connected once already"))
            }
        }))
        .await
        .map_err(|e| format!("HTTP/2 handshake on {}: {e}", socket.display()))?;
    FlightRecorderClient::new(channel)
        .status(pb::StatusRequest {})
        .await
        .map(drop)
        .map_err(|s| format!("Status: {}", s.message()))
}

#[cfg(test)]
mod tests {
    use super::{Round, set};

    #[test]
    fn the_reason_names_the_probes_asked_and_silent() {
        let round = Round::new();
        assert_eq!(
            round.silent(),
            [
                "the tracking drain (no drain round completed)",
                "the API (no answer to a Status call)"
            ]
        );
        set(&round.tracking_drain, Ok(()));
        set(&round.api, Ok(()));
        assert!(
            round.silent().is_empty(),
            "the dump thread is not asked yet"
        );
        set(
            &round.dump_thread,
            Err("a dump under way does not end".into()),
        );
        assert_eq!(
            round.silent(),
            ["the dump thread (a dump under way does not end)"]
        );
        set(&round.dump_thread, Ok(()));
        assert!(round.silent().is_empty());
    }
}
