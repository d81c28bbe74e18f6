//! `redquorum status RESOURCE`: what every master holds, and the majority's view; for a
//! semaphore of that name in use, each permit's holder too.

use redquorum::{FenceSeeding, Inspection, Leader, SemaphoreInspection};
use serde_json::json;

use crate::args::Tuning;
use crate::client;
use crate::exit::{self, CliError};
use crate::out::say;

pub(crate) async fn status(
    nodes: Vec<String>,
    resource: &str,
    as_json: bool,
    tuning: &Tuning,
) -> Result<u8, CliError> {
    let rl = client::redlock(nodes, tuning, false, None)?;
    // The masters' fence seeding, read beside the resource (none in the shared layout).
    let (seen, seeding) = tokio::join!(rl.inspect(resource), rl.fence_seeding());
    let seen = seen?;
    let seeding = seeding.ok();
    // A semaphore of this name in use records its number of permits beside the lock's keys;
    // then its permits are read too.
    let permits = match seen.semaphore_permits() {
        Some(n) => match rl.semaphore(resource, n) {
            Ok(semaphore) => Some(semaphore.inspect().await?),
            Err(_) => None,
        },
        None => None,
    };
    if as_json {
        let mut json = to_json(resource, &seen, seeding.as_ref());
        json["semaphore"] = permits
            .as_ref()
            .map_or(serde_json::Value::Null, semaphore_json);
        say!("{json}");
    } else {
        match &permits {
            // The lock of that name is free: the semaphore is all there is to show.
            Some(permits) if seen.free_on_majority() => print_permits(resource, permits),
            Some(permits) => {
                print_table(resource, &seen);
                say!();
                print_permits(resource, permits);
            }
            None => print_table(resource, &seen),
        }
        if let Some(seeding) = &seeding {
            say!("{}", crate::fence::summary(seeding));
        }
    }
    Ok(if seen.reachable() >= seen.quorum() {
        exit::OK
    } else {
        exit::NO_QUORUM
    })
}

fn print_table(resource: &str, seen: &Inspection) {
    say!(
        "{:<4} {:<24} {:<11} {:<14} {:<10} {:>9} {:>7}  leader",
        "node",
        "address",
        "reachable",
        "server",
        "holder",
        "ttl",
        "fence"
    );
    for n in seen.nodes() {
        let address = n.node().address();
        match n.state() {
            Ok(h) => say!(
                "{:<4} {:<24} {:<11} {:<14} {:<10} {:>9} {:>7}  {}",
                n.node().index(),
                address,
                "yes",
                n.server().unwrap_or("-"),
                holder_cell(h),
                h.ttl()
                    .map_or("-".into(), |t| format!("{:.1}s", t.as_secs_f64())),
                h.fence().map_or("-".into(), |f| f.to_string()),
                h.leader().map_or("-".into(), |l| format!(
                    "{} (term {})",
                    String::from_utf8_lossy(l.value()),
                    l.term()
                )),
            ),
            Err(e) => say!("{:<4} {:<24} no: {e}", n.node().index(), address),
        }
    }
    let view = if seen.reachable() < seen.quorum() {
        format!("unknown: only {} masters answered", seen.reachable())
    } else if let Some(who) = seen.majority_holder() {
        let described =
            majority_holding(seen).and_then(|h| Some((h.holder_about()?, h.held_since()?)));
        let who = match described {
            Some((about, since)) => format!(
                "{who} ({about}, since {})",
                humantime::format_rfc3339_seconds(since)
            ),
            None => who,
        };
        match seen.majority_leader() {
            Some(l) => format!(
                "held by {who}: leader {} in term {}",
                String::from_utf8_lossy(l.value()),
                l.term()
            ),
            None if who == READERS => match seen.readers_on_majority() {
                1 => "held by 1 reader (shared)".to_owned(),
                n => format!("held by {n} readers (shared)"),
            },
            None => format!("held by {who}"),
        }
    } else if seen.free_on_majority() {
        "free".to_owned()
    } else {
        "no majority agrees (changing hands, or a split after failures)".to_owned()
    };
    say!(
        "\n{resource}: {view} (quorum {} of {})",
        seen.quorum(),
        seen.nodes().len()
    );
}

/// Each master's permits ("0:1a2b3c4d 29.1s" for a held one, "1:-" for a free one), then the
/// majority's view: which permits one holder holds on a majority.
/// What the lock key holds while readers of the read-write lock of the name hold: their mark
/// (see `redquorum::RwLock`).
const READERS: &str = "readers";

