//! `redquorum-lab demo`: three candidates elect a leader on five local masters while a nemesis
//! kills, pauses and restarts masters; a live timeline, then a summary.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redquorum::RedLock;
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::error::LabError;
use crate::stop::{StopSignals, exit_code};
use redquorum_testkit::{DevCluster, NodeState};

const RESOURCE: &str = "demo:leader";
const TTL: Duration = Duration::from_secs(2);
const CANDIDATES: [&str; 3] = ["A", "B", "C"];
const NODES: usize = 5;

/// What the nemesis does to a node.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Kill,
    Pause,
    Resume,
    Restart,
}

/// One step of the schedule: at `at` seconds (before scaling), do `faults`, and say why.
struct Step {
    at: f64,
    faults: &'static [(Fault, usize)],
    why: &'static str,
}

const SCHEDULE: &[Step] = &[
    Step {
        at: 5.0,
        faults: &[(Fault::Kill, 4)],
        why: "a crash: four masters are left, still a majority (a leader whose key was on exactly three of five, one of them this one, steps down)",
    },
    Step {
        at: 10.0,
        faults: &[(Fault::Pause, 3)],
        why: "a hung master: rounds are decided by the others, each request to it times out in 20 ms",
    },
    Step {
        at: 15.0,
        faults: &[(Fault::Resume, 3)],
        why: "it answers again",
    },
    Step {
        at: 18.0,
        faults: &[(Fault::Restart, 4)],
        why: "back with every key it had (appendfsync always)",
    },
    Step {
        at: 22.0,
        faults: &[(Fault::Kill, 0), (Fault::Pause, 1)],
        why: "two of five at once: three are still a majority",
    },
    Step {
        at: 28.0,
        faults: &[(Fault::Resume, 1), (Fault::Restart, 0)],
        why: "all five again",
    },
    Step {
        at: 32.0,
        faults: &[(Fault::Kill, 0), (Fault::Kill, 1), (Fault::Kill, 2)],
        why: "three of five: no majority, so the leader must step down by its deadline and nobody may lead",
    },
    Step {
        at: 40.0,
        faults: &[
            (Fault::Restart, 0),
            (Fault::Restart, 1),
            (Fault::Restart, 2),
        ],
        why: "a majority again: a new leader, in a higher term",
    },
];
const END: f64 = 48.0;
/// Leaders do not resign on their own in this window (before scaling), so that the majority
/// outage at 32 s meets a leader, and its step-down by the deadline shows.
const KEEP_LEADING: (f64, f64) = (29.0, 40.0);
const QUICK: f64 = 0.5;

/// What the printer hears about.
#[derive(Debug)]
enum Event {
    Elected {
        who: usize,
        term: u64,
        at: Instant,
    },
    SteppedDown {
        who: usize,
        term: u64,
        at: Instant,
        lost: Option<String>,
    },
    Nemesis {
        at: Instant,
        what: String,
        nodes: Vec<NodeState>,
    },
    NemesisFailed(String),
    ResignFailed {
        who: usize,
        term: u64,
        error: String,
    },
}

/// One leadership, on this process's monotonic clock: from the moment `campaign` returned to
/// the moment the candidate stopped acting as leader (before resigning, or when `lost` fired).
#[derive(Debug, Clone, Copy)]
struct Term {
    who: usize,
    term: u64,
    from: Instant,
    to: Option<Instant>,
    lost: bool,
}

