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
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    child: Option<Child>,
    /// `--user` and `--pass`, when the server requires them.
    credentials: Option<(String, String)>,
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
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("nats-server.log");
        let mut server = NatsServer {
            port,
            log,
            dir,
            child: None,
            credentials,
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
            "-js",
            "-sd",
        ])
        .arg(self.dir.path().join("store"));
        if let Some((user, pass)) = &self.credentials {
            cmd.args(["--user", user, "--pass", pass]);
        }
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

/// A loopback port nobody listened on a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}
