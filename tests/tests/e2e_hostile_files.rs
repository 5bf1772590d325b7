//! End to end: files a local user chose, against the root daemon and root's
//! snapctl (issue 19, items 1 to 3).
//!
//! - A user maps an ELF file without program headers whose note section is
//!   4 GiB (sparse, in /dev/shm): the build-id reader must read a few KiB of
//!   it, off every lock, so dumps and status still answer at once and the
//!   daemon does not grow.
//! - Links planted in the output directory are never followed, and an
//!   output directory others could write is refused with its config line.
//! - Root's `snapctl archive`/`decompress` in a directory a user owns write
//!   nothing through the user's links, give the result the snapshot's mode,
//!   and pass over a FIFO planted at a mapped path.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flightrec_tests::fleet::{connected, fleet_toml};
use flightrec_tests::{
    Daemon, Load, NatsServer, flightrecd_to_end, require_root, rss, snapshot_id, test_config,
};

const NOBODY: u32 = 65534;
const MIB: u64 = 1 << 20;
/// Debian's (with python3-fusepy), readable by nobody.
const PYTHON: &str = "/usr/bin/python3";

/// Maps `argv[1]` sparse ELF files of /dev/shm whose note section is
/// `argv[2]` bytes long and which have no program headers (the kernel finds
/// no build-id in them), PROT_EXEC, and keeps them mapped until stdin
/// closes.
const NOTE_SECTION_PY: &str = r#"
import mmap, os, struct, sys
count, note_size = int(sys.argv[1]), int(sys.argv[2])
paths = []
for i in range(count):
    path = "/dev/shm/fr-huge-note-%d-%d" % (os.getpid(), i)
    # ELF64 header: no program headers; 3 section headers at 64 (null,
    # the note, the section name table) as any ELF reader expects them.
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0, 0, 64, 0, 64, 0, 0, 64, 3, 2)
    null = bytes(64)
    names = b"\0.note.gnu.build-id\0.shstrtab\0"
    note = struct.pack("<IIQQQQIIQQ", 1, 7, 2, 0, 288, note_size, 0, 0, 4, 0)
    strtab = struct.pack("<IIQQQQIIQQ", 20, 3, 0, 0, 256, len(names), 0, 0, 1, 0)
    body = struct.pack("<III", 4, 20, 3) + b"GNU\0" + bytes([i + 1] * 20)
    with open(path, "wb") as f:
        f.write(header + null + note + strtab + names + bytes(288 - 256 - len(names)) + body)
        f.truncate(max(288 + note_size, 4096))
    fd = os.open(path, os.O_RDONLY)
    mmap.mmap(fd, 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC)
    paths.append(path)
print("ready", flush=True)
sys.stdin.read()
for p in paths:
    os.unlink(p)
"#;

struct AsNobody(Child);

impl AsNobody {
    fn python(script: &str, args: &[&str]) -> Self {
        let mut child = Command::new(PYTHON)
            .arg("-c")
            .arg(script)
            .args(args)
            .uid(NOBODY)
            .gid(NOBODY)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn python3 as nobody");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read");
        assert_eq!(line.trim(), "ready", "the script failed");
        AsNobody(child)
    }
}

impl Drop for AsNobody {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// Runs `snapctl ARGS` and returns its output and how long it took.
fn timed(d: &Daemon, args: &[&str]) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let out = d.snapctl(args);
    (out, started.elapsed())
}

/// How long the caller of a dump waited, less the syncs that put the file
/// on disk (the daemon's `sync_ns`): a sync on a file system others write
/// to waits for the journal to take their data too (the sibling tests'
/// writes took it to 1 s on these machines), which no file a user mapped
/// has a part in.
fn waited_outside_syncs(dump: &std::process::Output, took: Duration) -> Duration {
    let reply: serde_json::Value = serde_json::from_slice(&dump.stdout).unwrap_or_else(|e| {
        panic!(
            "the dump printed no JSON ({e}): {}",
            String::from_utf8_lossy(&dump.stdout)
        )
    });
    let sync = reply["timings"]["sync_ns"]
        .as_u64()
        .unwrap_or_else(|| panic!("no timings.sync_ns in {reply}"));
    took.saturating_sub(Duration::from_nanos(sync))
}

