//! The fleet: with `[fleet]` set, the daemon joins NATS and answers dump
//! requests sent to every host (`<subject>.dump`) or to it alone
//! (`<subject>.dump.<host>`).
//!
//! A matching request goes through [`crate::dump::Dumps::dump`] with
//! [`TriggerKind::Fleet`], so it is coalesced and rate-limited like every
//! other trigger; the reply (to the message's reply subject) is the
//! snapshot's metadata or the error. NATS is never in the way of local
//! recording: the connection is made in the background, retried forever,
//! and its state and last error are shown by `Status`.

pub mod jetstream;
pub mod object;
pub mod request;
pub mod s3;
pub mod upload;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event as NatsEvent, Message};
use flightrec_config::{FleetConfig, check_host, quoted};
use tokio::sync::Semaphore;
use tokio_stream::StreamExt;

use crate::control::fleet_status::{FleetReport, FleetStatus};
use crate::control::{self, Control};
use crate::dump::{DumpRequest, TriggerKind};
use crate::log_limit::{RateLimitedWarning, cut};
use crate::store::validate_label;
use crate::time::WallTime;
pub use request::{FleetReply, FleetRequest};

/// Longest pause between two connection attempts.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);
/// Fleet requests that may wait for their snapshot at once; more are
/// answered "busy" at once, so a flood of requests cannot pile up tasks
/// (those waiting share one dump anyway).
pub const MAX_WAITING_REQUESTS: usize = 16;

/// Messages a subscription holds before the client drops more (a "slow
/// consumer"): the memory a flood of requests can take is this many
/// payloads, not the 64Ki messages async-nats holds by default (measured:
/// 6,000 requests of 60 KB grew a debug daemon by 300 MiB).
pub const SUBSCRIPTION_CAPACITY: usize = 16;

/// The host name in the fleet: `fleet.host`, else the machine's.
pub fn fleet_host(fleet: &FleetConfig) -> String {
    fleet
        .host
        .as_ref()
        .map_or_else(crate::control::config::host_name, |h| h.get_ref().clone())
}

/// Joins the fleet and serves its requests until shutdown. Never fails:
/// what goes wrong is logged and shown by `Status`.
pub async fn run(state: Arc<Control>, fleet: FleetConfig) {
    let host = fleet_host(&fleet);
    let status = state.fleet.clone();
    let destinations = upload::destinations(&fleet);
    *status.lock() = Some(FleetReport {
        state: "connecting",
        host: host.clone(),
        servers: fleet.servers().to_vec(),
        bucket: fleet.bucket.get_ref().clone(),
        upload_destinations: destinations.clone(),
        ..FleetReport::default()
    });
    if let Err(why) = check_host(&host) {
        status.set_state("stopped");
        status.set_error(format!(
            "{why}; set fleet.host to a valid name (the fleet is off, local recording goes on)"
        ));
        return;
    }
    let mut stop = state.lifecycle.shutdown_signal();
    let client = loop {
        match connect(&fleet, &host, &status).await {
            Ok(client) => break client,
            Err(e) => status.set_error(e),
        }
        tokio::select! {
            () = tokio::time::sleep(MAX_RETRY_DELAY) => {}
            () = control::stopped(&mut stop) => return,
        }
    };
    let prefix = fleet.subject.get_ref();
    let labels = fleet.label_map();
    if !destinations.is_empty() {
        let uploader = upload::Uploader {
            state: state.clone(),
            client: client.clone(),
            host: host.clone(),
            labels: labels.clone(),
            bucket: fleet.bucket.get_ref().clone(),
            replicas: usize::from(*fleet.replicas.get_ref()),
            s3: fleet.s3.as_ref().map(|s| s.get_ref().clone()),
        };
        tokio::spawn(uploader.run());
    }
    let subjects = [format!("{prefix}.dump"), format!("{prefix}.dump.{host}")];
    let mut requests = match subscribe(&client, &subjects).await {
        Ok(s) => s,
        Err(e) => {
            status.set_state("stopped");
            status.set_error(e);
            return;
        }
    };
    tracing::info!(
        host = %host,
        servers = %fleet.servers().join(","),
        subjects = %subjects.join(", "),
        "fleet: listening for dump requests"
    );
    let fleet_state = Arc::new(Served {
        state: state.clone(),
        client: client.clone(),
        host,
        labels,
        waiting: Arc::new(Semaphore::new(MAX_WAITING_REQUESTS)),
    });
    loop {
        tokio::select! {
            message = requests.next() => match message {
                Some(m) => match FleetRequest::parse(&m.payload) {
                    // Answered here: a flood of bad requests spawns nothing.
                    Err(e) => fleet_state.refuse(m, e).await,
                    Ok(r) => {
                        let served = fleet_state.clone();
                        tokio::spawn(async move { served.answer(m, r).await });
                    }
                },
                None => break,
            },
            () = control::stopped(&mut stop) => break,
        }
    }
    // Replies already published go out before the connection closes.
    let _ = client.flush().await;
}

