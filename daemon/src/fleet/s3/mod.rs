//! The S3 destination of uploads (`[fleet] s3`): a snapshot goes to
//! `<prefix>/<host>/<id>.perf.data` in the bucket, its [`ObjectHeaders`] as
//! user metadata (`x-amz-meta-flightrec-host`, ...), through any
//! S3-compatible server (`endpoint`) or AWS.
//!
//! Files are streamed: up to [`PART_SIZE`] in one PUT, bigger ones in
//! parts of that size with at most [`PARTS_IN_FLIGHT`] being sent, so
//! memory stays bounded whatever the snapshot's size. Uploads are
//! idempotent by key and size (and digest, when known), so the queue can
//! retry one that was cut short and in fact completed.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flightrec_config::{S3Config, quoted};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::client::{HttpError, HttpErrorKind};
use object_store::path::Path as ObjectPath;
use object_store::{
    Attribute, Attributes, BackoffConfig, ClientOptions, GetOptions, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, RetryConfig, WriteMultipart,
};
use tokio::io::AsyncReadExt;

use super::jetstream::ObjectDigest;
use super::object::ObjectHeaders;

mod credentials;
mod metadata;

pub use credentials::{ACCESS_KEY_ID, S3Credentials, SECRET_ACCESS_KEY, SESSION_TOKEN};
pub use metadata::{
    decode_metadata_value, encode_metadata_value, metadata_attributes, metadata_bytes,
};

/// Files up to this size go in one PUT; bigger ones in parts of this size
/// (S3 wants at least 5 MiB per part but the last).
pub const PART_SIZE: usize = 8 << 20;
/// Parts being sent at once: memory is at most `(PARTS_IN_FLIGHT + 1) *
/// PART_SIZE` per upload.
pub const PARTS_IN_FLIGHT: usize = 2;
/// Most bytes of user metadata S3 takes (names and values, UTF-8).
pub const MAX_METADATA_BYTES: usize = 2048;
/// Region when none is configured (what S3-compatible servers expect).
pub const DEFAULT_REGION: &str = "us-east-1";
/// `s3://bucket/prefix` as (bucket, prefix): the prefix without leading,
/// trailing or doubled slashes, "" for none.
pub fn parse_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| format!("fleet.s3.url {} does not start with s3://", quoted(url)))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!("fleet.s3.url {} has no bucket", quoted(url)));
    }
    let prefix = prefix
        .split('/')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("/");
    Ok((bucket.to_string(), prefix))
}

/// The key of `object_name` under `prefix` (as [`parse_url`] returns it).
pub fn object_key(prefix: &str, object_name: &str) -> String {
    if prefix.is_empty() {
        object_name.to_string()
    } else {
        format!("{prefix}/{object_name}")
    }
}

/// Uploads to one bucket (and prefix) of an S3-compatible store. Cheap to
/// clone (one connection pool).
#[derive(Clone)]
pub struct S3Destination {
    store: Arc<AmazonS3>,
    bucket: String,
    prefix: String,
    /// As configured (no trailing slash), None for AWS.
    endpoint: Option<String>,
    region: String,
}

/// Never the credentials.
impl fmt::Debug for S3Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("S3Destination")
            .field(&self.describe())
            .finish()
    }
}

impl S3Destination {
    /// From `[fleet] s3`; credentials from the environment
    /// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or from
    /// `s3.credentials_file` when set. Errors say what is wrong.
    pub fn new(s3: &S3Config) -> Result<Self, String> {
        let credentials = match &s3.credentials_file {
            Some(file) => S3Credentials::read_file(file.get_ref())?,
            None => S3Credentials::from_env()?,
        };
        Self::with_credentials(s3, credentials)
    }

