//! Scenario `fleet`: three daemons on this machine joined to one
//! nats-server with JetStream, under `perf bench sched messaging -g 4`:
//! how long a fleet dump takes from the request to the last of the three
//! replies, beside a plain local `snapctl dump`; and how fast the
//! snapshots then go up to the JetStream object store (read off each
//! daemon's "snapshot uploaded" log lines). perf has no counterpart.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use flightrec_tests::NatsServer;

use crate::MIB;
use crate::cli::Args;
use crate::recorder::{FleetSetup, Kind, Recorder, Setup};
use crate::report::{Row, Section, show};
use crate::stats::Summary;
use crate::workload::BackgroundLoad;

const RING: u64 = 4 * MIB;
const HOSTS: [&str; 3] = ["host-a", "host-b", "host-c"];

/// `bytes=N` / `ms=N` of a tracing line.
fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|t| t.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

/// (bytes, ms) of every upload a daemon logged.
fn uploads(log: &str) -> Vec<(u64, u64)> {
    log.lines()
        .filter(|l| l.contains("fleet: snapshot uploaded") && l.contains("already_there=false"))
        .filter_map(|l| Some((field(l, "bytes")?, field(l, "ms")?)))
        .collect()
}

fn wait_status(r: &Recorder, what: &str, done: impl Fn(&serde_json::Value) -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let fleet = r.status()?["fleet"].clone();
        if done(&fleet) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{what} not reached in 60s: {fleet}\n{}", r.log());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Until host-a has uploaded `n` snapshots, the others at least half as
/// many (they take no local dumps), and none waits.
fn all_uploaded(recorders: &[Recorder], n: u64) -> Result<()> {
    for (i, r) in recorders.iter().enumerate() {
        let want = if i == 0 { n } else { n.div_ceil(2) };
        wait_status(r, "uploads done", |f| {
            f["uploaded"].as_u64() >= Some(want) && f["uploads_pending"] == 0
        })?;
    }
    Ok(())
}

/// `snapctl --json fleet dump` to every host: request → last reply.
fn fleet_dump(url: &str) -> Result<Duration> {
    let out = Command::new(flightrec_tests::bin_path("snapctl"))
        .args(["--json", "fleet", "--nats", url, "dump", "--wait", "20s"])
        .args(["--expect", &HOSTS.join(",")])
        .output()
        .context("running snapctl fleet dump")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "snapctl fleet dump: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    if !out.status.success() || v["missing"] != serde_json::json!([]) {
        bail!("fleet dump incomplete: {v}");
    }
    let ns = v["last_reply_ns"].as_u64().context("no last_reply_ns")?;
    Ok(Duration::from_nanos(ns))
}

/// What one phase (under load, or idle) measured.
#[derive(Default)]
struct Phase {
    fan_out: Vec<f64>,
    local: Vec<f64>,
    upload_ms: Vec<f64>,
    mib_per_s: Vec<f64>,
    sizes: Vec<f64>,
}

impl Phase {
    /// `rounds` fleet dumps, each followed by a local dump on host-a, every
    /// snapshot uploaded before the next. `uploaded` counts host-a's
    /// uploads so far. With `refill`, a burst of load fills the rings
    /// before each dump and stops before it, so the idle machine dumps and
    /// ships full rings.
    fn run(
        &mut self,
        recorders: &mut [Recorder],
        url: &str,
        rounds: usize,
        uploaded: &mut u64,
        refill: bool,
    ) -> Result<()> {
        let fill = || -> Result<()> {
            if refill {
                let load = BackgroundLoad::messaging(4)?;
                std::thread::sleep(Duration::from_secs(3));
                drop(load);
                std::thread::sleep(Duration::from_millis(500));
            }
            Ok(())
        };
        for _ in 0..rounds {
            fill()?;
            self.fan_out.push(fleet_dump(url)?.as_secs_f64() * 1e3);
            *uploaded += 1;
            let n = *uploaded;
            all_uploaded(recorders, n)?;
            fill()?;
            let shot = recorders[0].trigger_snapctl(false)?;
            self.local.push(shot.elapsed.as_secs_f64() * 1e3);
            *uploaded += 1;
            let n = *uploaded;
            wait_status(&recorders[0], "local upload", |f| {
                f["uploaded"].as_u64() >= Some(n) && f["uploads_pending"] == 0
            })?;
        }
        Ok(())
    }

