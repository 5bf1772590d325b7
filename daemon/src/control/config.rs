//! The config as the daemon applies it: where it comes from, what
//! `--check-config` verifies (group, paths, memory, events against the
//! kernel), and the settings derived from it.

use std::path::{Path, PathBuf};

use flightrec_config::{Config, ConfigError, LoadedConfig};
use nix::unistd::{Gid, Group};

use crate::dump::Timing;
use crate::recorder::{self, Recorder, StartError};
use crate::store::RetentionPolicy;

/// Where the config comes from.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    pub path: PathBuf,
    /// Given with `--config`: a missing file is an error. Otherwise the
    /// default path, and a missing file means built-in defaults.
    pub explicit: bool,
}

impl ConfigSource {
    /// Reads the config, falling back to built-in defaults when the default
    /// file is absent; `Ok(None)` path in the result means defaults.
    pub fn load(&self) -> Result<LoadedConfig, ConfigError> {
        if !self.explicit && !self.path.exists() {
            return Ok(LoadedConfig::defaults());
        }
        LoadedConfig::load(&self.path)
    }
}

/// The socket group resolved against the system's groups. The default
/// group may be absent (None: the socket keeps the daemon's group); a group
/// named in the file must exist.
pub fn resolve_group(loaded: &LoadedConfig) -> Result<Option<(String, Gid)>, ConfigError> {
    let Some(group) = &loaded.config.daemon.socket_group else {
        return Ok(None);
    };
    let name = group.get_ref();
    if name.is_empty() {
        return Ok(None);
    }
    match Group::from_name(name) {
        Ok(Some(g)) => Ok(Some((name.clone(), g.gid))),
        Ok(None) if group.span().is_empty() => {
            tracing::warn!(
                group = %name,
                "the default socket group does not exist; the socket is accessible to root only \
                 (create the group or set daemon.socket_group)"
            );
            Ok(None)
        }
        Ok(None) => Err(loaded.error_at(
            group.span(),
            format!(
                "daemon.socket_group: group {name:?} does not exist \
                 (create it with `groupadd {name}` or name another group)"
            ),
        )),
        Err(e) => Err(loaded.error_at(
            group.span(),
            format!("daemon.socket_group: cannot look up group {name:?}: {e}"),
        )),
    }
}

/// Everything `--check-config` verifies: syntax, values, the group, the
/// paths, and the events and triggers (filters included) against the
/// running kernel.
/// Returns the effective config, which reads back as the same daemon.
pub fn check_config(loaded: &LoadedConfig) -> Result<Config, ConfigError> {
    let group = resolve_group(loaded)?;
    check_paths(loaded, group.as_ref())?;
    check_tracking_log(loaded)?;
    recorder::start::check_events(&loaded.config).map_err(|e| start_error_in_config(loaded, &e))?;
    // Arms and drops the triggers: the kernel checks tracepoints, filters
    // and PSI thresholds.
    drop(super::conditions::open_conditions(loaded)?);
    Ok(effective_config(&loaded.config, group.as_ref()))
}

/// `config` with the socket group as resolved: a default group that does
/// not exist is written `""` (no group), so the printed config, fed back,
/// starts the same daemon instead of asking for a group that is absent.
pub fn effective_config(config: &Config, group: Option<&(String, Gid)>) -> Config {
    let mut effective = config.clone();
    effective.daemon.socket_group = Some(flightrec_config::Spanned::new(
        0..0,
        group.map(|g| g.0.clone()).unwrap_or_default(),
    ));
    effective
}

/// What a path the daemon must create can be refused for: the nearest
/// existing ancestor of `path` (itself included) must be a directory
/// (`want_dir`: `path` itself, when it exists, too) that root may write to.
fn check_creatable(path: &Path, want_dir: bool) -> Result<(), String> {
    let shown = |p: &Path| flightrec_config::quoted(&p.to_string_lossy());
    let mut probe = path;
    loop {
        match std::fs::metadata(probe) {
            Ok(md) if probe == path => {
                return if want_dir && !md.is_dir() {
                    Err(format!("{} exists and is not a directory", shown(path)))
                } else {
                    Ok(())
                };
            }
            Ok(md) if !md.is_dir() => {
                return Err(format!(
                    "{} cannot be created: {} is not a directory",
                    shown(path),
                    shown(probe)
                ));
            }
            Ok(_) => {
                return nix::unistd::access(probe, nix::unistd::AccessFlags::W_OK).map_err(|e| {
                    format!(
                        "{} cannot be created in {}: {}",
                        shown(path),
                        shown(probe),
                        e.desc()
                    )
                });
            }
            // Missing, or under a file: the ancestor found next says which.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) => {}
            Err(e) => return Err(format!("{} cannot be checked: {e}", shown(probe))),
        }
        match probe.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => probe = parent,
            _ => return Ok(()),
        }
    }
}