    /// With the credentials given.
    pub fn with_credentials(s3: &S3Config, credentials: S3Credentials) -> Result<Self, String> {
        let (bucket, prefix) = parse_url(s3.url.get_ref())?;
        let endpoint = s3
            .endpoint
            .as_ref()
            .map(|e| e.get_ref().trim_end_matches('/').to_string());
        let region = s3
            .region
            .as_ref()
            .map_or(DEFAULT_REGION, |r| r.get_ref().as_str())
            .to_string();
        let client = ClientOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            // A part or a small file is at most PART_SIZE: 120 s allows
            // links down to about 70 kB/s.
            .with_timeout(Duration::from_secs(120))
            .with_allow_http(
                endpoint
                    .as_deref()
                    .is_some_and(|e| e.starts_with("http://")),
            );
        // The upload queue retries with its own backoff: a few quick retries
        // here ride out a blip without holding the queue for minutes.
        let retry = RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 3,
            retry_timeout: Duration::from_secs(30),
        };
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&bucket)
            .with_region(&region)
            .with_access_key_id(credentials.access_key_id)
            .with_secret_access_key(credentials.secret_access_key)
            .with_client_options(client)
            .with_retry(retry)
            // S3-compatible servers are addressed by path (a bucket in the
            // host name needs DNS for it); AWS by virtual host.
            .with_virtual_hosted_style_request(endpoint.is_none());
        if let Some(token) = credentials.session_token {
            builder = builder.with_token(token);
        }
        if let Some(endpoint) = &endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        let store = builder
            .build()
            .map_err(|e| format!("fleet.s3: {}", one_line(&e.to_string())))?;
        Ok(Self {
            store: Arc::new(store),
            bucket,
            prefix,
            endpoint,
            region,
        })
    }

    /// "s3://bucket/prefix (endpoint http://127.0.0.1:9000)": for logs and
    /// Status.
    pub fn describe(&self) -> String {
        let url = match self.prefix.as_str() {
            "" => format!("s3://{}", self.bucket),
            prefix => format!("s3://{}/{prefix}", self.bucket),
        };
        match &self.endpoint {
            Some(e) => format!("{url} (endpoint {e})"),
            None => format!("{url} (AWS, region {})", self.region),
        }
    }

    /// The key of a snapshot in the bucket.
    pub fn key(&self, headers: &ObjectHeaders) -> String {
        object_key(&self.prefix, &headers.object_name())
    }

    /// `s3://bucket/key` of a snapshot, as Watch and the log show it.
    pub fn url(&self, headers: &ObjectHeaders) -> String {
        format!("s3://{}/{}", self.bucket, self.key(headers))
    }

    /// Uploads the file at `path` under its key with the headers as
    /// metadata. Idempotent: when an object with that key and the same size
    /// already exists (an upload cut short by a restart that in fact
    /// completed), it does nothing and returns Ok(false); Ok(true) when it
    /// uploaded. When both the object and `headers` have a digest, they must
    /// match too. Memory stays bounded (see [`PART_SIZE`]).
    ///
    /// The bytes sent are digested as they are sent: unless they are the
    /// ones `headers.digest` names (the file was replaced since the digest
    /// was taken, by a compression), the upload is abandoned before S3
    /// makes it an object, and retried with the file as it is then. After
    /// the put, the object's size and metadata are read back and checked.
    ///
    /// An upload dropped half-way (shutdown) may leave parts of a multipart
    /// upload on the server, never an object; S3 drops them by a lifecycle
    /// rule (AbortIncompleteMultipartUpload).
    pub async fn upload(&self, path: &Path, headers: &ObjectHeaders) -> Result<bool, String> {
        let key = self.key(headers);
        let fail = |cause: String| {
            format!(
                "cannot upload s3://{}/{key} to {}: {cause}",
                self.bucket,
                self.endpoint.as_deref().unwrap_or("AWS")
            )
        };
        let location = ObjectPath::parse(&key)
            .map_err(|e| fail(format!("{} is not a valid key: {e}", quoted(&key))))?;
        let attributes = metadata_attributes(headers);
        check_metadata_size(&attributes).map_err(fail)?;
        let shown = path.display().to_string();
        let opening = path.to_path_buf();
        let (file, md) = tokio::task::spawn_blocking(move || {
            flightrec_files::open_regular(&opening, flightrec_files::Links::Refuse)
        })
        .await
        .map_err(|e| fail(format!("{shown}: worker thread failed: {e}")))?
        .map_err(|e| fail(format!("{shown}: {e}")))?;
        let size = md.len();
        if self
            .already_there(&location, size, headers)
            .await
            .map_err(fail)?
        {
            return Ok(false);
        }
        let sending = Sending {
            location: &location,
            file: tokio::fs::File::from_std(file),
            size,
            shown: &shown,
            headers,
        };
        if size <= PART_SIZE as u64 {
            self.put_whole(sending, attributes).await
        } else {
            self.put_in_parts(sending, attributes).await
        }
        .map_err(fail)?;
        self.verify(&location, size, headers).await.map_err(fail)
    }

    /// The object's size and metadata, without its bytes (a HEAD request).
    async fn head(
        &self,
        location: &ObjectPath,
    ) -> Result<object_store::GetResult, object_store::Error> {
        let head = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        self.store.get_opts(location, head).await
    }

    /// Whether the object is there already, with the snapshot's size and
    /// digest (an upload cut short that in fact completed).
    async fn already_there(
        &self,
        location: &ObjectPath,
        size: u64,
        headers: &ObjectHeaders,
    ) -> Result<bool, String> {
        match self.head(location).await {
            Ok(existing) => Ok(
                existing.meta.size == size && same_digest(&existing.attributes, &headers.digest)
            ),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            // Upload-only credentials (s3:PutObject without s3:GetObject,
            // so a host cannot read the others' snapshots) may not look:
            // upload anyway, the PUT says whether they may write.
            Err(object_store::Error::PermissionDenied { .. }) => Ok(false),
            Err(e) => Err(cause(&e, false)),
        }
    }

    /// One PUT of the whole file.
    async fn put_whole(&self, s: Sending<'_>, attributes: Attributes) -> Result<(), String> {
        let Sending {
            location,
            mut file,
            size,
            shown,
            headers,
        } = s;
        let mut body = Vec::with_capacity(size as usize);
        // A snapshot does not change once written; `take` bounds the read
        // should it grow anyway.
        (&mut file)
            .take(PART_SIZE as u64)
            .read_to_end(&mut body)
            .await
            .map_err(|e| format!("{shown}: {e}"))?;
        check_size(body.len() as u64, size)?;
        let mut digest = ObjectDigest::default();
        digest.update(&body);
        check_digest(digest, &headers.digest)?;
        let options = PutOptions {
            attributes,
            ..PutOptions::default()
        };
        self.store
            .put_opts(location, PutPayload::from(body), options)
            .await
            .map_err(|e| cause(&e, true))?;
        Ok(())
    }

    /// A multipart upload, [`PARTS_IN_FLIGHT`] parts of [`PART_SIZE`] at
    /// most being sent; aborted (its parts dropped) on any failure.
    async fn put_in_parts(&self, s: Sending<'_>, attributes: Attributes) -> Result<(), String> {
        let Sending {
            location,
            mut file,
            size,
            shown,
            headers,
        } = s;
        let options = PutMultipartOptions {
            attributes,
            ..PutMultipartOptions::default()
        };
        let upload = self
            .store
            .put_multipart_opts(location, options)
            .await
            .map_err(|e| cause(&e, true))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut digest = ObjectDigest::default();
        let mut buffer = vec![0; 1 << 20];
        let mut sent = 0u64;
        let failure = loop {
            let n = match file.read(&mut buffer).await {
                Ok(0) => {
                    break check_size(sent, size)
                        .and_then(|()| check_digest(std::mem::take(&mut digest), &headers.digest))
                        .err();
                }
                Ok(n) => n,
                Err(e) => break Some(format!("{shown}: {e}")),
            };
            if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                break Some(cause(&e, true));
            }
            digest.update(&buffer[..n]);
            writer.write(&buffer[..n]);
            sent += n as u64;
        };
        if let Some(why) = failure {
            // Parts already sent are dropped, not left to be billed.
            let _ = writer.abort().await;
            return Err(why);
        }
        writer.finish().await.map_err(|e| cause(&e, true))?;
        Ok(())
    }

    /// Reads back the object just put: its size and digest must be the
    /// snapshot's (the upload is retried otherwise).
    async fn verify(
        &self,
        location: &ObjectPath,
        size: u64,
        headers: &ObjectHeaders,
    ) -> Result<bool, String> {
        match self.head(location).await {
            Ok(o) if o.meta.size != size => Err(format!(
                "the stored object has {} bytes, the snapshot {size}",
                o.meta.size
            )),
            Ok(o) if !same_digest(&o.attributes, &headers.digest) => Err(format!(
                "the stored object's digest is not the snapshot's ({})",
                headers.digest
            )),
            Ok(_) => Ok(true),
            // Upload-only credentials may not read it back: the PUT said
            // it was stored.
            Err(object_store::Error::PermissionDenied { .. }) => Ok(true),
            Err(e) => Err(cause(&e, false)),
        }
    }
}

