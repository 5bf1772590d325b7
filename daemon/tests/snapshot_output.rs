//! Snapshot files on real file systems: a full (tiny tmpfs) disk is an
//! error that names the file, leaves no temporary file and never touches a
//! snapshot already there (needs root to mount; under CI=true lacking it is
//! a failure); compressing in place replaces the file atomically.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use flightrecd::snapshot::output::{compress_snapshot, is_temp_file_name, write_snapshot};
use flightrecd::snapshot::perfdata::WriteOptions;

use flightrecd::snapshot::testing::{
    SCHED_SWITCH_FORMAT, SyntheticSpec, synthetic_capture, synthetic_host,
};

use flightrec_tests::require_root;

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop.
struct TinyFs {
    dir: tempfile::TempDir,
}

impl TinyFs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount tmpfs");
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn full_disk_fails_cleanly_and_keeps_earlier_snapshots() {
    require_root("full_disk_fails_cleanly_and_keeps_earlier_snapshots");
    let fs = TinyFs::mount("256k");
    let opts = WriteOptions {
        compression: None,
        host: Some(std::sync::Arc::new(synthetic_host(SCHED_SWITCH_FORMAT))),
        scope: None,
    };
    let small = synthetic_capture(&SyntheticSpec {
        samples_per_cpu: 20,
        ..Default::default()
    });
    let first = write_snapshot(&small, &opts, fs.path(), "first.perf.data").unwrap();
    let before = std::fs::read(&first.path).unwrap();
    assert_eq!(before.len() as u64, first.bytes);
    let mode = std::fs::metadata(&first.path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640);

    // ~1 MiB of records: cannot fit in what is left of 256 KiB.
    let big = synthetic_capture(&SyntheticSpec {
        samples_per_cpu: 5_000,
        ..Default::default()
    });
    let err = write_snapshot(&big, &opts, fs.path(), "second.perf.data").unwrap_err();
    assert!(err.is_disk_full(), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("disk full"), "{msg}");
    assert!(msg.contains("/second.perf.data:"), "{msg}");

    let left = names(fs.path());
    assert_eq!(left, ["first.perf.data"], "temporary file left behind");
    assert!(!left.iter().any(|n| is_temp_file_name(n)));
    assert_eq!(std::fs::read(&first.path).unwrap(), before);

    // Space is back once the failed file is gone: a small one still fits.
    write_snapshot(&small, &opts, fs.path(), "third.perf.data").unwrap();
    // And an existing snapshot is never overwritten.
    let err = write_snapshot(&small, &opts, fs.path(), "first.perf.data").unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&first.path).unwrap(), before);
}

#[test]
fn compressing_replaces_the_file_and_refuses_a_second_time() {
    let dir = tempfile::tempdir().unwrap();
    let opts = WriteOptions {
        compression: None,
        host: Some(std::sync::Arc::new(synthetic_host(SCHED_SWITCH_FORMAT))),
        scope: None,
    };
    let capture = synthetic_capture(&SyntheticSpec {
        samples_per_cpu: 3_000,
        ..Default::default()
    });
    let plain = write_snapshot(&capture, &opts, dir.path(), "s.perf.data").unwrap();
    let compressed = compress_snapshot(&plain.path, 3).unwrap();
    assert_eq!(compressed.path, plain.path);
    assert!(compressed.bytes * 4 < plain.bytes);
    assert_eq!(
        std::fs::metadata(&plain.path).unwrap().len(),
        compressed.bytes
    );
    let mode = std::fs::metadata(&plain.path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640);
    let c = compressed.summary.compression.unwrap();
    assert_eq!(c.input_bytes, plain.summary.data_bytes);

    let before = std::fs::read(&plain.path).unwrap();
    let err = compress_snapshot(&plain.path, 3).unwrap_err();
    assert!(err.to_string().contains("already compressed"), "{err}");
    assert!(err.to_string().contains("s.perf.data"), "{err}");
    assert_eq!(std::fs::read(&plain.path).unwrap(), before);
    assert_eq!(names(dir.path()), ["s.perf.data"]);

    let err = compress_snapshot(&dir.path().join("missing.perf.data"), 3).unwrap_err();
    assert!(err.to_string().contains("missing.perf.data"), "{err}");
    let err = write_snapshot(
        &capture,
        &opts,
        &dir.path().join("no-such-dir"),
        "x.perf.data",
    )
    .unwrap_err();
    assert!(err.to_string().contains("no-such-dir"), "{err}");
    assert!(!err.is_disk_full());
}
