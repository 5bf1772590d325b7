//! What a pprof profile's samples are labelled with, as `go tool pprof
//! -tags` (Go's own reader, from Debian's golang-go) counts them.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Each label key of `profile` with its values and their sample counts.
pub fn tags(profile: &Path) -> BTreeMap<String, Vec<(String, u64)>> {
    let home = tempfile::tempdir().expect("tempdir");
    let out = Command::new("go")
        .env("HOME", home.path())
        .env("GOCACHE", home.path().join("cache"))
        .env("GOTOOLCHAIN", "local")
        .args(["tool", "pprof", "-tags", "-sample_index=samples"])
        .arg(profile)
        .output()
        .expect("go tool pprof");
    assert!(out.status.success(), "go tool pprof -tags: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut tags = BTreeMap::<String, Vec<(String, u64)>>::new();
    let mut key = String::new();
    for line in text.lines() {
        // ` container: Total 2317.0`, then `  2031.0 (87.66%): web.service`.
        let t = line.trim();
        if let Some((k, _)) = t.split_once(": Total ") {
            key = k.to_string();
        } else if let Some((n, rest)) = t.split_once(" (")
            && let Some((_, value)) = rest.split_once("): ")
            && let Ok(n) = n.parse::<f64>()
        {
            tags.entry(key.clone())
                .or_default()
                .push((value.to_string(), n.round() as u64));
        }
    }
    assert!(!tags.is_empty(), "no tags in:\n{text}");
    tags
}