/// A snapshot file on its way to the bucket.
struct Sending<'a> {
    location: &'a ObjectPath,
    file: tokio::fs::File,
    size: u64,
    /// The path, for errors.
    shown: &'a str,
    headers: &'a ObjectHeaders,
}

/// S3 refuses more than [`MAX_METADATA_BYTES`] of user metadata: say so
/// before sending anything, and how much the labels take.
fn check_metadata_size(attributes: &Attributes) -> Result<(), String> {
    let metadata = metadata_bytes(attributes);
    if metadata <= MAX_METADATA_BYTES {
        return Ok(());
    }
    let labels = super::object::LABELS.to_ascii_lowercase();
    let labels = attributes
        .get(&Attribute::Metadata(labels.into()))
        .map_or(0, |v| v.len());
    Err(format!(
        "its metadata would be {metadata} bytes, S3 takes at most {MAX_METADATA_BYTES} \
         (fleet.labels are {labels} of them: shorten them)"
    ))
}

/// The bytes sent are the ones the queue digested (`expected`; empty when
/// unknown): a compression may have replaced the file since.
fn check_digest(digest: ObjectDigest, expected: &str) -> Result<(), String> {
    let sent = digest.finish();
    (expected.is_empty() || sent == expected)
        .then_some(())
        .ok_or_else(|| {
            format!(
                "the bytes read have digest {sent}, the snapshot {expected}: it changed while \
                 being sent"
            )
        })
}

