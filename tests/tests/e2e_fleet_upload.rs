//! End to end: snapshots shipped to a real nats-server's JetStream object
//! store. Three daemons (`host-a|b|c`) upload their fleet dumps, which
//! `snapctl fleet list` shows with their metadata and `fleet fetch` brings
//! back byte for byte; snapshots taken while NATS is down arrive once it
//! is back, none twice; a daemon killed (-9) mid-upload completes it after
//! its restart; retention keeps what still waits for its upload.
//!
//! "None twice" is read off the server, not the daemons: the bucket's
//! stream holds one message per chunk plus one per object, so its last
//! sequence equals that sum only when nothing was sent again.

use std::path::Path;
use std::time::{Duration, Instant};

use flightrec_tests::fleet::{
    connected, fleet_toml, snapctl_fleet, snapctl_fleet_json, start_connected, wait_fleet,
};
use flightrec_tests::{Daemon, NatsCluster, NatsServer, Watcher, perf_script, require_root};
use serde_json::Value;

/// The daemon's chunk size in the object store (fleet/jetstream.rs).
const CHUNK_BYTES: u64 = 512 * 1024;

fn fleet_section(url: &str, host: &str, labels: &str, extra: &str) -> String {
    fleet_toml(&format!("\"{url}\""), host, labels, extra)
}

/// The bucket's snapshots as `snapctl fleet list` gives them.
fn bucket(url: &str) -> Vec<Value> {
    let (out, v) = snapctl_fleet_json(url, &["list"]);
    assert!(out.status.success(), "{v}");
    v["snapshots"].as_array().cloned().expect("snapshots")
}

