//! `[fleet]`: the NATS servers a daemon joins, its credentials, its name
//! and labels in the fleet, and where snapshots are shipped. Absent, the
//! daemon runs alone. The S3 sub-table is in [`s3`], the rules for names
//! (URLs, hosts, subjects, buckets, labels) in [`names`].

mod names;
mod s3;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use toml::Spanned;

use crate::checks::check_path;
use crate::message::quoted;
use names::{check_bucket, check_nats_url, check_subject_prefix};

pub use names::{check_host, check_label_key, check_label_value};
pub use s3::S3Config;

/// Default `subject` prefix: requests go to `flightrec.dump[.<host>]`.
pub const DEFAULT_SUBJECT: &str = "flightrec";
/// Default JetStream object store bucket.
pub const DEFAULT_BUCKET: &str = "flightrec";
/// Where `snapctl fleet` publishes when neither `--nats` nor a config says.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";
/// Longest host name, label key or value, and subject prefix.
pub const MAX_FLEET_NAME_BYTES: usize = 128;
/// Most `labels` a host can have.
pub const MAX_FLEET_LABELS: usize = 64;

/// `nats`: one URL or a list of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct NatsServers(pub Vec<String>);

impl<'de> Deserialize<'de> for NatsServers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct OneOrMany;
        impl<'de> Visitor<'de> for OneOrMany {
            type Value = NatsServers;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a NATS URL or a list of them, e.g. \"nats://10.0.0.1:4222\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NatsServers, E> {
                Ok(NatsServers(vec![v.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NatsServers, A::Error> {
                let mut urls = Vec::new();
                while let Some(url) = seq.next_element::<String>()? {
                    urls.push(url);
                }
                Ok(NatsServers(urls))
            }
        }
        d.deserialize_any(OneOrMany)
    }
}

/// `[fleet]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// `nats://host:port` (or `tls://`, `ws://`, `wss://`), one or a list.
    pub nats: Spanned<NatsServers>,
    /// A NATS credentials file (JWT and nkey seed); not with `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creds: Option<Spanned<PathBuf>>,
    /// User name; its password is read from `password_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<Spanned<PathBuf>>,
    /// CA certificate(s) the server's certificate must chain to (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<Spanned<PathBuf>>,
    /// Client certificate and key (PEM), both or neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<Spanned<PathBuf>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<Spanned<PathBuf>>,
    /// This host's name in the fleet; default: the host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Spanned<String>>,
    /// Subject prefix: requests arrive on `<subject>.dump` and
    /// `<subject>.dump.<host>`.
    #[serde(default = "default_subject")]
    pub subject: Spanned<String>,
    /// JetStream object store bucket of the uploads.
    #[serde(default = "default_bucket")]
    pub bucket: Spanned<String>,
    /// What describes this host (role, zone...), matched by `--select`.
    #[serde(default)]
    pub labels: BTreeMap<String, Spanned<String>>,
    /// Ship every snapshot to the bucket (and to `s3` when set).
    #[serde(default = "default_upload")]
    pub upload: bool,
    /// Copies JetStream keeps of the bucket when the daemon creates it
    /// (1 to 5; 3 on a three-node cluster survives a node lost).
    #[serde(default = "default_replicas")]
    pub replicas: Spanned<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<Spanned<S3Config>>,
}

fn default_subject() -> Spanned<String> {
    Spanned::new(0..0, DEFAULT_SUBJECT.to_string())
}

fn default_bucket() -> Spanned<String> {
    Spanned::new(0..0, DEFAULT_BUCKET.to_string())
}

fn default_upload() -> bool {
    true
}

/// Most replicas JetStream allows for a stream.
pub const MAX_REPLICAS: u8 = 5;

fn default_replicas() -> Spanned<u8> {
    Spanned::new(0..0, 1)
}

impl FleetConfig {
    /// The servers, as written.
    pub fn servers(&self) -> &[String] {
        &self.nats.get_ref().0
    }

    /// The labels as plain strings.
    pub fn label_map(&self) -> BTreeMap<String, String> {
        self.labels
            .iter()
            .map(|(k, v)| (k.clone(), v.get_ref().clone()))
            .collect()
    }

    /// Checks the section; `whole` is its span (for a missing key). The
    /// first problem wins.
    pub(crate) fn validate(&self, whole: Range<usize>) -> Result<(), (Range<usize>, String)> {
        self.check_servers()?;
        self.check_user_credentials(&whole)?;
        self.check_tls_pair(&whole)?;
        for (key, path) in [
            ("creds", &self.creds),
            ("password_file", &self.password_file),
            ("tls_ca", &self.tls_ca),
            ("tls_cert", &self.tls_cert),
            ("tls_key", &self.tls_key),
        ] {
            if let Some(p) = path {
                check_absolute_path(key, p)?;
            }
        }
        self.check_names()?;
        self.check_labels(&whole)?;
        let replicas = &self.replicas;
        if !(1..=MAX_REPLICAS).contains(replicas.get_ref()) {
            return Err((
                replicas.span(),
                format!(
                    "fleet.replicas = {} is out of range: JetStream keeps 1 to {MAX_REPLICAS} copies",
                    replicas.get_ref()
                ),
            ));
        }
        if let Some(s3) = &self.s3 {
            s3.get_ref().validate()?;
        }
        Ok(())
    }