/// The output directory and the socket's directory exist as directories
/// or can be created; the socket path is free or a socket. The output
/// directory (and every directory above it) must be the daemon's own: no
/// one but root and the socket group may write there, or they could plant
/// links and files where a root daemon creates, lists and removes them.
pub fn check_paths(
    loaded: &LoadedConfig,
    group: Option<&(String, Gid)>,
) -> Result<(), ConfigError> {
    let daemon = &loaded.config.daemon;
    let at = |key: &str, why: String| {
        loaded.error_at(
            loaded.key_span("daemon", key),
            format!("daemon.{key}: {why}"),
        )
    };
    check_creatable(&daemon.output_dir, true).map_err(|why| at("output_dir", why))?;
    check_own_dir(&daemon.output_dir, group).map_err(|why| at("output_dir", why))?;
    let history = &loaded.config.history;
    if history.enabled {
        let at = |why: String| {
            loaded.error_at(
                loaded.key_span("history", "dir"),
                format!("history.dir: {why}"),
            )
        };
        check_creatable(&history.dir, true).map_err(at)?;
        check_own_dir(&history.dir, group).map_err(at)?;
        check_history_dir(&history.dir).map_err(at)?;
    }
    if let Some(dir) = daemon.socket.parent()
        && !dir.as_os_str().is_empty()
    {
        check_creatable(dir, true).map_err(|why| at("socket", why))?;
    }
    if let Ok(md) = std::fs::symlink_metadata(&daemon.socket) {
        use std::os::unix::fs::FileTypeExt;
        if !md.file_type().is_socket() {
            return Err(at(
                "socket",
                format!(
                    "{} exists and is not a socket",
                    flightrec_config::quoted(&daemon.socket.to_string_lossy())
                ),
            ));
        }
    }
    Ok(())
}

/// `dir` may be written by no one but the daemon's user, root and the
/// socket group.
pub fn check_own_dir(dir: &Path, group: Option<&(String, Gid)>) -> Result<(), String> {
    let owner = nix::unistd::geteuid().as_raw();
    flightrec_files::dirs::check_private(dir, owner, group.map(|g| g.1.as_raw())).map_err(|e| {
        let shown = |p: &Path| flightrec_config::quoted(&p.to_string_lossy());
        let what = if e.dir == dir {
            shown(dir)
        } else {
            format!("{} (above {})", shown(&e.dir), shown(dir))
        };
        format!(
            "{what} {}; only root and the socket group may write where the daemon keeps \
             snapshots",
            e.reason
        )
    })
}

/// The history's directory may be written by the daemon's user alone:
/// the daemon reads its segments back at dump time, and a file planted or
/// swapped there would be read by root.
pub fn check_history_dir(dir: &Path) -> Result<(), String> {
    let owner = nix::unistd::geteuid().as_raw();
    flightrec_files::dirs::check_owner_only(dir, owner).map_err(|e| {
        format!(
            "{} {}; the history's segments are read back by the daemon, so only it may write \
             there",
            flightrec_config::quoted(&e.dir.to_string_lossy()),
            e.reason
        )
    })
}

/// A start error that names an event becomes a config error pointing at
/// that event.
fn start_error_in_config(loaded: &LoadedConfig, e: &StartError) -> ConfigError {
    let span = e
        .event_index()
        .and_then(|i| loaded.config.events.get(i))
        .map(|ev| ev.get_ref().name.span());
    loaded.error_at(span.unwrap_or(0..0), e.reason())
}

/// Whether the system grants the memory `buffers.tracking_log` asks for
/// (the recorder allocates it whole), so a log too large for this machine
/// is a config error pointing at the key rather than a failed start.
pub fn check_tracking_log(loaded: &LoadedConfig) -> Result<(), ConfigError> {
    let log = &loaded.config.buffers.tracking_log;
    let bytes = usize::try_from(log.get_ref().bytes()).unwrap_or(usize::MAX);
    Vec::<u8>::new().try_reserve_exact(bytes).map_err(|e| {
        loaded.error_at(
            log.span(),
            format!(
                "buffers.tracking_log = {}: this machine does not grant that much memory ({e})",
                log.get_ref()
            ),
        )
    })
}

/// Why the recorder a config describes could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The config is at fault (the message names file, line and column).
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Recorder(StartError),
}

/// Opens the rings `loaded` asks for; an event the kernel refuses is a
/// config error pointing at its `[[event]]`.
pub fn start_recorder(loaded: &LoadedConfig) -> Result<Recorder, OpenError> {
    check_tracking_log(loaded)?;
    recorder::start::start(&loaded.config).map_err(|e| {
        if e.event_index().is_some() {
            OpenError::Config(start_error_in_config(loaded, &e))
        } else {
            OpenError::Recorder(e)
        }
    })
}

pub fn timing_of(config: &Config) -> Timing {
    Timing {
        min_interval: config.snapshot.min_interval.get(),
        post_trigger_delay: config.snapshot.post_trigger_delay.get_ref().get(),
    }
}