/// The object's digest is `digest`, or one of them is unknown.
fn same_digest(attributes: &Attributes, digest: &str) -> bool {
    let name = super::object::DIGEST.to_ascii_lowercase();
    let stored = attributes
        .get(&Attribute::Metadata(name.into()))
        .map(|v| decode_metadata_value(v.as_ref()))
        .unwrap_or_default();
    digest.is_empty() || stored.is_empty() || stored == digest
}

/// The file must not change while it is uploaded.
fn check_size(read: u64, expected: u64) -> Result<(), String> {
    if read == expected {
        Ok(())
    } else {
        Err(format!(
            "the file changed while it was read ({read} bytes read, {expected} expected)"
        ))
    }
}

/// What went wrong, briefly, with what to check. `writing` tells a missing
/// bucket (on PUT) from a missing object (on HEAD).
fn cause(e: &object_store::Error, writing: bool) -> String {
    let text = one_line(&e.to_string());
    let code = s3_error_code(&text);
    let with_code = |what: &str| match code {
        Some(c) => format!("{what} ({c})"),
        None => what.to_string(),
    };
    match e {
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => {
            format!("{} (check the S3 credentials)", with_code("access denied"))
        }
        object_store::Error::NotFound { .. } if writing => with_code("the bucket does not exist"),
        _ => match http_error_kind(e) {
            Some(HttpErrorKind::Connect) => {
                "cannot connect (is the S3 server running and reachable?)".to_string()
            }
            Some(HttpErrorKind::Timeout) => "timed out (is the S3 server overloaded?)".to_string(),
            _ => text,
        },
    }
}

/// The kind of the transport error under `e`, if it is one.
fn http_error_kind(e: &object_store::Error) -> Option<HttpErrorKind> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(http) = s.downcast_ref::<HttpError>() {
            return Some(http.kind());
        }
        source = s.source();
    }
    None
}

/// `<Code>AccessDenied</Code>` in an S3 error body.
fn s3_error_code(text: &str) -> Option<&str> {
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    Some(&text[start..start + len]).filter(|c| !c.is_empty())
}

