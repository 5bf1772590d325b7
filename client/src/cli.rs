//! The command line of snapctl, as clap parses it: kept in the library so
//! that its manual pages and shell completions are generated from it
//! (`flightrec-tests`' docs test), never written by hand.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use flightrec_config::{ByteSize, HumanDuration};

use crate::fleet::parse_selector;

pub const EXIT_CODES: &str = "\
Exit status:
  0  success
  1  the daemon answered with an error (bad label or id, disk full, ...);
     fleet dump: a host answered with an error, or did not answer;
     fleet list/fetch: no such bucket or snapshot, the file exists, a
     download that came short or corrupt
  2  bad command line
  3  cannot reach the daemon (no socket, nobody listening, connection lost,
     no answer within --timeout), or NATS for `fleet`
  4  permission denied on the socket (not root, not in its group)";

/// Control flightrecd, the flight recorder: take, list, rotate and compress
/// snapshots; show its status; follow its events.
#[derive(Parser)]
#[command(name = "snapctl", version, after_help = EXIT_CODES)]
pub struct Args {
    /// The daemon's socket. Default: $FLIGHTREC_SOCKET, else daemon.socket
    /// of the daemon's config file (see --config), else
    /// /run/flightrec/flightrecd.sock.
    #[arg(long, global = true, value_name = "PATH", env = "FLIGHTREC_SOCKET")]
    pub socket: Option<PathBuf>,

    /// The daemon's config file, read for what snapctl is not told: the
    /// socket and, for `fleet`, its [fleet] section. Default:
    /// $FLIGHTREC_CONFIG, else /etc/flightrec/flightrec.toml when it
    /// exists. A file named here must read as a valid config.
    #[arg(long, global = true, value_name = "FILE", env = "FLIGHTREC_CONFIG")]
    pub config: Option<PathBuf>,

