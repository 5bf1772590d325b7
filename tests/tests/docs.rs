//! The manual pages and shell completions the Debian package ships
//! (`packaging/man/`, `packaging/completions/`) are generated, never written
//! by hand: flightrecd(8) and snapctl(1) with a page per verb from the clap
//! definitions (clap_mangen), the completions from the same (clap_complete),
//! flightrec.toml(5) from config/flightrec.toml, the documented default
//! config. Each opens with a comment naming this file as its generator.
//! These tests regenerate them and fail when a checked-in copy differs;
//! `FLIGHTREC_UPDATE_DOCS=1 cargo test -p flightrec-tests --test docs`
//! rewrites them. A last test asks the config schema for every key it
//! accepts and finds each in flightrec.toml(5).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff::{Roff, bold, italic, roman};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Renders one page: clap_mangen's sections, then `extra` (SEE ALSO...).
fn page(man: clap_mangen::Man, cmd: &clap::Command, extra: &Roff) -> String {
    let mut out = Vec::new();
    man.render_title(&mut out).expect("render");
    man.render_name_section(&mut out).expect("render");
    man.render_synopsis_section(&mut out).expect("render");
    man.render_description_section(&mut out).expect("render");
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out).expect("render");
    }
    out.extend(extra.to_roff().into_bytes());
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out).expect("render");
    }
    String::from_utf8(out).expect("roff is UTF-8")
}

fn see_also(roff: &mut Roff, pages: &[(&str, &str)]) {
    roff.control("SH", ["SEE ALSO"]);
    let mut inlines = Vec::new();
    for (i, (name, section)) in pages.iter().enumerate() {
        if i > 0 {
            inlines.push(roman(", "));
        }
        inlines.push(bold(*name));
        inlines.push(roman(format!("({section})")));
    }
    roff.text(inlines);
}

/// Preformatted lines.
fn verbatim(roff: &mut Roff, lines: &[&str]) {
    roff.control("nf", [] as [&str; 0]);
    for line in lines {
        roff.text([roman(*line)]);
    }
    roff.control("fi", [] as [&str; 0]);
}

fn flightrecd_page() -> String {
    let cmd = flightrecd::daemon::cli::Args::command();
    let man = clap_mangen::Man::new(cmd.clone()).section("8");
    let mut extra = Roff::new();
    extra.control("SH", ["FILES"]);
    for (path, what) in [
        (
            "/etc/flightrec/flightrec.toml",
            "The configuration, see flightrec.toml(5).",
        ),
        (
            "/run/flightrec/flightrecd.sock",
            "The gRPC API socket snapctl(1) talks to (0660, group flightrec).",
        ),
        (
            "/var/lib/flightrec/snapshots",
            "The snapshots (0640, group flightrec), read by perf script -i and perf report -i.",
        ),
        (
            "/usr/lib/systemd/system/flightrecd.service",
            "The systemd unit: Type=notify, WatchdogSec=30s, the capabilities and \
             sandboxing it runs with, each explained in its comments.",
        ),
    ] {
        extra.control("TP", [] as [&str; 0]);
        extra.text([italic(path)]);
        extra.text([roman(what)]);
    }
    see_also(
        &mut extra,
        &[
            ("snapctl", "1"),
            ("flightrec.toml", "5"),
            ("perf-script", "1"),
            ("perf-report", "1"),
            ("systemd.service", "5"),
        ],
    );
    page(man, &cmd, &extra)
}

/// snapctl(1), then one page per verb (snapctl-dump(1), snapctl-fleet-
/// fetch(1), ...), by file name.
fn snapctl_pages() -> BTreeMap<String, String> {
    let mut cmd = snapctl::cli::Args::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = BTreeMap::new();
    add_snapctl_pages(&cmd, true, &mut pages);
    pages
}

