//! Capture cost per ring size: how long a capture takes and how long each
//! CPU's ring stays paused, for rings filled (wrapped) by context-switch
//! load, next to a plain memcpy of the same bytes.
//!
//! `cargo bench -p flightrecd --bench capture` (as root). Prints figures; it
//! is not a test.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flightrecd::perf::event::EventSpec;
use flightrecd::recorder::{Recorder, RecorderConfig};
use nix::sched::{CpuSet, sched_setaffinity};
use nix::unistd::Pid;

const RUNS: usize = 15;

struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    /// Two threads per CPU bouncing a byte: a context switch per bounce.
    fn start(cpus: &[u32]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for &cpu in cpus {
            let (mut a, mut b) = UnixStream::pair().expect("socketpair");
            let stop_a = Arc::clone(&stop);
            threads.push(std::thread::spawn(move || {
                pin(cpu);
                let mut byte = [0u8; 1];
                while !stop_a.load(Ordering::Relaxed) {
                    if a.write_all(&byte).is_err() || a.read_exact(&mut byte).is_err() {
                        break;
                    }
                }
            }));
            threads.push(std::thread::spawn(move || {
                pin(cpu);
                let mut byte = [0u8; 1];
                while b.read_exact(&mut byte).is_ok() && b.write_all(&byte).is_ok() {}
            }));
        }
        Self { stop, threads }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn pin(cpu: u32) {
    let mut set = CpuSet::new();
    if set.set(cpu as usize).is_ok() {
        let _ = sched_setaffinity(Pid::from_raw(0), &set);
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:8.3} ms", d.as_secs_f64() * 1e3)
}

fn measure(recorder: &Recorder, label: &str) {
    let ncpus = recorder.cpus().len();
    let mut total = Vec::new();
    let mut pauses: Vec<Vec<Duration>> = vec![Vec::new(); ncpus];
    let mut bytes = vec![0u64; ncpus];
    for _ in 0..RUNS {
        let t = Instant::now();
        let capture = recorder.capture().expect("capture");
        total.push(t.elapsed());
        for (i, c) in capture.cpus.iter().enumerate() {
            pauses[i].push(c.pause);
            bytes[i] = c.records.len() as u64;
        }
    }
    let max_pause = pauses.iter().flatten().max().copied().unwrap_or_default();
    let per_cpu: Vec<String> = pauses
        .iter_mut()
        .zip(&bytes)
        .map(|(p, b)| format!("{} ({} KiB)", ms(median(p)).trim(), b / 1024))
        .collect();
    println!(
        "  {label:<11} capture median {}  pause per CPU median {}  pause max {}",
        ms(median(&mut total)),
        per_cpu.join(", "),
        ms(max_pause).trim(),
    );
}

/// Median memcpy of `bytes` into a buffer whose pages are already mapped:
/// (hot) from the same source each time, (cold) from sources rotating over
/// 64 MiB so the source is not in the caches, as a ring is not.
fn memcpy_reference(bytes: usize) -> (Duration, Duration) {
    let sources: Vec<Vec<u8>> = (0..(64usize << 20).div_ceil(bytes).max(2))
        .map(|i| vec![i as u8 | 1; bytes])
        .collect();
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&sources[0]); // fault the pages in first
    let mut time = |src: &[u8]| {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(src));
        std::hint::black_box(&dst);
        t.elapsed()
    };
    let mut hot: Vec<Duration> = (0..RUNS).map(|_| time(&sources[0])).collect();
    let mut cold: Vec<Duration> = (0..RUNS)
        .map(|i| time(&sources[1 + i % (sources.len() - 1)]))
        .collect();
    (median(&mut hot), median(&mut cold))
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("capture bench: needs root (perf events, tracefs); skipped");
        return;
    }
    println!("capture benchmark: sched:sched_switch on every CPU, {RUNS} captures per row");
    for ring_bytes in [64u64 << 10, 1 << 20, 8 << 20] {
        let recorder = Recorder::start(&RecorderConfig {
            events: vec![EventSpec::new("sched:sched_switch")],
            ring_bytes_per_cpu: ring_bytes,
            tracking_ring_bytes_per_cpu: 256 << 10,
            tracking_log_bytes: 16 << 20,
            ..RecorderConfig::default()
        })
        .expect("recorder starts");
        let cpus = recorder.cpus();
        let load = Load::start(&cpus);
        // Fill: keep the load on until every ring has wrapped.
        let fill = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let capture = recorder.capture().expect("capture");
            if capture.cpus.iter().all(|c| c.wrapped) || fill.elapsed() > Duration::from_secs(30) {
                break;
            }
        }
        let (hot, cold) = memcpy_reference(ring_bytes as usize);
        println!(
            "ring {} KiB per CPU ({} CPUs), filled in {:.1} s; plain memcpy of {} KiB: \
             {} cache-hot, {} cache-cold",
            ring_bytes / 1024,
            cpus.len(),
            fill.elapsed().as_secs_f64(),
            ring_bytes / 1024,
            ms(hot).trim(),
            ms(cold).trim(),
        );
        measure(&recorder, "under load");
        load.stop();
        measure(&recorder, "quiet");
    }
}
