//! Reading a config file: parsing, validating, and errors that point at the
//! line and column of the offending value, also for checks the daemon makes
//! later.

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::checks::check_path;
use crate::message::{MAX_MESSAGE_CHARS, line_column, truncated};
use crate::schema::Config;

/// A config that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Unlocated { path: PathBuf, message: String },
}

impl Config {
    /// Parses and validates `text`, read from `path` (used in messages).
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Ok(LoadedConfig::parse(text, path)?.config)
    }
}

/// A parsed config with its source, so later checks can point at a line.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    /// None when running on built-in defaults (no file).
    pub path: Option<PathBuf>,
    source: String,
}

impl LoadedConfig {
    /// Built-in defaults, no file.
    pub fn defaults() -> Self {
        Self {
            config: Config::default(),
            path: None,
            source: String::new(),
        }
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => error_at(path, text, span, e.message().trim().to_string()),
            None => ConfigError::Unlocated {
                path: path.to_path_buf(),
                message: truncated(e.message().trim(), MAX_MESSAGE_CHARS),
            },
        })?;
        let loaded = Self {
            config,
            path: Some(path.to_path_buf()),
            source: text.to_string(),
        };
        loaded
            .config
            .validate()
            .map_err(|(span, msg)| loaded.error_at(span, msg))?;
        let daemon = &loaded.config.daemon;
        for (key, value) in [
            ("socket", &daemon.socket),
            ("output_dir", &daemon.output_dir),
        ] {
            if let Err(why) = check_path(value) {
                return Err(loaded.error_at(
                    loaded.key_span("daemon", key),
                    format!("daemon.{key} {why}"),
                ));
            }
        }
        if let Err(why) = check_path(&loaded.config.history.dir) {
            return Err(loaded.error_at(
                loaded.key_span("history", "dir"),
                format!("history.dir {why}"),
            ));
        }
        Ok(loaded)
    }

    /// The span of the value of `key` in `[section]` of the file; empty
    /// (no position) when the file does not set it. For values kept as
    /// plain types (paths) rather than [`Spanned`](crate::Spanned).
    pub fn key_span(&self, section: &str, key: &str) -> Range<usize> {
        use toml::de::{DeTable, DeValue};
        let Ok(doc) = DeTable::parse(&self.source) else {
            return 0..0;
        };
        fn find<'a, 'i>(
            table: &'a DeTable<'i>,
            name: &str,
        ) -> Option<&'a toml::Spanned<DeValue<'i>>> {
            table
                .iter()
                .find(|(k, _)| k.get_ref() == name)
                .map(|(_, v)| v)
        }
        match find(doc.get_ref(), section).map(|v| v.get_ref()) {
            Some(DeValue::Table(t)) => find(t, key).map_or(0..0, |v| v.span()),
            _ => 0..0,
        }
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// An error pointing at `span` of this config's file. Spans of values
    /// that came from defaults (empty) give an error without a position.
    pub fn error_at(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        let path = self
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from("<built-in defaults>"));
        if span.is_empty() && span.start == 0 {
            return ConfigError::Unlocated {
                path,
                message: truncated(&message.into(), MAX_MESSAGE_CHARS),
            };
        }
        error_at(&path, &self.source, span, message.into())
    }
}

