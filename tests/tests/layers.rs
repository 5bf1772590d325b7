//! The folders of every crate import only from the folders below them
//! (ARCHITECTURE.md). A new top-level module must be given its floor here.

use flightrec_tests::layers::Layers;

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn check(crate_dir: &str, ranks: &[&[&str]]) {
    let layers = Layers {
        src: root().join(crate_dir).join("src"),
        ranks,
    };
    let (backward, unranked) = layers.check().expect("reading the sources");
    let lines: Vec<String> = backward.iter().map(ToString::to_string).collect();
    assert!(
        lines.is_empty(),
        "{crate_dir}: imports against the rule:\n{}",
        lines.join("\n")
    );
    assert!(
        unranked.is_empty(),
        "{crate_dir}: modules without a floor in tests/tests/layers.rs: {unranked:?}"
    );
}

#[test]
fn daemon_folders_only_look_back() {
    check(
        "daemon",
        &[
            &["abi", "log_limit"],
            &["perf"],
            &["ring"],
            &["host"],
            &["tracking"],
            &["recorder"],
            &["snapshot"],
            &["history"],
            &["store"],
            &["triggers"],
            &["control"],
            &["api", "fleet"],
            &["daemon"],
        ],
    );
}

#[test]
fn perfdata_modules_only_look_back() {
    check(
        "perfdata",
        &[
            &["abi", "kallsyms"],
            &["records"],
            &["encode", "format"],
            &["reader"],
        ],
    );
}

#[test]
fn config_modules_only_look_back() {
    check(
        "config",
        &[
            &["message"],
            &["units"],
            &["checks"],
            &["trigger", "fleet"],
            &["schema"],
            &["validate"],
            &["load"],
        ],
    );
}

#[test]
fn client_modules_only_look_back() {
    check(
        "client",
        &[
            &["archive"],
            &["report"],
            &["render"],
            &["fleet"],
            &["cli"],
            &["run"],
        ],
    );
}

#[test]
fn report_modules_only_look_back() {
    check(
        "report",
        &[
            &["tracefmt", "model"],
            &["load", "symbols"],
            &["stacks"],
            &["pprof", "html"],
        ],
    );
}

#[test]
fn files_modules_only_look_back() {
    check("files", &[&["untrusted"], &["elf", "dirs"], &["new_file"]]);
}
