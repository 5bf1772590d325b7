//! End to end: `snapctl fleet list` and `snapctl fleet fetch` against a
//! real `nats-server` with JetStream. The objects are put the way the
//! daemons upload them (`<host>/<id>.perf.data`, headers from flightrecd's
//! `ObjectHeaders::to_pairs`), here by the test through async-nats: real
//! snapshots of a real daemon under two hosts, a file that is not a
//! snapshot, and objects whose download comes short. Then: list's JSON
//! and text, `--host`, fetch's byte-identical file that `perf script`
//! reads, refusing to overwrite, the errors for a missing snapshot, a
//! missing bucket and an unreachable server, and nothing left behind by
//! a download that fails.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, object_store};
use flightrec_tests::{
    Daemon, Load, NatsCluster, NatsServer, free_port, perf_script, require_root,
};
use flightrecd::fleet::object::ObjectHeaders;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde_json::{Value, json};

const BUCKET: &str = "flightrec";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn bucket(url: &str) -> (jetstream::Context, object_store::ObjectStore) {
    let client = async_nats::connect(url).await.expect("connect to nats");
    let js = jetstream::new(client);
    let store = match js.get_object_store(BUCKET).await {
        Ok(store) => store,
        Err(_) => js
            .create_object_store(object_store::Config {
                bucket: BUCKET.into(),
                ..Default::default()
            })
            .await
            .expect("create the bucket"),
    };
    (js, store)
}

/// Creates the bucket with `replicas` copies (as `[fleet] replicas` has
/// the daemons do).
fn create_bucket(url: &str, replicas: usize) {
    runtime().block_on(async {
        let client = async_nats::connect(url).await.expect("connect to nats");
        let js = jetstream::new(client);
        // A cluster that elected its meta leader may not know every
        // peer's JetStream yet (on a loaded machine, a second or more):
        // until then it refuses to place the replicas, and says so.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let created = js
                .create_object_store(object_store::Config {
                    bucket: BUCKET.into(),
                    num_replicas: replicas,
                    ..Default::default()
                })
                .await;
            match created {
                Ok(_) => return,
                Err(e)
                    if format!("{e:?}").contains("no suitable peers")
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("create the bucket: {e:?}"),
            }
        }
    });
}

/// Puts `data` as object `name` with `headers` (as a daemon uploads a
/// snapshot) in chunks of `chunk` bytes; returns what the store says.
fn put(
    url: &str,
    name: &str,
    headers: Option<&ObjectHeaders>,
    data: &[u8],
    chunk: usize,
) -> object_store::ObjectInfo {
    runtime().block_on(async {
        let (_, store) = bucket(url).await;
        let headers = headers.map(|h| {
            let mut map = HeaderMap::new();
            for (k, v) in h.to_pairs() {
                map.insert(k, v.as_str());
            }
            map
        });
        let meta = object_store::ObjectMetadata {
            name: name.into(),
            headers,
            chunk_size: Some(chunk),
            ..Default::default()
        };
        store
            .put(meta, &mut &data[..])
            .await
            .unwrap_or_else(|e| panic!("put {name}: {e}"))
    })
}

/// Removes data chunks of the object `nuid` from the bucket's stream,
/// those whose index (from 0) `drop` picks: its download then comes short
/// (a chunk in the middle) or never ends (all of them).
fn drop_chunks(url: &str, nuid: &str, drop: impl Fn(usize) -> bool) {
    runtime().block_on(async {
        let (js, _) = bucket(url).await;
        let mut stream = js
            .get_stream(format!("OBJ_{BUCKET}"))
            .await
            .expect("the bucket's stream");
        let last = stream
            .info()
            .await
            .expect("stream info")
            .state
            .last_sequence;
        let subject = format!("$O.{BUCKET}.C.{nuid}");
        let mut index = 0;
        for seq in 1..=last {
            let Ok(m) = stream.get_raw_message(seq).await else {
                continue; // deleted before
            };
            if m.subject.as_str() == subject {
                if drop(index) {
                    assert!(stream.delete_message(seq).await.expect("delete a chunk"));
                }
                index += 1;
            }
        }
        assert!(index > 1, "{index} chunks");
    });
}

/// Publishes `data` as one more chunk of the object `nuid`.
fn append_chunk(url: &str, nuid: &str, data: &[u8]) {
    runtime().block_on(async {
        let (js, _) = bucket(url).await;
        js.publish(format!("$O.{BUCKET}.C.{nuid}"), data.to_vec().into())
            .await
            .expect("publish a chunk")
            .await
            .expect("the chunk is stored");
    });
}

