//! The snapshots in the store as a client sees them: listed, rotated
//! under tightened limits, compressed in place. File work runs on blocking
//! threads: a file system or a lock a dump holds must not stall the async
//! workers that answer everyone else.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::live::Live;
use crate::dump::apply_retention;
use crate::events::EventBus;
use crate::snapshot::output::{self, SnapshotError};
use crate::store::{
    RetentionPolicy, RewriteError, SnapshotInfo, Store, StoreError, retention, retention_entries,
    unix_ns,
};
use flightrec_perfdata::reader::ReadError;

/// A `Rotate`'s limits; None: no limit beyond the configured one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RotateLimits {
    pub max_snapshots: Option<u32>,
    pub max_bytes: Option<u64>,
    pub max_age: Option<Duration>,
    pub delete_all: bool,
}

/// Why a listing failed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the worker thread failed: {0}")]
    Worker(#[from] tokio::task::JoinError),
}

/// Why a rotate removed nothing.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error(
        "delete_all: this rotate would remove all {count} snapshots; set delete_all to confirm \
         (snapctl rotate --all), or choose limits that keep some"
    )]
    WouldRemoveAll { count: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the worker thread failed: {0}")]
    Worker(#[from] tokio::task::JoinError),
}

/// Why a snapshot was not compressed.
#[derive(Debug, thiserror::Error)]
pub enum CompressError {
    #[error("level: {level} is not a zstd level (1 to 22, or 0 for the configured one)")]
    Level { level: i32 },
    #[error("snapshot {id} is already compressed")]
    AlreadyCompressed { id: String },
    #[error(
        "{MAX_COMPRESS_REQUESTS} compressions are already running or waiting (one runs at a \
         time); ask again once they are done"
    )]
    Busy,
    #[error("cannot compress {id}: {source}")]
    Write { id: String, source: SnapshotError },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("flightrecd is shutting down")]
    ShuttingDown,
    #[error("the worker thread failed: {0}")]
    Worker(#[from] tokio::task::JoinError),
}

/// The policy a `Rotate` applies: the configured one tightened by the
/// request's limits; `delete_all` removes everything.
pub fn rotate_policy(configured: RetentionPolicy, limits: &RotateLimits) -> RetentionPolicy {
    if limits.delete_all {
        return RetentionPolicy {
            max_snapshots: Some(0),
            max_bytes: None,
            max_age: None,
        };
    }
    configured.tightened(RetentionPolicy {
        max_snapshots: limits.max_snapshots,
        max_bytes: limits.max_bytes,
        max_age: limits.max_age,
    })
}

/// Refused when `policy` would remove every one of `all` (at least one):
/// that takes `delete_all`.
pub fn refuse_removing_all(
    all: &[SnapshotInfo],
    policy: &RetentionPolicy,
    now: SystemTime,
) -> Result<(), RotateError> {
    let entries = retention_entries(all);
    let doomed = retention::plan(&entries, policy, unix_ns(now), None).len();
    if doomed > 0 && doomed == all.len() {
        return Err(RotateError::WouldRemoveAll { count: doomed });
    }
    Ok(())
}

/// Compress requests admitted at once: one running, the others waiting.
pub const MAX_COMPRESS_REQUESTS: usize = 3;

/// `Compress` requests: one compresses at a time, a few more wait their
/// turn; beyond that they are refused, so a client cannot queue unbounded
/// work.
struct CompressQueue {
    running: Arc<tokio::sync::Semaphore>,
    admitted: Arc<std::sync::atomic::AtomicUsize>,
}

/// An admitted request; dropping it makes room for another.
struct Admitted(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Default for CompressQueue {
    fn default() -> Self {
        CompressQueue {
            running: Arc::new(tokio::sync::Semaphore::new(1)),
            admitted: Arc::default(),
        }
    }
}

impl CompressQueue {
    fn admit(&self) -> Result<Admitted, CompressError> {
        use std::sync::atomic::Ordering;
        let before = self.admitted.fetch_add(1, Ordering::SeqCst);
        let admitted = Admitted(self.admitted.clone());
        if before >= MAX_COMPRESS_REQUESTS {
            return Err(CompressError::Busy);
        }
        Ok(admitted)
    }

    /// Waits until no other compression runs.
    async fn turn(&self) -> Result<tokio::sync::OwnedSemaphorePermit, CompressError> {
        self.running
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| CompressError::ShuttingDown)
    }
}

/// Replaces snapshot `id` by its compressed form at `level`, locked against
/// retention removing it meanwhile. Returns the snapshot before and after.
fn compress_in_place(
    store: &Store,
    id: &str,
    level: i32,
) -> Result<(SnapshotInfo, SnapshotInfo), CompressError> {
    let already = || CompressError::AlreadyCompressed { id: id.into() };
    let rewritten = store.rewrite(id, |before| {
        if before.compressed {
            return Err(already());
        }
        output::compress_snapshot(&before.path, level)
            .map(drop)
            .map_err(|e| match &e {
                SnapshotError::Parse {
                    source: ReadError::AlreadyCompressed,
                    ..
                } => already(),
                _ => CompressError::Write {
                    id: id.into(),
                    source: e,
                },
            })
    });
    rewritten.map_err(|e| match e {
        RewriteError::Store(e) => e.into(),
        RewriteError::Rewrite(e) => e,
    })
}

