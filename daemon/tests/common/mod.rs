//! Shared by the daemon's kernel tests.

/// True when running as root (perf events on every CPU, tracefs). Under
/// `CI=true` not being root is a failure; elsewhere the test says why it
/// skips and the caller returns.
pub fn require_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: needs root (perf events, tracefs) and CI=true forbids skipping"
    );
    eprintln!("{test}: skipped, not root");
    false
}
