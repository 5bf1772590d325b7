//! A real S3-compatible server, `s3s-fs` (crates.io, installed by
//! tests/prepare-host), on a free loopback port, serving a temp directory
//! with one bucket, for the tests of S3 uploads. Killed when dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::free_port;

/// What tests/prepare-host installs.
pub const S3S_FS_VERSION: &str = "0.14.1";

pub struct S3Server {
    pub port: u16,
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
    /// Created empty at start.
    pub bucket: String,
    /// The served directory: one subdirectory per bucket.
    pub root: PathBuf,
    pub log: PathBuf,
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl S3Server {
    /// The bucket every server starts with.
    pub const BUCKET: &str = "flightrec-test";

    /// Starts one, or returns None (after saying why) when s3s-fs is not
    /// installed; under `CI=true` that is a failure (tests/prepare-host
    /// installs it). `$FLIGHTREC_TEST_S3S_FS` overrides the binary.
    pub fn start(test: &str) -> Option<Self> {
        let binary = std::env::var_os("FLIGHTREC_TEST_S3S_FS")
            .map_or_else(|| PathBuf::from("s3s-fs"), PathBuf::from);
        let version = Command::new(&binary).arg("--version").output();
        if !version.as_ref().is_ok_and(|o| o.status.success()) {
            let why = format!(
                "{test}: no s3s-fs ({}: {}); tests/prepare-host installs s3s-fs {S3S_FS_VERSION}",
                binary.display(),
                match &version {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Err(e) => e.to_string(),
                }
            );
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{why}");
            }
            eprintln!("{why}: skipped");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("data");
        std::fs::create_dir_all(root.join(Self::BUCKET)).expect("create the bucket directory");
        let port = free_port();
        let mut server = S3Server {
            port,
            endpoint: format!("http://127.0.0.1:{port}"),
            access_key: "flightrec-test-key".into(),
            secret_key: "flightrec-test-secret-0123456789".into(),
            bucket: Self::BUCKET.into(),
            log: dir.path().join("s3s-fs.log"),
            root,
            dir,
            child: None,
        };
        server.spawn(&binary);
        Some(server)
    }

    fn spawn(&mut self, binary: &std::path::Path) {
        let log = std::fs::File::create(&self.log).expect("create the s3s-fs log");
        let child = Command::new(binary)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", &self.access_key])
            .args(["--secret-key", &self.secret_key])
            .arg(&self.root)
            .env("RUST_LOG", "info")
            .stdout(log.try_clone().expect("dup the s3s-fs log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        self.child = Some(child);
        // Ready when it answers HTTP (an anonymous request: 403 is fine).
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = stream.write_all(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
                let mut line = String::new();
                if BufReader::new(stream).read_line(&mut line).is_ok() && line.starts_with("HTTP/")
                {
                    return;
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("s3s-fs exited with {status}:\n{}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not answer HTTP in 15s:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}
