//! The condition thread's loop: one poll(2) over the tracepoint rings, the
//! PSI files and the stop eventfd, with a timeout for the periodic
//! conditions (interval, loss, memory counters, glob rescans) and the
//! snoozed rings; what is ready goes through its trigger's gate.

use std::os::fd::AsFd;
use std::time::Instant;

use flightrec_config::TriggerScope;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::EventFd;

use super::super::gate::{Gate, Suppression, Verdict};
use super::cgroups::RESCAN;
use super::memory::MEMORY_POLL;
use super::{
    CgroupNames, Fired, Hit, LOSS_PERIOD, LossReader, MAX_HITS_PER_READ, Sink, Source, Watched,
    parse_hits,
};

/// Which poll entry belongs to what.
#[derive(Clone, Copy)]
enum Slot {
    Stop,
    Ring { watched: usize, ring: usize },
    Psi { watched: usize, file: usize },
}

/// What a firing matched: the words, and the cgroup, if one fired it.
struct Match {
    text: String,
    cgroup: Option<String>,
}

/// Watches until the stop eventfd is written (or poll fails).
pub(super) fn watch(
    mut watched: Vec<Watched>,
    mut names: CgroupNames,
    stop: &EventFd,
    losses: &LossReader,
    sink: &Sink,
) {
    let mut buf = Vec::new();
    loop {
        let timeout = poll_timeout(&mut watched, Instant::now());
        let Some(ready) = poll_ready(&watched, stop, timeout) else {
            return;
        };
        let now = Instant::now();
        for (slot, revents) in ready {
            match slot {
                Slot::Stop => return,
                Slot::Ring { watched: wi, ring } => {
                    on_ring(&mut watched[wi], ring, now, &mut buf, &mut names, sink);
                }
                Slot::Psi { watched: wi, file } => {
                    on_psi(&mut watched[wi], file, revents, now, sink);
                }
            }
        }
        on_ticks(&mut watched, now, losses, sink);
    }
}

/// How long the next poll may wait: until the next periodic condition is
/// due or a snoozed ring wakes. Ends the snoozes that are over.
fn poll_timeout(watched: &mut [Watched], now: Instant) -> PollTimeout {
    let mut next_tick: Option<Instant> = None;
    for w in watched {
        let due = match &mut w.source {
            Source::Loss { next, .. } | Source::Interval { next, .. } => Some(*next),
            Source::Tracepoint { snoozes, .. } => {
                snoozes.iter_mut().filter_map(|s| s.wakes(now)).min()
            }
            Source::Psi { watch, .. } => watch.cgroups.as_ref().map(|c| c.next_scan),
            Source::CgroupMemory(m) => Some(m.next_poll.min(m.next_scan)),
        };
        if let Some(d) = due {
            next_tick = Some(next_tick.map_or(d, |n| n.min(d)));
        }
    }
    match next_tick {
        None => PollTimeout::NONE,
        Some(at) => {
            let ms = at.saturating_duration_since(now).as_millis();
            // Rounded up, so a tick is never polled for early in a loop.
            PollTimeout::try_from(i32::try_from(ms + 1).unwrap_or(i32::MAX))
                .unwrap_or(PollTimeout::MAX)
        }
    }
}