fn add_snapctl_pages(cmd: &clap::Command, top: bool, pages: &mut BTreeMap<String, String>) {
    let mut extra = Roff::new();
    if cmd.get_subcommands().next().is_some() {
        extra.control("SH", ["COMMANDS"]);
        for sub in cmd.get_subcommands() {
            let name = sub.get_display_name().unwrap_or(sub.get_name());
            extra.control("TP", [] as [&str; 0]);
            extra.text([bold(name), roman("(1)")]);
            if let Some(about) = sub.get_about() {
                extra.text([roman(about.to_string())]);
            }
        }
    }
    if top {
        extra.control("SH", ["EXIT STATUS"]);
        let lines: Vec<&str> = snapctl::cli::EXIT_CODES.lines().skip(1).collect();
        verbatim(&mut extra, &lines);
        extra.control("SH", ["ENVIRONMENT"]);
        for (var, what) in [
            (
                "FLIGHTREC_SOCKET",
                "The daemon's socket, when --socket is not given.",
            ),
            (
                "FLIGHTREC_TIMEOUT",
                "The timeout, when --timeout is not given.",
            ),
            (
                "FLIGHTREC_CONFIG",
                "The daemon's config file, when --config is not given.",
            ),
        ] {
            extra.control("TP", [] as [&str; 0]);
            extra.text([bold(var)]);
            extra.text([roman(what)]);
        }
    }
    let mut also: Vec<(&str, &str)> = Vec::new();
    if !top {
        also.push(("snapctl", "1"));
    }
    also.extend([
        ("flightrecd", "8"),
        ("flightrec.toml", "5"),
        ("perf-script", "1"),
    ]);
    see_also(&mut extra, &also);
    let man =
        clap_mangen::Man::new(cmd.clone()).source(format!("snapctl {}", env!("CARGO_PKG_VERSION")));
    pages.insert(man.get_filename(), page(man, cmd, &extra));
    for sub in cmd.get_subcommands() {
        add_snapctl_pages(sub, false, pages);
    }
}

/// The completion scripts: file name, script.
fn completions() -> Vec<(&'static str, String)> {
    [
        (Shell::Bash, "snapctl.bash"),
        (Shell::Zsh, "_snapctl"),
        (Shell::Fish, "snapctl.fish"),
    ]
    .into_iter()
    .map(|(shell, file)| {
        let mut cmd = snapctl::cli::Args::command();
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cmd, "snapctl", &mut out);
        (file, String::from_utf8(out).expect("UTF-8 completions"))
    })
    .collect()
}

// ---- flightrec.toml(5), from config/flightrec.toml -----------------------

/// One line of the documented config.
#[derive(Debug, Clone, PartialEq)]
enum Line {
    Blank,
    /// The text after `# ` (or `#`).
    Comment(String),
    /// `[name]` or `[[name]]`, as written.
    Table(String),
    /// `key = value`, or `#key = value` (commented out).
    Key {
        key: String,
        value: String,
    },
}

fn classify(line: &str) -> Line {
    let t = line.trim_end();
    if t.is_empty() {
        return Line::Blank;
    }
    if t.starts_with('[') {
        return Line::Table(t.to_string());
    }
    // `#key = value`: a key shown commented out.
    let key_line = |s: &str| {
        let (k, v) = s.split_once(" = ")?;
        (!k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')).then(|| {
            Line::Key {
                key: k.to_string(),
                value: v.to_string(),
            }
        })
    };
    if let Some(rest) = t.strip_prefix('#') {
        if !rest.starts_with(' ')
            && let Some(k) = key_line(rest)
        {
            return k;
        }
        return Line::Comment(rest.strip_prefix(' ').unwrap_or(rest).to_string());
    }
    key_line(t).unwrap_or_else(|| panic!("config/flightrec.toml: cannot read {t:?}"))
}

/// A run of comment lines rendered as man text: prose is filled; lines
/// indented as `  term   description` become a tagged list; other
/// indented lines and lines of TOML stay as written.
fn render_comment(roff: &mut Roff, lines: &[String]) {
    enum Run {
        Prose(Vec<String>),
        Items(Vec<(String, Vec<String>)>),
        Verbatim(Vec<String>),
    }
    fn indent(l: &str) -> usize {
        l.len() - l.trim_start().len()
    }
    // `  term   description`: the term ends at the first run of 2+ spaces.
    fn item(l: &str) -> Option<(String, String)> {
        let ind = indent(l);
        if !(1..=4).contains(&ind) {
            return None;
        }
        let body = &l[ind..];
        let gap = body.find("  ")?;
        let desc = body[gap..].trim_start();
        (!desc.is_empty()).then(|| (body[..gap].to_string(), desc.to_string()))
    }
    fn tomlish(l: &str) -> bool {
        l.starts_with('[') || l.split_once(" = ").is_some_and(|(k, _)| !k.contains(' '))
    }
    let mut runs: Vec<Run> = Vec::new();
    for l in lines {
        if l.trim().is_empty() {
            runs.push(Run::Prose(Vec::new()));
            continue;
        }
        if let Some((term, desc)) = item(l) {
            match runs.last_mut() {
                Some(Run::Items(items)) => items.push((term, vec![desc])),
                _ => runs.push(Run::Items(vec![(term, vec![desc])])),
            }
        } else if indent(l) > 4 && matches!(runs.last(), Some(Run::Items(_))) {
            if let Some(Run::Items(items)) = runs.last_mut()
                && let Some((_, desc)) = items.last_mut()
            {
                desc.push(l.trim().to_string());
            }
        } else if indent(l) > 0 || tomlish(l) {
            match runs.last_mut() {
                Some(Run::Verbatim(v)) => v.push(l.clone()),
                _ => runs.push(Run::Verbatim(vec![l.clone()])),
            }
        } else {
            match runs.last_mut() {
                Some(Run::Prose(p)) => p.push(l.clone()),
                _ => runs.push(Run::Prose(vec![l.clone()])),
            }
        }
    }
    for run in runs {
        match run {
            Run::Prose(p) if p.is_empty() => {}
            Run::Prose(p) => {
                roff.control("PP", [] as [&str; 0]);
                roff.text([roman(p.join(" "))]);
            }
            Run::Items(items) => {
                for (term, desc) in items {
                    roff.control("TP", [] as [&str; 0]);
                    roff.text([bold(term)]);
                    roff.text([roman(desc.join(" "))]);
                }
            }
            Run::Verbatim(v) => {
                roff.control("PP", [] as [&str; 0]);
                let v: Vec<&str> = v.iter().map(String::as_str).collect();
                verbatim(roff, &v);
            }
        }
    }
}