/// `snapctl fleet fetch HOST/ID -o PATH`; the file's bytes.
fn fetch(url: &str, host: &str, id: &Value, path: &Path) -> Vec<u8> {
    let what = format!("{host}/{}", id.as_str().expect("id"));
    let out = snapctl_fleet(url, &["fetch", &what, "-o", path.to_str().unwrap()], false);
    assert!(
        out.status.success(),
        "fetch {what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(path).expect("the fetched file")
}

/// A daemon of `host-a` whose server is not there yet (its port is
/// free), with `extra` config: every snapshot waits for its upload.
fn daemon_before_its_server(extra: &str) -> (Daemon, u16) {
    let port = flightrec_tests::free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let d = Daemon::start(&format!(
        "{}\n{extra}",
        fleet_section(&url, "host-a", "role = \"db\"", "")
    ));
    (d, port)
}

/// Until this daemon has uploaded `n` snapshots and none waits.
fn uploaded(d: &Daemon, n: u64, within: Duration) -> Value {
    wait_fleet(d, within, |f| {
        f["uploaded"].as_u64() >= Some(n) && f["uploads_pending"] == 0
    })
}

/// Until the daemon lists `n` snapshots.
fn wait_listed(d: &Daemon, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = d.list();
        if list.len() >= n {
            return list;
        }
        assert!(
            Instant::now() < deadline,
            "{n} snapshots not listed in 20s: {list:?}\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The server holds each object once: its stream's last sequence is the
/// sum of one message per chunk and one per object.
fn assert_sent_once(nats: &NatsServer, objects: &[Value]) {
    let state = nats
        .stream_state("OBJ_flightrec")
        .expect("the bucket's stream exists");
    let expected: u64 = objects
        .iter()
        .map(|o| o["bytes"].as_u64().expect("bytes").div_ceil(CHUNK_BYTES) + 1)
        .sum();
    assert_eq!(
        state["last_seq"].as_u64(),
        Some(expected),
        "the stream took more messages than one upload of each object: {state}\n{objects:?}"
    );
}

/// The local snapshot `local` (from `snapctl list`) is in the bucket as
/// `host/id` with the same metadata.
fn find_in<'a>(objects: &'a [Value], host: &str, local: &Value) -> &'a Value {
    let found: Vec<&Value> = objects
        .iter()
        .filter(|o| o["host"] == host && o["id"] == local["id"])
        .collect();
    assert_eq!(found.len(), 1, "{host}/{}: {objects:?}", local["id"]);
    let o = found[0];
    for key in ["label", "trigger", "bytes", "compressed", "created_unix_ns"] {
        assert_eq!(o[key], local[key], "{key} of {host}/{}", local["id"]);
    }
    o
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn fleet_dumps_of_three_hosts_land_in_the_bucket_and_fetch_back() {
    require_root("fleet_dumps_of_three_hosts_land_in_the_bucket_and_fetch_back");
    let nats = NatsServer::start();
    let url = nats.url();
    let daemons = start_connected(
        [
            ("host-a", "role = \"db\""),
            ("host-b", "role = \"db\""),
            ("host-c", "role = \"web\""),
        ]
        .into_iter()
        .map(|(host, labels)| (host, fleet_section(&url, host, labels, "")))
        .collect(),
    );
    let (out, v) = snapctl_fleet_json(
        &url,
        &[
            "dump",
            "--label",
            "incident-1",
            "--wait",
            "30s",
            "--expect",
            "host-a,host-b,host-c",
        ],
    );
    assert!(out.status.success(), "{v}");
    for (_, d) in &daemons {
        let f = uploaded(d, 1, Duration::from_secs(30));
        assert_eq!(f["upload_destinations"], serde_json::json!(["jetstream"]));
        assert_eq!(f["last_upload_error"], "", "{f}");
    }

    let objects = bucket(&url);
    assert_eq!(objects.len(), 3, "{objects:?}");
    let dest = tempfile::tempdir().unwrap();
    for (host, d) in &daemons {
        let local = d.list();
        assert_eq!(local.len(), 1, "{host}: {local:?}");
        let o = find_in(&objects, host, &local[0]);
        assert_eq!(o["trigger"], "fleet");
        assert_eq!(o["label"], "incident-1");
        // Fetched back, it is the same file, and perf reads it.
        let out_path = dest.path().join(format!("{host}.perf.data"));
        let original = std::fs::read(local[0]["path"].as_str().unwrap()).unwrap();
        assert!(
            fetch(&url, host, &local[0]["id"], &out_path) == original,
            "{host}: the fetched file differs"
        );
        let script = perf_script(&out_path, &[]);
        assert!(
            script.contains("sched_switch") || script.contains("cpu-clock"),
            "{host}: {script:.300}"
        );
    }
    // --host keeps one host's.
    let (_, v) = snapctl_fleet_json(&url, &["list", "--host", "host-b"]);
    let only: Vec<&str> = v["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["host"].as_str().unwrap())
        .collect();
    assert_eq!(only, ["host-b"], "{v}");
    assert_sent_once(&nats, &objects);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn snapshots_taken_while_nats_is_down_arrive_once_it_is_back() {
    require_root("snapshots_taken_while_nats_is_down_arrive_once_it_is_back");
    let mut nats = NatsServer::start();
    let url = nats.url();
    let daemons: Vec<(&str, Daemon)> = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|host| {
            (
                host,
                Daemon::start(&fleet_section(&url, host, "zone = \"1\"", "")),
            )
        })
        .collect();
    for (_, d) in &daemons {
        connected(d);
    }
    let watch = Watcher::start(&daemons[0].1);
    nats.kill();
    for (_, d) in &daemons {
        wait_fleet(d, Duration::from_secs(20), |f| f["state"] != "connected");
        d.signal("USR2");
        wait_listed(d, 1);
        // Queued, and the failed attempts are counted and named.
        let f = wait_fleet(d, Duration::from_secs(20), |f| {
            f["uploads_pending"] == 1 && f["upload_failures"].as_u64() >= Some(1)
        });
        assert_ne!(f["last_upload_error"], "", "{f}");
    }
    // Watch tells of the failed attempts, then of the upload.
    let failed = watch
        .wait_for("upload_failed", Duration::from_secs(20))
        .expect("an upload_failed event");
    assert_eq!(failed["destination"], "jetstream", "{failed}");
    assert_eq!(failed["id"], daemons[0].1.list()[0]["id"], "{failed}");
    nats.restart();
    for (_, d) in &daemons {
        uploaded(d, 1, Duration::from_secs(60));
    }
    let done = watch
        .wait_for("uploaded", Duration::from_secs(20))
        .expect("an uploaded event");
    assert_eq!(
        done["snapshot"]["id"],
        daemons[0].1.list()[0]["id"],
        "{done}"
    );
    assert_eq!(
        done["object"],
        format!(
            "flightrec/host-a/{}.perf.data",
            daemons[0].1.list()[0]["id"].as_str().unwrap()
        )
    );
    assert_eq!(done["already_there"], false);
    let objects = bucket(&url);
    assert_eq!(objects.len(), 3, "{objects:?}");
    for (host, d) in &daemons {
        let o = find_in(&objects, host, &d.list()[0]);
        assert_eq!(o["trigger"], "signal");
    }
    assert_sent_once(&nats, &objects);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_daemon_killed_during_an_upload_completes_it_after_restart() {
    require_root("a_daemon_killed_during_an_upload_completes_it_after_restart");
    let nats = NatsServer::start();
    let url = nats.url();
    let mut d = Daemon::start(&fleet_section(&url, "host-a", "role = \"db\"", ""));
    connected(&d);
    // Open the bucket with a first upload, so the next one is cut inside
    // its chunks, not while creating the bucket.
    d.signal("USR2");
    uploaded(&d, 1, Duration::from_secs(30));
    // A paused server takes the chunks into its socket but acks none: the
    // upload hangs until the daemon dies.
    nats.pause();
    d.signal("USR2");
    let list = wait_listed(&d, 2);
    let cut = list[1].clone();
    std::thread::sleep(Duration::from_millis(500));
    d.kill9();
    nats.resume();
    d.spawn();
    let f = uploaded(&d, 1, Duration::from_secs(60));
    assert_eq!(f["uploads_pending"], 0, "{f}");
    let objects = bucket(&url);
    assert_eq!(objects.len(), 2, "{objects:?}");
    let o = find_in(&objects, "host-a", &cut);
    assert_eq!(o["trigger"], "signal");
    let dest = tempfile::tempdir().unwrap();
    let fetched = fetch(
        &url,
        "host-a",
        &cut["id"],
        &dest.path().join("cut.perf.data"),
    );
    assert!(
        fetched == std::fs::read(cut["path"].as_str().unwrap()).unwrap(),
        "the upload completed after the restart is the file on disk"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn retention_keeps_snapshots_waiting_for_upload_until_the_byte_budget_forces_it() {
    require_root("retention_keeps_snapshots_waiting_for_upload_until_the_byte_budget_forces_it");
    let (d, port) = daemon_before_its_server("[retention]\nmax_snapshots = 1\n");
    for n in 1..=3 {
        d.signal("USR2");
        wait_listed(&d, n);
        std::thread::sleep(Duration::from_millis(150));
    }
    assert_eq!(
        d.list().len(),
        3,
        "max_snapshots passed over the waiting ones"
    );
    let f = wait_fleet(&d, Duration::from_secs(10), |f| f["uploads_pending"] == 3);
    assert_eq!(f["uploaded"], 0);

    // The server comes: all three go up, then retention applies again at
    // the next dump and keeps one.
    let nats = NatsServer::start_on(port, None);
    uploaded(&d, 3, Duration::from_secs(60));
    assert_eq!(bucket(&nats.url()).len(), 3);
    d.signal("USR2");
    uploaded(&d, 4, Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.list().len() != 1 {
        assert!(Instant::now() < deadline, "{:?}", d.list());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn the_byte_budget_removes_a_waiting_snapshot_and_says_so() {
    require_root("the_byte_budget_removes_a_waiting_snapshot_and_says_so");
    // 1 byte: every older snapshot is over budget.
    let (d, _) = daemon_before_its_server("[retention]\nmax_bytes = 1\n");
    let watch = Watcher::start(&d);
    d.signal("USR2");
    let first = wait_listed(&d, 1)[0].clone();
    std::thread::sleep(Duration::from_millis(150));
    d.signal("USR2");
    let removed = watch
        .wait_for("snapshot_removed", Duration::from_secs(20))
        .expect("a snapshot_removed event");
    assert_eq!(removed["snapshot"]["id"], first["id"]);
    assert_eq!(removed["reason"], "retention.max_bytes, before its upload");
    let log = d.log_text();
    assert!(
        log.contains("snapshot removed before its upload"),
        "{log:.2000}"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_cluster_node_killed_during_a_fleet_dump_loses_nothing() {
    require_root("a_cluster_node_killed_during_a_fleet_dump_loses_nothing");
    let mut cluster = NatsCluster::start(3);
    let urls = cluster.urls();
    let nats_list = urls
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    // 8 MiB rings: each upload is tens of chunks, each acked by a quorum of
    // the three replicas, so the kill below finds uploads under way.
    let daemons: Vec<(&str, Daemon)> = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|host| {
            let dir = tempfile::tempdir().unwrap();
            let text = flightrec_tests::test_config(
                dir.path(),
                &fleet_toml(
                    &format!("[{nats_list}]"),
                    host,
                    "zone = \"1\"",
                    "replicas = 3",
                ),
            )
            .replace("per_cpu = \"256KiB\"", "per_cpu = \"8MiB\"");
            (host, Daemon::start_in(dir, &text, &[]))
        })
        .collect();
    for (_, d) in &daemons {
        connected(d);
    }
    // The request goes through node 3; node 1 dies once every daemon has
    // dumped, while the uploads and replies are under way.
    let dump = flightrec_tests::snapctl_command()
        .args(["--json", "fleet", "--nats", &urls[2]])
        .args(["dump", "--label", "cluster", "--wait", "30s"])
        .args(["--expect", "host-a,host-b,host-c"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn snapctl fleet dump");
    for (_, d) in &daemons {
        wait_listed(d, 1);
    }
    cluster.nodes[0].kill();
    let out = dump.wait_with_output().expect("snapctl fleet dump");
    let replies: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    for (host, d) in &daemons {
        let local = d.list();
        assert_eq!(local.len(), 1, "{host}: {local:?}");
        assert_eq!(local[0]["trigger"], "fleet", "{host}");
        uploaded(d, 1, Duration::from_secs(90));
    }
    let objects = bucket(&urls[1]);
    assert_eq!(objects.len(), 3, "{objects:?}\nreplies: {replies}");
    for (host, d) in &daemons {
        find_in(&objects, host, &d.list()[0]);
    }
    // Three copies were asked for and two nodes are left: the stream
    // reports its replicas (the survivors hold it).
    let state = cluster.nodes[1]
        .stream_state("OBJ_flightrec")
        .or_else(|| cluster.nodes[2].stream_state("OBJ_flightrec"))
        .expect("a surviving node holds the bucket");
    assert!(state["messages"].as_u64() > Some(3), "{state}");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn with_s3_set_a_snapshot_goes_to_both_destinations() {
    require_root("with_s3_set_a_snapshot_goes_to_both_destinations");
    let Some(s3) =
        flightrec_tests::S3Server::start("with_s3_set_a_snapshot_goes_to_both_destinations")
    else {
        return;
    };
    let nats = NatsServer::start();
    let url = nats.url();
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("s3.env");
    std::fs::write(
        &credentials,
        format!(
            "AWS_ACCESS_KEY_ID={}\nAWS_SECRET_ACCESS_KEY={}\n",
            s3.access_key, s3.secret_key
        ),
    )
    .unwrap();
    let s3_line = format!(
        "s3 = {{ url = \"s3://{}/fleet\", endpoint = \"{}\", region = \"us-east-1\", \
         credentials_file = \"{}\" }}",
        s3.bucket,
        s3.endpoint,
        credentials.display()
    );
    let text = flightrec_tests::test_config(
        dir.path(),
        &fleet_section(&url, "host-a", "role = \"db\"", &s3_line),
    );
    let d = Daemon::start_in(dir, &text, &[]);
    connected(&d);
    let watch = Watcher::start(&d);
    d.signal("USR2");
    let local = wait_listed(&d, 1)[0].clone();
    let f = uploaded(&d, 2, Duration::from_secs(60));
    assert_eq!(
        f["upload_destinations"],
        serde_json::json!(["jetstream", "s3"])
    );
    let id = local["id"].as_str().unwrap();
    let mut objects = Vec::new();
    for _ in 0..2 {
        let e = watch
            .wait_for("uploaded", Duration::from_secs(20))
            .expect("two uploaded events");
        objects.push(e["object"].as_str().unwrap().to_string());
    }
    objects.sort();
    assert_eq!(
        objects,
        [
            format!("flightrec/host-a/{id}.perf.data"),
            format!("s3://{}/fleet/host-a/{id}.perf.data", s3.bucket)
        ]
    );
    // s3s-fs keeps each object as a file under its bucket's directory.
    let stored = s3
        .root
        .join(&s3.bucket)
        .join(format!("fleet/host-a/{id}.perf.data"));
    assert!(
        std::fs::read(&stored).expect("the object on the S3 server")
            == std::fs::read(local["path"].as_str().unwrap()).unwrap(),
        "the S3 object is the snapshot"
    );
    find_in(&bucket(&url), "host-a", &local);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_snapshot_replaced_by_a_directory_is_passed_over_and_does_not_hold_the_queue() {
    require_root("a_snapshot_replaced_by_a_directory_is_passed_over_and_does_not_hold_the_queue");
    let (mut d, port) = daemon_before_its_server("");
    d.signal("USR2");
    let first = wait_listed(&d, 1)[0].clone();
    std::thread::sleep(Duration::from_millis(150));
    d.signal("USR2");
    let second = wait_listed(&d, 2)[1].clone();
    // Stopped with both queued, the oldest turned into something that is
    // not a snapshot (a directory under its name), the server up, the
    // daemon started again: the directory is passed over, named in the
    // log, and the queue goes on with the second.
    d.stop();
    let path = Path::new(first["path"].as_str().unwrap());
    std::fs::remove_file(path).unwrap();
    std::fs::create_dir(path).unwrap();
    let nats = NatsServer::start_on(port, None);
    d.spawn();
    let f = wait_fleet(&d, Duration::from_secs(60), |f| f["uploaded"] == 1);
    assert_eq!(f["uploads_pending"], 0, "nothing else to upload: {f}");
    let objects = bucket(&nats.url());
    assert_eq!(objects.len(), 1, "{objects:?}");
    find_in(&objects, "host-a", &second);
    let listed: Vec<_> = d.list().iter().map(|s| s["id"].clone()).collect();
    assert_eq!(listed, [second["id"].clone()]);
    let log = d.log_text();
    assert!(
        log.contains("passed over in the output directory: a directory"),
        "{log}"
    );
    std::fs::remove_dir(path).unwrap();
}

/// Each snapshot is compressed as soon as it is written, while its upload
/// may be under way: whichever file the S3 object ends up holding, its
/// metadata (digest, size, compression) must be that file's. (The exact
/// race, a file replaced between the digest pass and the send, is
/// reproduced deterministically in e2e_s3.)
#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn an_s3_object_holds_the_bytes_its_digest_names_even_when_a_compress_races_the_upload() {
    use object_store::ObjectStoreExt;
    require_root("an_s3_object_holds_the_bytes_its_digest_names");
    const ROUNDS: u64 = 4;
    let Some(s3) = flightrec_tests::S3Server::start("an_s3_object_holds_the_bytes_its_digest")
    else {
        return;
    };
    let nats = NatsServer::start();
    let url = nats.url();
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("s3.env");
    std::fs::write(
        &credentials,
        format!(
            "AWS_ACCESS_KEY_ID={}\nAWS_SECRET_ACCESS_KEY={}\n",
            s3.access_key, s3.secret_key
        ),
    )
    .unwrap();
    let s3_line = format!(
        "s3 = {{ url = \"s3://{}/fleet\", endpoint = \"{}\", region = \"us-east-1\", \
         credentials_file = \"{}\" }}",
        s3.bucket,
        s3.endpoint,
        credentials.display()
    );
    let text = flightrec_tests::test_config(
        dir.path(),
        &fleet_section(&url, "host-a", "role = \"db\"", &s3_line),
    );
    let d = Daemon::start_in(dir, &text, &[]);
    connected(&d);
    let _load = flightrec_tests::Load::start();
    let mut ids = Vec::new();
    for round in 1..=ROUNDS {
        let id = d.json(&["dump"])["id"].as_str().unwrap().to_string();
        // At once: the upload of the plain file is under way.
        let out = d.snapctl(&["compress", &id, "--level", "3"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        uploaded(&d, 2 * round, Duration::from_secs(60));
        ids.push(id);
    }
    let reader = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(&s3.bucket)
        .with_endpoint(&s3.endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(&s3.access_key)
        .with_secret_access_key(&s3.secret_key)
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut compressed_objects = 0;
    for id in &ids {
        let key = format!("fleet/host-a/{id}.perf.data");
        let got = runtime
            .block_on(reader.get(&object_store::path::Path::from(key.as_str())))
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        let meta = |name: &str| -> String {
            got.attributes
                .get(&object_store::Attribute::Metadata(name.to_string().into()))
                .map(|v| flightrecd::fleet::s3::decode_metadata_value(v.as_ref()))
                .unwrap_or_else(|| panic!("{key}: no {name}"))
        };
        let (digest, bytes, compressed) = (
            meta("flightrec-digest"),
            meta("flightrec-bytes"),
            meta("flightrec-compressed"),
        );
        let body = runtime.block_on(got.bytes()).unwrap();
        let stored = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(stored.path(), &body).unwrap();
        let mut f = std::fs::File::open(stored.path()).unwrap();
        assert_eq!(
            flightrecd::fleet::jetstream::digest_of(&mut f).unwrap(),
            digest,
            "{key}: the bytes are not the ones its digest names"
        );
        assert_eq!(bytes, body.len().to_string(), "{key}");
        let is_compressed = flightrecd::store::header_says_compressed(&body[..0x50]);
        assert_eq!(compressed, is_compressed.to_string(), "{key}");
        compressed_objects += usize::from(is_compressed);
    }
    let refused = d.log_text().matches("it changed while being sent").count();
    eprintln!(
        "{ROUNDS} snapshots compressed while uploading: {compressed_objects} went to S3 \
         compressed, all with their own digest; {refused} S3 uploads caught the race and were \
         sent again"
    );
}