/// A TCP relay to a nats-server that stops passing the server's bytes
/// back once the client asks for an object's data (a STREAM.MSG.GET with
/// `next_by_subj`): the download then waits, with its partial file
/// created, for answers that never come. The relay's threads end with
/// the test process.
struct FreezingRelay {
    url: String,
}

impl FreezingRelay {
    fn start(server_port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let url = format!("nats://{}", listener.local_addr().expect("addr"));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = TcpStream::connect(("127.0.0.1", server_port)).expect("connect");
                let frozen = Arc::new(AtomicBool::new(false));
                let (mut from_client, mut to_server) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let freeze = frozen.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    // The last bytes seen, for a word split across reads.
                    let mut seen = Vec::new();
                    while let Ok(n) = from_client.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        if seen.windows(12).any(|w| w == b"next_by_subj") {
                            // Before the request reaches the server, so
                            // no answer to it gets through.
                            freeze.store(true, Ordering::SeqCst);
                        }
                        seen.drain(..seen.len().saturating_sub(16));
                        if to_server.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
                let (mut from_server, mut to_client) = (server, client);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = from_server.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if !frozen.load(Ordering::SeqCst) && to_client.write_all(&buf[..n]).is_err()
                        {
                            break;
                        }
                    }
                });
            }
        });
        Self { url }
    }
}

/// `snapctl [--json] fleet --nats URL ARGS...` in `dir`.
fn snapctl_fleet(dir: &Path, url: &str, json: bool, args: &[&str]) -> Output {
    let mut cmd = flightrec_tests::snapctl_command();
    if json {
        cmd.arg("--json");
    }
    cmd.args(["fleet", "--nats", url])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run snapctl fleet")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "snapctl failed: {}", stderr(out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}\n{}", stdout(out), stderr(out)))
}

/// The files in `dir` (names), sorted.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// What a daemon of fleet host `host` uploads for snapshot `s` (as
/// `snapctl --json list` shows it).
fn headers_of(host: &str, s: &Value) -> ObjectHeaders {
    ObjectHeaders {
        host: host.into(),
        id: s["id"].as_str().expect("id").into(),
        label: s["label"].as_str().unwrap_or_default().into(),
        trigger: s["trigger"].as_str().expect("trigger").into(),
        bytes: s["bytes"].as_u64().expect("bytes"),
        compressed: s["compressed"].as_bool().expect("compressed"),
        created_unix_ns: s["created_unix_ns"].as_i64().expect("created_unix_ns"),
        labels: BTreeMap::from([("role".into(), "db".into())]),
        digest: String::new(),
    }
}

