//! The loss watcher: every second, the recorder's loss counters compared
//! with the last reading; growth is logged and published on Watch.

use std::sync::Arc;
use std::time::Duration;

use super::Control;
use crate::events::{Event, Loss};
use crate::recorder::CpuLosses;

/// Runs until aborted.
pub async fn watch_losses(control: Arc<Control>) {
    let mut last: Option<(usize, Vec<CpuLosses>)> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let cur = control.live.current();
        // A re-opened recorder starts its counters again.
        let id = Arc::as_ptr(&cur.recorder) as usize;
        let recorder = cur.recorder.clone();
        let Ok(losses) = tokio::task::spawn_blocking(move || recorder.losses()).await else {
            continue;
        };
        if let Some((prev_id, prev)) = &last
            && *prev_id == id
        {
            for loss in loss_growth(prev, &losses) {
                if loss.ring == "tracking" {
                    tracing::warn!(
                        cpu = loss.cpu,
                        lost = loss.lost,
                        total = loss.total,
                        "tracking records lost: snapshots may miss process names or maps"
                    );
                } else {
                    tracing::info!(
                        cpu = loss.cpu,
                        lost = loss.lost,
                        total = loss.total,
                        "samples lost while a capture paused the ring"
                    );
                }
                control.events.publish(Event::Loss(loss));
            }
        }
        last = Some((id, losses));
    }
}

/// Loss counters that grew between two readings, per CPU and ring.
pub fn loss_growth(prev: &[CpuLosses], now: &[CpuLosses]) -> Vec<Loss> {
    let mut out = Vec::new();
    for c in now {
        let (p_lost, p_tracking) = prev
            .iter()
            .find(|p| p.cpu == c.cpu)
            .map_or((0, 0), |p| (p.lost_samples, p.lost_tracking_records));
        for (ring, total, before) in [
            ("samples", c.lost_samples, p_lost),
            ("tracking", c.lost_tracking_records, p_tracking),
        ] {
            if total > before {
                out.push(Loss {
                    cpu: c.cpu,
                    ring,
                    lost: total - before,
                    total,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_growth_reports_what_grew_per_cpu_and_ring() {
        let status = |cpus: &[(u32, u64, u64)]| -> Vec<CpuLosses> {
            cpus.iter()
                .map(|&(cpu, lost_samples, lost_tracking_records)| CpuLosses {
                    cpu,
                    lost_samples,
                    lost_tracking_records,
                })
                .collect()
        };
        let prev = status(&[(0, 5, 0), (1, 0, 2)]);
        let now = status(&[(0, 5, 1), (1, 7, 2), (2, 3, 0)]);
        let got: Vec<(u32, &str, u64, u64)> = loss_growth(&prev, &now)
            .into_iter()
            .map(|l| (l.cpu, l.ring, l.lost, l.total))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "tracking", 1, 1),
                (1, "samples", 7, 7),
                (2, "samples", 3, 3),
            ]
        );
        assert!(loss_growth(&now, &now).is_empty());
    }
}