/// Polls the stop eventfd, every ring not snoozed and every PSI file not
/// broken; the entries that are ready. None when poll failed (the thread
/// stops, said in the log).
fn poll_ready(
    watched: &[Watched],
    stop: &EventFd,
    timeout: PollTimeout,
) -> Option<Vec<(Slot, PollFlags)>> {
    let mut slots = vec![Slot::Stop];
    let mut fds = vec![PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
    for (wi, w) in watched.iter().enumerate() {
        match &w.source {
            Source::Tracepoint { rings, snoozes, .. } => {
                for (ri, r) in rings.iter().enumerate() {
                    if snoozes[ri].until.is_some() {
                        continue;
                    }
                    fds.push(PollFd::new(r.fd(), PollFlags::POLLIN));
                    slots.push(Slot::Ring {
                        watched: wi,
                        ring: ri,
                    });
                }
            }
            Source::Psi { watch, .. } => {
                for (fi, f) in watch.files.iter().enumerate() {
                    if f.broken {
                        continue;
                    }
                    fds.push(PollFd::new(f.file.as_fd(), PollFlags::POLLPRI));
                    slots.push(Slot::Psi {
                        watched: wi,
                        file: fi,
                    });
                }
            }
            _ => {}
        }
    }
    match poll(&mut fds, timeout) {
        Ok(_) => Some(
            fds.iter()
                .zip(&slots)
                .filter_map(|(fd, slot)| fd.revents().filter(|r| !r.is_empty()).map(|r| (*slot, r)))
                .collect(),
        ),
        Err(nix::errno::Errno::EINTR) => Some(Vec::new()),
        Err(e) => {
            tracing::error!("conditions: poll failed, condition triggers stop: {e}");
            None
        }
    }
}

/// A tracepoint ring has hits: drains it and judges them. A ring that
/// had more than one is snoozed (see [`super::BUSY_SNOOZE`]), so a busy
/// tracepoint costs one read per snooze, not one per hit.
fn on_ring(
    w: &mut Watched,
    ring: usize,
    now: Instant,
    buf: &mut Vec<u8>,
    names: &mut CgroupNames,
    sink: &Sink,
) {
    let Source::Tracepoint {
        event,
        rings,
        snoozes,
        layout,
    } = &mut w.source
    else {
        return;
    };
    buf.clear();
    rings[ring].drain(buf);
    let hits = parse_hits(buf, layout);
    snoozes[ring].after_read(hits.total(), now);
    if hits.total() == 0 {
        return;
    }
    // A burst's hits beyond what the gate can use change nothing but the
    // count of suppressed firings: capped so a flood costs bounded work.
    let tally = Tally::of(&mut w.gate, now, hits.total().min(MAX_HITS_PER_READ), true);
    // What matched (a read of the task's comm, a cgroup's name) is worked
    // out only for a firing: a busy tracepoint counting towards its
    // `count` costs no more than the ring's read.
    if tally.is_empty() {
        return;
    }
    let matched = match hits.sampled.first() {
        Some(h) => hit_match(event, h, w.scope == TriggerScope::Matched, names),
        None => Match {
            text: format!("{event} ({} hits the ring had no room for)", hits.lost),
            cgroup: None,
        },
    };
    tally.report(w, matched, sink);
}

/// What hit `h` of `event` matched: the CPU and task, the victim a
/// tracepoint names, and the cgroup (the victim's, else the task's) when
/// the trigger's snapshots hold it or a victim is named.
fn hit_match(event: &str, h: &Hit, scoped: bool, names: &mut CgroupNames) -> Match {
    let mut text = format!(
        "{event} on CPU {} by pid {}{}",
        h.cpu,
        h.pid,
        comm_of(h.pid)
            .map(|c| format!(" ({c})"))
            .unwrap_or_default()
    );
    let mut cgroup = None;
    if let Some(v) = &h.subject {
        text.push_str(&format!(": victim pid {}", v.pid));
        if !v.comm.is_empty() {
            text.push_str(&format!(" ({})", v.comm));
        }
        cgroup = names.of_pid(v.pid);
    }
    if cgroup.is_none()
        && (scoped || h.subject.is_some())
        && let Some(id) = h.cgroup
    {
        cgroup = names.path_of(id, Some(h.pid));
    }
    if let Some(c) = &cgroup {
        text.push_str(&format!(" in cgroup {c}"));
    }
    Match { text, cgroup }
}

/// A PSI file is ready: the threshold was crossed, or the file broke (its
/// cgroup removed), which stops watching it.
fn on_psi(w: &mut Watched, file: usize, revents: PollFlags, now: Instant, sink: &Sink) {
    let Source::Psi { watch, text } = &mut w.source else {
        return;
    };
    let Some(f) = watch.files.get_mut(file) else {
        return;
    };
    if revents.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) {
        if watch.cgroups.is_some() {
            tracing::info!(
                trigger = %w.name,
                "{} reports an error (its cgroup was removed): no longer watched",
                f.path.display()
            );
        } else {
            tracing::error!(
                trigger = %w.name,
                "{} reports an error: this trigger stops",
                f.path.display()
            );
        }
        f.broken = true;
        return;
    }
    if revents.contains(PollFlags::POLLPRI) {
        let matched = Match {
            text: match &f.cgroup {
                Some(c) => format!("pressure {text} in cgroup {c} ({})", f.path.display()),
                None => format!("pressure {text} ({})", f.path.display()),
            },
            cgroup: f.cgroup.clone(),
        };
        judge(w, now, 1, false, matched, sink);
    }
}

