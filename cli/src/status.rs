//! `redquorum status RESOURCE`: what every master holds, and the majority's view.

use redquorum::{FenceSeeding, Inspection, Leader};
use serde_json::json;

use crate::args::Tuning;
use crate::client;
use crate::exit::{self, CliError};

pub(crate) async fn status(
    nodes: Vec<String>,
    resource: &str,
    as_json: bool,
    tuning: &Tuning,
) -> Result<u8, CliError> {
    let rl = client::redlock(nodes, tuning, false)?;
    // The masters' fence seeding, read beside the resource (none in the shared layout).
    let (seen, seeding) = tokio::join!(rl.inspect(resource), rl.fence_seeding());
    let seen = seen?;
    let seeding = seeding.ok();
    if as_json {
        println!("{}", to_json(resource, &seen, seeding.as_ref()));
    } else {
        print_table(resource, &seen, seeding.as_ref());
    }
    Ok(if seen.reachable() >= seen.quorum() {
        exit::OK
    } else {
        exit::NO_QUORUM
    })
}

fn print_table(resource: &str, seen: &Inspection, seeding: Option<&FenceSeeding>) {
    println!(
        "{:<4} {:<24} {:<11} {:<10} {:>9} {:>7}  leader",
        "node", "address", "reachable", "holder", "ttl", "fence"
    );
    for n in seen.nodes() {
        let address = n.node().address();
        match n.state() {
            Ok(h) => println!(
                "{:<4} {:<24} {:<11} {:<10} {:>9} {:>7}  {}",
                n.node().index(),
                address,
                "yes",
                h.holder().unwrap_or_else(|| "-".into()),
                h.ttl()
                    .map_or("-".into(), |t| format!("{:.1}s", t.as_secs_f64())),
                h.fence().map_or("-".into(), |f| f.to_string()),
                h.leader().map_or("-".into(), |l| format!(
                    "{} (term {})",
                    String::from_utf8_lossy(l.value()),
                    l.term()
                )),
            ),
            Err(e) => println!("{:<4} {:<24} no: {e}", n.node().index(), address),
        }
    }
    let view = if seen.reachable() < seen.quorum() {
        format!("unknown: only {} masters answered", seen.reachable())
    } else if let Some(who) = seen.majority_holder() {
        match seen.majority_leader() {
            Some(l) => format!(
                "held by {who}: leader {} in term {}",
                String::from_utf8_lossy(l.value()),
                l.term()
            ),
            None => format!("held by {who}"),
        }
    } else if seen.free_on_majority() {
        "free".to_owned()
    } else {
        "no majority agrees (changing hands, or a split after failures)".to_owned()
    };
    println!(
        "\n{resource}: {view} (quorum {} of {})",
        seen.quorum(),
        seen.nodes().len()
    );
    if let Some(seeding) = seeding {
        println!("{}", crate::fence::summary(seeding));
    }
}

fn to_json(resource: &str, seen: &Inspection, seeding: Option<&FenceSeeding>) -> serde_json::Value {
    let nodes: Vec<_> = seen
        .nodes()
        .iter()
        .map(|n| match n.state() {
            Ok(h) => json!({
                "node": n.node().index(),
                "address": n.node().address(),
                "reachable": true,
                "holder": h.holder(),
                "ttl_ms": h.ttl().map(|t| t.as_millis() as u64),
                "fence": h.fence(),
                "leader": h.leader().map(leader_json),
            }),
            Err(e) => json!({
                "node": n.node().index(),
                "address": n.node().address(),
                "reachable": false,
                "error": e.to_string(),
            }),
        })
        .collect();
    json!({
        "resource": resource,
        "quorum": seen.quorum(),
        "reachable": seen.reachable(),
        "majority_holder": seen.majority_holder(),
        "majority_leader": seen.majority_leader().map(leader_json),
        "free": seen.free_on_majority(),
        "highest_fence": seen.highest_fence(),
        "fencing_seeded": seeding.map(FenceSeeding::is_complete),
        "nodes": nodes,
    })
}

fn leader_json(leader: &Leader) -> serde_json::Value {
    json!({
        "value": String::from_utf8_lossy(leader.value()),
        "term": leader.term(),
    })
}