pub fn retention_of(config: &Config) -> RetentionPolicy {
    let r = &config.retention;
    RetentionPolicy::from_limits(r.max_snapshots, r.max_bytes.bytes(), r.max_age.get())
}

pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

pub fn log_removed_temps(removed: &[PathBuf]) {
    for p in removed {
        tracing::info!(path = %p.display(), "removed a temporary file left by an earlier crash");
    }
}

/// The daemon's own config path for messages.
pub fn describe_source(loaded: &LoadedConfig) -> String {
    loaded.path.as_deref().map_or_else(
        || "built-in defaults".to_string(),
        |p: &Path| p.display().to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(text: &str) -> LoadedConfig {
        LoadedConfig::parse(text, Path::new("/etc/f.toml")).unwrap()
    }

    #[test]
    fn a_missing_group_is_an_error_only_when_written_in_the_file() {
        let named = loaded("[daemon]\nsocket_group = \"no-such-group-zz\"\n");
        let err = resolve_group(&named).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "/etc/f.toml:2:16: daemon.socket_group: group \"no-such-group-zz\" does not exist"
            ),
            "{err}"
        );
        let mut defaults = LoadedConfig::defaults();
        if let Some(g) = defaults.config.daemon.socket_group.as_mut() {
            *g = flightrec_config::Spanned::new(0..0, "no-such-group-zz".to_string());
        }
        assert!(resolve_group(&defaults).unwrap().is_none());
        let root = loaded("[daemon]\nsocket_group = \"root\"\n");
        assert_eq!(resolve_group(&root).unwrap().map(|g| g.1.as_raw()), Some(0));
        assert!(resolve_group(&loaded("[daemon]\n")).is_ok());
    }

    #[test]
    fn an_empty_socket_group_means_none_and_a_missing_default_prints_as_empty() {
        assert!(
            resolve_group(&loaded("[daemon]\nsocket_group = \"\"\n"))
                .unwrap()
                .is_none()
        );
        let mut defaults = LoadedConfig::defaults();
        defaults.config.daemon.socket_group = Some(flightrec_config::Spanned::new(
            0..0,
            "no-such-group-zz".to_string(),
        ));
        let group = resolve_group(&defaults).unwrap();
        let printed = effective_config(&defaults.config, group.as_ref()).to_toml();
        assert!(printed.contains("socket_group = \"\"\n"), "{printed}");
        let back = loaded(&printed);
        assert!(resolve_group(&back).unwrap().is_none());
        let root = loaded("[daemon]\nsocket_group = \"root\"\n");
        let group = resolve_group(&root).unwrap();
        let printed = effective_config(&root.config, group.as_ref()).to_toml();
        assert!(printed.contains("socket_group = \"root\"\n"), "{printed}");
    }

    #[test]
    fn paths_under_a_file_cannot_be_created() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(
            check_creatable(&file, true).unwrap_err(),
            format!(
                "{:?} exists and is not a directory",
                file.display().to_string()
            )
        );
        let under = file.join("a/b");
        assert_eq!(
            check_creatable(&under, true).unwrap_err(),
            format!(
                "{:?} cannot be created: {:?} is not a directory",
                under.display().to_string(),
                file.display().to_string()
            )
        );
        assert!(check_creatable(&dir.path().join("new/dir"), true).is_ok());
        assert!(check_creatable(dir.path(), true).is_ok());
    }

    #[test]
    fn an_absent_default_file_means_defaults_but_an_explicit_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.toml");
        let implicit = ConfigSource {
            path: missing.clone(),
            explicit: false,
        };
        let l = implicit.load().unwrap();
        assert!(l.path.is_none());
        assert_eq!(l.config, Config::default());
        let explicit = ConfigSource {
            path: missing,
            explicit: true,
        };
        assert!(matches!(explicit.load(), Err(ConfigError::Read { .. })));
    }

    #[test]
    fn start_errors_naming_an_event_point_at_it() {
        let l = loaded("[[event]]\nname = \"cpu-clock\"\n\n[[event]]\nname = \"sched:nope\"\n");
        let e = StartError::Event {
            index: 1,
            source: crate::perf::event::EventError::TracepointMissing {
                event: "sched:nope".into(),
                path: "/sys/kernel/tracing/events/sched/nope".into(),
            },
        };
        assert_eq!(
            start_error_in_config(&l, &e).to_string(),
            "/etc/f.toml:5:8: tracepoint 'sched:nope' does not exist: \
             /sys/kernel/tracing/events/sched/nope is missing"
        );
    }

    #[test]
    fn retention_from_config_treats_zero_as_no_limit() {
        let c = loaded("[retention]\nmax_snapshots = 0\nmax_bytes = \"1MiB\"\nmax_age = \"0s\"\n");
        let p = retention_of(&c.config);
        assert_eq!(p.max_snapshots, None);
        assert_eq!(p.max_bytes, Some(1 << 20));
        assert_eq!(p.max_age, None);
    }
}
