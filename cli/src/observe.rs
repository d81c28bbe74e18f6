//! `redquorum observe RESOURCE`: follow an election's leader, as `etcdctl elect -l` does; with
//! `--holders`, follow who holds the lock (the exclusive holder, or how many readers).

use std::time::Duration;

use redquorum::Error;

use crate::args::{ObserveArgs, Tuning};
use crate::child::{self, Signals};
use crate::client;
use crate::events::{self, Event};
use crate::exit::{self, CliError};

/// The ttl the election handle is made with: observing only reads, so it sets no more than
/// the default per-node timeout (and `--node-timeout` overrides that).
const READ_TTL: Duration = Duration::from_secs(10);

/// What a majority says about the leader, as far as a change is worth a line.
#[derive(Debug, PartialEq)]
enum Seen {
    Leads(String, u64),
    Nobody,
    /// Too few masters answered (the message changes with every failure; one line is enough).
    Unknown,
}

pub(crate) async fn observe(
    nodes: Vec<String>,
    args: ObserveArgs,
    tuning: &Tuning,
) -> Result<u8, CliError> {
    if args.every.is_zero() {
        return Err(CliError::usage("--every must be more than 0"));
    }
    let rl = client::redlock(nodes, tuning, false, None)?;
    if args.holders {
        return holders(&rl, &args).await;
    }
    let election = rl.election(&args.resource, READ_TTL)?;
    let mut pace = Pace::start(&rl, args.every).await?;
    let mut last = None;
    loop {
        if let Some(code) = pace.tick().await {
            return Ok(code);
        }
        let answer = election.leader().await;
        let (seen, unknown) = match &answer {
            Ok(leader) => (
                Seen::Leads(
                    String::from_utf8_lossy(leader.value()).into_owned(),
                    leader.term(),
                ),
                None,
            ),
            Err(e) if e.is_no_leader() => (Seen::Nobody, None),
            Err(e) => (Seen::Unknown, Some(e.to_string())),
        };
        if last.as_ref() != Some(&seen) {
            let leader = match &seen {
                Seen::Leads(value, term) => Some((value.clone(), *term)),
                _ => None,
            };
            events::print(Event::Leader {
                resource: &args.resource,
                leader,
                unknown,
            });
        }
        if args.once {
            return Ok(match answer {
                Err(Error::NoQuorum(_)) => exit::NO_QUORUM,
                Err(e) if !e.is_no_leader() => CliError::from(e).code,
                _ => exit::OK,
            });
        }
        last = Some(seen);
    }
}

/// What a majority says about the lock's holders, as far as a change is worth a line.
#[derive(Debug, PartialEq)]
struct Holders {
    writer: Option<String>,
    readers: usize,
    unknown: Option<String>,
    /// Too few masters answered to tell (`--once` exits 69).
    too_few: bool,
}

/// What the lock key holds while readers hold (see `redquorum::RwLock`).
const READERS_MARK: &str = "readers";

impl Holders {
    fn of(seen: &redquorum::Inspection) -> Self {
        let none = |unknown: Option<String>| Self {
            writer: None,
            readers: 0,
            unknown,
            too_few: false,
        };
        if seen.reachable() < seen.quorum() {
            return Self {
                too_few: true,
                ..none(Some(format!("only {} masters answered", seen.reachable())))
            };
        }
        match seen.majority_holder() {
            Some(who) if who == READERS_MARK => Self {
                readers: seen.readers_on_majority(),
                ..none(None)
            },
            Some(who) if who.starts_with("handoff:") => {
                none(Some("reserved for a waiter, changing hands".to_owned()))
            }
            Some(writer) => Self {
                writer: Some(writer),
                ..none(None)
            },
            None if seen.free_on_majority() => none(None),
            None => none(Some(
                "no majority agrees (changing hands, or a split after failures)".to_owned(),
            )),
        }
    }
}

/// `observe --holders`: a line now and at every change of who holds the lock.
///
/// # Cancel safety
/// Returns on a signal; it only reads.
async fn holders(rl: &redquorum::RedLock, args: &ObserveArgs) -> Result<u8, CliError> {
    let mut pace = Pace::start(rl, args.every).await?;
    let mut last = None;
    loop {
        if let Some(code) = pace.tick().await {
            return Ok(code);
        }
        let seen = match rl.inspect(&args.resource).await {
            Ok(seen) => Holders::of(&seen),
            Err(e) if args.once => return Err(CliError::from(e)),
            Err(e) => Holders {
                writer: None,
                readers: 0,
                unknown: Some(e.to_string()),
                too_few: true,
            },
        };
        if last.as_ref() != Some(&seen) {
            events::print(Event::Holders {
                resource: &args.resource,
                writer: seen.writer.clone(),
                readers: seen.readers,
                unknown: seen.unknown.clone(),
            });
        }
        if args.once {
            return Ok(if seen.too_few {
                exit::NO_QUORUM
            } else {
                exit::OK
            });
        }
        last = Some(seen);
    }
}

/// An observer's pace: a look at the masters every `--every`, until a signal.
struct Pace {
    signals: Signals,
    ticks: tokio::time::Interval,
}

impl Pace {
    /// Listens for signals, then connects to the masters; the first tick is at once.
    ///
    /// # Cancel safety
    /// Dropped part-way, nothing is left to undo.
    async fn start(rl: &redquorum::RedLock, every: std::time::Duration) -> Result<Self, CliError> {
        let signals = Signals::new()?;
        client::connect_first(rl).await?;
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ok(Self { signals, ticks })
    }

    /// Waits for the next look: `None`, or the exit code of a signal that came first.
    ///
    /// # Cancel safety
    /// Cancel safe: a tick or a signal not taken stays for the next call.
    async fn tick(&mut self) -> Option<u8> {
        tokio::select! {
            _ = self.ticks.tick() => None,
            signal = self.signals.recv() => Some(child::signal_code(signal)),
        }
    }
}
