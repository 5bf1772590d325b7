//! What the fleet tests share: `[fleet]` sections for test daemons,
//! `snapctl fleet` runs, and waiting for a daemon's fleet status.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{Daemon, snapctl_command};

/// `[snapshot]` (plain, 100 ms apart) and `[fleet]` for a test daemon;
/// `nats` is TOML (a quoted URL or a list), `extra` adds keys.
pub fn fleet_toml(nats: &str, host: &str, labels: &str, extra: &str) -> String {
    format!(
        "[snapshot]\ncompression = \"none\"\nmin_interval = \"100ms\"\n\n\
         [fleet]\nnats = {nats}\nhost = \"{host}\"\nlabels = {{ {labels} }}\n{extra}\n"
    )
}

/// `snapctl [--json] fleet --nats URL ARGS...`.
pub fn snapctl_fleet(url: &str, args: &[&str], json: bool) -> Output {
    let mut cmd = snapctl_command();
    if json {
        cmd.arg("--json");
    }
    cmd.args(["fleet", "--nats", url])
        .args(args)
        .output()
        .expect("run snapctl fleet")
}

/// `snapctl --json fleet --nats URL ARGS...`: exit status and JSON.
pub fn snapctl_fleet_json(url: &str, args: &[&str]) -> (Output, Value) {
    let out = snapctl_fleet(url, args, true);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "snapctl fleet {args:?} printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, v)
}

/// Waits until `status` shows the fleet in a state `done` accepts.
pub fn wait_fleet(d: &Daemon, within: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let fleet = d.json(&["status"])["fleet"].clone();
        if done(&fleet) {
            return fleet;
        }
        assert!(
            Instant::now() < deadline,
            "fleet status not reached in {within:?}: {fleet}\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the daemon is connected to NATS.
pub fn connected(d: &Daemon) {
    wait_fleet(d, Duration::from_secs(20), |f| f["state"] == "connected");
}

/// Daemons started on `(host, config text)` each, once all are connected.
pub fn start_connected(configs: Vec<(&str, String)>) -> Vec<(&str, Daemon)> {
    let daemons: Vec<(&str, Daemon)> = configs
        .into_iter()
        .map(|(host, text)| (host, Daemon::start(&text)))
        .collect();
    for (_, d) in &daemons {
        connected(d);
    }
    daemons
}
