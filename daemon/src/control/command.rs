//! Commands: what a client may ask, parsed and validated by the API layer,
//! carried out by [`State::dispatch`]. Replies and errors are typed; the API
//! layer maps them to protobuf messages and gRPC codes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::config::describe_source;
use super::outcome::{DumpDone, DumpFailure, DumpTimings};
use super::{ReloadError, State};
use crate::recorder::{EventInfo, RecorderStatus};
use crate::snapshot::output::{self, SnapshotError};
use crate::store::{
    RetentionPolicy, RewriteError, SnapshotInfo, Store, StoreError, Usage, retention,
    retention_entries, unix_ns,
};
use crate::triggers::{Outcome, TriggerKind, WindowRequest};
use flightrec_perfdata::reader::ReadError;

/// A request, as the dispatcher takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Dump {
        label: Option<String>,
        compress: bool,
        window: WindowRequest,
    },
    List,
    Rotate(RotateLimits),
    /// `level`: a zstd level (1-22), or `None` for the configured one.
    Compress {
        id: String,
        level: Option<i32>,
    },
    Status,
    Reload,
}

/// A `Rotate`'s limits; 0 means "no limit", as in the config file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RotateLimits {
    pub max_snapshots: u32,
    pub max_bytes: u64,
    pub max_age: Duration,
    pub delete_all: bool,
}

/// What the daemon reports about itself.
#[derive(Debug, Clone)]
pub struct StatusReport {
    pub uptime: Duration,
    pub config_path: String,
    pub events: Vec<EventInfo>,
    pub recorder: RecorderStatus,
    pub ring_bytes_per_cpu: u64,
    pub tracking_ring_bytes_per_cpu: u64,
    pub checkpoint_interval_bytes: u64,
    pub output_dir: PathBuf,
    pub usage: Usage,
    pub last_dump: Option<DumpTimings>,
    pub dumps: u64,
    pub triggers: Vec<super::conditions::TriggerStatus>,
    /// None without `[fleet]`.
    pub fleet: Option<super::fleet_status::FleetReport>,
    /// None with `[history]` off.
    pub history: Option<HistoryReport>,
}

/// The history's status, its times on the wall clock.
#[derive(Debug, Clone)]
pub struct HistoryReport {
    pub status: crate::history::HistoryStatus,
    /// The oldest and newest instants held, ns since the Unix epoch (0:
    /// none), and how long ago the oldest is.
    pub oldest_unix_ns: i64,
    pub newest_unix_ns: i64,
    pub reach: Duration,
}

impl HistoryReport {
    fn of(status: crate::history::HistoryStatus) -> Self {
        let clock = crate::host::ClockReference::now();
        let unix = |ns: u64| match (&clock, ns) {
            (Some(c), ns) if ns > 0 => c.unix_ns_of_sample(ns),
            _ => 0,
        };
        let oldest_unix_ns = unix(status.oldest_ns);
        let now = crate::store::unix_ns(std::time::SystemTime::now());
        HistoryReport {
            oldest_unix_ns,
            newest_unix_ns: unix(status.newest_ns),
            reach: if oldest_unix_ns > 0 {
                Duration::from_nanos(now.saturating_sub(oldest_unix_ns).max(0).unsigned_abs())
            } else {
                Duration::ZERO
            },
            status,
        }
    }
}

/// A command's result.
#[derive(Debug, Clone)]
pub enum Reply {
    Dump {
        done: Arc<DumpDone>,
        coalesced: bool,
    },
    List(Vec<SnapshotInfo>),
    Rotate {
        removed: Vec<SnapshotInfo>,
        kept: Vec<SnapshotInfo>,
    },
    Compress {
        bytes_before: u64,
        after: Box<SnapshotInfo>,
    },
    Status(Box<StatusReport>),
    Reload {
        changed: bool,
        summary: String,
    },
}

