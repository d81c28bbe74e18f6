//! `redquorum elect`: run a command while this candidate leads; campaign again after a loss.

use crate::args::{ElectArgs, Tuning};
use crate::child::{self, Ending, Signals, Supervision};
use crate::client;
use crate::exit::{self, CliError};

pub(crate) async fn elect(
    nodes: Vec<String>,
    args: ElectArgs,
    tuning: &Tuning,
) -> Result<u8, CliError> {
    let kill_grace = child::kill_grace(args.ttl, args.kill_grace)?;
    let rl = client::redlock(nodes, tuning, false)?;
    client::connect_first(&rl).await;
    let election = rl.election(&args.resource, args.ttl)?;
    let mut signals = Signals::new()?;
    loop {
        eprintln!("redquorum: {} campaigning for {}", args.id, args.resource);
        let leadership = tokio::select! {
            leadership = election.campaign(args.id.as_bytes()) => leadership?,
            signal = signals.recv() => return Ok(child::signal_code(signal)),
        };
        let term = leadership.term();
        eprintln!(
            "redquorum: {} leads {} in term {term}",
            args.id, args.resource
        );
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
            |why| {
                eprintln!(
                    "redquorum: lost leadership of term {term} ({why}); stopping the command"
                );
            },
            &mut signals,
            Supervision {
                grace: kill_grace,
                foreground: args.foreground,
                stop_signal: args.kill_signal,
            },
        )
        .await;
        match ending {
            // With --once, the service manager decides what comes next (exit 76).
            Ok(Ending::Lost) if args.once => {
                let _ = leadership.resign().await;
                return Ok(exit::LOST);
            }
            // Campaign again.
            Ok(Ending::Lost) => {}
            Ok(Ending::Exited(code)) => {
                eprintln!("redquorum: the command exited ({code}); resigning term {term}");
                if let Err(e) = leadership.resign().await {
                    eprintln!("redquorum: resigning failed (the term ends at its ttl): {e}");
                }
                return Ok(code);
            }
            Err(e) => {
                let _ = leadership.resign().await;
                return Err(e);
            }
        }
    }
}
