//! `snapctl fleet`: the fleet over NATS, without any daemon's socket.
//! [`dump`] asks every daemon for a snapshot; [`store`] lists and fetches
//! the snapshots they uploaded into the JetStream object store.

pub mod bucket;
pub mod dump;
pub mod fetch;
mod interrupts;
pub mod store;

use std::path::PathBuf;
use std::time::Duration;

use async_nats::ConnectOptions;
use flightrec_config::{DEFAULT_BUCKET, DEFAULT_NATS_URL, DEFAULT_SUBJECT, FleetConfig};

use crate::ClientError;
pub use dump::{FleetDump, WindowArgs, dump, parse_selector, request_json};

/// Where and how to reach NATS: `--nats`, else `[fleet]` of the config
/// file, else the local default; credentials, subject and bucket from
/// `[fleet]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetTarget {
    pub servers: Vec<String>,
    pub subject: String,
    /// The JetStream object store bucket of the uploads.
    pub bucket: String,
    pub creds: Option<PathBuf>,
    pub user: Option<(String, PathBuf)>,
    pub tls_ca: Option<PathBuf>,
    pub tls_client: Option<(PathBuf, PathBuf)>,
}

impl FleetTarget {
    pub fn new(nats: Option<String>, fleet: Option<&FleetConfig>) -> Self {
        let servers = match (nats, fleet) {
            (Some(url), _) => vec![url],
            (None, Some(f)) => f.servers().to_vec(),
            (None, None) => vec![DEFAULT_NATS_URL.to_string()],
        };
        Self {
            servers,
            subject: fleet.map_or(DEFAULT_SUBJECT.to_string(), |f| f.subject.get_ref().clone()),
            bucket: fleet.map_or(DEFAULT_BUCKET.to_string(), |f| f.bucket.get_ref().clone()),
            creds: fleet.and_then(|f| f.creds.as_ref().map(|c| c.get_ref().clone())),
            user: fleet.and_then(|f| match (&f.user, &f.password_file) {
                (Some(u), Some(p)) => Some((u.get_ref().clone(), p.get_ref().clone())),
                _ => None,
            }),
            tls_ca: fleet.and_then(|f| f.tls_ca.as_ref().map(|c| c.get_ref().clone())),
            tls_client: fleet.and_then(|f| match (&f.tls_cert, &f.tls_key) {
                (Some(c), Some(k)) => Some((c.get_ref().clone(), k.get_ref().clone())),
                _ => None,
            }),
        }
    }

    /// The servers as error messages name them.
    pub fn servers_text(&self) -> String {
        self.servers.join(", ")
    }

    fn error(&self, message: impl std::fmt::Display) -> ClientError {
        ClientError::Nats {
            servers: self.servers_text(),
            message: message.to_string(),
        }
    }

    async fn connect(&self, timeout: Duration) -> Result<async_nats::Client, ClientError> {
        let mut options = ConnectOptions::new()
            .name("snapctl")
            .connection_timeout(timeout);
        if let Some(creds) = &self.creds {
            options = options
                .credentials_file(creds)
                .await
                .map_err(|e| self.error(format!("cannot read {}: {e}", creds.display())))?;
        }
        if let Some((user, file)) = &self.user {
            let password = std::fs::read_to_string(file)
                .map_err(|e| self.error(format!("cannot read {}: {e}", file.display())))?;
            options = options.user_and_password(
                user.clone(),
                password.trim_end_matches(['\n', '\r']).to_string(),
            );
        }
        if let Some(ca) = &self.tls_ca {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some((cert, key)) = &self.tls_client {
            options = options
                .add_client_certificate(cert.clone(), key.clone())
                .require_tls(true);
        }
        let addrs = self
            .servers
            .iter()
            .map(|u| u.parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))?;
        options.connect(addrs).await.map_err(|e| match e.kind() {
            async_nats::ConnectErrorKind::AuthorizationViolation => self.error(
                "authorization violation (the server refused the credentials: --creds, \
                 --user with --password-file, or those of [fleet] in the config)",
            ),
            async_nats::ConnectErrorKind::TimedOut => self.error(format!(
                "no NATS greeting within {} (not a NATS server, or unreachable?); --timeout \
                 or FLIGHTREC_TIMEOUT change the limit",
                crate::render::std_duration(timeout)
            )),
            async_nats::ConnectErrorKind::Io => self.error(format!(
                "cannot connect ({e}): is nats-server running there?"
            )),
            _ => self.error(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_follows_the_flag_then_the_config() {
        let t = FleetTarget::new(None, None);
        assert_eq!(t.servers, ["nats://127.0.0.1:4222"]);
        assert_eq!(t.subject, "flightrec");
        assert_eq!(t.bucket, "flightrec");
        let cfg = flightrec_config::Config::from_toml(
            "[fleet]\nnats = [\"nats://a:1\", \"nats://b:2\"]\nsubject = \"prod\"\n\
             bucket = \"snaps\"\nuser = \"u\"\npassword_file = \"/p\"\n",
            std::path::Path::new("/x.toml"),
        )
        .unwrap();
        let fleet = cfg.fleet.as_ref().map(|f| f.get_ref());
        let t = FleetTarget::new(None, fleet);
        assert_eq!(t.servers, ["nats://a:1", "nats://b:2"]);
        assert_eq!(t.subject, "prod");
        assert_eq!(t.bucket, "snaps");
        assert_eq!(t.user, Some(("u".to_string(), PathBuf::from("/p"))));
        let t = FleetTarget::new(Some("nats://c:3".into()), fleet);
        assert_eq!(t.servers, ["nats://c:3"]);
        assert_eq!(t.subject, "prod");
        assert_eq!(t.bucket, "snaps");
        assert_eq!(t.servers_text(), "nats://c:3");
    }
}