/// Why a command failed, by the kind of fault; the message is for the
/// operator reading it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// A request field is wrong; `field` names it.
    #[error("{field}: {message}")]
    InvalidArgument {
        field: &'static str,
        message: String,
    },
    #[error("{0}")]
    NotFound(String),
    /// The request is valid but the daemon's state refuses it.
    #[error("{0}")]
    FailedPrecondition(String),
    /// Disk full, or too many of something.
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("flightrecd is shutting down")]
    ShuttingDown,
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for CommandError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::InvalidLabel { .. } => CommandError::InvalidArgument {
                field: "label",
                message: e.to_string(),
            },
            StoreError::InvalidId { .. } => CommandError::InvalidArgument {
                field: "id",
                message: e.to_string(),
            },
            StoreError::NotFound { .. } => CommandError::NotFound(e.to_string()),
            _ if e.is_disk_full() => CommandError::ResourceExhausted(e.to_string()),
            _ => CommandError::Internal(e.to_string()),
        }
    }
}

impl From<DumpFailure> for CommandError {
    fn from(f: DumpFailure) -> Self {
        match f {
            DumpFailure::DiskFull(m) => CommandError::ResourceExhausted(m),
            DumpFailure::InvalidLabel(message) => CommandError::InvalidArgument {
                field: "label",
                message,
            },
            DumpFailure::Failed(m) => CommandError::Internal(format!("dump failed: {m}")),
            DumpFailure::OutsideWindow(m) => CommandError::FailedPrecondition(m),
            DumpFailure::ShuttingDown => CommandError::ShuttingDown,
        }
    }
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
    configured.tightened(RetentionPolicy::from_limits(
        limits.max_snapshots,
        limits.max_bytes,
        limits.max_age,
    ))
}

/// Refused when `policy` would remove every one of `all` (at least one):
/// that takes `delete_all`.
pub fn refuse_removing_all(
    all: &[SnapshotInfo],
    policy: &RetentionPolicy,
    now: SystemTime,
) -> Result<(), CommandError> {
    let entries = retention_entries(all);
    let doomed = retention::plan(&entries, policy, unix_ns(now), None).len();
    if doomed > 0 && doomed == all.len() {
        return Err(CommandError::FailedPrecondition(format!(
            "delete_all: this rotate would remove all {doomed} snapshots; set delete_all to \
             confirm (snapctl rotate --all), or choose limits that keep some"
        )));
    }
    Ok(())
}

/// Replaces snapshot `id` by its compressed form at `level`, locked against
/// retention removing it meanwhile. Returns the snapshot before and after.
fn compress_in_place(
    store: &Store,
    id: &str,
    level: i32,
) -> Result<(SnapshotInfo, SnapshotInfo), CommandError> {
    let already =
        || CommandError::FailedPrecondition(format!("snapshot {id} is already compressed"));
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
                e if e.is_disk_full() => {
                    CommandError::ResourceExhausted(format!("cannot compress {id}: {e}"))
                }
                e => CommandError::Internal(format!("cannot compress {id}: {e}")),
            })
    });
    rewritten.map_err(|e| match e {
        RewriteError::Store(e) => e.into(),
        RewriteError::Rewrite(e) => e,
    })
}

/// `Compress` requests: one compresses at a time, a few more wait their
/// turn; beyond that they are refused (RESOURCE_EXHAUSTED), so a client
/// cannot queue unbounded work.
pub struct CompressQueue {
    running: Arc<tokio::sync::Semaphore>,
    admitted: Arc<std::sync::atomic::AtomicUsize>,
}

/// Compress requests admitted at once: one running, the others waiting.
pub const MAX_COMPRESS_REQUESTS: usize = 3;

/// An admitted request; dropping it makes room for another.
pub struct Admitted(Arc<std::sync::atomic::AtomicUsize>);

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
    pub fn admit(&self) -> Result<Admitted, CommandError> {
        use std::sync::atomic::Ordering;
        let before = self.admitted.fetch_add(1, Ordering::SeqCst);
        let admitted = Admitted(self.admitted.clone());
        if before >= MAX_COMPRESS_REQUESTS {
            return Err(CommandError::ResourceExhausted(format!(
                "{MAX_COMPRESS_REQUESTS} compressions are already running or waiting (one \
                 runs at a time); ask again once they are done"
            )));
        }
        Ok(admitted)
    }

    /// Waits until no other compression runs.
    pub async fn turn(&self) -> Result<tokio::sync::OwnedSemaphorePermit, CommandError> {
        self.running
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| CommandError::ShuttingDown)
    }
}