/// A node's holder as the table shows it: with its number of live read shares when readers
/// hold there.
fn holder_cell(h: &redquorum::Holding) -> String {
    match h.holder() {
        Some(who) if who == READERS => format!("{READERS}:{}", h.readers()),
        Some(who) => who,
        None => "-".into(),
    }
}

fn print_permits(resource: &str, seen: &SemaphoreInspection) {
    say!(
        "{:<4} {:<24} {:<11} permits",
        "node",
        "address",
        "reachable"
    );
    for n in seen.nodes() {
        let address = n.node().address();
        match n.state() {
            Ok(permits) => {
                let shown: Vec<String> = permits
                    .iter()
                    .enumerate()
                    .map(|(i, h)| match (h.holder(), h.ttl()) {
                        (Some(who), Some(ttl)) => format!("{i}:{who} {:.1}s", ttl.as_secs_f64()),
                        (Some(who), None) => format!("{i}:{who}"),
                        (None, _) => format!("{i}:-"),
                    })
                    .collect();
                say!(
                    "{:<4} {:<24} {:<11} {}",
                    n.node().index(),
                    address,
                    "yes",
                    shown.join("  ")
                );
            }
            Err(e) => say!("{:<4} {:<24} no: {e}", n.node().index(), address),
        }
    }
    let held = seen.held_on_majority();
    let view = if seen.reachable() < seen.quorum() {
        format!("unknown: only {} masters answered", seen.reachable())
    } else if held.is_empty() {
        "no permit held by one owner on a majority".to_owned()
    } else {
        let each: Vec<String> = held
            .iter()
            .map(|(permit, who)| format!("permit {permit} by {who}"))
            .collect();
        format!("{} held: {}", held.len(), each.join(", "))
    };
    say!(
        "\n{resource}: semaphore of {} permits, {view} (quorum {} of {})",
        seen.permits(),
        seen.quorum(),
        seen.nodes().len()
    );
}

fn semaphore_json(seen: &SemaphoreInspection) -> serde_json::Value {
    let nodes: Vec<_> = seen
        .nodes()
        .iter()
        .map(|n| match n.state() {
            Ok(permits) => json!({
                "node": n.node().index(),
                "address": n.node().address(),
                "reachable": true,
                "permits": permits.iter().map(|h| json!({
                    "holder": h.holder(),
                    "ttl_ms": h.ttl().map(|t| t.as_millis() as u64),
                })).collect::<Vec<_>>(),
            }),
            Err(e) => unreachable_json(n.node(), e),
        })
        .collect();
    json!({
        "permits": seen.permits(),
        "held_on_majority": seen.held_on_majority().iter().map(|(permit, holder)| json!({
            "permit": permit,
            "holder": holder,
        })).collect::<Vec<_>>(),
        "nodes": nodes,
    })
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
                "server": n.server(),
                "holder": h.holder(),
                "readers": h.readers(),
                "ttl_ms": h.ttl().map(|t| t.as_millis() as u64),
                "fence": h.fence(),
                "leader": h.leader().map(leader_json),
                "holder_about": h.holder_about(),
                "held_since_ms": h.held_since().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_millis() as u64),
            }),
            Err(e) => unreachable_json(n.node(), e),
        })
        .collect();
    json!({
        "resource": resource,
        "quorum": seen.quorum(),
        "reachable": seen.reachable(),
        "majority_holder": seen.majority_holder(),
        "majority_holder_about": about(seen),
        "majority_leader": seen.majority_leader().map(leader_json),
        "readers_on_majority": seen.readers_on_majority(),
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

/// The description of the holder that holds on a majority, when it gave one (`run` and
/// `elect` do: host, pid, command).
pub(crate) fn about(seen: &Inspection) -> Option<String> {
    majority_holding(seen)?.holder_about().map(str::to_owned)
}

/// A node's holding of the holder that holds on a majority.
fn majority_holding(seen: &Inspection) -> Option<&redquorum::Holding> {
    let who = seen.majority_holder()?;
    seen.nodes()
        .iter()
        .filter_map(|n| n.state().ok())
        .find(|h| h.holder().as_deref() == Some(who.as_str()))
}

/// A master that could not be read, in the JSON of the lock and of a semaphore alike.
fn unreachable_json(node: &redquorum::NodeId, e: &redquorum::NodeError) -> serde_json::Value {
    json!({
        "node": node.index(),
        "address": node.address(),
        "reachable": false,
        "error": e.to_string(),
    })
}