/// Runs the demo on the dev cluster (started now, and stopped at the end, unless one ran
/// already: that one is left running with every node up) and prints the timeline, then the
/// summary (`as_json`: the summary as JSON on stdout, the timeline on stderr). Returns the exit
/// code: 0, or 128 + N when stopped by signal N.
///
/// # Errors
/// When the cluster cannot be started, the nemesis fails, or two candidates led at once.
pub async fn demo(quick: bool, as_json: bool) -> Result<u8, LabError> {
    let scale = if quick { QUICK } else { 1.0 };
    let kind = redquorum_testkit::ServerKind::for_dev().map_err(LabError::new)?;
    let (cluster, created) = DevCluster::up(&DevCluster::default_dir()?, NODES, kind)?;
    let t0 = Instant::now();
    let say = crate::report::sayer(as_json);
    say(format!(
        "five independent masters (redquorum dev status): {}",
        cluster.urls().join(" ")
    ));
    say(format!(
        "three candidates (A, B, C) campaign for {RESOURCE:?} with a {TTL:?} ttl; a leader resigns \
         after a while and campaigns again.\nmeanwhile masters are killed, paused and restarted; \
         the demo ends by itself after about {:.0} s.\n",
        END * scale
    ));

    let (events, mut heard) = mpsc::unbounded_channel();
    let (stop, stopped) = watch::channel(false);
    let mut candidates = Vec::new();
    for who in 0..CANDIDATES.len() {
        let rl = RedLock::new(cluster.urls())?;
        candidates.push(tokio::spawn(candidate(
            who,
            rl,
            (t0, scale),
            events.clone(),
            stopped.clone(),
        )));
    }
    let halt = Arc::new(AtomicBool::new(false));
    let nemesis = {
        let (cluster, events, halt) = (cluster.clone(), events.clone(), halt.clone());
        std::thread::spawn(move || nemesis(&cluster, scale, t0, &events, &halt))
    };
    drop(events);

    let mut signals = StopSignals::listen()?;
    let mut terms: Vec<Term> = Vec::new();
    let mut interrupted = None;
    let mut nemesis_failed = None;
    let end = t0 + Duration::from_secs_f64(END * scale);
    let stamp = |at: Instant| format!("[{:>5.1}s]", at.duration_since(t0).as_secs_f64());
    loop {
        tokio::select! {
            event = heard.recv() => match event {
                Some(Event::NemesisFailed(e)) => {
                    nemesis_failed = Some(e);
                    break;
                }
                Some(event) => narrate(event, &mut terms, &say, &stamp),
                None => break,
            },
            _ = tokio::time::sleep_until(end.into()) => break,
            signal = signals.recv() => {
                interrupted = Some(signal);
                break;
            }
        }
    }
    halt.store(true, Ordering::Relaxed);
    let _ = stop.send(true);
    for c in candidates {
        let _ = c.await;
    }
    while let Ok(event) = heard.try_recv() {
        if let Event::SteppedDown {
            who,
            term,
            at,
            lost,
        } = event
        {
            close_term(&mut terms, who, term, at, lost.is_some());
        }
    }
    let _ = tokio::task::spawn_blocking(move || nemesis.join()).await;
    let finished = Instant::now();
    let cleanup = if created {
        cluster
            .down()
            .map_err(LabError::from)
            .map(|()| "the dev cluster it started was stopped")
    } else {
        crate::masters::restore(&cluster)
            .map(|()| "the dev cluster was already running and is left running, all nodes up")
    };

    let summary = Summary::of(&terms, finished, t0);
    if as_json {
        println!("{}", summary.to_json());
    } else {
        summary.print(t0);
    }
    match cleanup {
        Ok(what) => say(format!("  cleanup: {what}")),
        Err(e) => eprintln!("redquorum: cleanup failed: {e}"),
    }
    if let Some(e) = nemesis_failed {
        return Err(LabError::new(format!("the nemesis failed: {e}")));
    }
    if let Some(signal) = interrupted {
        return Ok(exit_code(signal));
    }
    if summary.overlaps > 0 || !summary.terms_increase {
        return Err(LabError::new(
            "two candidates led at once, or a term did not increase: the lock lied",
        ));
    }
    Ok(0)
}

/// Says what one event of the demo means, and keeps the terms for the summary (a failed
/// nemesis ends the demo instead: the caller's).
fn narrate(
    event: Event,
    terms: &mut Vec<Term>,
    say: &impl Fn(String),
    stamp: &impl Fn(Instant) -> String,
) {
    match event {
        Event::Elected { who, term, at } => {
            let after = terms.iter().filter_map(|t| t.to).max();
            let gap = match after {
                Some(to) if terms.iter().all(|t| t.to.is_some()) => format!(
                    ", {:.0} ms after the last leader stopped",
                    at.saturating_duration_since(to).as_secs_f64() * 1e3
                ),
                _ => String::new(),
            };
            terms.push(Term {
                who,
                term,
                from: at,
                to: None,
                lost: false,
            });
            say(format!(
                "{} {} leads in term {term}{gap}",
                stamp(at),
                CANDIDATES[who]
            ));
        }
        Event::SteppedDown {
            who,
            term,
            at,
            lost,
        } => {
            close_term(terms, who, term, at, lost.is_some());
            match lost {
                Some(reason) => say(format!(
                    "{} {} steps down from term {term}: {reason}",
                    stamp(at),
                    CANDIDATES[who]
                )),
                None => say(format!(
                    "{} {} resigns term {term}",
                    stamp(at),
                    CANDIDATES[who]
                )),
            }
        }
        Event::Nemesis { at, what, nodes } => {
            let nodes: Vec<String> = nodes
                .iter()
                .map(|s| match s {
                    NodeState::Running => "up".to_owned(),
                    other => other.label().to_uppercase(),
                })
                .collect();
            say(format!(
                "{} nemesis: {what}\n          nodes: {}",
                stamp(at),
                nodes.join(" ")
            ));
        }
        Event::ResignFailed { who, term, error } => say(format!(
            "{} {}'s resignation of term {term} failed, so the term ends at its ttl: {error}",
            stamp(Instant::now()),
            CANDIDATES[who]
        )),
        Event::NemesisFailed(_) => {}
    }
}