/// Runs `f` on a blocking thread: file systems and the recorder's locks
/// must not stall the async workers that answer everyone else.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CommandError> + Send + 'static,
) -> Result<T, CommandError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CommandError::Internal(format!("worker thread failed: {e}")))?
}

impl State {
    /// The one dispatcher: every API request ends here.
    pub async fn dispatch(self: &Arc<Self>, command: Command) -> Result<Reply, CommandError> {
        match command {
            Command::Dump {
                label,
                compress,
                window,
            } => self.dump_command(label, compress, window).await,
            Command::List => {
                let store = self.current().store.clone();
                Ok(Reply::List(blocking(move || Ok(store.list()?)).await?))
            }
            Command::Rotate(limits) => self.rotate_command(limits).await,
            Command::Compress { id, level } => self.compress_command(id, level).await,
            Command::Status => self.status_command().await,
            Command::Reload => {
                if self.is_shutting_down() {
                    return Err(CommandError::ShuttingDown);
                }
                self.reload()
                    .await
                    .map(|(changed, summary)| Reply::Reload { changed, summary })
                    .map_err(|e: ReloadError| {
                        CommandError::FailedPrecondition(format!(
                            "new config rejected, the running one is kept: {e}"
                        ))
                    })
            }
        }
    }

    async fn dump_command(
        self: &Arc<Self>,
        label: Option<String>,
        compress: bool,
        window: WindowRequest,
    ) -> Result<Reply, CommandError> {
        if self.is_shutting_down() {
            return Err(CommandError::ShuttingDown);
        }
        let window = window.resolve(unix_ns(SystemTime::now())).map_err(|e| {
            CommandError::InvalidArgument {
                field: e.field,
                message: e.message,
            }
        })?;
        tracing::debug!(
            label = %crate::log_limit::cut(label.as_deref().unwrap_or("")),
            "dump requested over the API"
        );
        // `compress: false` asks for nothing: [snapshot] compression applies.
        let compress = compress.then_some(true);
        match self
            .request_dump(TriggerKind::Api, label, compress, window)
            .await
        {
            Ok(Outcome::Done {
                result: Ok(done),
                coalesced,
            }) => Ok(Reply::Dump { done, coalesced }),
            Ok(Outcome::Done { result: Err(f), .. }) => Err(f.into()),
            Ok(Outcome::ShuttingDown) | Err(_) => Err(CommandError::ShuttingDown),
        }
    }

    async fn rotate_command(self: &Arc<Self>, limits: RotateLimits) -> Result<Reply, CommandError> {
        let cfg = self.current().config.config.retention.clone();
        let configured = RetentionPolicy::from_limits(
            cfg.max_snapshots,
            cfg.max_bytes.bytes(),
            cfg.max_age.get(),
        );
        let policy = rotate_policy(configured, &limits);
        let state = self.clone();
        let store = self.current().store.clone();
        let (removed, kept) = blocking(move || {
            if !limits.delete_all {
                refuse_removing_all(&store.list()?, &policy, SystemTime::now())?;
            }
            Ok(state.apply_retention(&policy, None)?)
        })
        .await?;
        Ok(Reply::Rotate { removed, kept })
    }

    async fn compress_command(
        self: &Arc<Self>,
        id: String,
        level: Option<i32>,
    ) -> Result<Reply, CommandError> {
        let cur = self.current();
        let level = level.unwrap_or(*cur.config.config.snapshot.level.get_ref());
        let store = cur.store.clone();
        let admitted = self.compressions.admit()?;
        let turn = self.compressions.turn().await?;
        let (before, after) = blocking(move || {
            // Held until the compression is over, even if the caller left.
            let _queue = (admitted, turn);
            crate::perf::sched::background_pool().install(|| compress_in_place(&store, &id, level))
        })
        .await?;
        tracing::info!(id = %after.id, before = before.bytes, after = after.bytes, level, "snapshot compressed");
        Ok(Reply::Compress {
            bytes_before: before.bytes,
            after: Box::new(after),
        })
    }

