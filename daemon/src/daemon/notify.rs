//! sd_notify: READY, RELOADING, STOPPING and WATCHDOG for a Type=notify
//! unit, and the STATUS= line `systemctl status` shows:
//! `recording 2 CPUs, 12 snapshots, last 10:04:05` (the newest snapshot's
//! time, UTC as in snapshot names).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;

use crate::control::Control;
use crate::events::Event;

/// How often the STATUS line is refreshed besides after each snapshot
/// event (a reload may change the CPUs, a hand may remove files).
const STATUS_REFRESH: Duration = Duration::from_secs(60);

/// RELOADING=1 with the MONOTONIC_USEC systemd 253+ requires beside it.
pub fn notify_reloading() {
    let mut states = vec![sd_notify::NotifyState::Reloading];
    if let Ok(now) = sd_notify::NotifyState::monotonic_usec_now() {
        states.push(now);
    }
    if let Err(e) = sd_notify::notify(&states) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}

pub fn notify(state: sd_notify::NotifyState<'_>) {
    if let Err(e) = sd_notify::notify(&[state]) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}

/// The STATUS= text: `recording 2 CPUs, 12 snapshots, last 10:04:05`;
/// without a snapshot, `recording 2 CPUs, 0 snapshots`.
pub fn status_line(cpus: usize, snapshots: usize, newest_unix_ns: Option<i64>) -> String {
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut line = format!(
        "recording {}, {}",
        plural(cpus, "CPU", "CPUs"),
        plural(snapshots, "snapshot", "snapshots")
    );
    if let Some(ns) = newest_unix_ns {
        let secs = ns.div_euclid(1_000_000_000).rem_euclid(86_400);
        line.push_str(&format!(
            ", last {:02}:{:02}:{:02}",
            secs / 3600,
            secs % 3600 / 60,
            secs % 60
        ));
    }
    line
}

/// The STATUS= text for the daemon as it is now (lists the store: call it
/// off the async workers).
fn current_status(state: &Control) -> String {
    let current = state.live.current();
    let cpus = current.recorder.cpus().len();
    match current.store.list() {
        Ok(list) => status_line(
            cpus,
            list.len(),
            list.iter().map(|s| s.created_unix_ns).max(),
        ),
        Err(e) => format!(
            "{}; cannot list the snapshots: {e}",
            status_line(cpus, 0, None)
        ),
    }
}

/// Keeps the STATUS= line current until the task is aborted: at once,
/// after every snapshot written or removed, and every minute.
pub async fn keep_status(state: Arc<Control>) {
    let mut events = state.events.subscribe();
    let mut sent = String::new();
    loop {
        let st = state.clone();
        if let Ok(line) = tokio::task::spawn_blocking(move || current_status(&st)).await
            && line != sent
        {
            notify(sd_notify::NotifyState::Status(&line));
            sent = line;
        }
        let refresh = tokio::time::sleep(STATUS_REFRESH);
        tokio::pin!(refresh);
        loop {
            tokio::select! {
                () = &mut refresh => break,
                event = events.recv() => match event {
                    Ok(e) if matches!(
                        e.event,
                        Event::SnapshotCreated(_) | Event::SnapshotRemoved { .. }
                    ) => break,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::status_line;

    #[test]
    fn the_status_line_reads_as_systemctl_status_shows_it() {
        // date -u -d @1795169045 +%T: 10:04:05
        let at = 1_795_169_045_000_000_000;
        assert_eq!(
            status_line(2, 12, Some(at)),
            "recording 2 CPUs, 12 snapshots, last 10:04:05"
        );
        assert_eq!(
            status_line(1, 1, Some(at + 999_999_999)),
            "recording 1 CPU, 1 snapshot, last 10:04:05"
        );
        assert_eq!(status_line(64, 0, None), "recording 64 CPUs, 0 snapshots");
    }
}
