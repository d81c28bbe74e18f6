//! `redquorum observe RESOURCE`: follow an election's leader, as `etcdctl elect -l` does.

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
    let election = rl.election(&args.resource, READ_TTL)?;
    let mut signals = Signals::new()?;
    client::connect_first(&rl).await?;
    let mut last = None;
    let mut ticks = tokio::time::interval(args.every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            signal = signals.recv() => return Ok(child::signal_code(signal)),
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
