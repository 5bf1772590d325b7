//! `snapctl fleet ...`: NATS only, no daemon socket.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use flightrec_config::FleetConfig;

use super::config::daemon_config;
use super::print_line;
use crate::ClientError;
use crate::cli::FleetCommand;
use crate::fleet::{FleetTarget, WindowArgs, fetch, request_json, store};

/// What `snapctl fleet` was told about NATS; the rest comes from [fleet].
pub(super) struct FleetFlags {
    pub nats: Option<String>,
    pub subject: Option<String>,
    pub bucket: Option<String>,
    pub creds: Option<PathBuf>,
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
}

impl FleetFlags {
    /// `[fleet]` of the config with the flags on top: credentials from
    /// the flags replace the config's of either kind.
    fn target(self, fleet: Option<&FleetConfig>) -> FleetTarget {
        let mut target = FleetTarget::new(self.nats, fleet);
        if let Some(s) = self.subject {
            target.subject = s;
        }
        if let Some(b) = self.bucket {
            target.bucket = b;
        }
        if let Some(creds) = self.creds {
            target.creds = Some(creds);
            target.user = None;
        }
        if let (Some(user), Some(file)) = (self.user, self.password_file) {
            target.user = Some((user, file));
            target.creds = None;
        }
        target
    }
}

pub(super) async fn run(
    flags: FleetFlags,
    config: Option<&Path>,
    command: FleetCommand,
    json: bool,
    timeout: Duration,
) -> Result<(), ClientError> {
    let config = daemon_config(config)?;
    let target = flags.target(
        config
            .as_ref()
            .and_then(|c| c.config.fleet.as_ref().map(|f| f.get_ref())),
    );
    match command {
        FleetCommand::Dump {
            label,
            select,
            compress,
            wait,
            expect,
            host,
            at,
            before,
            after,
            cgroups,
            containers,
        } => {
            let select: BTreeMap<String, String> = select.into_iter().collect();
            let window = WindowArgs {
                at_unix_ns: at,
                before,
                after,
            };
            let request = request_json(
                label.as_deref(),
                &select,
                compress,
                window,
                (&cgroups, &containers),
            );
            let expect = expected_hosts(host.as_deref(), expect);
            let result =
                crate::fleet::dump(&target, host.as_deref(), &request, wait, &expect, timeout)
                    .await?;
            print_line(&result.render(json))?;
            match result.failure() {
                Some(why) => Err(ClientError::Fleet(why)),
                None => Ok(()),
            }
        }
        FleetCommand::List { host } => {
            let listing = store::list(&target, host.as_deref(), timeout).await?;
            for warning in listing.warnings() {
                eprintln!("snapctl: {warning}");
            }
            print_line(&listing.render(json))
        }
        FleetCommand::Fetch {
            snapshot: (host, id),
            output,
            force,
        } => {
            let out = fetch::output_path(output.as_deref(), &id);
            let fetched = fetch::fetch(&target, (&host, &id), &out, force, timeout).await?;
            print_line(&fetched.render(json))
        }
    }
}

/// The hosts a `fleet dump` waits for: `--expect`, else the one `--host`
/// asks.
fn expected_hosts(host: Option<&str>, expect: Vec<String>) -> Vec<String> {
    match host {
        Some(h) if expect.is_empty() => vec![h.to_string()],
        _ => expect,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> FleetFlags {
        FleetFlags {
            nats: None,
            subject: None,
            bucket: None,
            creds: None,
            user: None,
            password_file: None,
        }
    }

    #[test]
    fn flags_override_the_config_and_credentials_replace_each_other() {
        let cfg = flightrec_config::Config::from_toml(
            "[fleet]\nnats = \"nats://a:1\"\nsubject = \"prod\"\nbucket = \"snaps\"\n\
             user = \"u\"\npassword_file = \"/p\"\n",
            std::path::Path::new("/x.toml"),
        )
        .unwrap();
        let fleet = cfg.fleet.as_ref().map(|f| f.get_ref());
        let t = flags().target(fleet);
        assert_eq!(t, FleetTarget::new(None, fleet));
        let t = FleetFlags {
            nats: Some("nats://b:2".into()),
            subject: Some("test".into()),
            bucket: Some("other".into()),
            creds: Some("/c.creds".into()),
            ..flags()
        }
        .target(fleet);
        assert_eq!(t.servers, ["nats://b:2"]);
        assert_eq!((t.subject.as_str(), t.bucket.as_str()), ("test", "other"));
        assert_eq!((t.creds, t.user), (Some(PathBuf::from("/c.creds")), None));
        let t = FleetFlags {
            user: Some("v".into()),
            password_file: Some("/q".into()),
            ..flags()
        }
        .target(None);
        assert_eq!(t.user, Some(("v".to_string(), PathBuf::from("/q"))));
        assert_eq!(t.creds, None);
    }

    #[test]
    fn a_dump_of_one_host_expects_that_host_unless_told_otherwise() {
        assert_eq!(expected_hosts(Some("a"), vec![]), ["a"]);
        assert_eq!(expected_hosts(Some("a"), vec!["b".into()]), ["b"]);
        assert_eq!(expected_hosts(None, vec![]), Vec::<String>::new());
        assert_eq!(expected_hosts(None, vec!["b".into()]), ["b"]);
    }
}