    async fn status_command(self: &Arc<Self>) -> Result<Reply, CommandError> {
        let cur = self.current();
        let recorder = cur.recorder.clone();
        let store = cur.store.clone();
        let (status, usage) = blocking(move || Ok((recorder.status(), store.usage()?))).await?;
        let cfg = &cur.config.config;
        Ok(Reply::Status(Box::new(StatusReport {
            uptime: self.started.elapsed(),
            config_path: describe_source(&cur.config),
            events: cur.recorder.event_info().to_vec(),
            recorder: status,
            ring_bytes_per_cpu: cfg.buffers.per_cpu.get_ref().bytes(),
            tracking_ring_bytes_per_cpu: cfg.buffers.tracking.get_ref().bytes(),
            checkpoint_interval_bytes: cfg
                .tracking
                .effective_checkpoint_interval(cfg.buffers.tracking_log.get_ref().bytes()),
            output_dir: cur.store.dir().to_path_buf(),
            last_dump: self.last_dump(),
            dumps: self.dumps(),
            triggers: self.trigger_statuses(),
            // The queue as it is on disk now, not at the uploader's last pass.
            fleet: self.fleet.report().map(|mut f| {
                f.uploads_pending = usage.pending_uploads;
                f
            }),
            history: self.history_status().map(HistoryReport::of),
            usage,
        })))
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn store_errors_become_typed_command_errors_naming_the_field() {
        let e = CommandError::from(StoreError::InvalidLabel {
            label: "../x".into(),
            reason: "it starts with a dot".into(),
        });
        assert_eq!(
            e,
            CommandError::InvalidArgument {
                field: "label",
                message: "invalid label \"../x\": it starts with a dot".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "label: invalid label \"../x\": it starts with a dot"
        );
        let e = CommandError::from(StoreError::InvalidId { id: "a/b".into() });
        assert!(
            e.to_string().starts_with("id: invalid snapshot id \"a/b\""),
            "{e}"
        );
        assert!(matches!(
            CommandError::from(StoreError::NotFound { id: "x".into() }),
            CommandError::NotFound(_)
        ));
        assert!(matches!(
            CommandError::from(StoreError::WriteMeta {
                path: "/s/.x.meta".into(),
                source: io::Error::from_raw_os_error(libc::ENOSPC),
            }),
            CommandError::ResourceExhausted(_)
        ));
        let e = CommandError::from(StoreError::ReadDir {
            path: "/s".into(),
            source: io::Error::from_raw_os_error(libc::EIO),
        });
        assert!(
            matches!(&e, CommandError::Internal(m) if m.contains("/s")),
            "{e:?}"
        );
    }

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
        }
    }

    #[tokio::test]
    async fn compressions_run_one_at_a_time_and_only_a_few_may_wait() {
        let q = CompressQueue::default();
        let mut admitted: Vec<Admitted> = (0..MAX_COMPRESS_REQUESTS)
            .map(|_| q.admit().unwrap())
            .collect();
        assert!(matches!(
            q.admit(),
            Err(CommandError::ResourceExhausted(m)) if m.starts_with("3 compressions are already")
        ));
        admitted.pop();
        let _again = q.admit().unwrap();
        let first = q.turn().await.unwrap();
        let second = tokio::time::timeout(Duration::from_millis(50), q.turn()).await;
        assert!(second.is_err(), "a second compression ran beside the first");
        drop(first);
        let _second = q.turn().await.unwrap();
    }

    #[test]
    fn rotate_limits_of_zero_mean_no_limit_as_in_the_config() {
        let configured = RetentionPolicy::from_limits(10, 0, Duration::ZERO);
        let zero = RotateLimits::default();
        assert_eq!(rotate_policy(configured, &zero), configured);
        let tighter = RotateLimits {
            max_snapshots: 3,
            max_bytes: 1 << 20,
            ..zero
        };
        let p = rotate_policy(configured, &tighter);
        assert_eq!(p.max_snapshots, Some(3));
        assert_eq!(p.max_bytes, Some(1 << 20));
        assert_eq!(p.max_age, None);
        let all = RotateLimits {
            delete_all: true,
            ..zero
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
            matches!(&err, CommandError::FailedPrecondition(m)
                if m.starts_with("delete_all: this rotate would remove all 2 snapshots")),
            "{err:?}"
        );
        let old = RetentionPolicy::from_limits(0, 0, Duration::from_secs(1));
        assert!(refuse_removing_all(&all, &old, now).is_err());
        // Nothing to remove is not "everything".
        assert!(refuse_removing_all(&[], &tiny, now).is_ok());
    }
}