fn error_at(path: &Path, text: &str, span: Range<usize>, message: String) -> ConfigError {
    let (line, column) = line_column(text, span.start);
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line,
        column,
        message: truncated(&message, MAX_MESSAGE_CHARS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{parse, rejected_at};

    #[test]
    fn unknown_key_is_located() {
        rejected_at(
            "[daemon]\nsocket = \"/x\"\n  sokcet_group = \"a\"\n",
            3,
            3,
            "sokcet_group",
        );
    }

    #[test]
    fn unknown_section_is_located() {
        rejected_at("\n\n[bufers]\nper_cpu = \"4MiB\"\n", 3, 2, "bufers");
    }

    #[test]
    fn bad_size_is_located() {
        rejected_at(
            "[buffers]\nper_cpu = \"4XB\"\n",
            2,
            11,
            "invalid size \"4XB\"",
        );
    }

    #[test]
    fn bad_duration_is_located() {
        rejected_at(
            "[retention]\nmax_age = \"a week\"\n",
            2,
            11,
            "invalid duration",
        );
        rejected_at("[snapshot]\nmin_interval = 5\n", 2, 16, "give a unit");
    }

    #[test]
    fn syntax_error_is_located() {
        rejected_at("[daemon]\nsocket = /run/x\n", 2, 10, "");
    }

    #[test]
    fn wrong_type_is_located() {
        rejected_at("[retention]\nmax_snapshots = \"many\"\n", 2, 17, "");
    }

    #[test]
    fn unknown_compression_is_located() {
        rejected_at("[snapshot]\ncompression = \"lz4\"\n", 2, 15, "lz4");
    }

    #[test]
    fn event_without_name_is_located() {
        rejected_at("[[event]]\nfrequency = 99\n", 1, 1, "name");
    }

    #[test]
    fn later_checks_point_at_the_value() {
        let text = "[daemon]\nsocket_group = \"nosuchgroup\"\n";
        let loaded = LoadedConfig::parse(text, Path::new("/c.toml")).unwrap();
        let span = loaded.config.daemon.socket_group.as_ref().unwrap().span();
        let err = loaded.error_at(span, "group does not exist");
        assert_eq!(err.to_string(), "/c.toml:2:16: group does not exist");
        let defaults = LoadedConfig::defaults();
        let span = defaults.config.daemon.socket_group.as_ref().unwrap().span();
        assert_eq!(
            defaults.error_at(span, "x").to_string(),
            "<built-in defaults>: x"
        );
    }

    #[test]
    fn huge_values_are_cut_in_errors() {
        let huge = "x".repeat(10 << 20);
        for text in [
            format!("[daemon]\nlog_level = \"{huge}\"\n"),
            format!("[daemon]\nsocket_group = \"{huge}\"\n"),
            format!("[buffers]\nper_cpu = \"{huge}\"\n"),
            format!("[retention]\nmax_age = \"{huge}\"\n"),
            format!("[[event]]\nname = \"{huge}\"\n"),
            format!("[daemon]\n{huge} = 1\n"),
            format!("[daemon]\nsocket = \"/{huge}\"\n"),
        ] {
            let msg = parse(&text).expect_err("rejected").to_string();
            assert!(msg.len() < 1200, "{} bytes: {}", msg.len(), &msg[..200]);
            assert!(msg.starts_with("/etc/test.toml:2:"), "{msg}");
        }
        let msg = parse(&format!("[daemon]\nlog_level = \"{huge}\"\n"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("... (10485760 bytes)"), "{msg}");
        assert!(msg.contains("is not one of error, warn"), "{msg}");
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_parsed_or_rejected_with_a_position(text in "\\PC{0,200}") {
            match parse(&text) {
                Ok(_) => {}
                Err(ConfigError::Invalid { line, column, .. }) => {
                    proptest::prop_assert!(line >= 1 && column >= 1);
                    proptest::prop_assert!(line <= text.lines().count().max(1) + 1);
                }
                Err(ConfigError::Unlocated { .. }) => {}
                Err(e) => proptest::prop_assert!(false, "unexpected error kind: {e}"),
            }
        }

        #[test]
        fn toml_shaped_text_never_panics(
            key in "(socket|per_cpu|level|name|max_age|max_bytes|frequency|x)",
            value in "(\"[0-9A-Za-z :/.]{0,12}\"|-?[0-9]{1,20}|true|\\[\\])",
            section in "(daemon|buffers|snapshot|retention|\\[event\\])",
        ) {
            let _ = parse(&format!("[{section}]\n{key} = {value}\n"));
        }
    }
}