/// The store's operations.
pub struct Snapshots {
    live: Arc<Live>,
    events: EventBus,
    compressions: CompressQueue,
}

/// What a compression did.
#[derive(Debug, Clone)]
pub struct Compressed {
    pub bytes_before: u64,
    pub after: SnapshotInfo,
}

impl Snapshots {
    pub(super) fn new(live: Arc<Live>, events: EventBus) -> Self {
        Snapshots {
            live,
            events,
            compressions: CompressQueue::default(),
        }
    }

    /// Every snapshot, oldest first.
    pub async fn list(&self) -> Result<Vec<SnapshotInfo>, ListError> {
        let store = self.live.current().store.clone();
        Ok(tokio::task::spawn_blocking(move || store.list()).await??)
    }

    /// Applies the configured retention tightened by `limits` now.
    /// Returns (removed, kept).
    pub async fn rotate(
        &self,
        limits: RotateLimits,
    ) -> Result<(Vec<SnapshotInfo>, Vec<SnapshotInfo>), RotateError> {
        let cur = self.live.current();
        let policy = rotate_policy(super::config::retention_of(&cur.config.config), &limits);
        let store = cur.store.clone();
        let events = self.events.clone();
        tokio::task::spawn_blocking(move || {
            if !limits.delete_all {
                refuse_removing_all(&store.list()?, &policy, SystemTime::now())?;
            }
            Ok(apply_retention(&store, &events, &policy, None)?)
        })
        .await?
    }

    /// Compresses snapshot `id` in place at `level` (None: the configured
    /// one).
    pub async fn compress(
        &self,
        id: String,
        level: Option<i32>,
    ) -> Result<Compressed, CompressError> {
        if let Some(level) = level.filter(|l| !(1..=22).contains(l)) {
            return Err(CompressError::Level { level });
        }
        let cur = self.live.current();
        let level = level.unwrap_or(*cur.config.config.snapshot.level.get_ref());
        let store = cur.store.clone();
        let admitted = self.compressions.admit()?;
        let turn = self.compressions.turn().await?;
        let (before, after) = tokio::task::spawn_blocking(move || {
            // Held until the compression is over, even if the caller left.
            let _queue = (admitted, turn);
            crate::perf::sched::background_pool().install(|| compress_in_place(&store, &id, level))
        })
        .await??;
        tracing::info!(id = %after.id, before = before.bytes, after = after.bytes, level, "snapshot compressed");
        Ok(Compressed {
            bytes_before: before.bytes,
            after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(id: &str, created_unix_ns: i64, bytes: u64) -> SnapshotInfo {
        SnapshotInfo {
            id: id.into(),
            path: format!("/s/{id}.perf.data").into(),
            bytes,
            compressed: false,
            label: None,
            trigger: "api".into(),
            matched: String::new(),
            created_unix_ns,
            seq: 0,
            pending_uploads: Vec::new(),
            window: None,
            containers: Vec::new(),
            scope: String::new(),
        }
    }

    #[tokio::test]
    async fn compressions_run_one_at_a_time_and_only_a_few_may_wait() {
        let q = CompressQueue::default();
        let mut admitted: Vec<Admitted> = (0..MAX_COMPRESS_REQUESTS)
            .map(|_| q.admit().unwrap())
            .collect();
        let refused = q.admit().map(drop).unwrap_err();
        assert!(
            refused
                .to_string()
                .starts_with("3 compressions are already"),
            "{refused}"
        );
        admitted.pop();
        let _again = q.admit().unwrap();
        let first = q.turn().await.unwrap();
        let second = tokio::time::timeout(Duration::from_millis(50), q.turn()).await;
        assert!(second.is_err(), "a second compression ran beside the first");
        drop(first);
        let _second = q.turn().await.unwrap();
    }

    #[test]
    fn rotate_limits_tighten_the_configured_ones() {
        let configured = RetentionPolicy::from_limits(10, 0, Duration::ZERO);
        let none = RotateLimits::default();
        assert_eq!(rotate_policy(configured, &none), configured);
        let tighter = RotateLimits {
            max_snapshots: Some(3),
            max_bytes: Some(1 << 20),
            ..none
        };
        let p = rotate_policy(configured, &tighter);
        assert_eq!(p.max_snapshots, Some(3));
        assert_eq!(p.max_bytes, Some(1 << 20));
        assert_eq!(p.max_age, None);
        let all = RotateLimits {
            delete_all: true,
            ..none
        };
        assert_eq!(rotate_policy(configured, &all).max_snapshots, Some(0));
    }

    #[test]
    fn a_rotate_removing_every_snapshot_needs_delete_all() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let all = [snapshot("a", 1, 100), snapshot("b", 2, 100)];
        let keep_one = RetentionPolicy::from_limits(1, 0, Duration::ZERO);
        assert!(refuse_removing_all(&all, &keep_one, now).is_ok());
        let tiny = RetentionPolicy::from_limits(0, 10, Duration::ZERO);
        let err = refuse_removing_all(&all, &tiny, now).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("delete_all: this rotate would remove all 2 snapshots"),
            "{err}"
        );
        let old = RetentionPolicy::from_limits(0, 0, Duration::from_secs(1));
        assert!(refuse_removing_all(&all, &old, now).is_err());
        // Nothing to remove is not "everything".
        assert!(refuse_removing_all(&[], &tiny, now).is_ok());
    }
}
