//! `[fleet]`: the NATS servers a daemon joins, its credentials, its name
//! and labels in the fleet, and where snapshots are shipped. Absent, the
//! daemon runs alone.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use toml::Spanned;

use crate::checks::check_path;
use crate::message::quoted;

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

/// `s3 = { url, endpoint, region, credentials_file }`: a second
/// destination of uploads. A snapshot goes to `<prefix>/<host>/<id>.perf.data`
/// in the bucket, its description as `x-amz-meta-*` metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// `s3://bucket/prefix`.
    pub url: Spanned<String>,
    /// An S3-compatible server, `http(s)://host:port`; default: AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Spanned<String>>,
    /// `AWS_ACCESS_KEY_ID=...`, `AWS_SECRET_ACCESS_KEY=...` and optionally
    /// `AWS_SESSION_TOKEN=...` lines (as systemd's EnvironmentFile); default:
    /// those variables in the daemon's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_file: Option<Spanned<PathBuf>>,
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

    /// Checks the section; `whole` is its span (for a missing key).
    pub(crate) fn validate(&self, whole: Range<usize>) -> Result<(), (Range<usize>, String)> {
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
        match (&self.creds, &self.user, &self.password_file) {
            (Some(_), Some(user), _) => {
                return Err((
                    user.span(),
                    "fleet.user: give either creds or user with password_file, not both".into(),
                ));
            }
            (_, Some(_), None) => {
                return Err((
                    whole,
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
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => {
                return Err((
                    whole,
                    "fleet.tls_cert needs tls_key (its private key)".into(),
                ));
            }
            (None, Some(key)) => {
                return Err((
                    key.span(),
                    "fleet.tls_key needs tls_cert (the certificate it belongs to)".into(),
                ));
            }
            _ => {}
        }
        for (key, path) in [
            ("creds", &self.creds),
            ("password_file", &self.password_file),
            ("tls_ca", &self.tls_ca),
            ("tls_cert", &self.tls_cert),
            ("tls_key", &self.tls_key),
        ] {
            if let Some(p) = path {
                check_path(p.get_ref()).map_err(|why| (p.span(), format!("fleet.{key} {why}")))?;
                if !p.get_ref().is_absolute() {
                    return Err((
                        p.span(),
                        format!(
                            "fleet.{key} {} must be an absolute path",
                            quoted(&p.get_ref().display().to_string())
                        ),
                    ));
                }
            }
        }
        if let Some(host) = &self.host {
            check_host(host.get_ref())
                .map_err(|why| (host.span(), format!("fleet.host: {why}")))?;
        }
        let subject = &self.subject;
        check_subject_prefix(subject.get_ref())
            .map_err(|why| (subject.span(), format!("fleet.subject: {why}")))?;
        let bucket = &self.bucket;
        check_bucket(bucket.get_ref())
            .map_err(|why| (bucket.span(), format!("fleet.bucket: {why}")))?;
        if self.labels.len() > MAX_FLEET_LABELS {
            return Err((
                whole,
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
}

impl S3Config {
    fn validate(&self) -> Result<(), (Range<usize>, String)> {
        let url = &self.url;
        let bucket = url
            .get_ref()
            .strip_prefix("s3://")
            .map(|rest| rest.split('/').next().unwrap_or(""));
        let bucket_ok = bucket.is_some_and(|b| {
            (3..=63).contains(&b.len())
                && b.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        });
        if !bucket_ok
            || url
                .get_ref()
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err((
                url.span(),
                format!(
                    "fleet.s3.url {} is not s3://bucket/prefix (a bucket of 3 to 63 characters \
                     from a-z 0-9 . -)",
                    quoted(url.get_ref())
                ),
            ));
        }
        // Object keys cannot hold `.` or `..` segments (S3 clients resolve
        // them as paths), nor be longer than 1024 bytes.
        let prefix = url.get_ref()["s3://".len()..]
            .split_once('/')
            .map_or("", |(_, p)| p);
        if prefix.split('/').any(|s| s == "." || s == "..") || prefix.len() > 512 {
            return Err((
                url.span(),
                format!(
                    "fleet.s3.url {}: the prefix must not hold . or .. segments and is at most \
                     512 bytes",
                    quoted(url.get_ref())
                ),
            ));
        }
        if let Some(endpoint) = &self.endpoint {
            let e = endpoint.get_ref();
            let rest = e
                .strip_prefix("http://")
                .or_else(|| e.strip_prefix("https://"));
            if rest.is_none_or(|r| {
                r.is_empty() || r.chars().any(|c| c.is_whitespace() || c.is_control())
            }) {
                return Err((
                    endpoint.span(),
                    format!(
                        "fleet.s3.endpoint {} is not an http:// or https:// URL",
                        quoted(e)
                    ),
                ));
            }
        }
        if let Some(file) = &self.credentials_file {
            let path = file.get_ref();
            check_path(path)
                .map_err(|why| (file.span(), format!("fleet.s3.credentials_file {why}")))?;
            if !path.is_absolute() {
                return Err((
                    file.span(),
                    format!(
                        "fleet.s3.credentials_file {} must be an absolute path",
                        quoted(&path.display().to_string())
                    ),
                ));
            }
        }
        if let Some(region) = &self.region {
            let r = region.get_ref();
            let ok = !r.is_empty()
                && r.len() <= 64
                && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            if !ok {
                return Err((
                    region.span(),
                    format!(
                        "fleet.s3.region {} is not valid: 1 to 64 characters from a-z 0-9 -, \
                         e.g. \"eu-west-1\"",
                        quoted(r)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `scheme://host[:port]` with a NATS scheme, or `host:port`.
fn check_nats_url(url: &str) -> Result<(), String> {
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if ["nats", "tls", "ws", "wss"].contains(&scheme) => rest,
        Some(_) => {
            return Err(format!(
                "{} does not start with nats://, tls://, ws:// or wss://",
                quoted(url)
            ));
        }
        None => url,
    };
    // user:password@ in the URL is allowed by NATS but would put a secret
    // in the config printed by --check-config: credentials go in files.
    let bad = rest.is_empty()
        || rest.contains('@')
        || rest.chars().any(|c| c.is_whitespace() || c.is_control());
    let port_ok = match rest.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
            port.trim_end_matches('/')
                .parse::<u16>()
                .is_ok_and(|p| p > 0)
                && !host.is_empty()
        }
        _ => true,
    };
    if bad || !port_ok {
        return Err(format!(
            "{} is not a server URL such as \"nats://10.0.0.1:4222\" (credentials go in creds \
             or user/password_file, not in the URL)",
            quoted(url)
        ));
    }
    Ok(())
}

/// A host name in subjects and object names: `[A-Za-z0-9_-]` tokens
/// joined by single dots.
pub fn check_host(host: &str) -> Result<(), String> {
    let ok = !host.is_empty()
        && host.len() <= MAX_FLEET_NAME_BYTES
        && host.split('.').all(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "host {} is not valid: 1 to {MAX_FLEET_NAME_BYTES} characters from A-Z a-z 0-9 _ - \
             and single dots between them",
            quoted(host)
        ))
    }
}

/// A subject prefix: tokens of `[A-Za-z0-9_-]` joined by single dots (no
/// wildcard: it is subscribed to literally).
fn check_subject_prefix(prefix: &str) -> Result<(), String> {
    check_host(prefix).map_err(|_| {
        format!(
            "{} is not a subject prefix: 1 to {MAX_FLEET_NAME_BYTES} characters from A-Z a-z 0-9 \
             _ - and single dots between them, no wildcard",
            quoted(prefix)
        )
    })
}

/// A JetStream bucket name: `[A-Za-z0-9_-]`, 1 to 64 characters.
fn check_bucket(bucket: &str) -> Result<(), String> {
    let ok = !bucket.is_empty()
        && bucket.len() <= 64
        && bucket
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not a bucket name: 1 to 64 characters from A-Z a-z 0-9 _ -",
            quoted(bucket)
        ))
    }
}

/// A label key: `[A-Za-z0-9_.-]`, 1 to 128 characters.
pub fn check_label_key(key: &str) -> Result<(), String> {
    let ok = !key.is_empty()
        && key.len() <= MAX_FLEET_NAME_BYTES
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "label key {} is not valid: 1 to {MAX_FLEET_NAME_BYTES} characters from A-Z a-z 0-9 \
             . _ -",
            quoted(key)
        ))
    }
}

/// A label value: 1 to 128 bytes, no control characters.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > MAX_FLEET_NAME_BYTES || value.chars().any(char::is_control)
    {
        Err(format!(
            "label value {} is not valid: 1 to {MAX_FLEET_NAME_BYTES} bytes without control \
             characters",
            quoted(value)
        ))
    } else {
        Ok(())
    }
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

    #[test]
    fn s3_is_checked() {
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ns3 = { url = \"https://b/p\" }\n",
            3,
            14,
            "is not s3://bucket/prefix",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ns3 = { url = \"s3://bkt/p\", endpoint = \"ftp://x\" }\n",
            3,
            39,
            "not an http:// or https:// URL",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ns3 = { url = \"s3://bkt\", region = \"eu west\" }\n",
            3,
            35,
            "fleet.s3.region",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ns3 = { url = \"s3://bkt\", key = \"x\" }\n",
            3,
            26,
            "unknown field `key`",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ns3 = { url = \"s3://bkt/a/../b\" }\n",
            3,
            14,
            "the prefix must not hold . or .. segments",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ns3 = { url = \"s3://bkt\", credentials_file = \"s3.env\" }\n",
            3,
            45,
            "fleet.s3.credentials_file \"s3.env\" must be an absolute path",
        );
        rejected_at(
            "[fleet]\nnats = \"nats://x\"\ns3 = { url = \"s3://bkt\", credentials_file = \"\" }\n",
            3,
            45,
            "fleet.s3.credentials_file is empty",
        );
    }
}
