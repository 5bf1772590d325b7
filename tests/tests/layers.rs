//! The folders of every crate import only from the folders below them
//! (ARCHITECTURE.md). A new top-level module must be given its floor here.

use flightrec_tests::layers::Layers;

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn check(crate_dir: &str, allowed: &[(&str, &[&str])]) {
    let layers = Layers {
        src: root().join(crate_dir).join("src"),
        allowed,
    };
    let found = layers.check().expect("reading the sources");
    assert_eq!(found.circle, None, "{crate_dir}: the table has a circle");
    let lines: Vec<String> = found.forbidden.iter().map(ToString::to_string).collect();
    assert!(
        lines.is_empty(),
        "{crate_dir}: imports against the table:\n{}",
        lines.join("\n")
    );
    assert!(
        found.unlisted.is_empty(),
        "{crate_dir}: modules missing from the table in tests/tests/layers.rs: {:?}",
        found.unlisted
    );
}

/// flightrecd: each folder and what it may use, in the data's order
/// (ARCHITECTURE.md). `abi` (the perf ABI, re-exported from
/// flightrec-perfdata) is not a folder: everyone may use it.
#[test]
fn daemon_folders_use_only_what_the_table_allows() {
    check(
        "daemon",
        &[
            ("time", &[]),
            ("log_limit", &[]),
            ("perf", &[]),
            ("ring", &["time"]),
            ("host", &["perf", "time"]),
            ("tracking", &["perf", "ring", "host", "time", "log_limit"]),
            ("triggers", &["perf", "ring", "host"]),
            (
                "recorder",
                &["perf", "ring", "host", "tracking", "time", "log_limit"],
            ),
            (
                "snapshot",
                &["perf", "ring", "host", "tracking", "recorder", "time"],
            ),
            (
                "history",
                &[
                    "perf", "ring", "host", "tracking", "recorder", "snapshot", "time",
                ],
            ),
            ("store", &["snapshot", "time"]),
            ("events", &["store", "time"]),
            ("runtimes", &["log_limit"]),
            (
                "dump",
                &[
                    "perf",
                    "ring",
                    "host",
                    "recorder",
                    "snapshot",
                    "history",
                    "store",
                    "events",
                    "runtimes",
                    "time",
                    "log_limit",
                ],
            ),
            (
                "control",
                &[
                    "perf", "host", "recorder", "snapshot", "history", "store", "events", "dump",
                    "runtimes", "triggers", "time",
                ],
            ),
            (
                "api",
                &[
                    "control",
                    "dump",
                    "events",
                    "store",
                    "recorder",
                    "time",
                    "log_limit",
                ],
            ),
            (
                "fleet",
                &[
                    "control",
                    "dump",
                    "events",
                    "store",
                    "snapshot",
                    "time",
                    "log_limit",
                ],
            ),
            (
                "daemon",
                &[
                    "api",
                    "fleet",
                    "control",
                    "dump",
                    "events",
                    "store",
                    "triggers",
                    "perf",
                    "recorder",
                    "host",
                    "time",
                    "log_limit",
                ],
            ),
        ],
    );
}

#[test]
fn perfdata_modules_use_only_what_the_table_allows() {
    check(
        "perfdata",
        &[
            ("abi", &[]),
            ("kallsyms", &[]),
            ("records", &["abi"]),
            ("encode", &["abi", "records"]),
            ("format", &["abi", "records"]),
            (
                "reader",
                &["abi", "records", "format", "encode", "kallsyms"],
            ),
        ],
    );
}

#[test]
fn config_modules_use_only_what_the_table_allows() {
    check(
        "config",
        &[
            ("message", &[]),
            ("units", &["message"]),
            ("checks", &["message", "units"]),
            ("trigger", &["message", "units", "checks"]),
            ("fleet", &["message", "units", "checks"]),
            (
                "schema",
                &["message", "units", "checks", "trigger", "fleet"],
            ),
            (
                "validate",
                &["message", "units", "checks", "trigger", "fleet", "schema"],
            ),
            (
                "load",
                &[
                    "message", "units", "checks", "trigger", "fleet", "schema", "validate",
                ],
            ),
        ],
    );
}

#[test]
fn client_modules_use_only_what_the_table_allows() {
    check(
        "client",
        &[
            ("archive", &[]),
            ("report", &["archive"]),
            ("render", &["archive", "report"]),
            ("fleet", &["archive", "report", "render"]),
            ("cli", &["archive", "report", "render", "fleet"]),
            ("run", &["archive", "report", "render", "fleet", "cli"]),
        ],
    );
}

#[test]
fn report_modules_use_only_what_the_table_allows() {
    check(
        "report",
        &[
            ("tracefmt", &[]),
            ("model", &[]),
            ("cgroups", &["model"]),
            ("symbols", &["tracefmt", "model"]),
            ("unwind", &["model", "symbols"]),
            (
                "load",
                &["tracefmt", "model", "cgroups", "symbols", "unwind"],
            ),
            (
                "stacks",
                &["tracefmt", "model", "cgroups", "load", "symbols"],
            ),
            (
                "pprof",
                &["tracefmt", "model", "cgroups", "load", "symbols", "stacks"],
            ),
            (
                "html",
                &["tracefmt", "model", "cgroups", "load", "symbols", "stacks"],
            ),
        ],
    );
}

#[test]
fn files_modules_use_only_what_the_table_allows() {
    check(
        "files",
        &[
            ("untrusted", &[]),
            ("elf", &["untrusted"]),
            ("elf_layout", &["untrusted"]),
            ("dirs", &["untrusted"]),
            ("new_file", &["untrusted", "elf", "dirs"]),
        ],
    );
}
