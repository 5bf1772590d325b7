//! The API under load and abuse, against a real daemon on its real socket:
//! idle connections by the thousand, Watch streams by the thousand, a peer
//! whose access was revoked, a daemon that does not answer, a reader that
//! closes the pipe.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flightrec_proto::v1 as pb;
use flightrec_tests::{Daemon, PythonClient, require_root};
use serde_json::Value;

/// Waits for `child` at most `within`; kills it and panics past that.
fn wait_output(mut child: Child, within: Duration, what: &str) -> (Output, Duration) {
    let started = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return (child.wait_with_output().expect("output"), started.elapsed());
        }
        if started.elapsed() > within {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what} still running after {within:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("read the daemon's status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read the daemon's fds")
        .count()
}

fn log_lines(d: &Daemon, needle: &str) -> usize {
    d.log_text().lines().filter(|l| l.contains(needle)).count()
}

/// Waits until the daemon's log holds `needle`.
fn wait_for_log(d: &Daemon, needle: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !d.log_text().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the log within {within:?}:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_thousand_idle_connections_block_neither_the_api_nor_a_signal_dump() {
    require_root("idle_connections");
    // This test holds 1100 sockets.
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < 4096 {
        setrlimit(Resource::RLIMIT_NOFILE, hard.max(4096), hard.max(4096)).unwrap();
    }
    // The daemon gets the usual default, 1024, and may not raise it.
    let d = Daemon::start_wrapped(
        "[snapshot]\ncompression = \"none\"\nmin_interval = \"10ms\"\n",
        &["prlimit", "--nofile=1024:1024", "--"],
    );
    let before = d.list().len();

    let held = Arc::new(Mutex::new(Vec::new()));
    let flood = {
        let held = held.clone();
        let socket = d.socket.clone();
        std::thread::spawn(move || {
            for _ in 0..1100 {
                let mut s = UnixStream::connect(&socket)?;
                // An HTTP/2 client's preface and an empty SETTINGS frame,
                // then silence: idle, not silent, so the daemon's 5 s
                // handshake timeout never frees them, only the cap.
                s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")?;
                held.lock().unwrap().push(s);
            }
            Ok::<(), std::io::Error>(())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !flood.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the daemon stopped accepting after {} connections:\n{}",
            held.lock().unwrap().len(),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    flood.join().unwrap().expect("connect");
    assert_eq!(held.lock().unwrap().len(), 1100);

    // The daemon keeps its descriptors well below its limit: the cap plus
    // the reserve for dumps.
    let fds = open_fds(d.pid());
    assert!(fds <= 1024 - 256, "the daemon has {fds} descriptors open");

    // An API held up by the idle connections would not answer before
    // one of them is closed for its silence, after the 5-minute idle
    // timeout; the cap lets it answer at once (a few seconds on a
    // loaded 2-CPU machine, hence the generous timeout).
    let started = Instant::now();
    let out = d.snapctl(&["--timeout", "60s", "status"]);
    let took = started.elapsed();
    assert!(out.status.success(), "{out:?}\n{}", d.log_text());

    d.signal("USR2");
    let deadline = Instant::now() + Duration::from_secs(15);
    while d.list().len() == before {
        assert!(
            Instant::now() < deadline,
            "no snapshot from SIGUSR2 in 15s:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let snapshot = d.list().last().cloned().unwrap();
    assert_eq!(snapshot["trigger"], "signal", "{snapshot}");
    assert_eq!(log_lines(&d, "dump failed"), 0, "{}", d.log_text());
    // Said once, not at every connection.
    assert_eq!(log_lines(&d, "too many API connections"), 1);
    assert!(log_lines(&d, "accept failed") <= 1, "{}", d.log_text());
    eprintln!("1100 idle connections: daemon fds {fds}, status in {took:?}");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
async fn watch_streams_are_limited_per_connection_and_in_total() {
    require_root("watch_streams_are_limited");
    let d = Daemon::start("");
    let timeout = Duration::from_secs(5);
    // Let the daemon settle before measuring its memory.
    let first = snapctl::connect(&d.socket, timeout).await.unwrap();
    first.clone().status(pb::StatusRequest {}).await.unwrap();
    let rss_before = rss_kib(d.pid());

    /// Asks for `n` Watch streams at once on `client`'s connection; returns
    /// the streams opened within 2 s and the errors.
    async fn watch_many(
        client: &flightrec_proto::FlightRecorderClient<tonic::transport::Channel>,
        n: usize,
    ) -> (Vec<tonic::Streaming<pb::WatchEvent>>, Vec<tonic::Status>) {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..n {
            let mut c = client.clone();
            tasks.spawn(async move {
                tokio::time::timeout(Duration::from_secs(2), c.watch(pb::WatchRequest {})).await
            });
        }
        let (mut open, mut refused) = (Vec::new(), Vec::new());
        while let Some(r) = tasks.join_next().await {
            match r.unwrap() {
                Ok(Ok(s)) => open.push(s.into_inner()),
                Ok(Err(status)) => refused.push(status),
                Err(_) => {} // waits for a free stream on the connection
            }
        }
        (open, refused)
    }

    let (mut streams, refused) = watch_many(&first, 5000).await;
    assert_eq!(streams.len(), 16, "streams open on one connection");
    assert!(refused.is_empty(), "{refused:?}");
    let grown_kib = rss_kib(d.pid()).saturating_sub(rss_before);
    assert!(
        grown_kib < 8 * 1024,
        "5000 Watch requests grew the daemon by {grown_kib} KiB"
    );

    // 3 more connections reach the total of 64; the next one is refused.
    let mut clients = vec![first];
    for _ in 0..3 {
        let c = snapctl::connect(&d.socket, timeout).await.unwrap();
        let (open, refused) = watch_many(&c, 16).await;
        assert_eq!(open.len(), 16);
        assert!(refused.is_empty(), "{refused:?}");
        streams.extend(open);
        clients.push(c);
    }
    let mut last = snapctl::connect(&d.socket, timeout).await.unwrap();
    let err = last.watch(pb::WatchRequest {}).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert_eq!(
        err.message(),
        "watch: 64 Watch streams are open, the most flightrecd serves; close one and try again"
    );
    // Other calls still work, and a closed stream gives its place back.
    last.status(pb::StatusRequest {}).await.unwrap();
    drop(streams.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match last.watch(pb::WatchRequest {}).await {
            Ok(_) => break,
            Err(e) if e.code() == tonic::Code::ResourceExhausted => {
                assert!(Instant::now() < deadline, "the place was not given back");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    eprintln!("Watch: 16 per connection, 64 in all, RSS +{grown_kib} KiB after 5000 requests");
}

/// Runs the Python client as `nobody` with primary group `gid` and the
/// given supplementary groups, in `revoke` mode: it calls Status, waits for
/// a line on stdin, then calls Status again on the same connection.
struct RevokedPeer {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl RevokedPeer {
    fn start(python: &PythonClient, socket: &Path, gid: u32, groups: &str) -> Self {
        let mut cmd = Command::new("setpriv");
        cmd.arg("--reuid=65534").arg(format!("--regid={gid}"));
        if groups.is_empty() {
            cmd.arg("--clear-groups");
        } else {
            cmd.arg(format!("--groups={groups}"));
        }
        let py = python.command(socket, "revoke");
        cmd.arg(py.get_program()).args(py.get_args());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run the Python client as nobody");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        RevokedPeer { child, lines }
    }

    fn answer(&mut self) -> Value {
        let line = self
            .lines
            .next()
            .expect("an answer from the Python client")
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }

    fn call_again(&mut self) -> Value {
        self.child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(b"again\n")
            .unwrap();
        self.answer()
    }
}

impl Drop for RevokedPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The daemon on socket group `group`, its directories open to `nobody`.
fn daemon_for_nobody(group: &str) -> Daemon {
    let mut d = Daemon::start("");
    let text = std::fs::read_to_string(&d.config).unwrap().replace(
        "socket_group = \"root\"",
        &format!("socket_group = \"{group}\""),
    );
    std::fs::write(&d.config, text).unwrap();
    d.stop();
    // The socket directory is created with the socket group.
    std::fs::remove_dir_all(d.dir.path().join("run")).unwrap();
    d.spawn();
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    d
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_peer_whose_group_a_reload_removed_is_refused_on_its_open_connection() {
    require_root("revoked_by_reload");
    let Some(python) = PythonClient::find("revoked_by_reload") else {
        return;
    };
    let d = daemon_for_nobody("nogroup");
    let mut peer = RevokedPeer::start(&python, &d.socket, 65534, "");
    let first = peer.answer();
    assert_eq!(first["code"], "OK", "{first}\n{}", d.log_text());

    let text = std::fs::read_to_string(&d.config)
        .unwrap()
        .replace("socket_group = \"nogroup\"", "socket_group = \"root\"");
    std::fs::write(&d.config, text).unwrap();
    let reloaded = d.json(&["reload"]);
    assert!(
        reloaded["summary"]
            .as_str()
            .unwrap()
            .contains("socket_group"),
        "{reloaded}"
    );

    let second = peer.call_again();
    assert_eq!(second["code"], "PERMISSION_DENIED", "{second}");
    assert!(
        second["details"]
            .as_str()
            .unwrap()
            .starts_with("peer uid 65534 gid 65534"),
        "{second}"
    );
    assert_eq!(log_lines(&d, "request refused: peer uid 65534"), 1);
}

/// A group made for one test, deleted when dropped.
struct TestGroup(String);

impl TestGroup {
    fn create(name: &str) -> (Self, u32) {
        let _ = Command::new("groupdel").arg(name).status();
        let ok = Command::new("groupadd").arg(name).status().unwrap();
        assert!(ok.success(), "groupadd {name}");
        let gid = nix::unistd::Group::from_name(name)
            .unwrap()
            .expect("the new group")
            .gid
            .as_raw();
        (TestGroup(name.into()), gid)
    }
}

impl Drop for TestGroup {
    fn drop(&mut self) {
        let _ = Command::new("groupdel").arg(&self.0).status();
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_user_removed_from_the_socket_group_is_refused_on_its_open_connection() {
    require_root("removed_from_the_group");
    let Some(python) = PythonClient::find("removed_from_the_group") else {
        return;
    };
    let name = format!("frtest{}", std::process::id());
    let (_group, gid) = TestGroup::create(&name);
    let added = Command::new("gpasswd")
        .args(["-a", "nobody", &name])
        .output()
        .unwrap();
    assert!(added.status.success(), "{added:?}");
    let d = daemon_for_nobody(&name);
    // As after a login: the group among the process's supplementary ones.
    let mut peer = RevokedPeer::start(&python, &d.socket, 65534, &gid.to_string());
    let first = peer.answer();
    assert_eq!(first["code"], "OK", "{first}\n{}", d.log_text());

    let removed = Command::new("gpasswd")
        .args(["-d", "nobody", &name])
        .output()
        .unwrap();
    assert!(removed.status.success(), "{removed:?}");
    let second = peer.call_again();
    assert_eq!(second["code"], "PERMISSION_DENIED", "{second}");
    assert!(
        second["details"]
            .as_str()
            .unwrap()
            .contains(&format!("is neither root nor in group {gid}")),
        "{second}"
    );
}

#[test]
fn snapctl_gives_up_on_a_socket_nobody_answers() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("mute.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    // Accepts, never reads nor answers.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming() {
            held.push(s);
        }
    });
    for (args, env) in [
        (vec!["--timeout", "1s", "status"], None),
        (vec!["--timeout", "1s", "--json", "dump"], None),
        (vec!["list"], Some("1s")),
        (vec!["watch"], Some("1s")),
    ] {
        let mut cmd = flightrec_tests::snapctl_command();
        cmd.arg("--socket").arg(&socket).args(&args);
        if let Some(t) = env {
            cmd.env("FLIGHTREC_TIMEOUT", t);
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (out, took) = wait_output(child, Duration::from_secs(15), &format!("snapctl {args:?}"));
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "the daemon on {} did not answer within 1.00 s",
                socket.display()
            )),
            "{args:?}: {stderr}"
        );
        if args.contains(&"--json") {
            let err: Value = serde_json::from_str(stderr.trim()).unwrap();
            assert_eq!(err["code"], "Timeout");
            assert_eq!(err["exit"], 3);
        }
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "{args:?} took {took:?}"
        );
    }
}

/// SIGCONT when dropped, so a failing test leaves no stopped daemon.
struct Stopped<'a>(&'a Daemon);

impl<'a> Stopped<'a> {
    fn stop(d: &'a Daemon) -> Self {
        d.signal("STOP");
        Stopped(d)
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.0.signal("CONT");
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn snapctl_gives_up_on_a_stopped_daemon_even_in_the_middle_of_a_dump() {
    require_root("stopped_daemon");
    // The dump waits 5 s after its trigger: long enough to stop the daemon
    // while snapctl waits for the answer.
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\npost_trigger_delay = \"5s\"\n");
    let dump = d
        .snapctl_cmd(&["--timeout", "1s", "dump"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_log(&d, "dump requested over the API", Duration::from_secs(10));
    let stopped = Stopped::stop(&d);
    let (out, took) = wait_output(dump, Duration::from_secs(15), "snapctl dump");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did not answer within 1.00 s"),
        "{out:?}"
    );
    assert!(took < Duration::from_secs(5), "gave up after {took:?}");

    let status = d
        .snapctl_cmd(&["--timeout", "1s", "status"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, took) = wait_output(status, Duration::from_secs(15), "snapctl status");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(took < Duration::from_secs(3), "gave up after {took:?}");

    drop(stopped);
    assert!(d.snapctl(&["status"]).status.success());
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_reader_closing_the_pipe_is_not_an_error() {
    require_root("closed_pipe");
    let d = Daemon::start("");
    for args in [["status"], ["list"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        // `snapctl status | head -0`: nobody reads.
        drop(reader);
        let out = d.snapctl_cmd(&args).stdout(writer).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_connection_that_sends_nothing_is_closed_after_the_handshake_timeout() {
    use std::io::Read;
    require_root("silent_connection");
    let d = Daemon::start("");
    let mut silent = UnixStream::connect(&d.socket).unwrap();
    let opened = Instant::now();
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 4096];
    // The server's SETTINGS may come first; then the end of the stream.
    let closed = loop {
        match silent.read(&mut buf) {
            Ok(0) => break opened.elapsed(),
            Ok(_) => {}
            Err(e) => panic!("the daemon did not close a silent connection in 30s: {e}"),
        }
    };
    // HANDSHAKE_TIMEOUT is 5 s; the reaper looks every second.
    assert!(
        closed >= Duration::from_secs(5) && closed < Duration::from_secs(8),
        "closed after {closed:?}"
    );
    assert!(d.snapctl(&["status"]).status.success());
}