/// Campaign, lead for a while (or until leadership is lost), resign, campaign again.
async fn candidate(
    who: usize,
    rl: RedLock,
    (t0, scale): (Instant, f64),
    events: mpsc::UnboundedSender<Event>,
    mut stop: watch::Receiver<bool>,
) {
    let quick = scale < 1.0;
    let Ok(election) = rl.election(RESOURCE, TTL) else {
        return;
    };
    loop {
        let leadership = tokio::select! {
            leadership = election.campaign(CANDIDATES[who]) => match leadership {
                Ok(l) => l,
                Err(_) => return,
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        let term = leadership.term();
        let _ = events.send(Event::Elected {
            who,
            term,
            at: Instant::now(),
        });
        let hold = if quick { 2000..4000 } else { 3000..6000 };
        let hold = Duration::from_millis(rand::random_range(hold));
        let lost = tokio::select! {
            reason = leadership.lost() => Some(reason.to_string()),
            _ = lead_for(hold, t0, scale) => None,
            _ = stop.wait_for(|s| *s) => None,
        };
        let at = Instant::now();
        let stopping = *stop.borrow();
        let _ = events.send(Event::SteppedDown {
            who,
            term,
            at,
            lost: lost.clone(),
        });
        if lost.is_none()
            && let Err(e) = leadership.resign().await
        {
            let _ = events.send(Event::ResignFailed {
                who,
                term,
                error: e.to_string(),
            });
        }
        if stopping {
            return;
        }
        // A real worker would do other things between terms; this gives the others a turn.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn nemesis(
    cluster: &DevCluster,
    scale: f64,
    t0: Instant,
    events: &mpsc::UnboundedSender<Event>,
    halt: &AtomicBool,
) {
    for step in SCHEDULE {
        let when = t0 + Duration::from_secs_f64(step.at * scale);
        while Instant::now() < when {
            if halt.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10).min(when - Instant::now()));
        }
        let mut done = Vec::new();
        for &(fault, node) in step.faults {
            let result = match fault {
                Fault::Kill => cluster.kill(node),
                Fault::Pause => cluster.pause(node),
                Fault::Resume => cluster.resume(node),
                Fault::Restart => cluster.restart(node),
            };
            if let Err(e) = result {
                let _ = events.send(Event::NemesisFailed(e.to_string()));
                return;
            }
            let name = match fault {
                Fault::Kill => "SIGKILL",
                Fault::Pause => "SIGSTOP",
                Fault::Resume => "SIGCONT",
                Fault::Restart => "restart",
            };
            done.push(format!("{name} node {node}"));
        }
        let _ = events.send(Event::Nemesis {
            at: Instant::now(),
            what: format!("{} ({})", done.join(", "), step.why),
            nodes: cluster.nodes.iter().map(|n| n.state()).collect(),
        });
    }
}

/// Sleeps `hold`, and on past the end of the keep-leading window if it ends in it.
async fn lead_for(hold: Duration, t0: Instant, scale: f64) {
    tokio::time::sleep(hold).await;
    let (from, to) = KEEP_LEADING;
    let window =
        t0 + Duration::from_secs_f64(from * scale)..t0 + Duration::from_secs_f64(to * scale);
    if window.contains(&Instant::now()) {
        tokio::time::sleep_until(window.end.into()).await;
    }
}

/// Records the end of `who`'s leadership in `term`.
fn close_term(terms: &mut [Term], who: usize, term: u64, at: Instant, lost: bool) {
    if let Some(t) = terms
        .iter_mut()
        .rev()
        .find(|t| t.who == who && t.term == term)
    {
        t.to = Some(at);
        t.lost = lost;
    }
}

/// The demo's verdict.
#[derive(Debug)]
struct Summary {
    elapsed: Duration,
    per_candidate: [usize; 3],
    first_term: Option<u64>,
    last_term: Option<u64>,
    terms_increase: bool,
    overlaps: usize,
    lost: usize,
    handovers: Vec<Duration>,
    longest_gap: Option<(Duration, Instant, Instant)>,
}

impl Summary {
    fn of(terms: &[Term], finished: Instant, t0: Instant) -> Self {
        let mut terms = terms.to_vec();
        terms.sort_by_key(|t| t.from);
        let end = |t: &Term| t.to.unwrap_or(finished);
        let mut overlaps = 0;
        for (i, a) in terms.iter().enumerate() {
            for b in terms.iter().skip(i + 1) {
                if b.from < end(a) && a.from < end(b) {
                    overlaps += 1;
                }
            }
        }
        let mut per_candidate = [0; 3];
        for t in &terms {
            if let Some(n) = per_candidate.get_mut(t.who) {
                *n += 1;
            }
        }
        let mut handovers = Vec::new();
        let mut longest_gap: Option<(Duration, Instant, Instant)> = None;
        let mut previous: Option<Term> = None;
        for t in &terms {
            let (gap_from, after_resign) = match previous {
                Some(p) => (end(&p), !p.lost),
                None => (t0, false),
            };
            let gap = t.from.saturating_duration_since(gap_from);
            if after_resign {
                handovers.push(gap);
            }
            if longest_gap.is_none_or(|(g, _, _)| gap > g) {
                longest_gap = Some((gap, gap_from, t.from));
            }
            previous = Some(*t);
        }
        handovers.sort_unstable();
        Summary {
            elapsed: finished - t0,
            per_candidate,
            first_term: terms.first().map(|t| t.term),
            last_term: terms.last().map(|t| t.term),
            terms_increase: terms.windows(2).all(|w| w[0].term < w[1].term),
            overlaps,
            lost: terms.iter().filter(|t| t.lost).count(),
            handovers,
            longest_gap,
        }
    }

    fn leaderships(&self) -> usize {
        self.per_candidate.iter().sum()
    }

    fn handover_ms(&self, q: f64) -> Option<f64> {
        let i = ((self.handovers.len().checked_sub(1)?) as f64 * q).round() as usize;
        Some(self.handovers.get(i)?.as_secs_f64() * 1e3)
    }

    fn print(&self, t0: Instant) {
        println!(
            "\nwhat the demo showed, in {:.0} s:",
            self.elapsed.as_secs_f64()
        );
        println!(
            "  {} times a candidate became leader (A {}, B {}, C {}).",
            self.leaderships(),
            self.per_candidate[0],
            self.per_candidate[1],
            self.per_candidate[2],
        );
        println!(
            "  Two leaders at the same time: {}.",
            match self.overlaps {
                0 => "never".to_owned(),
                n => format!("{n} times: THE LOCK LIED"),
            }
        );
        match (self.first_term, self.last_term) {
            (Some(first), Some(last)) => println!(
                "  Each new leader got a higher term (its fencing token) than the one before: \
                 {} (from {first} to {last}).",
                if self.terms_increase { "yes" } else { "NO" },
            ),
            _ => println!("  Nobody became leader."),
        }
        println!(
            "  Leaders that lost their majority to failing masters and stepped down by their \
             deadline, before anyone else could lead: {}.",
            self.lost
        );
        match (self.handover_ms(0.5), self.handover_ms(1.0)) {
            (Some(p50), Some(max)) => println!(
                "  When a leader resigned, the next one led {p50:.0} ms later (typical; at \
                 most {max:.0} ms, over {} hand-overs).",
                self.handovers.len()
            ),
            _ => println!("  No leader resigned while another candidate waited."),
        }
        if let Some((gap, from, to)) = self.longest_gap {
            println!(
                "  The longest time without a leader was {:.1} s (from {:.1} s to {:.1} s).",
                gap.as_secs_f64(),
                from.duration_since(t0).as_secs_f64(),
                to.duration_since(t0).as_secs_f64()
            );
        }
    }

    fn to_json(&self) -> serde_json::Value {
        json!({
            "seconds": self.elapsed.as_secs_f64(),
            "leaderships": self.leaderships(),
            "per_candidate": { "A": self.per_candidate[0], "B": self.per_candidate[1], "C": self.per_candidate[2] },
            "first_term": self.first_term,
            "last_term": self.last_term,
            "terms_increase": self.terms_increase,
            "overlaps": self.overlaps,
            "lost": self.lost,
            "handovers": self.handovers.len(),
            "handover_p50_ms": self.handover_ms(0.5),
            "handover_max_ms": self.handover_ms(1.0),
            "longest_gap_ms": self.longest_gap.map(|(g, _, _)| g.as_secs_f64() * 1e3),
        })
    }
}
