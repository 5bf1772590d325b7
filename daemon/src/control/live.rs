//! The config in force and what was opened from it: the store and the
//! recorder. A reload replaces them as one, so every operation sees one
//! consistent set ([`Live::current`]).

use std::sync::{Arc, RwLock};

use flightrec_config::LoadedConfig;
use nix::unistd::Gid;

use super::config::ConfigSource;
use crate::recorder::Recorder;
use crate::store::Store;

/// What a reload may replace, swapped as one.
pub struct Current {
    pub config: LoadedConfig,
    pub store: Arc<Store>,
    pub recorder: Arc<Recorder>,
    pub group: Option<(String, Gid)>,
}

/// Where the config comes from, and the set in force.
pub struct Live {
    pub source: ConfigSource,
    current: RwLock<Arc<Current>>,
    /// One reload at a time.
    pub(super) reload_lock: tokio::sync::Mutex<()>,
}

impl Live {
    pub fn new(source: ConfigSource, current: Current) -> Self {
        Live {
            source,
            current: RwLock::new(Arc::new(current)),
            reload_lock: tokio::sync::Mutex::new(()),
        }
    }

    pub fn current(&self) -> Arc<Current> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(super) fn replace(&self, current: Current) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(current);
    }
}
