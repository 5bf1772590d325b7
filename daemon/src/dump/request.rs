//! What asks for a dump: a trigger (SIGUSR2, the `Dump` RPC, a condition,
//! a fleet request), with the window it wants and the caller waiting for
//! its answer, if any.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::error::DumpError;
use super::outcome::DumpDone;
use super::scope::Scope;
use super::window::{ResolvedWindow, WallWindow};

/// What asked for a dump.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TriggerKind {
    Api,
    Signal,
    /// A `[[trigger]]` condition, by name.
    Condition(Arc<str>),
    /// A request from the fleet (NATS).
    Fleet,
}

impl TriggerKind {
    /// As the snapshot's trigger field shows it: `api`, `signal`,
    /// `condition:<name>`, `fleet`.
    pub fn describe(&self) -> String {
        match self {
            TriggerKind::Api => "api".into(),
            TriggerKind::Signal => "signal".into(),
            TriggerKind::Condition(name) => format!("condition:{name}"),
            TriggerKind::Fleet => "fleet".into(),
        }
    }
}

/// A dump as a caller asks for it (the Dump RPC, a fleet request): the
/// label is checked and the window resolved by the caller's edge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpRequest {
    pub label: Option<String>,
    /// None: `[snapshot] compression` decides.
    pub compress: Option<bool>,
    pub window: ResolvedWindow,
    /// Part of the machine only (default: all of it).
    pub scope: Scope,
}

/// What a waiting caller gets: the snapshot, and whether other triggers
/// shared it.
#[derive(Debug, Clone)]
pub struct Served {
    pub done: Arc<DumpDone>,
    pub coalesced: bool,
}

/// A dump's answer to each of its callers.
pub type Answer = Result<Served, DumpError>;

/// The caller's end of a dump request.
pub type Waiter = oneshot::Sender<Answer>;

/// Whether the caller still waits: a request whose caller went away is
/// dropped before it costs a dump.
pub trait Waiting {
    fn gone(&self) -> bool;
}

impl Waiting for Waiter {
    fn gone(&self) -> bool {
        self.is_closed()
    }
}

/// One trigger, with the caller to answer (`W`), if any.
#[derive(Debug)]
pub struct Trigger<W> {
    pub kind: TriggerKind,
    pub label: Option<String>,
    /// None: `[snapshot] compression` decides.
    pub compress: Option<bool>,
    /// This trigger's own `post_trigger_delay`, instead of `[snapshot]`'s
    /// (a window ending later: until its end).
    pub delay: Option<Duration>,
    /// When it happened (the delay counts from here, also for a trigger
    /// that waited in the channel while a dump ran).
    pub at: Instant,
    /// The part of the past it asks for; open: all the rings hold.
    pub window: WallWindow,
    /// What a condition matched (the event and task, the stall, the
    /// losses), for the snapshot's sidecar and report.
    pub matched: Option<String>,
    /// Part of the machine only (default: all of it).
    pub scope: Scope,
    pub waiter: Option<W>,
}

impl<W> Trigger<W> {
    /// A trigger happening now, on the `[snapshot]` delay, asking for all
    /// the rings hold.
    pub fn now(kind: TriggerKind, waiter: Option<W>) -> Self {
        Self {
            kind,
            label: None,
            compress: None,
            delay: None,
            at: Instant::now(),
            window: WallWindow::default(),
            matched: None,
            scope: Scope::default(),
            waiter,
        }
    }

    /// A trigger of `request`, happening now.
    pub fn of_request(kind: TriggerKind, request: DumpRequest, waiter: Option<W>) -> Self {
        Self {
            label: request.label,
            compress: request.compress,
            delay: request.window.delay,
            window: request.window.window,
            scope: request.scope,
            ..Self::now(kind, waiter)
        }
    }

    /// The caller went away (a trigger nobody waits for never does).
    pub fn gone(&self) -> bool
    where
        W: Waiting,
    {
        self.waiter.as_ref().is_some_and(Waiting::gone)
    }
}
