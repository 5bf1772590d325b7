//! The grpc-python client: the API driven from another language.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `tests/prepare-host` installs grpc-python.
pub const GRPC_PYTHON: &str = "/var/tmp/flightrec-grpc-venv/bin/python";

/// A grpc-python client (`tests/python/flightrec_client.py`) with stubs
/// generated from `proto/flightrec.proto` into a directory of its own.
pub struct PythonClient {
    pub python: PathBuf,
    pub script: PathBuf,
    pub stubs: tempfile::TempDir,
}

impl PythonClient {
    /// The client, or None (after saying why) when grpc-python is not
    /// installed; under `CI=true` that is a failure (`tests/prepare-host`
    /// installs it).
    pub fn find(test: &str) -> Option<Self> {
        use std::os::unix::fs::PermissionsExt;
        let python = std::env::var_os("FLIGHTREC_TEST_PYTHON")
            .map_or_else(|| PathBuf::from(GRPC_PYTHON), PathBuf::from);
        let usable = Command::new(&python)
            .args(["-c", "import grpc, grpc_tools"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !usable {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!(
                    "{test}: no grpc-python at {} (run tests/prepare-host)",
                    python.display()
                );
            }
            eprintln!(
                "{test}: skipped, no grpc-python at {} (run tests/prepare-host)",
                python.display()
            );
            return None;
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let stubs = tempfile::tempdir().expect("tempdir");
        // Readable by the unprivileged users some tests run it as.
        std::fs::set_permissions(stubs.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod stubs dir");
        let proto = root.join("../proto");
        let out = Command::new(&python)
            .args(["-m", "grpc_tools.protoc"])
            .arg(format!("-I{}", proto.display()))
            .arg(format!("--python_out={}", stubs.path().display()))
            .arg(format!("--grpc_python_out={}", stubs.path().display()))
            .arg("flightrec.proto")
            .output()
            .expect("run grpc_tools.protoc");
        assert!(
            out.status.success(),
            "generating the Python stubs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Beside the stubs, where unprivileged users can read it too.
        let script = stubs.path().join("flightrec_client.py");
        std::fs::copy(root.join("python/flightrec_client.py"), &script)
            .expect("copy the Python client");
        Some(PythonClient {
            python,
            script,
            stubs,
        })
    }

    /// `python flightrec_client.py STUBS SOCKET MODE`, not started yet.
    pub fn command(&self, socket: &Path, mode: &str) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.arg(&self.script)
            .arg(self.stubs.path())
            .arg(socket)
            .arg(mode);
        cmd
    }
}
