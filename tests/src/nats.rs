//! A real `nats-server` (Debian's package, installed by tests/prepare-host)
//! on a free loopback port with JetStream in a temp store, for the fleet
//! tests. Killed when dropped.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct NatsServer {
    pub port: u16,
    /// HTTP monitoring (`/jsz`, `/varz`).
    pub monitor_port: u16,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    child: Option<Child>,
    /// `--user` and `--pass`, when the server requires them.
    credentials: Option<(String, String)>,
    /// More arguments (a cluster's name, routes...).
    extra: Vec<String>,
}

impl NatsServer {
    /// Starts one without authentication.
    pub fn start() -> Self {
        Self::start_on(free_port(), None)
    }

    /// Starts one that requires `user` and `password`.
    pub fn start_with_user(user: &str, password: &str) -> Self {
        Self::start_on(free_port(), Some((user.into(), password.into())))
    }

    /// Starts one on `port` (e.g. where daemons already try to connect).
    pub fn start_on(port: u16, credentials: Option<(String, String)>) -> Self {
        Self::start_with(port, credentials, Vec::new())
    }

    fn start_with(port: u16, credentials: Option<(String, String)>, extra: Vec<String>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("nats-server.log");
        let mut server = NatsServer {
            port,
            monitor_port: free_port(),
            log,
            dir,
            child: None,
            credentials,
            extra,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(&self.log).expect("create nats-server log");
        let mut cmd = Command::new("nats-server");
        cmd.args([
            "-a",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-m",
            &self.monitor_port.to_string(),
            "-js",
            "-sd",
        ])
        .arg(self.dir.path().join("store"));
        if let Some((user, pass)) = &self.credentials {
            cmd.args(["--user", user, "--pass", pass]);
        }
        cmd.args(&self.extra);
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run nats-server ({e}): tests/prepare-host installs it")
            });
        self.child = Some(child);
        // Ready when it greets a client with its INFO line.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut line = String::new();
                if BufReader::new(stream).read_line(&mut line).is_ok() && line.starts_with("INFO") {
                    return;
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("nats-server exited with {status}:\n{}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not accept clients in 15s:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Starts it again after [`kill`](Self::kill), on the same port and
    /// JetStream store.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "nats-server is still running");
        self.spawn();
    }

    /// SIGSTOP: the server holds its connections but answers nothing.
    pub fn pause(&self) {
        self.send(nix::sys::signal::Signal::SIGSTOP);
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.send(nix::sys::signal::Signal::SIGCONT);
    }

    fn send(&self, signal: nix::sys::signal::Signal) {
        let child = self.child.as_ref().expect("nats-server is running");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        nix::sys::signal::kill(pid, signal).expect("signal nats-server");
    }

    /// The state of JetStream stream `stream` from the monitoring port:
    /// `{"messages", "bytes", "first_seq", "last_seq", ...}`; None when the
    /// stream does not exist.
    pub fn stream_state(&self, stream: &str) -> Option<serde_json::Value> {
        let body = http_get(
            self.monitor_port,
            "/jsz?accounts=true&streams=true&config=false",
        );
        let jsz: serde_json::Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("/jsz is not JSON ({e}): {body:.300}"));
        jsz["account_details"]
            .as_array()?
            .iter()
            .filter_map(|a| a["stream_detail"].as_array())
            .flatten()
            .find(|s| s["name"] == stream)
            .map(|s| s["state"].clone())
    }

    /// SIGKILL and wait.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port nobody listened on a moment ago, below the kernel's
/// ephemeral range: a port from that range (what binding port 0 gives) can
/// go to any outgoing connection before the server binds it, such as a
/// cluster node dialing a route to a node not up yet ("address already in
/// use"). Successive calls in one process never repeat a port.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOWEST: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    if ephemeral_low > LOWEST + 1000 {
        let span = ephemeral_low - LOWEST;
        // Test binaries run one after the other; the pid spreads them.
        let base = std::process::id().wrapping_mul(7919) % span;
        for _ in 0..span {
            let port = LOWEST + (base + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
            let port = u16::try_from(port).expect("below the ephemeral range");
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}

/// Three (or `n`) nats-servers with JetStream routed into one cluster on
/// loopback ports.
pub struct NatsCluster {
    pub nodes: Vec<NatsServer>,
}

impl NatsCluster {
    pub fn start(n: usize) -> Self {
        let cluster_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let routes = cluster_ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let nodes: Vec<NatsServer> = cluster_ports
            .iter()
            .enumerate()
            .map(|(i, cport)| {
                let args = vec![
                    "--server_name".to_string(),
                    format!("n{}", i + 1),
                    "--cluster_name".into(),
                    "flightrec-test".into(),
                    "--cluster".into(),
                    format!("nats://127.0.0.1:{cport}"),
                    "--routes".into(),
                    routes.clone(),
                ];
                NatsServer::start_with(free_port(), None, args)
            })
            .collect();
        let cluster = NatsCluster { nodes };
        cluster.wait_for_meta_leader();
        cluster
    }

    /// Every node's client URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(NatsServer::url).collect()
    }

    /// JetStream in a cluster takes requests once its nodes elected a
    /// meta leader.
    fn wait_for_meta_leader(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let leader = self.nodes.iter().find_map(|n| {
                let body = http_get(n.monitor_port, "/jsz");
                let jsz: serde_json::Value = serde_json::from_str(&body).ok()?;
                let leader = jsz["meta_cluster"]["leader"].as_str()?.to_string();
                (!leader.is_empty()).then_some(leader)
            });
            if leader.is_some() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the JetStream cluster elected no leader in 30s:\n{}",
                self.nodes
                    .iter()
                    .map(NatsServer::log_text)
                    .collect::<Vec<_>>()
                    .join("\n---\n")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The body of `GET path` on a loopback HTTP port.
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the monitor port");
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("send a request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
            body.to_string()
        }
        _ => panic!("GET {path}: {response:.300}"),
    }
}