    /// `nats`: at least one server, each a NATS URL.
    fn check_servers(&self) -> Result<(), (Range<usize>, String)> {
        let nats = &self.nats;
        if nats.get_ref().0.is_empty() {
            return Err((
                nats.span(),
                "fleet.nats is empty: give at least one server URL, e.g. \"nats://10.0.0.1:4222\""
                    .into(),
            ));
        }
        for url in &nats.get_ref().0 {
            check_nats_url(url).map_err(|why| (nats.span(), format!("fleet.nats: {why}")))?;
        }
        Ok(())
    }

    /// Either `creds` or `user` with `password_file`, and a user name NATS
    /// can take.
    fn check_user_credentials(&self, whole: &Range<usize>) -> Result<(), (Range<usize>, String)> {
        match (&self.creds, &self.user, &self.password_file) {
            (Some(_), Some(user), _) => {
                return Err((
                    user.span(),
                    "fleet.user: give either creds or user with password_file, not both".into(),
                ));
            }
            (_, Some(_), None) => {
                return Err((
                    whole.clone(),
                    "fleet.user needs password_file (a file holding the password)".into(),
                ));
            }
            (_, None, Some(file)) => {
                return Err((
                    file.span(),
                    "fleet.password_file needs user (the name the password belongs to)".into(),
                ));
            }
            _ => {}
        }
        if let Some(user) = &self.user {
            let u = user.get_ref();
            if u.is_empty() || u.len() > MAX_FLEET_NAME_BYTES || u.chars().any(char::is_control) {
                return Err((
                    user.span(),
                    format!(
                        "fleet.user {} is not valid: 1 to {MAX_FLEET_NAME_BYTES} bytes without \
                         control characters",
                        quoted(u)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `tls_cert` and `tls_key`: a client certificate needs its key.
    fn check_tls_pair(&self, whole: &Range<usize>) -> Result<(), (Range<usize>, String)> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => Err((
                whole.clone(),
                "fleet.tls_cert needs tls_key (its private key)".into(),
            )),
            (None, Some(key)) => Err((
                key.span(),
                "fleet.tls_key needs tls_cert (the certificate it belongs to)".into(),
            )),
            _ => Ok(()),
        }
    }

    /// `host`, `subject` and `bucket`: they become parts of subjects and
    /// object names.
    fn check_names(&self) -> Result<(), (Range<usize>, String)> {
        if let Some(host) = &self.host {
            check_host(host.get_ref())
                .map_err(|why| (host.span(), format!("fleet.host: {why}")))?;
        }
        let subject = &self.subject;
        check_subject_prefix(subject.get_ref())
            .map_err(|why| (subject.span(), format!("fleet.subject: {why}")))?;
        let bucket = &self.bucket;
        check_bucket(bucket.get_ref())
            .map_err(|why| (bucket.span(), format!("fleet.bucket: {why}")))
    }

    /// `labels`: how many, and each key and value.
    fn check_labels(&self, whole: &Range<usize>) -> Result<(), (Range<usize>, String)> {
        if self.labels.len() > MAX_FLEET_LABELS {
            return Err((
                whole.clone(),
                format!(
                    "fleet.labels has {} labels, at most {MAX_FLEET_LABELS} are allowed",
                    self.labels.len()
                ),
            ));
        }
        for (key, value) in &self.labels {
            check_label_key(key)
                .and_then(|()| check_label_value(value.get_ref()))
                .map_err(|why| (value.span(), format!("fleet.labels: {why}")))?;
        }
        Ok(())
    }
}

/// A file the daemon opens, named `fleet.<key>` in errors: a usable path,
/// and absolute, so that it does not depend on the daemon's working
/// directory.
fn check_absolute_path(key: &str, path: &Spanned<PathBuf>) -> Result<(), (Range<usize>, String)> {
    check_path(path.get_ref()).map_err(|why| (path.span(), format!("fleet.{key} {why}")))?;
    if !path.get_ref().is_absolute() {
        return Err((
            path.span(),
            format!(
                "fleet.{key} {} must be an absolute path",
                quoted(&path.get_ref().display().to_string())
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::test_support::{parse, rejected_at};

    #[test]
    fn absent_fleet_means_alone() {
        assert!(parse("").unwrap().fleet.is_none());
    }

    #[test]
    fn the_full_section_parses_with_its_defaults() {
        let cfg = parse(
            r#"
[fleet]
nats = ["nats://10.0.0.1:4222", "tls://nats.example.com:4443"]
user = "flightrec"
password_file = "/etc/flightrec/nats.password"
tls_ca = "/etc/flightrec/ca.pem"
tls_cert = "/etc/flightrec/client.pem"
tls_key = "/etc/flightrec/client.key"
labels = { role = "db", zone = "eu-1a" }
s3 = { url = "s3://snapshots/flightrec", endpoint = "http://127.0.0.1:9000", region = "eu-west-1", credentials_file = "/etc/flightrec/s3.env" }
"#,
        )
        .unwrap();
        let fleet = cfg.fleet.as_ref().unwrap().get_ref();
        assert_eq!(
            fleet.servers(),
            ["nats://10.0.0.1:4222", "tls://nats.example.com:4443"]
        );
        assert_eq!(fleet.subject.get_ref(), "flightrec");
        assert_eq!(fleet.bucket.get_ref(), "flightrec");
        assert!(fleet.upload);
        assert!(fleet.host.is_none());
        assert_eq!(
            fleet.label_map().into_iter().collect::<Vec<_>>(),
            [
                ("role".to_string(), "db".to_string()),
                ("zone".to_string(), "eu-1a".to_string())
            ]
        );
        let s3 = fleet.s3.as_ref().unwrap().get_ref();
        assert_eq!(s3.url.get_ref(), "s3://snapshots/flightrec");
        assert_eq!(
            s3.credentials_file.as_ref().unwrap().get_ref(),
            std::path::Path::new("/etc/flightrec/s3.env")
        );
        // Printed back, it reads the same.
        assert_eq!(parse(&cfg.to_toml()).unwrap(), cfg, "{}", cfg.to_toml());
    }

    #[test]
    fn one_url_is_a_list_of_one() {
        let cfg = parse("[fleet]\nnats = \"nats://127.0.0.1:4222\"\nhost = \"host-a\"\nupload = false\nsubject = \"prod.flightrec\"\n").unwrap();
        let fleet = cfg.fleet.as_ref().unwrap().get_ref();
        assert_eq!(fleet.servers(), ["nats://127.0.0.1:4222"]);
        assert_eq!(fleet.host.as_ref().unwrap().get_ref(), "host-a");
        assert_eq!(fleet.subject.get_ref(), "prod.flightrec");
        assert!(!fleet.upload);
        assert_eq!(parse(&cfg.to_toml()).unwrap(), cfg);
    }

    #[test]
    fn bad_values_are_located() {
        rejected_at("[fleet]\nhost = \"a\"\n", 1, 1, "missing field `nats`");
        rejected_at("[fleet]\nnats = []\n", 2, 8, "fleet.nats is empty");
        rejected_at(
            "[fleet]\nnats = \"http://x:4222\"\n",
            2,
            8,
            "does not start with nats://",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://u:p@x:4222\"\n",
            2,
            8,
            "credentials go in creds",
        );
        rejected_at("[fleet]\nnats = \"nats://x:0\"\n", 2, 8, "not a server URL");
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\nhost = \"a b\"\n",
            3,
            8,
            "fleet.host: host \"a b\" is not valid",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\nsubject = \"flightrec.*\"\n",
            3,
            11,
            "no wildcard",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\nbucket = \"a.b\"\n",
            3,
            10,
            "not a bucket name",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\nlabels = { \"a b\" = \"db\" }\n",
            3,
            20,
            "label key \"a b\" is not valid",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\nlabels = { role = \"\" }\n",
            3,
            19,
            "label value \"\" is not valid",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\nlabels = { role = 3 }\n",
            3,
            19,
            "invalid type",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\nnkey = \"/x\"\n",
            3,
            1,
            "unknown field `nkey`",
        );
    }

    #[test]
    fn credentials_must_be_complete_and_one_kind() {
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\nuser = \"u\"\n",
            1,
            1,
            "fleet.user needs password_file",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\npassword_file = \"/p\"\n",
            3,
            17,
            "needs user",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ncreds = \"/c\"\nuser = \"u\"\npassword_file = \"/p\"\n",
            4,
            8,
            "either creds or user",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ncreds = \"relative.creds\"\n",
            3,
            9,
            "must be an absolute path",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ntls_key = \"/k\"\n",
            3,
            11,
            "needs tls_cert",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ntls_cert = \"/c\"\n",
            1,
            1,
            "tls_cert needs tls_key",
        );
    }

    #[test]
    fn replicas_are_1_to_5() {
        let cfg = parse("[fleet]\nnats = \"nats://x\"\nreplicas = 3\n").unwrap();
        assert_eq!(*cfg.fleet.unwrap().get_ref().replicas.get_ref(), 3);
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\nreplicas = 0\n",
            3,
            12,
            "fleet.replicas = 0 is out of range: JetStream keeps 1 to 5 copies",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\nreplicas = 6\n",
            3,
            12,
            "out of range",
        );
    }
}