/// Errors go in one log line and one Status field.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use object_store::AttributeValue;

    #[test]
    fn urls_split_into_bucket_and_a_clean_prefix() {
        let split = |u: &str| parse_url(u).unwrap();
        assert_eq!(split("s3://bkt"), ("bkt".into(), "".into()));
        assert_eq!(split("s3://bkt/"), ("bkt".into(), "".into()));
        assert_eq!(split("s3://bkt/p"), ("bkt".into(), "p".into()));
        assert_eq!(split("s3://bkt//a//b/"), ("bkt".into(), "a/b".into()));
        assert_eq!(
            parse_url("https://bkt/p").unwrap_err(),
            "fleet.s3.url \"https://bkt/p\" does not start with s3://"
        );
        assert_eq!(
            parse_url("s3:///p").unwrap_err(),
            "fleet.s3.url \"s3:///p\" has no bucket"
        );
    }

    #[test]
    fn keys_have_no_leading_or_double_slash() {
        assert_eq!(object_key("", "host-a/id.perf.data"), "host-a/id.perf.data");
        assert_eq!(
            object_key("a/b", "host-a/id.perf.data"),
            "a/b/host-a/id.perf.data"
        );
        let (_, prefix) = parse_url("s3://bkt//fleet/").unwrap();
        assert_eq!(
            object_key(&prefix, "host-a/id.perf.data"),
            "fleet/host-a/id.perf.data"
        );
    }

    fn config(url: &str, endpoint: Option<&str>) -> S3Config {
        let spanned = |s: &str| flightrec_config::Spanned::new(0..0, s.to_string());
        S3Config {
            url: spanned(url),
            endpoint: endpoint.map(spanned),
            region: None,
            credentials_file: None,
        }
    }

    fn credentials() -> S3Credentials {
        S3Credentials {
            access_key_id: "AKID".into(),
            secret_access_key: "secret".into(),
            session_token: None,
        }
    }

    #[test]
    fn the_destination_describes_itself_and_keys_snapshots() {
        let d = S3Destination::with_credentials(
            &config("s3://bkt/fleet/", Some("http://127.0.0.1:9000/")),
            credentials(),
        )
        .unwrap();
        assert_eq!(
            d.describe(),
            "s3://bkt/fleet (endpoint http://127.0.0.1:9000)"
        );
        let headers = ObjectHeaders {
            host: "host-a".into(),
            id: "ID".into(),
            label: String::new(),
            trigger: "signal".into(),
            bytes: 1,
            compressed: false,
            created_unix_ns: 1,
            labels: BTreeMap::new(),
            digest: String::new(),
        };
        assert_eq!(d.key(&headers), "fleet/host-a/ID.perf.data");
        let aws =
            S3Destination::with_credentials(&config("s3://bkt", None), credentials()).unwrap();
        assert_eq!(aws.describe(), "s3://bkt (AWS, region us-east-1)");
        assert_eq!(aws.key(&headers), "host-a/ID.perf.data");
    }

    #[test]
    fn digests_match_unless_one_is_unknown() {
        let with = |digest: &str| -> Attributes {
            [(
                Attribute::Metadata("flightrec-digest".into()),
                AttributeValue::from(digest.to_string()),
            )]
            .into_iter()
            .collect()
        };
        assert!(same_digest(&with("SHA-256=a"), "SHA-256=a"));
        assert!(!same_digest(&with("SHA-256=a"), "SHA-256=b"));
        assert!(same_digest(&with(""), "SHA-256=b"));
        assert!(same_digest(&Attributes::new(), "SHA-256=b"));
        assert!(same_digest(&with("SHA-256=a"), ""));
    }

    #[test]
    fn errors_are_brief_and_say_what_to_check() {
        assert_eq!(
            s3_error_code("403 Forbidden: <Error><Code>SignatureDoesNotMatch</Code></Error>"),
            Some("SignatureDoesNotMatch")
        );
        assert_eq!(s3_error_code("no body"), None);
        let error = |body: &str| -> Box<dyn std::error::Error + Send + Sync> { body.into() };
        let denied = object_store::Error::PermissionDenied {
            path: "k".into(),
            source: error("403 Forbidden: <Error><Code>AccessDenied</Code></Error>"),
        };
        assert_eq!(
            cause(&denied, true),
            "access denied (AccessDenied) (check the S3 credentials)"
        );
        let missing = || object_store::Error::NotFound {
            path: "k".into(),
            source: error("404 Not Found: <Error><Code>NoSuchBucket</Code>\n</Error>"),
        };
        // S3 says so on PUT (s3s-fs creates the bucket instead).
        assert_eq!(
            cause(&missing(), true),
            "the bucket does not exist (NoSuchBucket)"
        );
        assert_eq!(
            cause(&missing(), false),
            "Object at location k not found: 404 Not Found: <Error><Code>NoSuchBucket</Code> \
             </Error>"
        );
        assert_eq!(one_line("a\n  b\tc "), "a b c");
    }
}
