//! `[fleet] s3 = { ... }`: the S3 bucket snapshots are also shipped to,
//! and its checks.

use std::ops::Range;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::check_absolute_path;
use crate::message::quoted;

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

impl S3Config {
    /// Checks the sub-table; the first problem wins.
    pub(super) fn validate(&self) -> Result<(), (Range<usize>, String)> {
        self.check_url()?;
        self.check_endpoint()?;
        if let Some(file) = &self.credentials_file {
            check_absolute_path("s3.credentials_file", file)?;
        }
        self.check_region()
    }

    /// `s3://bucket/prefix` with a bucket name S3 accepts and a prefix
    /// that makes valid object keys.
    fn check_url(&self) -> Result<(), (Range<usize>, String)> {
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
        Ok(())
    }

    fn check_endpoint(&self) -> Result<(), (Range<usize>, String)> {
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
        Ok(())
    }

    fn check_region(&self) -> Result<(), (Range<usize>, String)> {
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

#[cfg(test)]
mod tests {
    use crate::test_support::rejected_at;

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