/// flightrec.toml(5): the header comment is the description; each table
/// (and each table the file documents in comments, `# [fleet]: ...`) is a
/// section whose keys are listed with their defaults and the comment above
/// them.
fn config_page(text: &str) -> String {
    let lines: Vec<Line> = text.lines().map(classify).collect();
    let mut roff = Roff::new();
    roff.control(
        "TH",
        [
            "FLIGHTREC.TOML",
            "5",
            "",
            &format!("flightrec {}", env!("CARGO_PKG_VERSION")),
        ],
    );
    roff.control("SH", ["NAME"]);
    roff.text([roman(
        "flightrec.toml - configuration of flightrecd, the flight recorder daemon",
    )]);
    roff.control("SH", ["SYNOPSIS"]);
    roff.text([italic("/etc/flightrec/flightrec.toml")]);
    roff.control("SH", ["DESCRIPTION"]);
    let mut pending: Vec<String> = Vec::new();
    // The keys of an array of tables ([[event]]) are its default list.
    let mut array_defaults: Vec<String> = Vec::new();
    let mut in_array = false;
    fn flush_defaults(roff: &mut Roff, defaults: &mut Vec<String>) {
        if !defaults.is_empty() {
            roff.control("PP", [] as [&str; 0]);
            roff.text([roman("The default list:")]);
            let v: Vec<&str> = defaults.iter().map(String::as_str).collect();
            verbatim(roff, &v);
            defaults.clear();
        }
    }
    // A comment block standing alone: text of the current section, or,
    // opening with `[fleet]: ...`, a table documented in comments only.
    fn free_block(
        roff: &mut Roff,
        pending: &mut Vec<String>,
        defaults: &mut Vec<String>,
        in_array: &mut bool,
    ) {
        if pending.is_empty() {
            return;
        }
        let heading = pending[0]
            .split_once(": ")
            .filter(|(h, _)| h.starts_with('[') && h.ends_with(']'))
            .map(|(h, rest)| (h.to_string(), rest.to_string()));
        if let Some((h, rest)) = heading {
            flush_defaults(roff, defaults);
            *in_array = false;
            roff.control("SH", [h.as_str()]);
            let mut body = vec![rest];
            body.extend(pending[1..].iter().cloned());
            render_comment(roff, &body);
        } else {
            render_comment(roff, pending);
        }
        pending.clear();
    }
    let mut i = 0;
    while i < lines.len() {
        match &lines[i] {
            Line::Comment(c) => pending.push(c.clone()),
            Line::Blank => {
                free_block(&mut roff, &mut pending, &mut array_defaults, &mut in_array);
            }
            Line::Table(t) => {
                let is_array = t.starts_with("[[");
                let same_array = is_array && in_array && array_defaults.iter().any(|d| d == t);
                if same_array {
                    array_defaults.push(String::new());
                } else {
                    flush_defaults(&mut roff, &mut array_defaults);
                    roff.control("SH", [t.as_str()]);
                    in_array = is_array;
                }
                render_comment(&mut roff, &pending);
                pending.clear();
                if is_array {
                    array_defaults.push(t.clone());
                }
            }
            Line::Key { key, value } => {
                if in_array {
                    array_defaults.push(format!("{key} = {value}"));
                } else {
                    // A comment over several keys at once introduces them.
                    let shared = matches!(lines.get(i + 1), Some(Line::Key { .. }));
                    if shared {
                        render_comment(&mut roff, &pending);
                    }
                    roff.control("TP", [] as [&str; 0]);
                    roff.text([bold(key.clone()), roman(format!(" = {value}"))]);
                    if !shared && !pending.is_empty() {
                        roff.text([roman(pending.join(" "))]);
                    }
                    pending.clear();
                }
            }
        }
        i += 1;
    }
    free_block(&mut roff, &mut pending, &mut array_defaults, &mut in_array);
    flush_defaults(&mut roff, &mut array_defaults);
    see_also(
        &mut roff,
        &[("flightrecd", "8"), ("snapctl", "1"), ("systemd.exec", "5")],
    );
    roff.to_roff()
}

