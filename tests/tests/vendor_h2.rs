//! vendor/check-h2, the proof that vendor/h2 is h2 from crates.io plus
//! vendor/h2.patch: it passes on the checked-in copy and fails, naming the
//! file, on a copy with one byte changed, one file added or one removed.
//! Each run downloads the release from static.crates.io: these tests need
//! the network, and fail (not skip) without it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Runs the check on `copy`; exit 2 (it could not run: no network, a
/// missing tool) fails the test with the script's own message.
fn check(copy: &Path) -> Output {
    let out = Command::new(repo().join("vendor/check-h2"))
        .arg(copy)
        .output()
        .expect("run vendor/check-h2");
    assert_ne!(
        out.status.code(),
        Some(2),
        "vendor/check-h2 could not run (it needs static.crates.io): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A copy of vendor/h2 in a fresh temporary directory.
fn copy_of_vendor_h2() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("h2");
    let status = Command::new("cp")
        .arg("-a")
        .arg(repo().join("vendor/h2"))
        .arg(&copy)
        .status()
        .expect("run cp");
    assert!(status.success(), "cp -a vendor/h2: {status}");
    (dir, copy)
}

/// Flips the lowest bit of the byte in the middle of `file`.
fn flip_one_byte(file: &Path) {
    let mut bytes = std::fs::read(file).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(file, bytes).expect("write");
}

#[test]
fn the_vendored_h2_is_the_registry_release_plus_the_patch() {
    let out = check(&repo().join("vendor/h2"));
    assert!(
        out.status.success(),
        "vendor/check-h2 on vendor/h2: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let files = Command::new("git")
        .args(["ls-files", "vendor/h2"])
        .current_dir(repo())
        .output()
        .expect("git ls-files");
    assert!(files.status.success(), "git ls-files vendor/h2: {files:?}");
    let tracked = String::from_utf8_lossy(&files.stdout).lines().count();
    // Every file of the copy was compared, and git tracks each of them
    // (the crate's own .gitignore names its Cargo.lock, which a plain
    // `git add` would leave out of a clean clone).
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("({tracked} files identical)")),
        "{tracked} files tracked under vendor/h2; the check said: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_check_fails_on_one_byte_changed_or_a_file_added_or_removed() {
    type Change = fn(&Path);
    let changes: [(&str, &str, Change); 5] = [
        ("one byte of the patched file", "src/server.rs", |c| {
            flip_one_byte(&c.join("src/server.rs"))
        }),
        ("one byte of an unpatched file", "src/lib.rs", |c| {
            flip_one_byte(&c.join("src/lib.rs"))
        }),
        ("one byte of the manifest", "Cargo.toml", |c| {
            flip_one_byte(&c.join("Cargo.toml"))
        }),
        ("a file added", "NOTES.md", |c| {
            std::fs::write(c.join("NOTES.md"), "local notes\n").expect("write")
        }),
        ("a file removed", "CHANGELOG.md", |c| {
            std::fs::remove_file(c.join("CHANGELOG.md")).expect("remove")
        }),
    ];
    for (what, file, change) in changes {
        let (_dir, copy) = copy_of_vendor_h2();
        change(&copy);
        let out = check(&copy);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{what}: vendor/check-h2 should find the difference: {stderr}"
        );
        assert!(
            stderr.lines().any(|l| l.contains(file)
                && (l.starts_with("Files ") || l.starts_with("Only in "))),
            "{what}: the check does not name {file}: {stderr}"
        );
    }
}
