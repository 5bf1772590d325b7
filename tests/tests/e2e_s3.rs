//! The S3 destination of uploads against a real S3-compatible server
//! (s3s-fs, started per test on a loopback port): keys, metadata,
//! idempotence, credentials and multipart uploads of big snapshots. What
//! was uploaded is read back with a client of its own.
//!
//! The tests run one at a time: the big upload measures the process's
//! peak memory, which the others would disturb.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use flightrec_config::{S3Config, Spanned};
use flightrec_tests::{S3Server, free_port};
use flightrecd::fleet::object::ObjectHeaders;
use flightrecd::fleet::s3::{
    PART_SIZE, PARTS_IN_FLIGHT, S3Credentials, S3Destination, decode_metadata_value,
};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{Attribute, ObjectStore, ObjectStoreExt};

const MIB: usize = 1 << 20;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config(server: &S3Server, bucket: &str, credentials_file: Option<PathBuf>) -> S3Config {
    S3Config {
        url: Spanned::new(0..0, format!("s3://{bucket}//fleet/")),
        endpoint: Some(Spanned::new(0..0, server.endpoint.clone())),
        region: None,
        credentials_file: credentials_file.map(|f| Spanned::new(0..0, f)),
    }
}

fn credentials(server: &S3Server) -> S3Credentials {
    S3Credentials {
        access_key_id: server.access_key.clone(),
        secret_access_key: server.secret_key.clone(),
        session_token: None,
    }
}

/// A destination on the server's bucket under "fleet", with its keys.
fn destination_of(server: &S3Server) -> S3Destination {
    S3Destination::with_credentials(&config(server, &server.bucket, None), credentials(server))
        .unwrap()
}

/// A client of the test's own, to read back what was uploaded.
fn reader(server: &S3Server) -> AmazonS3 {
    AmazonS3Builder::new()
        .with_bucket_name(&server.bucket)
        .with_endpoint(&server.endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(&server.access_key)
        .with_secret_access_key(&server.secret_key)
        .build()
        .expect("build the reading client")
}

/// `bytes` of a pseudo-random sequence seeded by `seed`, written in 1 MiB
/// pieces (the test must not hold big files in memory either).
fn write_file(path: &Path, bytes: usize, seed: u64) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create file"));
    let mut state = seed | 1;
    let mut left = bytes;
    let mut chunk = vec![0u8; MIB];
    while left > 0 {
        for b in chunk.iter_mut() {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state as u8;
        }
        let n = left.min(MIB);
        file.write_all(&chunk[..n]).expect("write file");
        left -= n;
    }
    file.flush().expect("flush file");
}

fn headers(id: &str, bytes: u64) -> ObjectHeaders {
    ObjectHeaders {
        host: "host-a".into(),
        id: id.into(),
        label: "incident-42".into(),
        trigger: "fleet+signal".into(),
        bytes,
        compressed: false,
        created_unix_ns: 1_795_500_000_123_456_789,
        labels: BTreeMap::from([
            ("role".to_string(), "db".to_string()),
            ("zone".to_string(), "zürich-1".to_string()),
        ]),
        digest: "SHA-256=3q2-7wAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".into(),
    }
}

/// `headers` with the digest of `file`'s bytes: the destination sends
/// nothing whose bytes are not the ones the digest names.
fn digest_of(headers: ObjectHeaders, file: &Path) -> ObjectHeaders {
    let mut f = std::fs::File::open(file).unwrap();
    ObjectHeaders {
        digest: flightrecd::fleet::jetstream::digest_of(&mut f).unwrap(),
        ..headers
    }
}

/// The objects under `prefix/` (one level).
async fn keys_under(store: &AmazonS3, prefix: &str) -> Vec<String> {
    store
        .list_with_delimiter(Some(&ObjectPath::from(prefix)))
        .await
        .expect("list the bucket")
        .objects
        .into_iter()
        .map(|o| o.location.to_string())
        .collect()
}