/// The periodic conditions that are due: intervals fire, loss triggers
/// read the loss counters, memory triggers their cgroups' counters, and
/// globs are expanded again.
fn on_ticks(watched: &mut [Watched], now: Instant, losses: &LossReader, sink: &Sink) {
    for w in watched {
        match &mut w.source {
            Source::Interval { every, next } if *next <= now => {
                while *next <= now {
                    *next += *every;
                }
                let matched = Match {
                    text: format!("every {}", flightrec_config::HumanDuration(*every)),
                    cgroup: None,
                };
                judge(w, now, 1, false, matched, sink);
            }
            Source::Loss { last, next } if *next <= now => {
                *next = now + LOSS_PERIOD;
                let Some(total) = losses() else { continue };
                let grown = last.map_or(0, |l| total.saturating_sub(l));
                *last = Some(total);
                if grown > 0 {
                    let rules = w.gate.rules();
                    let matched = Match {
                        text: format!("{grown} samples or tracking records lost"),
                        cgroup: None,
                    };
                    // More than `count` lost at once fires once: the rest
                    // would only be suppressed by the cooldown.
                    judge(w, now, grown.min(rules.count), true, matched, sink);
                }
            }
            Source::Psi { watch, .. } => {
                if let Some(c) = &mut watch.cgroups
                    && c.next_scan <= now
                {
                    c.next_scan = now + RESCAN;
                    watch.rescan(&w.name);
                }
            }
            Source::CgroupMemory(m) => {
                if m.next_scan <= now {
                    m.next_scan = now + RESCAN;
                    m.rescan(&w.name);
                }
                if m.next_poll > now {
                    continue;
                }
                m.next_poll = now + MEMORY_POLL;
                let count = w.gate.rules().count;
                for grown in m.poll() {
                    let matched = Match {
                        text: grown.matched,
                        cgroup: Some(grown.cgroup),
                    };
                    judge(w, now, grown.times.min(count), true, matched, sink);
                }
            }
            _ => {}
        }
    }
}

fn comm_of(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_string())
}

/// Runs `w`'s gate over `n` matches (or one firing without counting, when
/// `count` is false) and reports each verdict other than Counting, once
/// per verdict with how many times it happened.
fn judge(w: &mut Watched, now: Instant, n: u64, count: bool, matched: Match, sink: &Sink) {
    let tally = Tally::of(&mut w.gate, now, n, count);
    tally.report(w, matched, sink);
}

/// The firings of one judgement: how many dumps and suppressions of
/// each kind, with the last verdict of each.
#[derive(Default)]
struct Tally([(u64, Option<Verdict>); 3]);

impl Tally {
    fn of(gate: &mut Gate, now: Instant, n: u64, count: bool) -> Self {
        let mut tally = Self::default();
        let mut add = |verdict: Verdict| {
            let slot = match verdict {
                Verdict::Counting => return,
                Verdict::Dump => 0,
                Verdict::Suppressed(Suppression::Cooldown) => 1,
                Verdict::Suppressed(Suppression::HourlyLimit) => 2,
            };
            tally.0[slot].0 += 1;
            tally.0[slot].1 = Some(verdict);
        };
        if count {
            gate.on_matches(now, n, add);
        } else {
            add(gate.fire(now));
        }
        tally
    }

    /// Nothing fired (so what matched need not be worked out).
    fn is_empty(&self) -> bool {
        self.0.iter().all(|(times, _)| *times == 0)
    }

    fn report(self, w: &Watched, matched: Match, sink: &Sink) {
        for (times, verdict) in self.0 {
            if let (true, Some(verdict)) = (times > 0, verdict) {
                sink(Fired {
                    name: w.name.clone(),
                    matched: matched.text.clone(),
                    verdict,
                    times,
                    label: w.label.clone(),
                    compress: w.compress,
                    delay: w.delay,
                    before: w.before,
                    scope: w.scope.clone(),
                    cgroup: matched.cgroup.clone(),
                });
            }
        }
    }
}