/// What answering a request needs.
struct Served {
    state: Arc<Control>,
    client: Client,
    host: String,
    labels: BTreeMap<String, String>,
    /// One permit per request waiting for its dump.
    waiting: Arc<Semaphore>,
}

impl Served {
    /// Refuses a malformed request: a rate-limited warning and an error
    /// reply, both naming what was wrong in a few words.
    async fn refuse(&self, message: Message, error: String) {
        static BAD: RateLimitedWarning = RateLimitedWarning::per_minute();
        self.state.fleet.update(|s| s.bad_requests += 1);
        BAD.warn(|| format!("fleet: bad request on {}: {error}", cut(&message.subject)));
        self.reply(message.reply, FleetReply::error(&self.host, error))
            .await;
    }

    async fn answer(&self, message: Message, request: FleetRequest) {
        if !request.selects(&self.host, &self.labels) {
            return;
        }
        let reply = self.dump(request).await;
        self.reply(message.reply, reply).await;
    }

    async fn reply(&self, to: Option<async_nats::Subject>, reply: FleetReply) {
        let Some(to) = to else {
            return;
        };
        if let Err(e) = self.client.publish(to, reply.to_json().into()).await {
            self.state
                .fleet
                .set_error(format!("cannot send a reply: {e}"));
        } else {
            let _ = self.client.flush().await;
        }
    }

    async fn dump(&self, r: FleetRequest) -> FleetReply {
        self.state.fleet.update(|s| s.requests += 1);
        // Refused here, as the API does, so a bad label never fails a
        // dump that other triggers share.
        if let Some(Err(e)) = r.label.as_deref().map(validate_label) {
            return FleetReply::error(&self.host, e.to_string());
        }
        let Ok(_waiting) = self.waiting.clone().try_acquire_owned() else {
            return FleetReply::error(
                &self.host,
                format!(
                    "busy: {MAX_WAITING_REQUESTS} fleet requests already wait for a snapshot \
                     on this host; ask again once they are answered"
                ),
            );
        };
        tracing::info!(
            label = r.label.as_deref().unwrap_or(""),
            "fleet: dump requested"
        );
        let window = match r.window().and_then(|w| {
            w.resolve(WallTime::now()).map_err(|e| {
                // The API's field names, as the request's keys.
                let key = e.field.trim_end_matches("_unix_ns").trim_end_matches("_ns");
                format!("{key}: {}", e.message)
            })
        }) {
            Ok(w) => w,
            Err(e) => return FleetReply::error(&self.host, e),
        };
        let scope = match r.scope() {
            Ok(s) => s,
            Err(e) => return FleetReply::error(&self.host, e),
        };
        let request = DumpRequest {
            label: r.label,
            compress: r.compress,
            window,
            scope,
        };
        match self.state.dumps.dump(TriggerKind::Fleet, request).await {
            Ok(served) => {
                self.state.fleet.update(|s| s.dumps += 1);
                FleetReply::snapshot(
                    &self.host,
                    &served.done.snapshot,
                    served.done.output.window,
                    served.coalesced,
                )
            }
            Err(e) => FleetReply::error(&self.host, e.to_string()),
        }
    }
}

/// Subscribes to every subject, merged into one stream.
async fn subscribe(
    client: &Client,
    subjects: &[String; 2],
) -> Result<impl tokio_stream::Stream<Item = Message> + Unpin, String> {
    let mut subs = Vec::new();
    for s in subjects {
        subs.push(
            client
                .subscribe(s.clone())
                .await
                .map_err(|e| format!("cannot subscribe to {}: {e}", quoted(s)))?,
        );
    }
    let [all, own]: [_; 2] = subs
        .try_into()
        .map_err(|_| "two subscriptions expected".to_string())?;
    Ok(all.merge(own))
}