fn config_text() -> String {
    std::fs::read_to_string(repo().join("config/flightrec.toml")).expect("config/flightrec.toml")
}

/// The notice at the top of every generated file: what made it, from what,
/// and how to regenerate it, so nobody edits a copy the next run overwrites.
fn generated_notice(source: &str) -> [String; 2] {
    [
        format!("Generated by tests/tests/docs.rs from {source}: do not edit by hand."),
        "Regenerate with FLIGHTREC_UPDATE_DOCS=1 cargo test -p flightrec-tests --test docs"
            .to_string(),
    ]
}

/// A manual page with the notice as roff comments (`.\"`) before it.
fn man_with_notice(source: &str, page: String) -> String {
    let notice: String = generated_notice(source)
        .iter()
        .map(|line| format!(".\\\" {line}\n"))
        .collect();
    notice + &page
}

/// A completion script with the notice as `#` comments (bash, zsh and fish
/// alike), after zsh's `#compdef` line, which must stay the first.
fn completion_with_notice(script: String) -> String {
    let notice: String = generated_notice("the clap definitions of snapctl")
        .iter()
        .map(|line| format!("# {line}\n"))
        .collect();
    match script.split_once('\n') {
        Some((first, rest)) if first.starts_with("#compdef") => {
            format!("{first}\n{notice}{rest}")
        }
        _ => notice + &script,
    }
}

/// Every generated file: path under the repository, content.
fn generated() -> Vec<(PathBuf, String)> {
    let man = repo().join("packaging/man");
    let completions_dir = repo().join("packaging/completions");
    let mut files = vec![
        (
            man.join("flightrecd.8"),
            man_with_notice("the clap definitions of flightrecd", flightrecd_page()),
        ),
        (
            man.join("flightrec.toml.5"),
            man_with_notice("config/flightrec.toml", config_page(&config_text())),
        ),
    ];
    for (name, text) in snapctl_pages() {
        files.push((
            man.join(name),
            man_with_notice("the clap definitions of snapctl", text),
        ));
    }
    for (name, text) in completions() {
        files.push((completions_dir.join(name), completion_with_notice(text)));
    }
    files
}

#[test]
fn manual_pages_and_completions_are_generated_from_their_sources() {
    let files = generated();
    if std::env::var_os("FLIGHTREC_UPDATE_DOCS").is_some() {
        for dir in ["packaging/man", "packaging/completions"] {
            let _ = std::fs::remove_dir_all(repo().join(dir));
            std::fs::create_dir_all(repo().join(dir)).expect("mkdir");
        }
        for (path, text) in &files {
            std::fs::write(path, text).expect("write a generated file");
        }
    }
    // The notice opens each file (after zsh's `#compdef`), where a reader
    // about to edit one sees it.
    for (path, text) in &files {
        assert!(
            text.lines()
                .take(2)
                .any(|l| l.contains("Generated by tests/tests/docs.rs")),
            "{} does not open with the generated-file notice",
            path.display()
        );
    }
    let mut stale = Vec::new();
    for (path, text) in &files {
        if std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "stale or missing (regenerate with FLIGHTREC_UPDATE_DOCS=1 cargo test -p \
         flightrec-tests --test docs): {stale:?}"
    );
    // Nothing else lies there: a page of a removed verb would ship on.
    for dir in ["packaging/man", "packaging/completions"] {
        for entry in std::fs::read_dir(repo().join(dir))
            .expect("read_dir")
            .flatten()
        {
            assert!(
                files.iter().any(|(p, _)| *p == entry.path()),
                "{} is not generated by this test: remove it",
                entry.path().display()
            );
        }
    }
}

