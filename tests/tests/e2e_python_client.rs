//! A client written in another language: stock grpc-python, on the Unix
//! socket with the default channel options, calls every RPC.

use flightrec_tests::{Daemon, PythonClient, require_root};
use serde_json::Value;

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn grpc_python_calls_every_rpc_on_the_unix_socket() {
    require_root("grpc_python_calls_every_rpc");
    let Some(python) = PythonClient::find("grpc_python_calls_every_rpc") else {
        return;
    };
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"10ms\"\n");
    let out = python
        .command(&d.socket, "every-rpc")
        .output()
        .expect("run the Python client");
    assert!(
        out.status.success(),
        "the Python client failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON from the Python client ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });

    assert_eq!(r["status"]["pid"], d.pid(), "{r}");
    assert_eq!(r["status"]["version"], env!("CARGO_PKG_VERSION"), "{r}");
    let id = r["dump"]["id"].as_str().unwrap();
    assert!(id.contains("from-python"), "{r}");
    assert!(r["dump"]["cpus"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(r["watch"], serde_json::json!([id]), "{r}");
    assert_eq!(r["list"], serde_json::json!([id]), "{r}");
    assert_eq!(r["compress"]["compressed"], true, "{r}");
    assert!(
        r["compress"]["bytes"].as_u64().unwrap() < r["compress"]["bytes_before"].as_u64().unwrap(),
        "{r}"
    );
    // max_snapshots = 0 is "no limit", as in the config file.
    assert_eq!(
        r["rotate_zero"],
        serde_json::json!({"removed": 0, "kept": 1})
    );
    assert_eq!(r["rotate_everything"]["code"], "FAILED_PRECONDITION", "{r}");
    assert!(
        r["rotate_everything"]["details"]
            .as_str()
            .unwrap()
            .starts_with("delete_all: this rotate would remove all 1 snapshots"),
        "{r}"
    );
    assert_eq!(
        r["rotate_delete_all"],
        serde_json::json!({"removed": 1, "kept": 0})
    );
    assert_eq!(r["reload"]["changed"], false, "{r}");
    // A request that does not decode is the caller's error, naming the field.
    assert_eq!(r["malformed"]["code"], "INVALID_ARGUMENT", "{r}");
    let details = r["malformed"]["details"].as_str().unwrap();
    assert!(
        details.starts_with("malformed DumpRequest message")
            && details.contains("DumpRequest.label"),
        "{details}"
    );
    assert!(d.list().is_empty());
}
