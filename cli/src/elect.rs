//! `redquorum elect`: run a command while this candidate leads; campaign again after a loss.

use nix::sys::signal::Signal;
use redquorum::{Election, Leadership};

use crate::args::{ElectArgs, Tuning};
use crate::child::{self, Ending, Holding, Signals, Supervision};
use crate::client;
use crate::events::{self, Event};
use crate::exit::{self, CliError};
use crate::exporter;

pub(crate) async fn elect(
    nodes: Vec<String>,
    args: ElectArgs,
    tuning: &Tuning,
) -> Result<u8, CliError> {
    let kill_grace = child::kill_grace(args.ttl, args.kill_grace)?;
    client::lease_ttl(args.ttl, tuning)?;
    let rl = client::redlock(nodes, tuning, false, Some(client::holder(&args.command)))?;
    let ended = elect_with(&rl, args, tuning, kill_grace).await;
    // A resignation is decided at the majority; its other deletes finish in the background,
    // and must before the process exits.
    client::settle(&rl, tuning).await;
    ended
}

async fn elect_with(
    rl: &redquorum::RedLock,
    args: ElectArgs,
    tuning: &Tuning,
    kill_grace: std::time::Duration,
) -> Result<u8, CliError> {
    let election = rl.election(&args.resource, args.ttl)?;
    if let Some(address) = args.metrics {
        exporter::serve(address)?;
    }
    let gauges = exporter::Leadership::new(&args.resource);
    client::connect_first(rl).await?;
    let mut signals = Signals::new()?;
    let resource = args.resource.as_str();
    loop {
        events::emit(Event::Campaigning {
            resource,
            id: &args.id,
        });
        let leadership = match campaign(&election, &args, &mut signals).await? {
            Campaign::Elected(leadership) => *leadership,
            Campaign::Interrupted(signal) => {
                return Ok(child::signal_code(signal));
            }
        };
        let term = leadership.term();
        gauges.elected();
        events::emit(Event::Elected {
            resource,
            id: &args.id,
            term,
            valid_until: leadership.signal().valid_until(),
        });
        let env = [
            ("REDQUORUM_RESOURCE", args.resource.clone()),
            ("REDQUORUM_LEADER_ID", args.id.clone()),
            ("REDQUORUM_TERM", term.to_string()),
            ("REDQUORUM_FENCING_TOKEN", term.to_string()),
        ];
        let ending = child::run_guarded(
            &args.command,
            &env,
            leadership.signal(),
            Holding {
                resource,
                term: Some(term),
            },
            &mut signals,
            Supervision {
                grace: kill_grace,
                foreground: args.foreground,
                stop_signal: tuning.kill_signal(args.kill_signal),
            },
        )
        .await;
        match ending {
            // With --once, the service manager decides what comes next (exit 76).
            Ok(Ending::Lost) if args.once => {
                gauges.lost();
                let _ = leadership.resign().await;
                return Ok(exit::LOST);
            }
            // Campaign again.
            Ok(Ending::Lost) => gauges.lost(),
            Ok(Ending::Exited(code)) => {
                gauges.stepped_down();
                resign(leadership, resource).await;
                return Ok(code);
            }
            Err(e) => {
                gauges.stepped_down();
                let _ = leadership.resign().await;
                return Err(e);
            }
        }
    }
}

/// How a campaign ended.
enum Campaign {
    Elected(Box<Leadership>),
    /// redquorum was sent this signal while campaigning.
    Interrupted(Signal),
}

/// Campaigns until elected or interrupted, saying who leads meanwhile (`leader` events).
///
/// # Cancel safety
/// Cancel safe: a dropped campaign cleans up after itself.
async fn campaign(
    election: &Election,
    args: &ElectArgs,
    signals: &mut Signals,
) -> Result<Campaign, CliError> {
    let campaign = election.campaign(args.id.as_bytes());
    tokio::pin!(campaign);
    // Polled every quarter ttl by a task that ends when this receiver is dropped.
    let mut leaders = election.observe();
    let mut observing = true;
    loop {
        tokio::select! {
            leadership = &mut campaign => return Ok(Campaign::Elected(Box::new(leadership?))),
            changed = leaders.changed(), if observing => {
                if changed.is_err() {
                    observing = false;
                    continue;
                }
                let leader = leaders
                    .borrow_and_update()
                    .as_ref()
                    .map(|l| (String::from_utf8_lossy(l.value()).into_owned(), l.term()));
                events::emit(Event::Leader {
                    resource: &args.resource,
                    leader,
                    unknown: None,
                });
            }
            signal = signals.recv() => return Ok(Campaign::Interrupted(signal)),
        }
    }
}

/// Gives the term up after the command exited by itself.
///
/// # Cancel safety
/// Not cancel safe: dropped midway, the term ends at its ttl instead.
async fn resign(leadership: Leadership, resource: &str) {
    let term = leadership.term();
    match leadership.resign().await {
        Ok(()) => events::emit(Event::Resigned { resource, term }),
        Err(e) => events::emit(Event::ResignFailed {
            resource,
            error: e.to_string(),
        }),
    }
}