#[test]
fn every_snapctl_verb_has_its_page_and_every_flag_is_in_it() {
    let pages = snapctl_pages();
    let mut cmd = snapctl::cli::Args::command().disable_help_subcommand(true);
    cmd.build();
    fn walk(cmd: &clap::Command, pages: &BTreeMap<String, String>, seen: &mut usize) {
        let name = cmd.get_display_name().unwrap_or(cmd.get_name());
        let page = pages
            .get(&format!("{name}.1"))
            .unwrap_or_else(|| panic!("no page {name}.1"));
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long() {
                // roff escapes the dashes of a flag.
                assert!(
                    page.contains(&format!("\\-\\-{}", long.replace('-', "\\-"))),
                    "{name}.1 does not show --{long}"
                );
            }
        }
        *seen += 1;
        for sub in cmd.get_subcommands() {
            walk(sub, pages, seen);
        }
    }
    let mut seen = 0;
    walk(&cmd, &pages, &mut seen);
    // snapctl, its 13 verbs, fleet's 3.
    assert_eq!(seen, 17, "pages: {:?}", pages.keys().collect::<Vec<_>>());
    assert_eq!(pages.len(), 17);
}

/// The tables of the config and the keys the schema accepts in each, read
/// from the parser's own "unknown field" message, so a key added to the
/// schema but not to config/flightrec.toml fails here.
fn schema_keys() -> Vec<(&'static str, Vec<String>)> {
    let probe = |text: &str| -> Vec<String> {
        let err = flightrec_config::Config::from_toml(text, Path::new("/probe.toml"))
            .expect_err("an unknown key is an error");
        let msg = err.to_string();
        // serde says "expected one of `a`, `b`, `c`", or "expected `a` or
        // `b`" for two.
        let list = msg
            .split_once("expected one of ")
            .or_else(|| msg.split_once("expected "))
            .unwrap_or_else(|| panic!("the schema's message lists no keys: {msg}"))
            .1;
        list.split(", ")
            .flat_map(|k| k.split(" or "))
            .map(|k| k.trim_matches('`').to_string())
            .collect()
    };
    vec![
        ("[daemon]", probe("[daemon]\nzz_probe = 1\n")),
        ("[buffers]", probe("[buffers]\nzz_probe = 1\n")),
        ("[tracking]", probe("[tracking]\nzz_probe = 1\n")),
        ("[[event]]", probe("[[event]]\nzz_probe = 1\n")),
        ("[snapshot]", probe("[snapshot]\nzz_probe = 1\n")),
        ("[retention]", probe("[retention]\nzz_probe = 1\n")),
        ("[history]", probe("[history]\nzz_probe = 1\n")),
        ("[containers]", probe("[containers]\nzz_probe = 1\n")),
        (
            "[fleet]",
            probe("[fleet]\nzz_probe = 1\n")
                .into_iter()
                .chain(probe(
                    "[fleet]\nnats = \"nats://127.0.0.1:4222\"\ns3 = { zz_probe = 1 }\n",
                ))
                .collect(),
        ),
        ("[[trigger]]", probe("[[trigger]]\nzz_probe = 1\n")),
    ]
}

#[test]
fn the_config_page_documents_every_key_the_schema_accepts() {
    let page = config_page(&config_text());
    // Sections by their .SH heading.
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut current = String::new();
    for line in page.lines() {
        if let Some(h) = line.strip_prefix(".SH ") {
            current = h.trim_matches('"').to_string();
        } else {
            let s = sections.entry(current.clone()).or_default();
            s.push_str(line);
            s.push('\n');
        }
    }
    let top = probe_top();
    let tables = schema_keys();
    assert_eq!(
        top.len(),
        tables.len(),
        "the schema's tables {top:?} against those checked here"
    );
    let mut checked = 0;
    for (table, keys) in tables {
        let text = sections.get(table).unwrap_or_else(|| {
            panic!(
                "flightrec.toml(5) has no section {table}; it has {:?}",
                sections.keys()
            )
        });
        // Keys appear as written (roff leaves `_` alone).
        for key in keys {
            let shown = text.lines().any(|l| {
                let l = l
                    .replace("\\fB", " ")
                    .replace("\\fR", " ")
                    .replace("\\fI", " ");
                l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .any(|w| w == key)
            });
            assert!(
                shown,
                "flightrec.toml(5), section {table}, never names {key}"
            );
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} keys checked");
}

/// The top-level tables of the schema.
fn probe_top() -> Vec<String> {
    let err = flightrec_config::Config::from_toml("zz_probe = 1\n", Path::new("/probe.toml"))
        .expect_err("an unknown table is an error");
    let msg = err.to_string();
    msg.split_once("expected one of ")
        .map(|(_, l)| {
            l.split(", ")
                .map(|k| k.trim_matches('`').to_string())
                .collect()
        })
        .unwrap_or_default()
}
