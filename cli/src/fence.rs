//! `redquorum fence`: seed every master's fence counters now, and show whether each master is
//! seeded for its current term, as an operator checks before restarting the next master.

use redquorum::{FenceSeeding, Seeding};
use serde_json::json;

use crate::args::Tuning;
use crate::client;
use crate::exit::{self, CliError};
use crate::out::say;

pub(crate) async fn fence(
    nodes: Vec<String>,
    check_only: bool,
    as_json: bool,
    tuning: &Tuning,
) -> Result<u8, CliError> {
    let rl = client::redlock(nodes, tuning, true, None)?;
    let seeding = if check_only {
        rl.fence_seeding().await?
    } else {
        rl.seed_fencing().await?
    };
    if as_json {
        say!("{}", to_json(&seeding));
    } else {
        print_table(&seeding);
    }
    Ok(if seeding.is_complete() {
        exit::OK
    } else {
        exit::NO_QUORUM
    })
}

/// One word for a master's seeding, as `status` and `fence` show it.
pub(crate) fn word(seeding: Seeding) -> &'static str {
    match seeding {
        Seeding::Seeded => "seeded",
        Seeding::NotSeeded => "not seeded",
        Seeding::NotTracked => "not tracked (a cluster: `redquorum fence` checks it)",
        Seeding::Unreachable => "unreachable",
        _ => "unknown",
    }
}

/// The one line `status` and `fence` end with.
pub(crate) fn summary(seeding: &FenceSeeding) -> String {
    let not_seeded: Vec<String> = seeding
        .masters()
        .iter()
        .filter(|(_, s)| *s != Seeding::Seeded)
        .map(|(node, s)| format!("{} ({})", node.index(), word(*s)))
        .collect();
    if not_seeded.is_empty() {
        return "fencing: seeded on every master: any one can be restarted".to_owned();
    }
    format!(
        "fencing: not seeded on master {}: restart no other master until `redquorum fence` \
         says every master is seeded (a fenced lock meanwhile needs a majority of the others)",
        not_seeded.join(", ")
    )
}

fn print_table(seeding: &FenceSeeding) {
    say!("{:<4} {:<24} fencing", "node", "address");
    for (node, state) in seeding.masters() {
        say!(
            "{:<4} {:<24} {}",
            node.index(),
            node.address(),
            word(*state)
        );
    }
    if let Some(left) = seeding.slots_left().filter(|left| *left > 0) {
        say!("\n{left} slots could not be seeded on every master that answered");
    }
    say!("\n{}", summary(seeding));
}

fn to_json(seeding: &FenceSeeding) -> serde_json::Value {
    let masters: Vec<_> = seeding
        .masters()
        .iter()
        .map(|(node, state)| {
            json!({
                "node": node.index(),
                "address": node.address(),
                "fencing": word(*state),
            })
        })
        .collect();
    json!({
        "complete": seeding.is_complete(),
        "slots_left": seeding.slots_left(),
        "nodes": masters,
    })
}
