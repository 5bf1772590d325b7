//! Support for flightrec's end-to-end tests.
//!
//! # Finding the binaries
//! Cargo builds a binary (and sets `CARGO_BIN_EXE_<name>`) only for the
//! integration tests of the package that owns it, so this package cannot rely
//! on that for `flightrecd` and `snapctl`. Instead [`bin_path`] runs
//! `cargo build --bins -p flightrecd -p snapctl` once per test process, into
//! the same target directory and profile as the running test, and returns the
//! path. That works from a clean target dir and costs nothing when the
//! binaries are already fresh (cargo releases its lock before running tests).
//!
//! # Privileges
//! Kernel tests need root (perf_event_open on tracepoints, tracefs). Under
//! `CI=true` lacking it is a failure, elsewhere the test says why it skips:
//! see [`require_root`].

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The target directory and profile directory of the running test binary
/// (`<target>/<profile>/deps/<test>` → `<target>/<profile>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a parent dir");
    deps.parent()
        .expect("deps dir has a parent (the profile dir)")
        .to_path_buf()
}

/// Path of a workspace binary (`flightrecd` or `snapctl`), built on first use.
pub fn bin_path(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let profile = profile_dir();
    BUILT
        .get_or_init(|| build_binaries(&profile))
        .as_ref()
        .unwrap_or_else(|e| panic!("building the workspace binaries failed: {e}"));
    let path = profile.join(name);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

fn build_binaries(profile: &Path) -> Result<(), String> {
    let target_dir = profile.parent().ok_or("profile dir has no parent")?;
    let profile_name = match profile.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(other) => other,
        None => return Err("profile dir has no name".into()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let status = Command::new(cargo)
        .args(["build", "--bins", "-p", "flightrecd", "-p", "snapctl"])
        .arg("--profile")
        .arg(profile_name)
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .map_err(|e| format!("running cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build exited with {status}"))
    }
}

/// True when running as root. Under `CI=true` not being root panics (a
/// missing permission is a failure there); elsewhere it prints why the
/// calling test skips and returns false.
pub fn require_root(test: &str) -> bool {
    let is_root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false);
    if !is_root {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test}: needs root (perf events, tracefs) and CI=true forbids skipping");
        }
        eprintln!("{test}: skipped, not root");
    }
    is_root
}
