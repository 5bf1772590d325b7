//! The workspace binaries can be found and run from this package's tests.

use flightrec_tests::bin_path;
use std::process::Command;

#[test]
fn both_binaries_are_built_and_report_their_version() {
    for name in ["flightrecd", "snapctl"] {
        let out = Command::new(bin_path(name))
            .arg("--version")
            .output()
            .expect("spawn");
        assert!(out.status.success(), "{name} --version failed: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.trim(),
            format!("{name} {}", env!("CARGO_PKG_VERSION")),
            "{name} --version"
        );
    }
}
