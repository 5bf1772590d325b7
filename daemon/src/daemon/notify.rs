//! sd_notify: READY, RELOADING and STOPPING for a Type=notify unit.

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