    /// Print JSON (one object; `watch` prints one per line) instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// Give up (exit status 3) when the daemon does not answer within DUR,
    /// e.g. 500ms or 1m: to connect, and to each call. `dump` and `watch`
    /// may take longer as long as the daemon answers HTTP/2 pings within
    /// DUR. Default: $FLIGHTREC_TIMEOUT, else 10s.
    #[arg(
        long,
        global = true,
        value_name = "DUR",
        env = "FLIGHTREC_TIMEOUT",
        value_parser = parse_timeout
    )]
    pub timeout: Option<Duration>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Take a snapshot now and print its path (`perf script -i PATH` reads it).
    Dump {
        /// Free text added to the file name: letters, digits, '.', '_', '-',
        /// at most 64 characters, not starting with '.'.
        #[arg(long, value_name = "TEXT")]
        label: Option<String>,
        /// Compress with zstd even if the daemon's config says "none".
        #[arg(long)]
        compress: bool,
        /// Cut the window around TIME instead of now: RFC 3339
        /// (2026-11-23T21:04:05Z) or relative to now (-5m, +30s). In the
        /// past, --before defaults to 10s.
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        at: Option<i64>,
        /// Start the window DUR before TIME (default: as far back as the
        /// memory rings hold when TIME is now).
        #[arg(long, value_name = "DUR", value_parser = parse_window_duration)]
        before: Option<Duration>,
        /// End the window DUR after TIME: the rings keep recording until
        /// then (default: the configured post_trigger_delay when TIME is
        /// now). A window may end at most 5m from now; other triggers
        /// are not held by it.
        #[arg(long, value_name = "DUR", value_parser = parse_window_duration)]
        after: Option<Duration>,
        /// Only this cgroup (a path relative to the cgroup root, e.g.
        /// /system.slice/nginx.service; its descendants included). Repeat
        /// for several.
        #[arg(long = "cgroup", value_name = "PATH")]
        cgroups: Vec<String>,
        /// Only this container: its id (at least 12 hex digits) or its name.
        /// Repeat for several.
        #[arg(long = "container", value_name = "ID|NAME")]
        containers: Vec<String>,
    },
    /// List the snapshots, oldest first.
    List,
    /// Apply retention now; each option tightens the configured limit for
    /// this call only.
    Rotate {
        /// Keep at most N snapshots (the newest), N >= 1 (see --all).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        keep: Option<u32>,
        /// Keep at most SIZE bytes of snapshots, e.g. 500MiB.
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_bytes: Option<u64>,
        /// Remove snapshots older than DUR, e.g. 2h or 7d.
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        max_age: Option<u64>,
        /// Remove every snapshot. Without it, a rotate that would remove
        /// them all is refused and removes nothing.
        #[arg(long)]
        all: bool,
    },
    /// Replace a snapshot by its zstd-compressed form (atomically).
    Compress {
        /// The snapshot's id, as `snapctl list` shows it.
        id: String,
        /// zstd level 1..=22 (default: the configured level).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..=22))]
        level: Option<i32>,
    },
    /// Show events, rings, loss counters, tracking health, store usage and
    /// the last dump's timings.
    Status,
    /// Print snapshot, loss and trigger events as they happen.
    Watch {
        /// Exit after N events.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Make the daemon re-read its config (a bad file is rejected and the
    /// running config kept).
    Reload,
    /// List the configured [[trigger]] conditions: how often each fired,
    /// dumped and was held by its rate limit, and when it last fired.
    Triggers,
    /// Write a tarball of a snapshot and the files its samples need, named
    /// by build-id (like `perf archive`): extract it into DIR and run
    /// `perf --buildid-dir DIR report -i ID.perf.data` on any machine.
    /// Runs with your rights: files you cannot read are listed as missing.
    /// The tarball gets the snapshot's mode and group, without access for
    /// other users when it holds the kernel's symbols (kallsyms).
    Archive {
        /// The snapshot's id (as `snapctl list` shows it) or a path to a
        /// .perf.data file (then the daemon is not asked).
        snapshot: String,
        /// The tarball to write. Default: ./ID.tar.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Leave out /proc/kallsyms (kernel symbol addresses): kernel
        /// frames then resolve only where the reader has the same kernel.
        #[arg(long)]
        no_kallsyms: bool,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Write a plain (uncompressed) copy of a compressed snapshot, for
    /// readers without zstd (hotspot's perfparser). The records are
    /// decompressed as they are written: memory stays a few MiB whatever
    /// their size.
    Decompress {
        /// The snapshot's id or a path to a .perf.data file.
        snapshot: String,
        /// The copy to write (with the snapshot's mode and group).
        /// Default: ./ID.plain.perf.data.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        limits: ReadLimits,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Write one HTML page that shows a snapshot: the window and its
    /// losses, a per-CPU timeline of what ran (sched_switch), flame graphs
    /// of the sampled events (on CPU) and of the time threads waited (off
    /// CPU, from sched_switch call chains), and the top processes and
    /// threads; where the snapshot recorded cgroups, the threads grouped
    /// by container (named as the sidecar names them, else from the cgroup
    /// path) with a container filter, and a scoped dump's scope.
    /// Self-contained: open it in any browser, offline. Frames are
    /// named on this machine from files whose build-id matches the
    /// snapshot's (see --symfs); the others show as FILE+0xOFFSET.
    Report {
        /// The snapshot's id (as `snapctl list` shows it) or a path to a
        /// .perf.data file (then the daemon is not asked).
        snapshot: String,
        /// The page to write. Default: ./ID.html.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        symbols: SymbolArgs,
        #[command(flatten)]
        limits: ReadLimits,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Write a snapshot's stacks for other tools: `pprof` (gzipped
    /// profile.proto with two sample types, `samples` of one event and
    /// `off_cpu` nanoseconds, each sample labelled with its thread and,
    /// where recorded, its cgroup, container and pod: go tool pprof,
    /// Pyroscope, Parca) or `collapsed` (folded stacks,
    /// `comm;root;...;leaf COUNT`: flamegraph.pl, inferno, speedscope).
    Export {
        /// The snapshot's id or a path to a .perf.data file.
        snapshot: String,
        #[arg(long, value_enum, value_name = "FORMAT")]
        format: crate::report::ExportFormat,
        /// The file to write, or - for standard output (then --json's
        /// summary goes to stderr). Default: ./ID.pb.gz (pprof) or
        /// ./ID.folded (collapsed).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// The sampled event to count (default: the snapshot's first event
        /// with a frequency or period, e.g. cpu-clock).
        #[arg(long, value_name = "NAME", conflicts_with = "off_cpu")]
        event: Option<String>,
        /// collapsed: off-CPU time in microseconds instead of samples.
        #[arg(long)]
        off_cpu: bool,
        /// collapsed: the root frame of every stack: `thread` (its name,
        /// the default) or `container` (the container's name, `[host]`
        /// for samples in none, then the thread's name). pprof labels
        /// every sample with its container instead (`go tool pprof
        /// -tagroot=container`).
        #[arg(long, value_enum, value_name = "ROOT")]
        by: Option<crate::report::FoldBy>,
        #[command(flatten)]
        symbols: SymbolArgs,
        #[command(flatten)]
        limits: ReadLimits,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Talk to every daemon of the fleet over NATS ([fleet] in the config):
    /// ask them all for a snapshot (dump), list what they uploaded into the
    /// JetStream object store (list), download one (fetch).
    Fleet {
        /// A NATS server. Default: nats of [fleet] in
        /// /etc/flightrec/flightrec.toml, else nats://127.0.0.1:4222.
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
        /// Subject prefix. Default: subject of [fleet], else flightrec.
        #[arg(long, value_name = "PREFIX")]
        subject: Option<String>,
        /// The JetStream object store bucket of the uploads (list, fetch).
        /// Default: bucket of [fleet], else flightrec.
        #[arg(long, value_name = "BUCKET", value_parser = parse_bucket)]
        bucket: Option<String>,
        /// A NATS credentials file. Default: creds of [fleet].
        #[arg(long, value_name = "FILE", conflicts_with = "user")]
        creds: Option<PathBuf>,
        /// A NATS user (with --password-file). Default: user of [fleet].
        #[arg(long, value_name = "NAME", requires = "password_file")]
        user: Option<String>,
        /// The file holding --user's password.
        #[arg(long, value_name = "FILE", requires = "user")]
        password_file: Option<PathBuf>,
        // Boxed: the other commands are much smaller.
        #[command(subcommand)]
        command: Box<FleetCommand>,
    },
}

/// Where `report` and `export` find symbols.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SymbolArgs {
    /// A build-id cache or root directory holding the snapshot's files (an
    /// unpacked `snapctl archive`, ~/.debug); repeat for several.
    #[arg(long, value_name = "DIR")]
    pub symfs: Vec<PathBuf>,
    /// A kallsyms file of the snapshot's kernel (default: the archive's,
    /// or /proc/kallsyms when this machine runs that kernel).
    #[arg(long, value_name = "FILE")]
    pub kallsyms: Option<PathBuf>,
    /// Use only --symfs and --kallsyms, not this machine's files.
    #[arg(long)]
    pub no_local_files: bool,
}

impl SymbolArgs {
    pub fn sources(&self) -> flightrec_report::SymbolSources {
        flightrec_report::SymbolSources {
            symfs: self.symfs.clone(),
            kallsyms: self.kallsyms.clone(),
            local_files: !self.no_local_files,
        }
    }
}

/// How much of a snapshot `decompress`, `report` and `export` read.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct ReadLimits {
    /// Read a snapshot whose records take at most SIZE once decompressed,
    /// e.g. 8GiB. Default: 64 times the file's size, at least 16 MiB (real
    /// snapshots compress 4 to 15 times; a file from elsewhere, such as a
    /// fleet fetch, could expand to anything). A file past the limit is
    /// refused before any record is read.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_decompressed: Option<u64>,
}

#[derive(Subcommand)]
pub enum FleetCommand {
    /// Ask every daemon (or those --select picks) for a snapshot; print one
    /// line per host that answered within --wait, and the --expect hosts
    /// that did not. Exit status 1 when a host failed or did not answer.
    Dump {
        /// The snapshots' label (see `snapctl dump --label`).
        #[arg(long, value_name = "TEXT")]
        label: Option<String>,
        /// Only hosts whose [fleet] labels have KEY=VALUE (repeat: all must
        /// match; host=NAME matches the fleet host name).
        #[arg(long, value_name = "KEY=VALUE", value_parser = parse_selector)]
        select: Vec<(String, String)>,
        /// Compress with zstd even if a daemon's config says "none".
        #[arg(long)]
        compress: bool,
        /// How long to collect replies, e.g. 10s.
        #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_timeout)]
        wait: Duration,
        /// Hosts that should answer (comma-separated): the ones that did
        /// not are listed, and the wait ends once all have answered.
        #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
        expect: Vec<String>,
        /// Ask this host only (on <subject>.dump.HOST; expected to answer).
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        /// Every host cuts its window around TIME (see `snapctl dump --at`):
        /// a relative TIME is made absolute here, once, so all cut the same
        /// wall-clock window.
        #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
        at: Option<i64>,
        /// Start the windows DUR before TIME.
        #[arg(long, value_name = "DUR", value_parser = parse_window_duration)]
        before: Option<Duration>,
        /// End the windows DUR after TIME.
        #[arg(long, value_name = "DUR", value_parser = parse_window_duration)]
        after: Option<Duration>,
        /// Every host holds only this cgroup (a path relative to the cgroup root, e.g.
        /// /system.slice/nginx.service; its descendants included). Repeat
        /// for several.
        #[arg(long = "cgroup", value_name = "PATH")]
        cgroups: Vec<String>,
        /// Every host holds only this container (the same pod on every node): its id (at least 12 hex digits) or its name.
        /// Repeat for several.
        #[arg(long = "container", value_name = "ID|NAME")]
        containers: Vec<String>,
    },
    /// List the snapshots the daemons uploaded into the bucket.
    ///
    /// One line each, newest first: host, id, size, creation time (UTC),
    /// trigger, compression, label; with --json
    /// {"snapshots": [{"host", "id", "label", "trigger", "bytes",
    /// "compressed", "created_unix_ns"}, ...]}. Objects that are not
    /// snapshots are skipped with a warning on stderr. Exit status 1 when
    /// the bucket does not exist (nothing was uploaded yet).
    List {
        /// Only the snapshots of this fleet host.
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
    },
    /// Download one snapshot of the bucket; print the path written.
    ///
    /// `perf script -i PATH` reads it. The file appears only once complete,
    /// of the size and SHA-256 digest the store and the snapshot's headers
    /// give: a cut or interrupted download leaves nothing behind. Exit
    /// status 1 when there is no such snapshot, the file exists (see
    /// --force) or the download came short or corrupt.
    Fetch {
        /// The snapshot, as `snapctl fleet list` shows it: HOST/ID.
        #[arg(value_name = "HOST/ID", value_parser = crate::fleet::store::parse_snapshot_ref)]
        snapshot: (String, String),
        /// The file to write (or a directory to write ID.perf.data into).
        /// Default: ./ID.perf.data.
        #[arg(short, long, value_name = "PATH")]
        output: Option<PathBuf>,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
}

/// A JetStream bucket name, as `[fleet] bucket` accepts it.
fn parse_bucket(s: &str) -> Result<String, String> {
    if crate::fleet::store::valid_bucket_name(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a bucket name: 1 to 64 characters from A-Z a-z 0-9 _ -"
        ))
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    ByteSize::parse(s).map(ByteSize::bytes)
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = HumanDuration::parse(s)?.get();
    if d.is_zero() {
        return Err("the timeout must be more than 0".into());
    }
    Ok(d)
}

/// A window's `--before`/`--after`: any duration, 0 included.
fn parse_window_duration(s: &str) -> Result<Duration, String> {
    HumanDuration::parse(s).map(HumanDuration::get)
}

/// `--at`: RFC 3339 in UTC, or a duration relative to now with a sign;
/// ns since the Unix epoch.
pub fn parse_time(s: &str) -> Result<i64, String> {
    parse_time_at(s, std::time::SystemTime::now())
}

fn parse_time_at(s: &str, now: std::time::SystemTime) -> Result<i64, String> {
    let s = s.trim();
    let time = if let Some(rest) = s.strip_prefix('-') {
        now.checked_sub(HumanDuration::parse(rest)?.get())
    } else if let Some(rest) = s.strip_prefix('+') {
        now.checked_add(HumanDuration::parse(rest)?.get())
    } else if s == "now" {
        Some(now)
    } else {
        Some(humantime::parse_rfc3339_weak(s).map_err(|e| {
            format!("{s:?}: {e} (RFC 3339 such as 2026-11-23T21:04:05Z, or -5m, +30s)")
        })?)
    };
    time.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_nanos()).ok())
        .ok_or_else(|| format!("{s:?} is out of range"))
}

fn parse_duration(s: &str) -> Result<u64, String> {
    HumanDuration::parse(s).map(|d| d.get().as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn a_time_is_rfc_3339_or_relative_to_now() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let at = |s| parse_time_at(s, now);
        assert_eq!(at("-5m"), Ok(1_800_000_000_000_000_000 - 300_000_000_000));
        assert_eq!(at("+30s"), Ok(1_800_000_000_000_000_000 + 30_000_000_000));
        assert_eq!(at("now"), Ok(1_800_000_000_000_000_000));
        assert_eq!(at("2026-11-23T21:04:05Z"), Ok(1_795_467_845_000_000_000));
        assert_eq!(
            at("2026-11-23T21:04:05.250Z"),
            Ok(1_795_467_845_250_000_000)
        );
        let bad = at("yesterday").unwrap_err();
        assert!(bad.contains("RFC 3339"), "{bad}");
        assert!(at("-5 parsecs").is_err());
        assert!(parse_time("-1s").unwrap() < parse_time("now").unwrap());
    }
}
