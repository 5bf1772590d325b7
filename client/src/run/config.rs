//! The daemon's config file, read for what snapctl is not told: the
//! socket, and `[fleet]`.

use std::path::{Path, PathBuf};

use flightrec_config::{DEFAULT_CONFIG_PATH, DEFAULT_SOCKET, LoadedConfig};

/// The daemon's config file, when there is one that reads.
pub(super) fn daemon_config() -> Option<LoadedConfig> {
    let path = Path::new(DEFAULT_CONFIG_PATH);
    path.exists()
        .then(|| LoadedConfig::load(path).ok())
        .flatten()
}

/// Flag or env, else the daemon's config file, else the default.
pub(super) fn socket_path(flag: Option<PathBuf>) -> PathBuf {
    socket_path_from(flag, daemon_config)
}

/// As [`socket_path`], with `config` read only when there is no flag.
fn socket_path_from(
    flag: Option<PathBuf>,
    config: impl FnOnce() -> Option<LoadedConfig>,
) -> PathBuf {
    flag.or_else(|| config().map(|l| l.config.daemon.socket))
        .unwrap_or_else(|| DEFAULT_SOCKET.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_is_the_flag_else_the_config_s_else_the_default() {
        let unread = || -> Option<LoadedConfig> { panic!("the config is not needed") };
        assert_eq!(
            socket_path_from(Some("/tmp/a.sock".into()), unread),
            Path::new("/tmp/a.sock")
        );
        let mut loaded = LoadedConfig::defaults();
        loaded.config = flightrec_config::Config::from_toml(
            "[daemon]\nsocket = \"/srv/flightrec.sock\"\n",
            Path::new("/x.toml"),
        )
        .unwrap();
        assert_eq!(
            socket_path_from(None, || Some(loaded)),
            Path::new("/srv/flightrec.sock")
        );
        assert_eq!(socket_path_from(None, || None), Path::new(DEFAULT_SOCKET));
    }
}
