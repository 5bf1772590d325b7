//! The JetStream object store destination: one object per snapshot,
//! `<host>/<id>.perf.data`, with the snapshot's description in its headers.

use std::collections::HashMap;
use std::io::{Read, Seek};
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::object_store::{
    self, InfoError, InfoErrorKind, ObjectInfo, ObjectMetadata, ObjectStore,
};
use async_nats::{Client, HeaderMap};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE;
use sha2::{Digest, Sha256};

use super::object::ObjectHeaders;

/// Chunks of 512 KiB: fewer round trips than the crate's 128 KiB default,
/// well under the server's default 1 MiB message limit.
const CHUNK_BYTES: usize = 512 * 1024;

/// How long the first look-ups of an object wait for an answer before
/// they ask again; the last waits as long as the client's requests do
/// (10 s). nats-server 2.9 drops a direct get that arrives while other
/// clients create the same bucket, as every host of a fleet does at its
/// first fleet dump, and answers the same request asked a moment later:
/// with three clients at once on a fresh bucket, 1 to 9 rounds in a
/// hundred lost one (two runs by hand). Unanswered, it cost 10 s and a failed upload, retried
/// a second later; now 2 s. Each wait is longer than the last, so a server
/// that is only slow still answers one of them.
const LOOKUP_WAITS: [Duration; 2] = [Duration::from_secs(2), Duration::from_secs(4)];

/// The bucket, opened (and created when missing).
pub struct JetStreamDestination {
    bucket: String,
    store: ObjectStore,
}

impl JetStreamDestination {
    /// Opens `bucket`, creating it with `replicas` copies when missing.
    pub async fn open(client: &Client, bucket: &str, replicas: usize) -> Result<Self, String> {
        let js = async_nats::jetstream::new(client.clone());
        let store = match js.get_object_store(bucket).await {
            Ok(s) => s,
            Err(e) if e.kind() == async_nats::jetstream::context::ObjectStoreErrorKind::GetStore => js
                .create_object_store(object_store::Config {
                    bucket: bucket.to_string(),
                    description: Some("flightrec snapshots".into()),
                    num_replicas: replicas,
                    ..Default::default()
                })
                .await
                .map_err(|e| {
                    format!(
                        "cannot create the JetStream object store bucket {bucket:?} with {replicas} \
                         replica(s): {e} (is nats-server running with JetStream, -js?)"
                    )
                })?,
            Err(e) => return Err(format!("cannot open the bucket {bucket:?}: {e}")),
        };
        Ok(Self {
            bucket: bucket.to_string(),
            store,
        })
    }

    /// What the bucket holds under `name`, asked again while unanswered
    /// (see [`LOOKUP_WAITS`]).
    async fn info(&self, name: &str) -> Result<ObjectInfo, InfoError> {
        for (tries, wait) in (1..).zip(LOOKUP_WAITS) {
            match tokio::time::timeout(wait, self.store.info(name)).await {
                Ok(answer) => return answer,
                Err(_) => tracing::debug!(
                    object = name,
                    tries,
                    "fleet: a look-up in the bucket went unanswered; asking again"
                ),
            }
        }
        self.store.info(name).await
    }

    /// `<bucket>/<object name>`, as Watch and the log show it.
    pub fn object_url(&self, headers: &ObjectHeaders) -> String {
        format!("{}/{}", self.bucket, headers.object_name())
    }

    /// Uploads `file` (already open: its digest is in `headers`). Ok(false)
    /// when an object of that name and digest is there already (exactly
    /// once across restarts).
    pub async fn upload(
        &self,
        file: std::fs::File,
        headers: &ObjectHeaders,
    ) -> Result<bool, String> {
        let name = headers.object_name();
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            format!("cannot {what} {}: {e}", self.object_url(headers))
        };
        match self.info(&name).await {
            Ok(info) if !info.deleted && info.digest.as_deref() == Some(&headers.digest) => {
                return Ok(false);
            }
            Ok(_) => {}
            Err(e) if e.kind() == InfoErrorKind::NotFound => {}
            Err(e) => return Err(fail("look up", &e)),
        }
        let mut header_map = HeaderMap::new();
        let mut metadata = HashMap::new();
        for (key, value) in headers.to_pairs() {
            header_map.insert(key, value.as_str());
            metadata.insert(key.to_ascii_lowercase(), value);
        }
        let meta = ObjectMetadata {
            name,
            description: Some(format!(
                "flightrec snapshot {} of {}",
                headers.id, headers.host
            )),
            chunk_size: Some(CHUNK_BYTES),
            metadata,
            headers: Some(header_map),
        };
        let mut reader = tokio::fs::File::from_std(file);
        let info = self
            .store
            .put(meta, &mut reader)
            .await
            .map_err(|e| fail("upload", &e))?;
        if info.digest.as_deref() != Some(&headers.digest) {
            return Err(format!(
                "the upload of {} has digest {:?}, the file {}: it changed while being sent",
                self.object_url(headers),
                info.digest.unwrap_or_default(),
                headers.digest
            ));
        }
        Ok(true)
    }
}

/// `SHA-256=<base64url>` of what `file` holds from its start, as the
/// JetStream object store writes its digest; the file is left at its start.
pub fn digest_of(file: &mut std::fs::File) -> std::io::Result<String> {
    let mut digest = ObjectDigest::default();
    let mut buf = vec![0u8; 1 << 20];
    file.rewind()?;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        digest.update(&buf[..n]);
    }
    file.rewind()?;
    Ok(digest.finish())
}

/// A digest as the JetStream object store writes it, of bytes fed in
/// pieces (what an upload sends, as it sends it).
#[derive(Default)]
pub struct ObjectDigest(Sha256);

impl ObjectDigest {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// `SHA-256=<base64url>`.
    pub fn finish(self) -> String {
        format!("SHA-256={}", URL_SAFE.encode(self.0.finalize()))
    }
}

/// A snapshot opened for an upload: one descriptor, and what its bytes
/// are, all read from it (a compression that replaces the file meanwhile
/// changes nothing of this one).
pub struct OpenedSnapshot {
    pub file: std::fs::File,
    pub digest: String,
    pub bytes: u64,
    pub compressed: bool,
}

/// Opens a snapshot (a regular file, not followed as a link) and reads its
/// size, digest and header (blocking: call off the async workers).
pub fn open_with_digest(path: &Path) -> std::io::Result<OpenedSnapshot> {
    use flightrec_files::{Links, open_regular, untrusted::read_at_most};
    let (mut file, md) = open_regular(path, Links::Refuse)?;
    let digest = digest_of(&mut file)?;
    let header = read_at_most(&file, 0, md.len().min(0x50), 0x50)?;
    Ok(OpenedSnapshot {
        file,
        digest,
        bytes: md.len(),
        compressed: crate::store::header_says_compressed(&header),
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn the_digest_is_the_object_stores_encoding() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"abc").unwrap();
        // SHA-256("abc") = ba7816bf..., in base64url with padding.
        assert_eq!(
            digest_of(&mut f).unwrap(),
            "SHA-256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0="
        );
        let mut back = String::new();
        f.read_to_string(&mut back).unwrap();
        assert_eq!(back, "abc", "left at its start");
    }
}