    fn add_uploads(&mut self, log_lines: &str) {
        for (bytes, ms) in uploads(log_lines) {
            self.sizes.push(bytes as f64 / MIB as f64);
            self.upload_ms.push(ms as f64);
            if ms > 0 {
                self.mib_per_s
                    .push(bytes as f64 / MIB as f64 / (ms as f64 / 1e3));
            }
        }
    }
}

pub fn fleet(args: &Args) -> Result<Section> {
    let nats = NatsServer::start();
    let url = nats.url();
    let rounds = if args.quick { 5 } else { 10 };
    let (mut loaded, mut idle) = (Phase::default(), Phase::default());
    for _ in 0..args.runs {
        let mut recorders = HOSTS
            .iter()
            .map(|&host| {
                let setup = Setup {
                    fleet: Some(FleetSetup {
                        nats_port: nats.port,
                        host,
                    }),
                    ..Setup::switch_and_clock(RING)
                };
                Recorder::start(Kind::Flightrec, setup)
            })
            .collect::<Result<Vec<_>>>()?;
        for r in &recorders {
            wait_status(r, "connected", |f| f["state"] == "connected")?;
        }
        let mut uploaded = 0;
        let load = BackgroundLoad::messaging(4)?;
        std::thread::sleep(Duration::from_secs(5));
        loaded.run(&mut recorders, &url, rounds, &mut uploaded, false)?;
        drop(load);
        // Where each log's idle part begins.
        let marks: Vec<usize> = recorders.iter().map(|r| r.log().len()).collect();
        std::thread::sleep(Duration::from_secs(2));
        idle.run(&mut recorders, &url, rounds, &mut uploaded, true)?;
        for (r, mark) in recorders.into_iter().zip(marks) {
            let log = r.log();
            let (under_load, after) = log.split_at(mark.min(log.len()));
            loaded.add_uploads(under_load);
            idle.add_uploads(after);
            r.stop()?;
        }
    }
    let row = |metric: &str, pick: &dyn Fn(&Phase) -> &Vec<f64>, unit: &str, precision| Row {
        metric: metric.into(),
        flightrec: show(Summary::of(pick(&loaded)), unit, precision),
        perf: show(Summary::of(pick(&idle)), unit, precision),
        ratio: None,
        target: "reported",
    };
    Ok(Section {
        title: format!(
            "Fleet: 3 daemons and one nats-server (JetStream) on this machine, {} MiB per CPU, \
             {rounds} fleet dumps and {rounds} local dumps per run and phase. perf has no \
             counterpart: the flightrec column is under `perf bench sched messaging -g 4`, \
             the perf column holds flightrec's figures on the idle machine (rings filled by a 3 s burst of that load, stopped 0.5 s before each dump)",
            RING / MIB
        ),
        rows: vec![
            row(
                "fleet dump: request → last of 3 replies",
                &|p| &p.fan_out,
                " ms",
                1,
            ),
            row(
                "local dump: `snapctl dump` call → reply",
                &|p| &p.local,
                " ms",
                1,
            ),
            row("snapshot size", &|p| &p.sizes, " MiB", 1),
            row(
                "upload to JetStream: digest + put",
                &|p| &p.upload_ms,
                " ms",
                0,
            ),
            row("upload throughput", &|p| &p.mib_per_s, " MiB/s", 1),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_lines_give_bytes_and_ms() {
        let log = "2026-11-23T18:00:00Z  INFO fleet: snapshot uploaded id=h-1 destination=jetstream \
                   object=flightrec/host-a/h-1.perf.data bytes=8388608 ms=42 already_there=false\n\
                   2026-11-23T18:00:01Z  INFO fleet: snapshot uploaded id=h-2 bytes=10 ms=1 \
                   already_there=true\n\
                   2026-11-23T18:00:01Z  INFO snapshot written id=h-3 bytes=5\n";
        assert_eq!(uploads(log), [(8_388_608, 42)]);
    }
}
