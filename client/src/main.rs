//! The `snapctl` binary: a thin wrapper over the library.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use flightrec_config::{
    ByteSize, DEFAULT_CONFIG_PATH, DEFAULT_SOCKET, HumanDuration, LoadedConfig,
};
use flightrec_proto::v1 as pb;
use snapctl::fleet::{FleetTarget, parse_selector, request_json};
use snapctl::{ClientError, DEFAULT_TIMEOUT, answered_within, call_error, connect, render};

const EXIT_CODES: &str = "\
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
struct Args {
    /// The daemon's socket. Default: $FLIGHTREC_SOCKET, else daemon.socket
    /// from /etc/flightrec/flightrec.toml, else /run/flightrec/flightrecd.sock.
    #[arg(long, global = true, value_name = "PATH", env = "FLIGHTREC_SOCKET")]
    socket: Option<PathBuf>,

    /// Print JSON (one object; `watch` prints one per line) instead of text.
    #[arg(long, global = true)]
    json: bool,

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
    timeout: Option<Duration>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Take a snapshot now and print its path (`perf script -i PATH` reads it).
    Dump {
        /// Free text added to the file name: letters, digits, '.', '_', '-',
        /// at most 64 characters, not starting with '.'.
        #[arg(long, value_name = "TEXT")]
        label: Option<String>,
        /// Compress with zstd even if the daemon's config says "none".
        #[arg(long)]
        compress: bool,
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
    /// readers without zstd (hotspot's perfparser).
    Decompress {
        /// The snapshot's id or a path to a .perf.data file.
        snapshot: String,
        /// The copy to write (with the snapshot's mode and group).
        /// Default: ./ID.plain.perf.data.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
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

#[derive(Subcommand)]
enum FleetCommand {
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
        #[arg(value_name = "HOST/ID", value_parser = snapctl::fleet::store::parse_snapshot_ref)]
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
    if snapctl::fleet::store::valid_bucket_name(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a bucket name: 1 to 64 characters from A-Z a-z 0-9 _ -"
        ))
    }
}

/// The id of a snapshot file name (`ID.perf.data`).
fn snapshot_id(path: &Path) -> String {
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    name.strip_suffix(".perf.data").unwrap_or(&name).to_string()
}

/// The archive and decompress verbs: `target` resolved to a file (asking
/// the daemon's list for an id), the output written by this process.
async fn local_verb(
    command: Command,
    socket: &Path,
    timeout: Duration,
    json: bool,
) -> Result<String, ClientError> {
    let (Command::Archive { snapshot, .. } | Command::Decompress { snapshot, .. }) = &command
    else {
        unreachable!("only archive and decompress are local");
    };
    let path = if snapshot.contains('/') || snapshot.ends_with(".perf.data") {
        PathBuf::from(snapshot)
    } else {
        let mut client = connect(socket, timeout).await?;
        let r = answered_within(socket, timeout, client.list(pb::ListRequest {})).await?;
        let found = r.snapshots.iter().find(|s| s.id == *snapshot);
        match found {
            Some(s) => PathBuf::from(&s.path),
            None => {
                return Err(ClientError::Daemon {
                    code: tonic::Code::NotFound,
                    message: format!("no snapshot with id {snapshot} (see snapctl list)"),
                });
            }
        }
    };
    let id = snapshot_id(&path);
    let failed = |e: snapctl::archive::ArchiveError| ClientError::Daemon {
        code: tonic::Code::FailedPrecondition,
        message: e.to_string(),
    };
    match command {
        Command::Archive {
            output,
            no_kallsyms,
            force,
            ..
        } => {
            let out = output.unwrap_or_else(|| format!("{id}.tar").into());
            let opts = snapctl::archive::ArchiveOptions {
                kallsyms: !no_kallsyms,
                force,
            };
            let s = snapctl::archive::write_archive(&path, &out, opts).map_err(failed)?;
            Ok(render::archive(&out, &s, json))
        }
        Command::Decompress { output, force, .. } => {
            let out = output.unwrap_or_else(|| format!("{id}.plain.perf.data").into());
            let bytes = snapctl::archive::write_plain_copy(&path, &out, force).map_err(failed)?;
            Ok(if json {
                serde_json::json!({"path": out.display().to_string(), "bytes": bytes}).to_string()
            } else {
                out.display().to_string()
            })
        }
        _ => unreachable!("only archive and decompress are local"),
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

fn parse_duration(s: &str) -> Result<u64, String> {
    HumanDuration::parse(s).map(|d| d.get().as_secs())
}

/// The daemon's config file, when there is one that reads.
fn daemon_config() -> Option<LoadedConfig> {
    let path = Path::new(DEFAULT_CONFIG_PATH);
    path.exists()
        .then(|| LoadedConfig::load(path).ok())
        .flatten()
}

/// Flag or env, else the daemon's config file, else the default.
fn socket_path(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| daemon_config().map(|l| l.config.daemon.socket))
        .unwrap_or_else(|| DEFAULT_SOCKET.into())
}

/// What `snapctl fleet` was told about NATS; the rest comes from [fleet].
struct FleetFlags {
    nats: Option<String>,
    subject: Option<String>,
    bucket: Option<String>,
    creds: Option<PathBuf>,
    user: Option<String>,
    password_file: Option<PathBuf>,
}

fn print_line(text: &str) -> Result<(), ClientError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(ClientError::Output)
}

/// `snapctl fleet ...`: NATS only, no daemon socket.
async fn run_fleet(
    flags: FleetFlags,
    command: FleetCommand,
    json: bool,
    timeout: Duration,
) -> Result<(), ClientError> {
    let config = daemon_config();
    let mut target = FleetTarget::new(
        flags.nats,
        config
            .as_ref()
            .and_then(|c| c.config.fleet.as_ref().map(|f| f.get_ref())),
    );
    if let Some(s) = flags.subject {
        target.subject = s;
    }
    if let Some(b) = flags.bucket {
        target.bucket = b;
    }
    if let Some(creds) = flags.creds {
        target.creds = Some(creds);
        target.user = None;
    }
    if let (Some(user), Some(file)) = (flags.user, flags.password_file) {
        target.user = Some((user, file));
        target.creds = None;
    }
    let (label, select, compress, wait, mut expect, host) = match command {
        FleetCommand::Dump {
            label,
            select,
            compress,
            wait,
            expect,
            host,
        } => (label, select, compress, wait, expect, host),
        FleetCommand::List { host } => {
            let listing = snapctl::fleet::store::list(&target, host.as_deref(), timeout).await?;
            for warning in listing.warnings() {
                eprintln!("snapctl: {warning}");
            }
            return print_line(&listing.render(json));
        }
        FleetCommand::Fetch {
            snapshot: (host, id),
            output,
            force,
        } => {
            let out = snapctl::fleet::store::output_path(output.as_deref(), &id);
            let fetched =
                snapctl::fleet::store::fetch(&target, (&host, &id), &out, force, timeout).await?;
            return print_line(&fetched.render(json));
        }
    };
    let select: BTreeMap<String, String> = select.into_iter().collect();
    let request = request_json(label.as_deref(), &select, compress);
    if let Some(h) = &host
        && expect.is_empty()
    {
        expect.push(h.clone());
    }
    let result =
        snapctl::fleet::dump(&target, host.as_deref(), &request, wait, &expect, timeout).await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", result.render(json))
        .and_then(|()| out.flush())
        .map_err(ClientError::Output)?;
    match result.failure() {
        Some(why) => Err(ClientError::Fleet(why)),
        None => Ok(()),
    }
}

async fn run(args: Args) -> Result<(), ClientError> {
    let json = args.json;
    let timeout = args.timeout.unwrap_or(DEFAULT_TIMEOUT);
    // The fleet is reached over NATS, not through the daemon's socket.
    let args = match args.command {
        Command::Fleet {
            nats,
            subject,
            bucket,
            creds,
            user,
            password_file,
            command,
        } => {
            let flags = FleetFlags {
                nats,
                subject,
                bucket,
                creds,
                user,
                password_file,
            };
            return run_fleet(flags, *command, json, timeout).await;
        }
        command => Args { command, ..args },
    };
    let path = socket_path(args.socket);
    if matches!(
        args.command,
        Command::Archive { .. } | Command::Decompress { .. }
    ) {
        let text = local_verb(args.command, &path, timeout, json).await?;
        let mut out = std::io::stdout().lock();
        return writeln!(out, "{text}")
            .and_then(|()| out.flush())
            .map_err(ClientError::Output);
    }
    let mut client = connect(&path, timeout).await?;
    let text = match args.command {
        Command::Dump { label, compress } => {
            // A dump may wait for its slot (snapshot.min_interval) and take
            // long to write: no deadline, but the connection's keep-alive
            // pings end it when the daemon stops answering.
            let r = client
                .dump(pb::DumpRequest {
                    label: label.unwrap_or_default(),
                    compress,
                })
                .await
                .map_err(|s| call_error(&path, s, timeout))?;
            render::dump(r.get_ref(), json)
        }
        Command::List => {
            let r = answered_within(&path, timeout, client.list(pb::ListRequest {})).await?;
            render::list(&r, json)
        }
        Command::Rotate {
            keep,
            max_bytes,
            max_age,
            all,
        } => {
            let r = answered_within(
                &path,
                timeout,
                client.rotate(pb::RotateRequest {
                    max_snapshots: keep,
                    max_bytes,
                    max_age_seconds: max_age,
                    delete_all: all,
                }),
            )
            .await?;
            render::rotate(&r, json)
        }
        Command::Compress { id, level } => {
            // Compressing a big snapshot takes a while: kept alive by pings
            // like a dump.
            let r = client
                .compress(pb::CompressRequest {
                    id,
                    level: level.unwrap_or(0),
                })
                .await
                .map_err(|s| call_error(&path, s, timeout))?;
            render::compress(r.get_ref(), json)
        }
        Command::Status => {
            let r = answered_within(&path, timeout, client.status(pb::StatusRequest {})).await?;
            render::status(&r, json)
        }
        Command::Triggers => {
            let r = answered_within(&path, timeout, client.status(pb::StatusRequest {})).await?;
            render::triggers(&r, json)
        }
        Command::Reload => {
            let r = answered_within(&path, timeout, client.reload(pb::ReloadRequest {})).await?;
            render::reload(&r, json)
        }
        Command::Watch { count } => {
            let mut stream =
                answered_within(&path, timeout, client.watch(pb::WatchRequest {})).await?;
            let mut seen = 0u64;
            while count.is_none_or(|c| seen < c) {
                match stream
                    .message()
                    .await
                    .map_err(|s| call_error(&path, s, timeout))?
                {
                    Some(e) => {
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "{}", render::watch_event(&e, json))
                            .and_then(|()| out.flush())
                            .map_err(ClientError::Output)?;
                        seen += 1;
                    }
                    None => {
                        return Err(ClientError::Connect {
                            path: path.clone(),
                            message: "the daemon ended the stream (shutting down?)".into(),
                        });
                    }
                }
            }
            return Ok(());
        }
        Command::Archive { .. } | Command::Decompress { .. } | Command::Fleet { .. } => {
            unreachable!("handled before connecting")
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(ClientError::Output)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let json = args.json;
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("snapctl: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`snapctl status | head -1`): it has what it
        // wanted, which is not an error.
        Err(ClientError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            if json {
                eprintln!("{}", e.to_json());
            } else {
                eprintln!("snapctl: {e}");
            }
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}
