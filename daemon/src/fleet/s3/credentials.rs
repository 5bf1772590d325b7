//! The keys S3 requests are signed with: from the environment or from
//! `fleet.s3.credentials_file`, an environment file (`KEY=value` lines).

use std::fmt;
use std::path::Path;

use flightrec_config::quoted;

/// The environment variables (and credentials file lines) read.
pub const ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
pub const SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
pub const SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";

/// Keys to sign requests with. Debug hides the secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<hidden>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<hidden>"),
            )
            .finish()
    }
}

impl S3Credentials {
    /// From variables looked up by `get`; `source` says where they were
    /// looked for, and `hint` what else to do when none is there.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
        source: &str,
        hint: &str,
    ) -> Result<Self, String> {
        let get = |name: &str| get(name).filter(|v| !v.is_empty());
        match (get(ACCESS_KEY_ID), get(SECRET_ACCESS_KEY)) {
            (Some(access_key_id), Some(secret_access_key)) => Ok(Self {
                access_key_id,
                secret_access_key,
                session_token: get(SESSION_TOKEN),
            }),
            (None, None) => Err(format!(
                "no S3 credentials: {ACCESS_KEY_ID} and {SECRET_ACCESS_KEY} are not set in \
                 {source}{hint}"
            )),
            (None, Some(_)) => Err(format!(
                "{ACCESS_KEY_ID} is not set in {source} ({SECRET_ACCESS_KEY} is)"
            )),
            (Some(_), None) => Err(format!(
                "{SECRET_ACCESS_KEY} is not set in {source} ({ACCESS_KEY_ID} is)"
            )),
        }
    }

    /// From the daemon's environment.
    pub fn from_env() -> Result<Self, String> {
        Self::from_lookup(
            |n| std::env::var(n).ok(),
            "the daemon's environment",
            " (set them, or fleet.s3.credentials_file)",
        )
    }

    /// From a credentials file's text: `NAME=value` lines as systemd's
    /// EnvironmentFile reads them (blank lines and `#`/`;` comments skipped,
    /// an optional `export `, values optionally quoted). Other variables are
    /// ignored, so the file may hold more. Errors name the file and line
    /// (never the line's text: it may hold a secret).
    pub fn parse_file(file: &Path, text: &str) -> Result<Self, String> {
        let name = quoted(&file.display().to_string());
        let mut vars = std::collections::HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let at = || format!("fleet.s3.credentials_file {name} line {}", index + 1);
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            let line = line.strip_prefix("export ").unwrap_or(line);
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!(
                    "{}: not NAME=value (e.g. {ACCESS_KEY_ID}=AKIA...)",
                    at()
                ));
            };
            let key = key.trim();
            let key_ok = key.chars().next().is_some_and(|c| !c.is_ascii_digit())
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !key_ok {
                return Err(format!(
                    "{}: {} is not a variable name (letters, digits and _)",
                    at(),
                    quoted(key)
                ));
            }
            let value = value.trim();
            let value = match value.as_bytes() {
                [q @ (b'"' | b'\''), .., last] if last == q => &value[1..value.len() - 1],
                [b'"' | b'\'', ..] => {
                    return Err(format!("{}: the value of {key} has no closing quote", at()));
                }
                _ => value,
            };
            vars.insert(key.to_string(), value.to_string());
        }
        Self::from_lookup(
            |n| vars.get(n).cloned(),
            &format!("fleet.s3.credentials_file {name}"),
            &format!(" (it needs {ACCESS_KEY_ID}=... and {SECRET_ACCESS_KEY}=... lines)"),
        )
    }

    /// From `path`, read now.
    pub fn read_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "cannot read fleet.s3.credentials_file {}: {e}",
                quoted(&path.display().to_string())
            )
        })?;
        Self::parse_file(path, &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_files_read_as_environment_files() {
        let file = Path::new("/etc/flightrec/s3.env");
        let c = S3Credentials::parse_file(
            file,
            "# S3 keys\n\nAWS_ACCESS_KEY_ID=AKID\r\nexport AWS_SECRET_ACCESS_KEY = \"se=cret\"\n\
             AWS_SESSION_TOKEN='T0K-9'\nAWS_REGION=eu-west-1\n",
        )
        .unwrap();
        assert_eq!(
            c,
            S3Credentials {
                access_key_id: "AKID".into(),
                secret_access_key: "se=cret".into(),
                session_token: Some("T0K-9".into()),
            }
        );
        assert!(!format!("{c:?}").contains("se=cret"), "{c:?}");
        assert!(!format!("{c:?}").contains("T0K-9"), "{c:?}");
    }

    #[test]
    fn bad_credentials_files_are_named_with_the_line() {
        let file = Path::new("/etc/flightrec/s3.env");
        let parse = |text: &str| S3Credentials::parse_file(file, text).unwrap_err();
        assert_eq!(
            parse("AWS_ACCESS_KEY_ID=AKID\nAKIAsecret\n"),
            "fleet.s3.credentials_file \"/etc/flightrec/s3.env\" line 2: not NAME=value \
             (e.g. AWS_ACCESS_KEY_ID=AKIA...)"
        );
        assert_eq!(
            parse("\n\nAWS SECRET=x\n"),
            "fleet.s3.credentials_file \"/etc/flightrec/s3.env\" line 3: \"AWS SECRET\" is not a \
             variable name (letters, digits and _)"
        );
        assert_eq!(
            parse("AWS_SECRET_ACCESS_KEY=\"abc\n"),
            "fleet.s3.credentials_file \"/etc/flightrec/s3.env\" line 1: the value of \
             AWS_SECRET_ACCESS_KEY has no closing quote"
        );
        assert_eq!(
            parse("AWS_ACCESS_KEY_ID=AKID\n"),
            "AWS_SECRET_ACCESS_KEY is not set in fleet.s3.credentials_file \
             \"/etc/flightrec/s3.env\" (AWS_ACCESS_KEY_ID is)"
        );
        assert_eq!(
            parse("AWS_ACCESS_KEY_ID=\nAWS_SECRET_ACCESS_KEY=x\n"),
            "AWS_ACCESS_KEY_ID is not set in fleet.s3.credentials_file \
             \"/etc/flightrec/s3.env\" (AWS_SECRET_ACCESS_KEY is)"
        );
        assert_eq!(
            parse("# nothing\n"),
            "no S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set in \
             fleet.s3.credentials_file \"/etc/flightrec/s3.env\" (it needs \
             AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines)"
        );
        let missing = S3Credentials::read_file(Path::new("/nonexistent/s3.env")).unwrap_err();
        assert!(
            missing.starts_with(
                "cannot read fleet.s3.credentials_file \"/nonexistent/s3.env\": No such file"
            ),
            "{missing}"
        );
    }

    #[test]
    fn credentials_come_from_the_environment_in_pairs() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |n: &str| {
                vars.iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.to_string())
            }
        };
        let from = |vars| S3Credentials::from_lookup(env(vars), "the environment", " (hint)");
        assert_eq!(
            from(&[("AWS_ACCESS_KEY_ID", "A"), ("AWS_SECRET_ACCESS_KEY", "S")]),
            Ok(S3Credentials {
                access_key_id: "A".into(),
                secret_access_key: "S".into(),
                session_token: None,
            })
        );
        assert_eq!(
            from(&[]).unwrap_err(),
            "no S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set in the \
             environment (hint)"
        );
        assert_eq!(
            from(&[("AWS_SECRET_ACCESS_KEY", "S"), ("AWS_SESSION_TOKEN", "T")]).unwrap_err(),
            "AWS_ACCESS_KEY_ID is not set in the environment (AWS_SECRET_ACCESS_KEY is)"
        );
    }
}
