//! Scenario `report`: `snapctl report` and `snapctl export` of a snapshot
//! taken under load (sched_switch with call chains and cpu-clock, the
//! off-CPU set; `report-dwarf`: cpu-clock with stack copies, unwound by
//! both), timed against `perf report --stdio` on the same file, with
//! the outputs' sizes, and how long the page takes to draw its timeline in
//! headless Chromium (the whole window, and panning a zoomed view). Run
//! after the load stops: the tools run on an idle machine, one after
//! another.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::wrap_rings_under_load;
use crate::MIB;
use crate::cli::Args;
use crate::recorder::{EventSet, Kind, Recorder, Setup};
use crate::report::{Row, Section, human_bytes, show};
use crate::stats::{Summary, ratio};

/// `perf report --stdio` of `path`, timed.
fn perf_report_secs(path: &std::path::Path) -> Result<f64> {
    let start = Instant::now();
    let out = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "-i"])
        .arg(path)
        .output()
        .context("running perf report")?;
    if !out.status.success() {
        bail!("perf report: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Of every frame of every cpu-clock sample perf unwinds from `path`
/// (`perf script`, inlined frames left out as flightrec leaves them), the
/// share perf names (a symbol, not `[unknown]`), in percent.
fn perf_named_share(path: &std::path::Path) -> Result<f64> {
    let out = Command::new("perf")
        .args(["script", "-F", "event,ip,sym", "--no-inline", "-i"])
        .arg(path)
        .output()
        .context("running perf script")?;
    if !out.status.success() {
        bail!("perf script: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut frames, mut named) = (0u64, 0u64);
    for block in text
        .split("\n\n")
        .filter(|b| b.trim_start().starts_with("cpu-clock"))
    {
        // `EVENT:` then one `ADDR SYMBOL+OFFSET` or `ADDR [unknown]` a frame.
        for sym in block
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .filter(|sym| !sym.ends_with(':'))
        {
            frames += 1;
            named += u64::from(sym != "[unknown]");
        }
    }
    if frames == 0 {
        bail!(
            "perf script unwound no cpu-clock frame of {}",
            path.display()
        );
    }
    Ok(100.0 * named as f64 / frames as f64)
}

/// The same share in `snapctl export --format collapsed`'s stacks (a
/// frame without a function shows as `file+0xOFFSET` or `[unknown] ADDR`;
/// the thread's name, the root, is not a frame).
fn folded_named_share(folded: &std::path::Path) -> Result<f64> {
    let text = std::fs::read_to_string(folded)?;
    let (mut frames, mut named) = (0u64, 0u64);
    for line in text.lines() {
        let (stack, count) = line
            .rsplit_once(' ')
            .context("a folded line without a count")?;
        let count: u64 = count.parse().context("a folded count")?;
        for frame in stack.split(';').skip(1) {
            frames += count;
            if !(frame.contains("+0x") || frame.starts_with("[unknown]")) {
                named += count;
            }
        }
    }
    if frames == 0 {
        bail!("no frame in {}", folded.display());
    }
    Ok(100.0 * named as f64 / frames as f64)
}

/// Appended to a copy of the page: draws the timeline of the whole window
/// 20 times (double-click), zooms in 10 steps of the wheel and pans 50
/// times (drag), each frame timed, and writes the medians into the page.
const PAN_PROBE: &str = r#"<script>
(function () {
  const c = document.getElementById("timeline"), r = c.getBoundingClientRect();
  const at = (type, x, extra) => c.dispatchEvent(new MouseEvent(type, Object.assign({ bubbles: true, clientX: r.left + x, clientY: r.top + 30 }, extra || {})));
  const median = (v) => { v.sort((a, b) => a - b); return v[v.length >> 1]; };
  const timed = (n, f) => { const v = []; for (let i = 0; i < n; i++) { const t = performance.now(); f(i); v.push(performance.now() - t); } return median(v); };
  const whole = timed(20, () => at("dblclick", 400));
  for (let i = 0; i < 10; i++) c.dispatchEvent(new WheelEvent("wheel", { bubbles: true, cancelable: true, clientX: r.left + 400, clientY: r.top + 30, deltaY: -100 }));
  at("mousedown", 600);
  const pan = timed(50, (i) => at("mousemove", 600 + (i % 2 ? 40 : -40), { buttons: 1 }));
  window.dispatchEvent(new MouseEvent("mouseup"));
  const out = document.createElement("pre"); out.id = "pan-probe";
  out.textContent = "whole=" + whole.toFixed(2) + " pan=" + pan.toFixed(2);
  document.body.appendChild(out);
})();
</script>"#;

/// Median milliseconds per timeline frame of `page` in headless Chromium:
/// (the whole window, panning at 10 wheel steps of zoom).
fn timeline_frame_ms(page: &std::path::Path, work: &std::path::Path) -> Result<(f64, f64)> {
    let html = std::fs::read_to_string(page)?;
    let probed = work.join("probed.html");
    std::fs::write(
        &probed,
        html.replacen("</body>", &format!("{PAN_PROBE}</body>"), 1),
    )?;
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--window-size=1400,1800",
            "--dump-dom",
        ])
        .arg(format!(
            "--user-data-dir={}",
            work.join("chromium").display()
        ))
        .arg(format!("file://{}", probed.display()))
        .output()
        .context("running chromium")?;
    let dom = String::from_utf8_lossy(&out.stdout);
    let probe = dom
        .split_once(r#"id="pan-probe">"#)
        .and_then(|(_, rest)| rest.split_once('<'))
        .map(|(text, _)| text.to_string())
        .with_context(|| {
            format!(
                "no result from the page in chromium: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let field = |name: &str| -> Result<f64> {
        probe
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .context("malformed probe result")?
            .parse()
            .context("probe result is not a number")
    };
    Ok((field("whole")?, field("pan")?))
}

/// The scenario with `events` (`report`: the off-CPU set; `report-dwarf`:
/// cpu-clock with 8 KiB stack copies, which both tools unwind as they
/// read) in `ring` bytes per CPU.
pub fn report(args: &Args, ring: u64, events: EventSet) -> Result<Section> {
    let setup = Setup {
        events,
        ..Setup::switch_and_clock(ring)
    };
    let mut snapshot_mib = Vec::new();
    let mut perf_secs = Vec::new();
    let mut whole_ms = Vec::new();
    let mut pan_ms = Vec::new();
    // With stack copies: the share of frames named, flightrec and perf.
    let mut named: [Vec<f64>; 2] = Default::default();
    let dwarf = matches!(events, EventSet::SwitchAndClockDwarf);
    // report, pprof, collapsed: seconds and MiB.
    let mut secs: [Vec<f64>; 3] = Default::default();
    let mut mib: [Vec<f64>; 3] = Default::default();
    for _ in 0..args.runs {
        let mut recorder = Recorder::start(Kind::Flightrec, setup)?;
        let load = wrap_rings_under_load(ring)?;
        let shot = recorder.trigger_snapctl(false)?;
        drop(load);
        let work = tempfile::tempdir()?;
        snapshot_mib.push(std::fs::metadata(&shot.path)?.len() as f64 / MIB as f64);
        let path = shot.path.to_str().context("snapshot path")?.to_string();
        let outputs = [
            vec!["report".to_string(), path.clone()],
            vec![
                "export".into(),
                path.clone(),
                "--format".into(),
                "pprof".into(),
            ],
            vec![
                "export".into(),
                path.clone(),
                "--format".into(),
                "collapsed".into(),
            ],
        ];
        for (i, mut cmd) in outputs.into_iter().enumerate() {
            let out = work.path().join(format!("out-{i}"));
            cmd.extend(["-o".to_string(), out.to_str().unwrap().to_string()]);
            let argv: Vec<&str> = cmd.iter().map(String::as_str).collect();
            let (_, elapsed) = recorder.snapctl_json(&argv)?;
            secs[i].push(elapsed.as_secs_f64());
            mib[i].push(std::fs::metadata(&out)?.len() as f64 / MIB as f64);
        }
        let (whole, pan) = timeline_frame_ms(&work.path().join("out-0"), work.path())?;
        whole_ms.push(whole);
        pan_ms.push(pan);
        perf_secs.push(perf_report_secs(&shot.path)?);
        if dwarf {
            named[0].push(folded_named_share(&work.path().join("out-2"))?);
            named[1].push(perf_named_share(&shot.path)?);
        }
        recorder.stop()?;
    }
    let snap = Summary::of(&snapshot_mib);
    let perf = Summary::of(&perf_secs);
    let [report_s, pprof_s, folded_s] = secs.map(|v| Summary::of(&v));
    let [report_mib, pprof_mib, folded_mib] = mib.map(|v| Summary::of(&v));
    let timed = |metric: &str, s: Option<Summary>, target: &'static str| Row {
        metric: metric.into(),
        flightrec: show(s, " s", 2),
        perf: show(perf, " s", 2),
        ratio: ratio(s, perf),
        target,
    };
    let size = |metric: &str, s: Option<Summary>, target: &'static str| Row {
        metric: metric.into(),
        flightrec: show(s, " MiB", 1),
        perf: "-".into(),
        ratio: None,
        target,
    };
    let big = ring >= 32 * MIB;
    let mut named_rows = Vec::new();
    if dwarf {
        let (fr, pf) = (Summary::of(&named[0]), Summary::of(&named[1]));
        named_rows.push(Row {
            metric: "share of the cpu-clock samples' frames named (perf column: perf script)"
                .into(),
            flightrec: show(fr, "%", 1),
            perf: show(pf, "%", 1),
            ratio: ratio(fr, pf),
            target: ">= perf",
        });
    }
    Ok(Section {
        title: format!(
            "Report and exports of a snapshot taken under load, {} per CPU, {} (perf column: perf report --stdio on the same file)",
            human_bytes(ring),
            events.name()
        ),
        rows: vec![
            size("snapshot size", snap, ""),
            timed(
                "`snapctl report` → HTML page",
                report_s,
                if big { "< 5 s" } else { "" },
            ),
            size("page size", report_mib, if big { "< 20 MiB" } else { "" }),
            Row {
                metric: "timeline in Chromium: one frame of the whole window (median of 20)".into(),
                flightrec: show(Summary::of(&whole_ms), " ms", 1),
                perf: "-".into(),
                ratio: None,
                target: "",
            },
            Row {
                metric: "timeline in Chromium: one frame while panning, zoomed in 10 wheel steps (median of 50)".into(),
                flightrec: show(Summary::of(&pan_ms), " ms", 1),
                perf: "-".into(),
                ratio: None,
                target: "<= 16.7 ms (60 frames/s)",
            },
            timed("`snapctl export --format pprof`", pprof_s, ""),
            size("pprof size", pprof_mib, ""),
            timed("`snapctl export --format collapsed`", folded_s, ""),
            size("folded stacks size", folded_mib, ""),
        ]
        .into_iter()
        .chain(named_rows)
        .collect(),
    })
}
