//! The `snapctl` binary: a thin wrapper over the library.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use flightrec_config::{DEFAULT_CONFIG_PATH, DEFAULT_SOCKET, LoadedConfig};
use flightrec_proto::v1 as pb;
use snapctl::cli::{Args, Command, FleetCommand};
use snapctl::fleet::{FleetTarget, request_json};
use snapctl::{ClientError, DEFAULT_TIMEOUT, answered_within, call_error, connect, render};

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