/// A client connecting in the background: it returns at once, retries
/// forever and reports through `status`. Errors are the settings it could
/// not read (a credentials file).
async fn connect(
    fleet: &FleetConfig,
    host: &str,
    status: &Arc<FleetStatus>,
) -> Result<Client, String> {
    let mut options = ConnectOptions::new()
        .name(format!("flightrecd {host}"))
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(5))
        .subscription_capacity(SUBSCRIPTION_CAPACITY)
        .reconnect_delay_callback(|attempts| {
            Duration::from_millis(250u64.saturating_mul(attempts as u64)).min(MAX_RETRY_DELAY)
        });
    if let Some(creds) = &fleet.creds {
        options = options
            .credentials_file(creds.get_ref())
            .await
            .map_err(|e| file_error("creds", creds.get_ref(), &e))?;
    }
    if let (Some(user), Some(file)) = (&fleet.user, &fleet.password_file) {
        let password = tokio::fs::read_to_string(file.get_ref())
            .await
            .map_err(|e| file_error("password_file", file.get_ref(), &e))?;
        // A trailing newline is the editor's, not the password's.
        let password = password.trim_end_matches(['\n', '\r']).to_string();
        options = options.user_and_password(user.get_ref().clone(), password);
    }
    if let Some(ca) = &fleet.tls_ca {
        options = options
            .add_root_certificates(ca.get_ref().clone())
            .require_tls(true);
    }
    if let (Some(cert), Some(key)) = (&fleet.tls_cert, &fleet.tls_key) {
        options = options
            .add_client_certificate(cert.get_ref().clone(), key.get_ref().clone())
            .require_tls(true);
    }
    let servers = fleet.servers().join(", ");
    let events = status.clone();
    options = options.event_callback(move |event| {
        let status = events.clone();
        let servers = servers.clone();
        async move { on_event(&status, &servers, event) }
    });
    let addrs = fleet
        .servers()
        .iter()
        .map(|u| u.parse::<async_nats::ServerAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("fleet.nats: {e}"))?;
    options
        .connect(addrs)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", fleet.servers().join(", ")))
}

fn file_error(key: &str, path: &Path, e: &std::io::Error) -> String {
    format!(
        "cannot read fleet.{key} {}: {e} (retrying; local recording goes on)",
        quoted(&path.display().to_string())
    )
}

/// Connection events into the report.
fn on_event(status: &FleetStatus, servers: &str, event: NatsEvent) {
    match event {
        NatsEvent::Connected => {
            tracing::info!("fleet: connected to NATS ({servers})");
            status.set_state("connected");
            // Back after an outage: the queue goes now, not at the next retry.
            status.wake_uploads();
        }
        NatsEvent::Disconnected => {
            status.set_state("disconnected");
            status.set_error(format!("disconnected from {servers}; reconnecting"));
        }
        NatsEvent::ClientError(e) => {
            status.set_error(describe_connect_error(servers, &e.to_string()))
        }
        NatsEvent::ServerError(e) => {
            status.set_error(describe_connect_error(servers, &e.to_string()))
        }
        NatsEvent::Closed => status.set_state("disconnected"),
        NatsEvent::SlowConsumer(_) => {
            static DROPPED: RateLimitedWarning = RateLimitedWarning::per_minute();
            DROPPED.warn(|| {
                format!(
                    "fleet: requests arrive faster than they are read; more than \
                     {SUBSCRIPTION_CAPACITY} waiting were dropped"
                )
            });
        }
        other => tracing::debug!("fleet: {other}"),
    }
}

/// A connection error with what to check.
pub fn describe_connect_error(servers: &str, error: &str) -> String {
    let error = error.trim_start_matches("nats: ");
    let hint = if error.contains("authorization violation") {
        " (the server refused the credentials: check fleet.creds or fleet.user and \
         fleet.password_file)"
    } else if error.contains("IO error") || error.contains("timed out") {
        " (is nats-server running and reachable?)"
    } else {
        ""
    };
    format!("cannot connect to {servers}: {error}{hint}; retrying, local recording goes on")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_errors_say_what_to_check() {
        assert_eq!(
            describe_connect_error("nats://127.0.0.1:4222", "nats: authorization violation"),
            "cannot connect to nats://127.0.0.1:4222: authorization violation (the server \
             refused the credentials: check fleet.creds or fleet.user and fleet.password_file); \
             retrying, local recording goes on"
        );
        assert!(describe_connect_error("s", "nats: IO error").contains("is nats-server running"));
    }

    #[test]
    fn the_report_follows_connection_events() {
        let status = FleetStatus::default();
        on_event(&status, "s", NatsEvent::Connected);
        assert_eq!(status.report(), None, "no [fleet], no report");
        *status.lock() = Some(FleetReport {
            state: "connecting",
            ..FleetReport::default()
        });
        on_event(&status, "s", NatsEvent::Connected);
        assert_eq!(status.report().unwrap().state, "connected");
        on_event(&status, "s", NatsEvent::Disconnected);
        let r = status.report().unwrap();
        assert_eq!(r.state, "disconnected");
        assert_eq!(r.last_error, "disconnected from s; reconnecting");
        assert!(r.last_error_unix_ns > 0);
    }
}
