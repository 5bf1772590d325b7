//! Marks the tests that need root as ignored ("needs root" in the test
//! summary) when they are built by a user that is not root outside CI:
//! emits `cfg(flightrec_unprivileged)`, used as
//! `#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]`.
//! Under `CI=true` the cfg is never set, so a missing permission fails the
//! test (see `flightrec_tests::require_root`). Also the build script of
//! flightrecd, whose kernel tests need the same.
//!
//! `cfg(flightrec_cpu_pmu)` says the machine that builds the tests has a
//! CPU PMU: tests of what happens without one are ignored there ("needs
//! a machine without a CPU PMU"), not passed without checking anything.
//!
//! The script reruns only when it changes or `CI` does: cargo reads a
//! `rerun-if-changed` path that does not exist (the PMU's directory on a
//! machine without one) as changed on every build, which recompiled both
//! crates that use this script on every `cargo` command. A target
//! directory moved to a machine with another PMU or user needs
//! `cargo clean -p flightrecd -p flightrec-tests`.

const CPU_PMU: &str = "/sys/bus/event_source/devices/cpu";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(flightrec_unprivileged)");
    println!("cargo::rustc-check-cfg=cfg(flightrec_cpu_pmu)");
    println!("cargo::rerun-if-env-changed=CI");
    // This script, from either package that uses it (flightrecd's is
    // ../tests/build.rs).
    println!("cargo::rerun-if-changed=../tests/build.rs");
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if !ci && !effective_uid_is_root() {
        println!("cargo::rustc-cfg=flightrec_unprivileged");
    }
    if std::path::Path::new(CPU_PMU).exists() {
        println!("cargo::rustc-cfg=flightrec_cpu_pmu");
    }
}

/// The effective uid (second field of `Uid:` in /proc/self/status) is 0.
fn effective_uid_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}