fn tracking_status(d: &Daemon) -> serde_json::Value {
    d.json(&["status"])["tracking"].clone()
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_huge_note_section_mapped_by_nobody_stalls_no_dump_and_grows_nothing() {
    require_root("a_huge_note_section_mapped_by_nobody_stalls_no_dump_and_grows_nothing");
    const FILES: u64 = 3;
    // No spacing between dumps: the time measured is the dump's own.
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n");
    d.json(&["dump"]);
    let before = rss(d.pid());
    let baseline = tracking_status(&d);
    let absent_before = baseline["build_ids_absent"].as_u64().unwrap();
    let mapper = AsNobody::python(
        NOTE_SECTION_PY,
        &[&FILES.to_string(), &(4u64 << 30).to_string()],
    );

    // The witness: every file was read (and found to have no build-id
    // within the bytes a reader may take).
    let deadline = Instant::now() + Duration::from_secs(20);
    let t = loop {
        let t = tracking_status(&d);
        if t["build_ids_absent"].as_u64().unwrap() >= absent_before + FILES {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "the mapped files were never read: {t}\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(t["build_ids_timed_out"], 0, "{t}");

    let (dump, dump_took) = timed(&d, &["--json", "dump"]);
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let (status, status_took) = timed(&d, &["--json", "status"]);
    assert!(status.status.success());
    let grown = rss(d.pid()).saturating_sub(before);
    let dump_waited = waited_outside_syncs(&dump, dump_took);
    eprintln!(
        "dump {dump_took:?} ({dump_waited:?} outside syncs), status {status_took:?}, RSS grew \
         {} KiB; {t}",
        grown / 1024
    );
    assert!(
        dump_waited < Duration::from_secs(1),
        "dump took {dump_took:?}, {dump_waited:?} outside syncs: {}",
        String::from_utf8_lossy(&dump.stdout)
    );
    assert!(
        status_took < Duration::from_secs(1),
        "status took {status_took:?}"
    );
    assert!(grown < 16 * MIB, "RSS grew {} MiB", grown / MIB);
    drop(mapper);
}

/// A root-only file somewhere the plants point at.
fn victim(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("victim");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn links_planted_in_the_output_directory_are_never_followed() {
    require_root("links_planted_in_the_output_directory_are_never_followed");
    let dir = tempfile::tempdir().unwrap();
    let secret = victim(dir.path(), "secret");
    // The victim belongs to nogroup; the daemon's socket group is root's.
    nix::unistd::chown(&secret, None, Some(nix::unistd::Gid::from_raw(NOBODY))).unwrap();
    let output = dir.path().join("snapshots");
    std::fs::create_dir(&output).unwrap();
    std::fs::set_permissions(&output, std::fs::Permissions::from_mode(0o750)).unwrap();
    // Named like a snapshot, and like the sidecar temp files of 5595349.
    let planted = output.join("host-20261120T221133Z-000001.perf.data");
    std::os::unix::fs::symlink(&secret, &planted).unwrap();
    for pid in 1..=120 {
        std::os::unix::fs::symlink(
            &secret,
            output.join(format!(".host-20261120T221133Z-000002.meta.tmp-{pid}")),
        )
        .unwrap();
    }
    let text = test_config(dir.path(), "[snapshot]\ncompression = \"none\"\n");
    let d = Daemon::start_in(dir, &text, &[]);
    for _ in 0..3 {
        d.json(&["dump"]);
    }
    let md = std::fs::metadata(&secret).unwrap();
    assert_eq!(
        (md.gid(), md.mode() & 0o7777),
        (NOBODY, 0o600),
        "the planted link's target was changed"
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
    let listed: Vec<String> = d
        .list()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(!listed.iter().any(|id| id == "host-20261120T221133Z-000001"));
    assert!(std::fs::symlink_metadata(&planted).unwrap().is_symlink());
    let log = d.log_text();
    assert!(
        log.contains("passed over in the output directory: a symbolic link")
            && log.contains("host-20261120T221133Z-000001.perf.data"),
        "{log}"
    );
    // Retention never removes what is not the daemon's.
    d.snapctl(&["rotate", "--keep", "1"]);
    assert!(std::fs::symlink_metadata(&planted).is_ok());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn an_output_directory_others_can_write_is_refused_at_its_line() {
    require_root("an_output_directory_others_can_write_is_refused_at_its_line");
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("snapshots");
    std::fs::create_dir(&output).unwrap();
    let text = test_config(dir.path(), "");
    let config = dir.path().join("flightrec.toml");
    std::fs::write(&config, &text).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with("output_dir"))
        .unwrap()
        + 1;
    let expect_refused = |why: &str| {
        for flag in ["--check-config", "--config"] {
            let out = flightrecd_to_end(flag, &config);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
            assert!(
                err.contains(&format!("flightrec.toml:{line}:"))
                    && err.contains("daemon.output_dir")
                    && err.contains(why),
                "{flag}: {err}"
            );
        }
    };
    // Writable by every user.
    std::fs::set_permissions(&output, std::fs::Permissions::from_mode(0o777)).unwrap();
    expect_refused("writable by every user (mode 0777)");
    // Owned by another user.
    std::fs::set_permissions(&output, std::fs::Permissions::from_mode(0o750)).unwrap();
    nix::unistd::chown(&output, Some(nix::unistd::Uid::from_raw(NOBODY)), None).unwrap();
    expect_refused("belongs to uid 65534");
    // Not there yet, under a directory others may write.
    nix::unistd::chown(&output, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    std::fs::remove_dir(&output).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    expect_refused("writable by every user (mode 0777)");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();

    // A reload onto such a directory keeps the running config.
    let d = Daemon::start_in(dir, &text, &[]);
    let open = d.dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let changed = text.replace(
        &format!("output_dir = \"{}\"", d.output.display()),
        &format!("output_dir = \"{}\"", open.display()),
    );
    std::fs::write(&d.config, changed).unwrap();
    let out = d.snapctl(&["reload"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("writable by every user (mode 1777)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = d.json(&["dump"])["path"].as_str().unwrap().to_string();
    assert!(path.starts_with(d.output.to_str().unwrap()), "{path}");
}

/// A directory owned by nobody, where nobody plants links to `target` at
/// each of `names`.
fn users_directory(parent: &Path, target: &Path, names: &[&str]) -> PathBuf {
    let dir = parent.join("users");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    nix::unistd::chown(
        &dir,
        Some(nix::unistd::Uid::from_raw(NOBODY)),
        Some(nix::unistd::Gid::from_raw(NOBODY)),
    )
    .unwrap();
    for name in names {
        let status = Command::new("ln")
            .arg("-s")
            .arg(target)
            .arg(dir.join(name))
            .uid(NOBODY)
            .gid(NOBODY)
            .status()
            .unwrap();
        assert!(status.success());
    }
    dir
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn roots_archive_and_decompress_in_a_users_directory_clobber_nothing() {
    require_root("roots_archive_and_decompress_in_a_users_directory_clobber_nothing");
    let d = Daemon::start("[snapshot]\ncompression = \"zstd\"\n");
    let load = Load::start();
    std::thread::sleep(Duration::from_millis(300));
    let path = PathBuf::from(d.json(&["dump"])["path"].as_str().unwrap());
    drop(load);
    let id = snapshot_id(&path);
    let secrets = tempfile::tempdir().unwrap();
    let secret = victim(secrets.path(), "secret");
    let planted = [
        format!("{id}.tar.tmp"),
        "out.tar.tmp".to_string(),
        format!("{id}.plain.perf.tmp"),
        "plain.tmp".to_string(),
        "taken.tar".to_string(),
    ];
    let planted: Vec<&str> = planted.iter().map(String::as_str).collect();
    let users = users_directory(secrets.path(), &secret, &planted);

    let out = d.snapctl(&[
        "--json",
        "archive",
        &id,
        "-o",
        users.join("out.tar").to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tar = std::fs::metadata(users.join("out.tar")).unwrap();
    let snapshot = std::fs::metadata(&path).unwrap();
    assert_eq!(tar.mode() & 0o7777, 0o640, "the archive holds kallsyms");
    assert_eq!(tar.gid(), snapshot.gid());
    assert!(tar.len() > snapshot.len());
    // Into an existing name (a user's link): refused, nothing written.
    let taken = d.snapctl(&[
        "archive",
        &id,
        "-o",
        users.join("taken.tar").to_str().unwrap(),
    ]);
    assert_eq!(taken.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&taken.stderr).contains("already exists"),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    let plain = users.join("plain");
    let out = d.snapctl(&["decompress", &id, "-o", plain.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::metadata(&plain).unwrap().mode() & 0o7777,
        snapshot.mode() & 0o7777
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
    assert_eq!(std::fs::metadata(&secret).unwrap().mode() & 0o7777, 0o600);
    // Without kallsyms, the archive may keep the snapshot's mode for others
    // too; here the snapshot has none.
    let out = d.snapctl(&[
        "--json",
        "archive",
        &id,
        "--no-kallsyms",
        "-o",
        users.join("bare.tar").to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["missing"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "[kernel.kallsyms]"),
        "{v}"
    );
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_fifo_planted_at_a_mapped_path_does_not_block_the_archive() {
    require_root("a_fifo_planted_at_a_mapped_path_does_not_block_the_archive");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\n");
    // A user's copy of `yes`, spinning: its samples put it in the
    // snapshot's build-id table.
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let program = home.path().join("fr-user-yes");
    flightrec_tests::copy_executable("/usr/bin/yes", &program);
    nix::unistd::chown(&program, Some(nix::unistd::Uid::from_raw(NOBODY)), None).unwrap();
    let mut spinner = Command::new(&program)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let path = PathBuf::from(d.json(&["dump"])["path"].as_str().unwrap());
    // The user replaces the file with a FIFO nobody writes to.
    std::fs::remove_file(&program).unwrap();
    nix::unistd::mkfifo(&program, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let tar = out_dir.path().join("a.tar");
    let mut archive = d.snapctl_cmd(&[
        "--json",
        "archive",
        path.to_str().unwrap(),
        "-o",
        tar.to_str().unwrap(),
    ]);
    let started = Instant::now();
    let mut child = archive.stdout(Stdio::piped()).spawn().unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = spinner.kill();
            panic!("snapctl archive blocked on the FIFO for 30s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let _ = spinner.kill();
    let _ = spinner.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Found through the process that still maps it.
    let added = v["build_ids"].as_array().unwrap();
    let ours = added
        .iter()
        .find(|b| b["name"] == program.to_str().unwrap())
        .unwrap_or_else(|| panic!("{} is not in the archive: {v}", program.display()));
    assert!(
        ours["from"].as_str().unwrap().starts_with("/proc/"),
        "{ours}"
    );
}

/// A FUSE file system (python3-fusepy) with one file, `lib.so`, whose
/// reads never return once `argv[2]` exists: a file system that hangs.
/// A hanging read first creates `argv[2]` + ".reading", the witness that
/// someone is stuck in it.
const HANGING_FUSE_PY: &str = r#"
import errno, os, stat, sys, time
from fusepy import FUSE, FuseOSError, Operations
mountpoint, gate = sys.argv[1], sys.argv[2]
class Hanging(Operations):
    def getattr(self, path, fh=None):
        if path == "/":
            return dict(st_mode=stat.S_IFDIR | 0o755, st_nlink=2)
        if path == "/lib.so":
            return dict(st_mode=stat.S_IFREG | 0o755, st_nlink=1, st_size=1 << 16)
        raise FuseOSError(errno.ENOENT)
    def readdir(self, path, fh):
        return [".", "..", "lib.so"]
    def open(self, path, flags):
        return 0
    def read(self, path, size, offset, fh):
        if os.path.exists(gate):
            open(gate + ".reading", "w").close()
        while os.path.exists(gate):
            time.sleep(0.1)
        return bytes(size)
FUSE(Hanging(), mountpoint, foreground=True, nothreads=False, allow_other=True)
"#;

/// Maps `argv[1]` PROT_EXEC and waits for stdin to close.
const MAP_EXEC_PY: &str = r#"
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC)
print("ready", flush=True)
sys.stdin.read()
"#;

/// The hanging file system, mounted; unmounted (lazily, which fails the
/// hung reads) when dropped.
struct HangingFuse {
    server: Child,
    mountpoint: PathBuf,
    gate: PathBuf,
}

impl HangingFuse {
    /// Waits until a read hangs in the file system.
    fn wait_for_a_hung_read(&self, within: Duration, what: impl Fn() -> String) {
        let reading = self.gate.with_extension("reading");
        let deadline = Instant::now() + within;
        while !reading.exists() {
            assert!(Instant::now() < deadline, "no read hung: {}", what());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl HangingFuse {
    fn mount(dir: &Path) -> Self {
        let mountpoint = dir.join("fuse");
        let gate = dir.join("hang");
        std::fs::create_dir(&mountpoint).unwrap();
        std::fs::write(&gate, b"").unwrap();
        let server = Command::new(PYTHON)
            .arg("-c")
            .arg(HANGING_FUSE_PY)
            .arg(&mountpoint)
            .arg(&gate)
            .spawn()
            .expect("run the FUSE server (python3-fusepy, from tests/prepare-host)");
        let lib = mountpoint.join("lib.so");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::fs::metadata(&lib).is_err() {
            assert!(
                Instant::now() < deadline,
                "the FUSE file system never came up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        HangingFuse {
            server,
            mountpoint,
            gate,
        }
    }
}

impl Drop for HangingFuse {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.gate);
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .status();
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_mapped_file_whose_reads_never_return_is_given_up_and_dumps_go_on() {
    require_root("a_mapped_file_whose_reads_never_return_is_given_up_and_dumps_go_on");
    let d = Daemon::start("[snapshot]\ncompression = \"none\"\nmin_interval = \"0s\"\n");
    let dir = tempfile::tempdir().unwrap();
    let fuse = HangingFuse::mount(dir.path());
    let mut mapper = Command::new(PYTHON)
        .arg("-c")
        .arg(MAP_EXEC_PY)
        .arg(fuse.mountpoint.join("lib.so"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(mapper.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");

    // The witness: the read was given up after its deadline.
    let deadline = Instant::now() + Duration::from_secs(20);
    let t = loop {
        let t = tracking_status(&d);
        if t["build_ids_timed_out"].as_u64().unwrap() >= 1 {
            break t;
        }
        assert!(Instant::now() < deadline, "the read never timed out: {t}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(t["build_id_readers_stuck"], 1, "{t}");
    // While that read still hangs, dumps and status answer at once, and
    // the next file is read by another reader.
    let (dump, dump_took) = timed(&d, &["--json", "dump"]);
    assert!(dump.status.success());
    let (_, status_took) = timed(&d, &["--json", "status"]);
    let dump_waited = waited_outside_syncs(&dump, dump_took);
    eprintln!(
        "dump {dump_took:?} ({dump_waited:?} outside syncs), status {status_took:?} while a \
         read hangs: {t}"
    );
    // Under the read deadline: no read of the hung file was waited for
    // (one would be given up only after it).
    assert!(
        dump_waited < Duration::from_secs(1),
        "dump took {dump_took:?}, {dump_waited:?} outside syncs: {}",
        String::from_utf8_lossy(&dump.stdout)
    );
    assert_eq!(
        tracking_status(&d)["build_id_readers_stuck"],
        1,
        "the hung read returned: the dump was not made while it hung"
    );
    assert!(
        status_took < Duration::from_secs(1),
        "status took {status_took:?}"
    );
    let found = t["build_ids_found"].as_u64().unwrap();
    let small_note = AsNobody::python(NOTE_SECTION_PY, &["1", "36"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while tracking_status(&d)["build_ids_found"].as_u64().unwrap() <= found {
        assert!(
            Instant::now() < deadline,
            "no reader read the next file: {}",
            tracking_status(&d)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(small_note);
    drop(mapper.stdin.take());
    let _ = mapper.wait();
    drop(fuse);
}

#[test]
#[cfg_attr(flightrec_unprivileged, ignore = "needs root")]
fn a_hung_file_system_under_the_upload_queue_leaves_the_api_answering_on_one_worker() {
    require_root("a_hung_file_system_under_the_upload_queue_leaves_the_api_answering");
    let nats = NatsServer::start();
    // Declared before the file system so that it is dropped after it: a
    // daemon stuck in a hung read could not stop.
    let d: Daemon;
    let dir = tempfile::tempdir().unwrap();
    let fuse = HangingFuse::mount(dir.path());
    // The S3 credentials file lies on the hung file system: the upload
    // queue reads it when it first sends a snapshot to S3.
    let fleet = fleet_toml(
        &format!("\"{}\"", nats.url()),
        "stalled",
        "",
        &format!(
            "upload = true\ns3 = {{ url = \"s3://bucket\", endpoint = \"http://127.0.0.1:9\", \
             credentials_file = \"{}\" }}\n",
            fuse.mountpoint.join("lib.so").display()
        ),
    );
    // One async worker: anything blocking on it stops the whole API.
    d = Daemon::start_wrapped(&fleet, &["env", "TOKIO_WORKER_THREADS=1"]);
    connected(&d);
    let first = d.json(&["dump"]);
    assert!(first["path"].is_string(), "{first}");
    fuse.wait_for_a_hung_read(Duration::from_secs(30), || d.log_text());

    // The witness that the queue reached S3 after JetStream: the JetStream
    // upload is counted, and the S3 one is not over.
    let status = d.snapctl(&["--timeout", "5s", "--json", "status"]);
    assert!(
        status.status.success(),
        "status while the queue hangs: {status:?}"
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["fleet"]["uploaded"], 1, "{status}");
    assert_eq!(status["fleet"]["uploads_pending"], 1, "{status}");
    for args in [
        &["--json", "status"][..],
        &["--json", "list"],
        &["--json", "dump"],
    ] {
        let started = Instant::now();
        let out = d.snapctl(&[&["--timeout", "5s"][..], args].concat());
        let took = started.elapsed();
        assert!(
            out.status.success(),
            "snapctl {args:?} while the queue hangs: {out:?}\n{}",
            d.log_text()
        );
        assert!(
            took < Duration::from_secs(2),
            "snapctl {args:?} took {took:?}"
        );
    }
    let listed = d.snapctl(&["--timeout", "5s", "--json", "list"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(
        listed["snapshots"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    drop(fuse);
}