/// The bytes of `path` equal those of the object `key`, compared a part
/// at a time.
async fn assert_same_bytes(store: &AmazonS3, key: &str, path: &Path) {
    let location = ObjectPath::from(key);
    let size = std::fs::metadata(path).unwrap().len();
    assert_eq!(store.head(&location).await.unwrap().size, size, "{key}");
    let mut file = std::fs::File::open(path).unwrap();
    let mut expected = vec![0u8; PART_SIZE];
    let mut at = 0u64;
    while at < size {
        let n = (size - at).min(PART_SIZE as u64);
        file.read_exact(&mut expected[..n as usize]).unwrap();
        let got = store.get_range(&location, at..at + n).await.unwrap();
        assert!(
            got[..] == expected[..n as usize],
            "{key}: bytes {at}..{} differ from {}",
            at + n,
            path.display()
        );
        at += n;
    }
}

/// `VmRSS` or `VmHWM` (peak) of this process, in bytes.
fn memory(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("bad line {line:?}"));
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_uploads_under_its_key_with_every_header_as_metadata() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let Some(server) = S3Server::start("a_snapshot_uploads_under_its_key") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    // Credentials from a file, as `fleet.s3.credentials_file` gives them.
    let env_file = work.path().join("s3.env");
    std::fs::write(
        &env_file,
        format!(
            "# test keys\nAWS_ACCESS_KEY_ID={}\nAWS_SECRET_ACCESS_KEY=\"{}\"\n",
            server.access_key, server.secret_key
        ),
    )
    .unwrap();
    let destination = S3Destination::new(&config(&server, &server.bucket, Some(env_file)))
        .expect("the destination");
    assert_eq!(
        destination.describe(),
        format!(
            "s3://{}/fleet (endpoint {})",
            server.bucket, server.endpoint
        )
    );
    let file = work.path().join("snapshot.perf.data");
    let size = 3 * MIB + 123;
    write_file(&file, size, 1);
    let headers = digest_of(
        headers("box-20261123T180000Z-000007-incident", size as u64),
        &file,
    );

    assert_eq!(destination.upload(&file, &headers).await, Ok(true));

    let store = reader(&server);
    let key = "fleet/host-a/box-20261123T180000Z-000007-incident.perf.data";
    assert_eq!(destination.key(&headers), key);
    assert_eq!(keys_under(&store, "fleet/host-a").await, [key]);
    let got = store.get(&ObjectPath::from(key)).await.expect("get");
    let metadata: BTreeMap<String, String> = got
        .attributes
        .iter()
        .filter_map(|(attribute, value)| match attribute {
            Attribute::Metadata(name) => {
                Some((name.to_string(), decode_metadata_value(value.as_ref())))
            }
            _ => None,
        })
        .collect();
    let bytes = got.bytes().await.expect("object bytes");
    assert!(
        bytes[..] == std::fs::read(&file).unwrap()[..],
        "the object's bytes differ from the file's"
    );
    for (name, value) in headers.to_pairs() {
        assert_eq!(
            metadata.get(&name.to_ascii_lowercase()),
            Some(&value),
            "x-amz-meta-{} in {metadata:?}",
            name.to_ascii_lowercase()
        );
    }
    assert_eq!(metadata.len(), headers.to_pairs().len(), "{metadata:?}");
    // Readers get the description back from the metadata.
    let back = ObjectHeaders::from_lookup(|n| metadata.get(&n.to_ascii_lowercase()).cloned());
    assert_eq!(back, Ok(headers));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_upload_of_the_same_snapshot_does_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let Some(server) = S3Server::start("a_second_upload_of_the_same_snapshot") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let destination = destination_of(&server);
    let file = work.path().join("snapshot.perf.data");
    let size = 2 * MIB;
    write_file(&file, size, 2);
    // No label and no digest: empty metadata values are fine too.
    let headers = ObjectHeaders {
        label: String::new(),
        digest: String::new(),
        ..headers("box-1", size as u64)
    };
    let store = reader(&server);
    let key = destination.key(&headers);

    assert_eq!(destination.upload(&file, &headers).await, Ok(true));
    let got = store.get(&ObjectPath::from(key.as_str())).await.unwrap();
    let back = ObjectHeaders::from_lookup(|n| {
        got.attributes
            .get(&Attribute::Metadata(n.to_ascii_lowercase().into()))
            .map(|v| decode_metadata_value(v.as_ref()))
    });
    assert_eq!(back.as_ref(), Ok(&headers));
    let uploaded = work.path().join("uploaded");
    std::fs::copy(&file, &uploaded).unwrap();
    // Same key, same size: taken as the same snapshot (an upload that
    // completed before a restart), so the object is left as it is, even
    // with other bytes in the file now.
    write_file(&file, size, 3);
    assert_eq!(destination.upload(&file, &headers).await, Ok(false));
    assert_eq!(keys_under(&store, "fleet/host-a").await, [key.as_str()]);
    assert_same_bytes(&store, &key, &uploaded).await;

    // Another size (an object that is not this snapshot) is replaced.
    write_file(&file, size + 1, 4);
    assert_eq!(destination.upload(&file, &headers).await, Ok(true));
    assert_eq!(keys_under(&store, "fleet/host-a").await, [key.as_str()]);
    assert_same_bytes(&store, &key, &file).await;

    // Same size, both digests known: they decide.
    let with_digest_of = |seed: u64| {
        write_file(&file, size, seed);
        digest_of(
            ObjectHeaders {
                id: "box-digest".into(),
                ..headers.clone()
            },
            &file,
        )
    };
    let b = with_digest_of(6);
    let a = with_digest_of(5);
    let key = destination.key(&a);
    assert_eq!(destination.upload(&file, &a).await, Ok(true));
    std::fs::copy(&file, &uploaded).unwrap();
    write_file(&file, size, 6);
    assert_eq!(destination.upload(&file, &a).await, Ok(false));
    assert_same_bytes(&store, &key, &uploaded).await;
    assert_eq!(
        destination.upload(&file, &b).await,
        Ok(true),
        "another digest is another snapshot"
    );
    assert_same_bytes(&store, &key, &file).await;
    assert_eq!(destination.upload(&file, &b).await, Ok(false));
    assert_eq!(keys_under(&store, "fleet/host-a").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_give_a_clear_error_and_upload_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let Some(server) = S3Server::start("wrong_credentials_give_a_clear_error") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("snapshot.perf.data");
    write_file(&file, MIB, 5);
    let headers = digest_of(headers("box-2", MIB as u64), &file);
    let wrong_secret = S3Credentials {
        secret_access_key: "not-the-secret".into(),
        ..credentials(&server)
    };
    let unknown_key = S3Credentials {
        access_key_id: "nobody".into(),
        ..credentials(&server)
    };
    // The code is S3's answer to the PUT (the HEAD before it, denied too,
    // has no body: upload-only credentials may not look, so the PUT is
    // tried anyway).
    for (wrong, code) in [
        (wrong_secret, "SignatureDoesNotMatch"),
        // s3s's code for a key it does not know (AWS: InvalidAccessKeyId).
        (unknown_key, "NotSignedUp"),
    ] {
        let destination =
            S3Destination::with_credentials(&config(&server, &server.bucket, None), wrong).unwrap();
        assert_eq!(
            destination.upload(&file, &headers).await,
            Err(format!(
                "cannot upload s3://{}/fleet/host-a/box-2.perf.data to {}: access denied ({code}) \
                 (check the S3 credentials)",
                server.bucket, server.endpoint
            ))
        );
    }
    assert_eq!(
        keys_under(&reader(&server), "fleet/host-a").await,
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_uploaded_is_named() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let Some(server) = S3Server::start("what_cannot_be_uploaded_is_named") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("snapshot.perf.data");
    write_file(&file, MIB, 6);
    let headers = headers("box-3", MIB as u64);

    // Nobody listens on this port.
    let mut gone = config(&server, &server.bucket, None);
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    gone.endpoint = Some(Spanned::new(0..0, endpoint.clone()));
    let no_server = S3Destination::with_credentials(&gone, credentials(&server)).unwrap();
    assert_eq!(
        no_server.upload(&file, &headers).await,
        Err(format!(
            "cannot upload s3://{}/fleet/host-a/box-3.perf.data to {endpoint}: cannot connect \
             (is the S3 server running and reachable?)",
            server.bucket
        ))
    );

    // A file that is gone is named too (the queue reports it).
    let missing = work.path().join("gone.perf.data");
    let ok = destination_of(&server);
    let e = ok.upload(&missing, &headers).await.unwrap_err();
    assert!(
        e.ends_with(&format!(
            "{}: No such file or directory (os error 2)",
            missing.display()
        )),
        "{e}"
    );

    // Labels S3 would refuse as metadata (2 KB at most) fail before any
    // request, with what to shorten.
    let labels: BTreeMap<String, String> = (0..20)
        .map(|i| (format!("label-{i:02}"), "v".repeat(100)))
        .collect();
    let crowded = ObjectHeaders {
        labels,
        ..headers.clone()
    };
    let e = ok.upload(&file, &crowded).await.unwrap_err();
    assert!(
        e.starts_with(&format!(
            "cannot upload s3://{}/fleet/host-a/box-3.perf.data to {}: its metadata would be ",
            server.bucket, server.endpoint
        )) && e.ends_with(
            " bytes, S3 takes at most 2048 (fleet.labels are 2281 of them: shorten them)"
        ),
        "{e}"
    );
    assert_eq!(
        keys_under(&reader(&server), "fleet/host-a").await,
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_snapshot_uploads_in_parts_with_bounded_memory() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let Some(server) = S3Server::start("a_big_snapshot_uploads_in_parts") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let destination = destination_of(&server);
    let file = work.path().join("big.perf.data");
    let size = 64 * MIB;
    write_file(&file, size, 7);
    let headers = digest_of(headers("box-big", size as u64), &file);

    // Peak memory of this process during the upload, from the resident
    // set before it ("5" resets VmHWM to the current RSS).
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
    let before = memory("VmRSS:");
    let started = std::time::Instant::now();
    assert_eq!(destination.upload(&file, &headers).await, Ok(true));
    let took = started.elapsed();
    let peak_delta = memory("VmHWM:").saturating_sub(before);
    eprintln!(
        "uploading {} MiB: {:.2} s ({:.0} MiB/s), peak RSS +{:.1} MiB",
        size / MIB,
        took.as_secs_f64(),
        size as f64 / MIB as f64 / took.as_secs_f64(),
        peak_delta as f64 / MIB as f64
    );
    // Parts in flight plus the one being filled, and room for the HTTP
    // stack; reading the whole file would take 64 MiB by itself.
    let bound = ((PARTS_IN_FLIGHT + 2) * PART_SIZE) as u64;
    assert!(
        peak_delta < bound,
        "peak RSS grew by {peak_delta} bytes uploading {size} bytes (bound {bound})"
    );

    let store = reader(&server);
    let key = destination.key(&headers);
    // s3s-fs, like S3, gives a multipart object the ETag
    // "<md5 of the parts' md5s>-<parts>".
    let parts = size.div_ceil(PART_SIZE);
    let etag = store
        .head(&ObjectPath::from(key.as_str()))
        .await
        .unwrap()
        .e_tag;
    assert!(
        etag.as_deref()
            .is_some_and(|e| e.trim_matches('"').ends_with(&format!("-{parts}"))),
        "ETag {etag:?} is not that of a {parts}-part upload"
    );
    assert_same_bytes(&store, &key, &file).await;
    assert_eq!(destination.upload(&file, &headers).await, Ok(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_the_digested_ones_are_never_stored() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let Some(server) = S3Server::start("bytes_that_are_not_the_digested_ones") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let destination = destination_of(&server);
    let store = reader(&server);
    // A snapshot digested, then replaced under the same name (as a
    // compression renames its result over it): small (one PUT) and big (in
    // parts).
    for (size, id) in [(MIB, "box-small"), (20 * MIB, "box-parts")] {
        let file = work.path().join(format!("{id}.perf.data"));
        write_file(&file, size, 10);
        let headers = digest_of(headers(id, size as u64), &file);
        write_file(&file, size, 12);
        let e = destination.upload(&file, &headers).await.unwrap_err();
        assert!(e.contains("it changed while being sent"), "{e}");
        assert_eq!(
            keys_under(&store, "fleet/host-a").await,
            Vec::<String>::new(),
            "{id}: an object was stored"
        );
    }
}