/// The `fleet list --json` entry of `h`.
fn listed(h: &ObjectHeaders) -> Value {
    json!({
        "host": h.host,
        "id": h.id,
        "label": h.label,
        "trigger": h.trigger,
        "bytes": h.bytes,
        "compressed": h.compressed,
        "created_unix_ns": h.created_unix_ns,
    })
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn fleet_list_and_fetch_return_real_snapshots_put_under_two_hosts() {
    require_root("fleet_list_and_fetch_return_real_snapshots_put_under_two_hosts");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n");
    let load = Load::start();
    std::thread::sleep(Duration::from_millis(300));
    // One compressed and labelled by the API, then one by SIGUSR2.
    let first = d.json(&["dump", "--label", "incident", "--compress"]);
    d.signal("USR2");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut snaps = d.list();
    while snaps.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "no snapshot after SIGUSR2:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
        snaps = d.list();
    }
    drop(load);
    assert_eq!(snaps[0]["id"], first["id"]);
    assert_eq!(snaps[1]["trigger"], "signal");
    let a = headers_of("host-a", &snaps[0]);
    let b = headers_of("host-b", &snaps[1]);
    assert!(a.compressed && !b.compressed && a.label == "incident" && b.label.is_empty());
    assert!(b.created_unix_ns > a.created_unix_ns);
    let path = |s: &Value| PathBuf::from(s["path"].as_str().expect("path"));
    let a_data = std::fs::read(path(&snaps[0])).expect("read snapshot");
    let b_data = std::fs::read(path(&snaps[1])).expect("read snapshot");

    let nats = NatsServer::start();
    let url = nats.url();
    put(&url, &a.object_name(), Some(&a), &a_data, 128 * 1024);
    put(&url, &b.object_name(), Some(&b), &b_data, 128 * 1024);
    put(&url, "notes.txt", None, b"not a snapshot", 1024);
    let work = tempfile::tempdir().expect("tempdir");

    // JSON: newest first, the values that were put; the note is skipped
    // with one warning naming it.
    let out = snapctl_fleet(work.path(), &url, true, &["list"]);
    assert_eq!(
        json_of(&out),
        json!({"snapshots": [listed(&b), listed(&a)]}),
        "{}",
        stderr(&out)
    );
    let warning = "snapctl: warning: skipped object \"notes.txt\" in bucket \"flightrec\": not a \
                   snapshot (the name is not HOST/ID.perf.data)\n";
    assert_eq!(stderr(&out), warning);

    let out = snapctl_fleet(work.path(), &url, true, &["list", "--host", "host-a"]);
    assert_eq!(json_of(&out), json!({"snapshots": [listed(&a)]}));
    let out = snapctl_fleet(work.path(), &url, true, &["list", "--host", "host-z"]);
    assert_eq!(json_of(&out), json!({"snapshots": []}));

    // Text: a table like `snapctl list`, host first, UTC times.
    let out = snapctl_fleet(work.path(), &url, false, &["list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), warning);
    let text = stdout(&out);
    let lines: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "HOST",
            "ID",
            "SIZE",
            "CREATED",
            "TRIGGER",
            "COMPRESSED",
            "LABEL"
        ]
    );
    for (line, h) in lines[1..3].iter().zip([&b, &a]) {
        // CREATED is `2026-11-20 22:11:33Z`: two words.
        let created = snapctl::render::utc(h.created_unix_ns);
        let (day, time) = created.split_once(' ').expect("date and time");
        let want = [
            h.host.as_str(),
            h.id.as_str(),
            &snapctl::render::human_bytes(h.bytes),
            day,
            time,
            &h.trigger,
            if h.compressed { "zstd" } else { "-" },
            if h.label.is_empty() { "-" } else { &h.label },
        ];
        assert_eq!(*line, want, "{text}");
    }
    assert_eq!(
        lines[3].join(" "),
        format!(
            "2 snapshots, {}",
            snapctl::render::human_bytes(a.bytes + b.bytes)
        )
    );
    assert_eq!(lines.len(), 4, "{text}");

    // Fetch into the current directory by default: byte-identical, and
    // perf reads it (the compressed one too).
    let a_ref = format!("host-a/{}", a.id);
    let out = snapctl_fleet(work.path(), &url, false, &["fetch", &a_ref]);
    assert!(out.status.success(), "{}", stderr(&out));
    let a_file = format!("{}.perf.data", a.id);
    assert_eq!(stdout(&out), format!("{a_file}\n"));
    let fetched = work.path().join(&a_file);
    assert!(std::fs::read(&fetched).expect("fetched file") == a_data);
    assert_eq!(
        perf_script(&fetched, &[]),
        perf_script(&path(&snaps[0]), &[])
    );
    assert_eq!(files_in(work.path()), [a_file.as_str()]);

    // -o names the file; --json describes what was written.
    let b_out = work.path().join("b.perf.data");
    let b_ref = format!("host-b/{}", b.id);
    let out = snapctl_fleet(
        work.path(),
        &url,
        true,
        &["fetch", &b_ref, "-o", b_out.to_str().unwrap()],
    );
    let mut want = listed(&b);
    want["path"] = json!(b_out.display().to_string());
    assert_eq!(json_of(&out), want);
    assert!(std::fs::read(&b_out).expect("fetched file") == b_data);
    let script = perf_script(&b_out, &[]);
    assert!(
        script.contains("sched_switch") || script.contains("cpu-clock"),
        "{script:.500}"
    );

    // An existing file is kept unless --force.
    std::fs::write(&fetched, b"mine").expect("overwrite");
    let out = snapctl_fleet(work.path(), &url, false, &["fetch", &a_ref]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(
        stderr(&out),
        format!("snapctl: {a_file} already exists (--force overwrites it)\n")
    );
    assert_eq!(std::fs::read(&fetched).expect("kept"), b"mine");
    let out = snapctl_fleet(work.path(), &url, false, &["fetch", &a_ref, "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read(&fetched).expect("replaced") == a_data);
    assert_eq!(files_in(work.path()), ["b.perf.data".to_string(), a_file]);
}

#[test]
fn fleet_fetch_leaves_nothing_behind_when_the_download_is_short_corrupt_stalled_or_interrupted() {
    let nats = NatsServer::start();
    let url = nats.url();
    // 1 MiB that is not all zeros, in 64 KiB chunks.
    let data: Vec<u8> = (0..1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let header = |id: &str, bytes: u64| ObjectHeaders {
        host: "host-a".into(),
        id: id.into(),
        label: String::new(),
        trigger: "signal".into(),
        bytes,
        compressed: false,
        created_unix_ns: 1_795_212_693_000_000_000,
        labels: BTreeMap::new(),
        digest: String::new(),
    };
    let whole = header("whole", data.len() as u64);
    put(&url, &whole.object_name(), Some(&whole), &data, 64 * 1024);
    // The headers promise one byte more than was stored.
    let short = header("short", data.len() as u64 + 1);
    put(&url, &short.object_name(), Some(&short), &data, 64 * 1024);
    // A chunk is missing: the download comes short.
    let cut = header("cut", data.len() as u64);
    let info = put(&url, &cut.object_name(), Some(&cut), &data, 64 * 1024);
    drop_chunks(&url, &info.nuid, |i| i == 1);
    // A chunk replaced by other bytes of its size: the digest differs.
    let bad = header("bad", data.len() as u64);
    let info = put(&url, &bad.object_name(), Some(&bad), &data, 64 * 1024);
    drop_chunks(&url, &info.nuid, |i| i == 1);
    append_chunk(&url, &info.nuid, &vec![7u8; 64 * 1024]);
    let work = tempfile::tempdir().expect("tempdir");

    let out = snapctl_fleet(work.path(), &url, false, &["fetch", "host-a/short"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(
        stderr(&out),
        "snapctl: host-a/short.perf.data: downloaded 1048576 bytes, but its headers say 1048577 \
         and the store 1048576; nothing written\n"
    );
    assert_eq!(files_in(work.path()), Vec::<String>::new());

    let out = snapctl_fleet(work.path(), &url, false, &["fetch", "host-a/cut"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(
        stderr(&out),
        "snapctl: host-a/cut.perf.data: downloaded 983040 bytes, but its headers say 1048576 \
         and the store 1048576; nothing written\n"
    );
    assert_eq!(files_in(work.path()), Vec::<String>::new());

    let out = snapctl_fleet(work.path(), &url, false, &["fetch", "host-a/bad"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with("snapctl: host-a/bad.perf.data: the downloaded bytes have digest SHA-256=")
            && err.ends_with(&format!(
                ", not {}; nothing written\n",
                info.digest.unwrap()
            )),
        "{err}"
    );
    assert_eq!(files_in(work.path()), Vec::<String>::new());

    // Stalled: the server's answers stop once the data is asked for (the
    // partial file exists then); an error after --timeout.
    let relay = FreezingRelay::start(nats.port);
    let started = Instant::now();
    let out = snapctl_fleet(
        work.path(),
        &relay.url,
        false,
        &["--timeout", "1s", "fetch", "host-a/whole"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "snapctl: NATS at {}: the download of host-a/whole.perf.data stalled after 0 \
             bytes (nothing for 1.00 s)\n",
            relay.url
        )
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(files_in(work.path()), Vec::<String>::new());

    // Interrupted (Ctrl-C, kill) while its partial file exists: that file
    // is removed, and snapctl ends by the signal.
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        let mut child = flightrec_tests::snapctl_command()
            .args(["--timeout", "60s", "fleet", "--nats", &relay.url])
            .args(["fetch", "host-a/whole"])
            .current_dir(work.path())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn snapctl");
        let deadline = Instant::now() + Duration::from_secs(15);
        // The partial file: `.whole.perf.data.tmp-<random>`.
        while !files_in(work.path())
            .iter()
            .any(|f| f.starts_with(".whole.perf.data.tmp-"))
        {
            assert!(Instant::now() < deadline, "no partial file in 15s");
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        nix::sys::signal::kill(pid, signal).expect("kill");
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "snapctl ignored {signal}");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.signal(), Some(signal as i32), "{status}");
        assert_eq!(files_in(work.path()), Vec::<String>::new(), "{signal}");
    }

    // The same directory takes the whole one (HOST/ID.perf.data works too).
    let out = snapctl_fleet(
        work.path(),
        &url,
        false,
        &["fetch", "host-a/whole.perf.data"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(files_in(work.path()), ["whole.perf.data"]);
    assert!(std::fs::read(work.path().join("whole.perf.data")).expect("fetched") == data);
}

#[test]
fn fleet_list_and_fetch_name_a_missing_bucket_or_snapshot_and_an_unreachable_server() {
    let nats = NatsServer::start();
    let url = nats.url();
    let work = tempfile::tempdir().expect("tempdir");

    // Nothing uploaded yet: no bucket.
    let out = snapctl_fleet(work.path(), &url, false, &["list"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "snapctl: no snapshot was uploaded yet: bucket \"flightrec\" does not exist on {url}\n"
        )
    );
    assert_eq!(stdout(&out), "");
    let out = snapctl_fleet(work.path(), &url, true, &["--bucket", "other", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let err: Value = serde_json::from_slice(&out.stderr).expect("JSON error");
    assert_eq!(
        err,
        json!({
            "error": format!(
                "no snapshot was uploaded yet: bucket \"other\" does not exist on {url}"
            ),
            "code": "NotFound",
            "exit": 1,
        })
    );
    let out = snapctl_fleet(work.path(), &url, false, &["--bucket", "a.b", "list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("\"a.b\" is not a bucket name: 1 to 64 characters"),
        "{}",
        stderr(&out)
    );

    // A bucket without that snapshot.
    put(&url, "host-a/x.perf.data", None, b"x", 1024);
    let out = snapctl_fleet(work.path(), &url, false, &["fetch", "host-c/nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "snapctl: no snapshot host-c/nope in bucket \"flightrec\" on {url} (see snapctl fleet \
             list)\n"
        )
    );
    let out = snapctl_fleet(work.path(), &url, false, &["fetch", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("\"nope\" is not HOST/ID (as `snapctl fleet list` shows them)"),
        "{}",
        stderr(&out)
    );
    // An object under a snapshot's name but without headers is named.
    let out = snapctl_fleet(work.path(), &url, false, &["fetch", "host-a/x"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "snapctl: object host-a/x.perf.data in bucket \"flightrec\" is not a snapshot: it has \
         no headers\n"
    );
    assert_eq!(files_in(work.path()), Vec::<String>::new());

    // Nobody listening: an error at once. A listener that never speaks
    // NATS: an error after --timeout, not a hang.
    let nobody = format!("nats://127.0.0.1:{}", free_port());
    let silent = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
    let silent = format!("nats://{}", silent.local_addr().expect("addr"));
    let cases = [
        (
            &nobody,
            "10s",
            "cannot connect (IO error: Connection refused",
        ),
        (
            &silent,
            "1s",
            "no NATS greeting within 1.00 s (not a NATS server, or unreachable?)",
        ),
    ];
    for (url, timeout, why) in cases {
        for verb in [&["list"][..], &["fetch", "host-a/x"][..]] {
            let started = Instant::now();
            let mut args = vec!["--timeout", timeout, "fleet", "--nats", url];
            args.extend_from_slice(verb);
            let out = flightrec_tests::snapctl_command()
                .args(&args)
                .current_dir(work.path())
                .output()
                .expect("run snapctl");
            let took = started.elapsed();
            assert_eq!(out.status.code(), Some(3), "{args:?}: {}", stderr(&out));
            assert!(
                stderr(&out).starts_with(&format!("snapctl: NATS at {url}: {why}")),
                "{}",
                stderr(&out)
            );
            assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
        }
    }
}

#[test]
fn fleet_list_and_fetch_keep_working_on_a_cluster_that_lost_a_node() {
    let mut cluster = NatsCluster::start(3);
    let urls = cluster.urls();
    create_bucket(&urls[1], 3);
    let data: Vec<u8> = (0..512 * 1024u32).map(|i| (i % 251) as u8).collect();
    let h = ObjectHeaders {
        host: "host-a".into(),
        id: "box-1".into(),
        label: "cluster".into(),
        trigger: "fleet".into(),
        bytes: data.len() as u64,
        compressed: false,
        created_unix_ns: 1_795_212_693_000_000_000,
        labels: BTreeMap::new(),
        digest: String::new(),
    };
    put(&urls[1], &h.object_name(), Some(&h), &data, 64 * 1024);
    cluster.nodes[0].kill();
    let work = tempfile::tempdir().expect("tempdir");
    let out_file = work.path().join("box-1.perf.data");
    let list = || snapctl_fleet(work.path(), &urls[1], true, &["--timeout", "3s", "list"]);
    let fetch = || {
        snapctl_fleet(
            work.path(),
            &urls[1],
            false,
            &["--timeout", "3s", "fetch", "host-a/box-1", "--force"],
        )
    };
    // The stream may need a new leader first, and that leader may answer
    // before it applied what the old one committed (an empty listing):
    // the witness is a listing that holds the snapshot.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = list();
        if out.status.success()
            && json_of(&out)["snapshots"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no listing with the snapshot in 30s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Then every read works: none depends on a consumer that the cluster
    // may place on the dead node.
    for round in 0..8 {
        let out = list();
        assert_eq!(
            json_of(&out),
            json!({"snapshots": [listed(&h)]}),
            "round {round}"
        );
        let out = fetch();
        assert!(out.status.success(), "round {round}: {}", stderr(&out));
        assert!(std::fs::read(&out_file).expect("fetched") == data);
    }
}
