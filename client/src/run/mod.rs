//! What snapctl does with a parsed command line: each group of commands
//! reaches what it needs (the fleet over NATS, a snapshot file, the
//! daemon's socket), prints its reply on stdout, and a failure becomes a
//! line on stderr and an exit status ([`failure`]).

mod config;
mod daemon;
mod fleet;
mod local;

use std::io::Write;

use crate::cli::{Args, Command};
use crate::{ClientError, DEFAULT_TIMEOUT};
use daemon::Daemon;
use fleet::FleetFlags;

/// Runs one command, printing its reply on stdout.
pub async fn run(args: Args) -> Result<(), ClientError> {
    let json = args.json;
    let timeout = args.timeout.unwrap_or(DEFAULT_TIMEOUT);
    // The fleet is reached over NATS, not through the daemon's socket.
    if let Command::Fleet {
        nats,
        subject,
        bucket,
        creds,
        user,
        password_file,
        command,
    } = args.command
    {
        let flags = FleetFlags {
            nats,
            subject,
            bucket,
            creds,
            user,
            password_file,
        };
        return fleet::run(flags, args.config.as_deref(), *command, json, timeout).await;
    }
    let daemon = Daemon {
        socket: config::socket_path(args.socket, args.config.as_deref())?,
        timeout,
    };
    match args.command {
        Command::Archive {
            snapshot,
            output,
            no_kallsyms,
            force,
        } => {
            let options = crate::archive::ArchiveOptions {
                kallsyms: !no_kallsyms,
                force,
            };
            let text = local::archive(&daemon, &snapshot, output, options, json).await?;
            print_line(&text)
        }
        Command::Decompress {
            snapshot,
            output,
            limits,
            force,
        } => {
            let text = local::decompress(&daemon, &snapshot, output, limits, force, json).await?;
            print_line(&text)
        }
        Command::Report {
            snapshot,
            output,
            symbols,
            limits,
            force,
        } => {
            let text =
                local::report(&daemon, &snapshot, output, &symbols, limits, force, json).await?;
            print_line(&text)
        }
        Command::Export {
            snapshot,
            format,
            output,
            event,
            off_cpu,
            by,
            symbols,
            limits,
            force,
        } => {
            let request = crate::report::ExportRequest {
                format,
                event,
                off_cpu,
                by,
                max_decompressed: limits.max_decompressed,
                force,
            };
            let text = local::export(&daemon, &snapshot, output, request, &symbols, json).await?;
            if !text.is_empty() {
                print_line(&text)?;
            }
            Ok(())
        }
        command => daemon::call(&daemon, command, json).await,
    }
}

/// One reply on stdout, flushed at once (`watch` prints as events come).
fn print_line(text: &str) -> Result<(), ClientError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(ClientError::Output)
}

/// How a failed run ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The line for stderr: `snapctl: why`, or the error's JSON object
    /// with `--json`.
    pub message: String,
    /// The exit status (see [`crate::cli::EXIT_CODES`]).
    pub status: u8,
}

/// How `error` ends snapctl; None when the reader of stdout went away
/// (`snapctl status | head -1`): it has what it wanted, which is not an
/// error.
pub fn failure(error: &ClientError, json: bool) -> Option<Failure> {
    if let ClientError::Output(e) = error
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        return None;
    }
    let message = if json {
        error.to_json()
    } else {
        // Errors quote what others wrote (a host's reply, a header).
        crate::render::shown(&format!("snapctl: {error}")).into_owned()
    };
    Some(Failure {
        message,
        status: u8::try_from(error.exit_code()).unwrap_or(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_stdout_is_success_and_other_errors_are_a_line_and_a_status() {
        let gone = ClientError::Output(std::io::ErrorKind::BrokenPipe.into());
        assert_eq!(failure(&gone, false), None);
        assert_eq!(failure(&gone, true), None);
        let full = ClientError::Output(std::io::Error::other("disk full"));
        assert_eq!(
            failure(&full, false),
            Some(Failure {
                message: "snapctl: cannot write the output: disk full".into(),
                status: 1,
            })
        );
        let missing = ClientError::NoSocket {
            path: "/run/x.sock".into(),
        };
        assert_eq!(
            failure(&missing, false),
            Some(Failure {
                message: "snapctl: daemon not running (no socket at /run/x.sock)".into(),
                status: 3,
            })
        );
        let refused = ClientError::Daemon {
            code: tonic::Code::PermissionDenied,
            message: "no".into(),
        };
        let f = failure(&refused, true).unwrap();
        assert_eq!(f.status, 4);
        let v: serde_json::Value = serde_json::from_str(&f.message).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": "no", "code": "PermissionDenied", "exit": 4})
        );
    }
}
