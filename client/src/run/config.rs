//! The daemon's config file, read for what snapctl is not told: the
//! socket, and `[fleet]`. It is the file `--config` (or
//! `FLIGHTREC_CONFIG`) names, which must read, else
//! /etc/flightrec/flightrec.toml when it exists and reads.

use std::path::{Path, PathBuf};

use flightrec_config::{DEFAULT_CONFIG_PATH, DEFAULT_SOCKET, LoadedConfig};

use crate::ClientError;

/// The daemon's config file: the one named (`--config`), which must
/// read, else the default one when there is one that reads.
pub(super) fn daemon_config(named: Option<&Path>) -> Result<Option<LoadedConfig>, ClientError> {
    match named {
        Some(path) => LoadedConfig::load(path)
            .map(Some)
            .map_err(ClientError::Config),
        None => {
            let path = Path::new(DEFAULT_CONFIG_PATH);
            Ok(path
                .exists()
                .then(|| LoadedConfig::load(path).ok())
                .flatten())
        }
    }
}

/// Flag or env, else the daemon's config file's, else the default.
pub(super) fn socket_path(
    flag: Option<PathBuf>,
    config: Option<&Path>,
) -> Result<PathBuf, ClientError> {
    socket_path_from(flag, || daemon_config(config))
}

/// As [`socket_path`], with `config` read only when there is no flag.
fn socket_path_from(
    flag: Option<PathBuf>,
    config: impl FnOnce() -> Result<Option<LoadedConfig>, ClientError>,
) -> Result<PathBuf, ClientError> {
    if let Some(path) = flag {
        return Ok(path);
    }
    Ok(config()?
        .map(|l| l.config.daemon.socket)
        .unwrap_or_else(|| DEFAULT_SOCKET.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_is_the_flag_else_the_config_s_else_the_default() {
        let unread =
            || -> Result<Option<LoadedConfig>, ClientError> { panic!("the config is not needed") };
        assert_eq!(
            socket_path_from(Some("/tmp/a.sock".into()), unread).unwrap(),
            Path::new("/tmp/a.sock")
        );
        let mut loaded = LoadedConfig::defaults();
        loaded.config = flightrec_config::Config::from_toml(
            "[daemon]\nsocket = \"/srv/flightrec.sock\"\n",
            Path::new("/x.toml"),
        )
        .unwrap();
        assert_eq!(
            socket_path_from(None, || Ok(Some(loaded))).unwrap(),
            Path::new("/srv/flightrec.sock")
        );
        assert_eq!(
            socket_path_from(None, || Ok(None)).unwrap(),
            Path::new(DEFAULT_SOCKET)
        );
    }

    #[test]
    fn a_named_config_must_read_and_says_who_named_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("flightrec.toml");
        std::fs::write(&file, "[daemon]\nsocket = \"/srv/q.sock\"\n").unwrap();
        assert_eq!(
            socket_path(None, Some(&file)).unwrap(),
            Path::new("/srv/q.sock")
        );
        // An empty file is the defaults.
        std::fs::write(&file, "").unwrap();
        assert_eq!(
            socket_path(None, Some(&file)).unwrap(),
            Path::new(DEFAULT_SOCKET)
        );
        let missing = dir.path().join("none.toml");
        let e = socket_path(None, Some(&missing)).unwrap_err();
        assert_eq!(e.exit_code(), crate::EXIT_USAGE);
        let text = e.to_string();
        assert!(
            text.contains(&missing.display().to_string())
                && text.ends_with("(named by --config or FLIGHTREC_CONFIG)"),
            "{text}"
        );
        std::fs::write(&file, "[daemon]\nsokcet = 1\n").unwrap();
        let text = socket_path(None, Some(&file)).unwrap_err().to_string();
        assert!(text.contains("flightrec.toml:2:1: unknown field"), "{text}");
        // A flag needs no config, even a bad one.
        assert_eq!(
            socket_path(Some("/tmp/a.sock".into()), Some(&missing)).unwrap(),
            Path::new("/tmp/a.sock")
        );
    }
}
