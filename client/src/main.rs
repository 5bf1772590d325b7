//! The `snapctl` binary: a thin wrapper over the library.

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use flightrec_config::{
    ByteSize, DEFAULT_CONFIG_PATH, DEFAULT_SOCKET, HumanDuration, LoadedConfig,
};
use flightrec_proto::v1 as pb;
use snapctl::{ClientError, call_error, connect, render};

const EXIT_CODES: &str = "\
Exit status:
  0  success
  1  the daemon answered with an error (bad label or id, disk full, ...)
  2  bad command line
  3  cannot reach the daemon (no socket, nobody listening, connection lost)
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
        /// Keep at most N snapshots (the newest).
        #[arg(long, value_name = "N")]
        keep: Option<u32>,
        /// Keep at most SIZE bytes of snapshots, e.g. 500MiB.
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_bytes: Option<u64>,
        /// Remove snapshots older than DUR, e.g. 2h or 7d.
        #[arg(long, value_name = "DUR", value_parser = parse_duration)]
        max_age: Option<u64>,
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
    /// Print snapshot and loss events as they happen.
    Watch {
        /// Exit after N events.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Make the daemon re-read its config (a bad file is rejected and the
    /// running config kept).
    Reload,
}

fn parse_size(s: &str) -> Result<u64, String> {
    ByteSize::parse(s).map(ByteSize::bytes)
}

fn parse_duration(s: &str) -> Result<u64, String> {
    HumanDuration::parse(s).map(|d| d.get().as_secs())
}

/// Flag or env, else the daemon's config file, else the default.
fn socket_path(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| {
        let path = Path::new(DEFAULT_CONFIG_PATH);
        path.exists()
            .then(|| LoadedConfig::load(path).ok())
            .flatten()
            .map(|l| l.config.daemon.socket)
    })
    .unwrap_or_else(|| DEFAULT_SOCKET.into())
}

async fn run(args: Args) -> Result<(), ClientError> {
    let path = socket_path(args.socket);
    let json = args.json;
    let mut client = connect(&path).await?;
    let err = |s| call_error(&path, s);
    let text = match args.command {
        Command::Dump { label, compress } => {
            let r = client
                .dump(pb::DumpRequest {
                    label: label.unwrap_or_default(),
                    compress,
                })
                .await
                .map_err(err)?;
            render::dump(r.get_ref(), json)
        }
        Command::List => {
            let r = client.list(pb::ListRequest {}).await.map_err(err)?;
            render::list(r.get_ref(), json)
        }
        Command::Rotate {
            keep,
            max_bytes,
            max_age,
        } => {
            let r = client
                .rotate(pb::RotateRequest {
                    max_snapshots: keep,
                    max_bytes,
                    max_age_seconds: max_age,
                })
                .await
                .map_err(err)?;
            render::rotate(r.get_ref(), json)
        }
        Command::Compress { id, level } => {
            let r = client
                .compress(pb::CompressRequest {
                    id,
                    level: level.unwrap_or(0),
                })
                .await
                .map_err(err)?;
            render::compress(r.get_ref(), json)
        }
        Command::Status => {
            let r = client.status(pb::StatusRequest {}).await.map_err(err)?;
            render::status(r.get_ref(), json)
        }
        Command::Reload => {
            let r = client.reload(pb::ReloadRequest {}).await.map_err(err)?;
            render::reload(r.get_ref(), json)
        }
        Command::Watch { count } => {
            let mut stream = client
                .watch(pb::WatchRequest {})
                .await
                .map_err(err)?
                .into_inner();
            let mut seen = 0u64;
            while count.is_none_or(|c| seen < c) {
                match stream.message().await.map_err(err)? {
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
    };
    writeln!(std::io::stdout(), "{text}").map_err(ClientError::Output)
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
