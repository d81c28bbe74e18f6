//! `redquorum dev …`: drive the local cluster from the shell.

use std::time::Duration;

use serde_json::json;

use redquorum_testkit::{DevCluster, ServerKind};

use crate::args::DevAction;
use crate::exit::{self, CliError};
use crate::out::say;

/// The dev cluster in its state directory ([`DevCluster::default_dir`]), if there is one.
pub(crate) fn open_dev_cluster() -> Result<Option<DevCluster>, CliError> {
    Ok(DevCluster::open(&DevCluster::default_dir()?)?)
}

pub(crate) fn dev(action: DevAction, as_json: bool) -> Result<u8, CliError> {
    let cluster = match action {
        DevAction::Up { count, server } => {
            let dir = DevCluster::default_dir()?;
            let kind = match server {
                Some(server) => Some(ServerKind::from_name(&server).ok_or_else(|| {
                    CliError::usage(format!("--server {server}: redis or valkey"))
                })?),
                None => None,
            };
            let (cluster, created) = DevCluster::up(&dir, usize::from(count), kind)?;
            eprintln!(
                "redquorum: dev cluster {} in {}",
                if created { "started" } else { "is up" },
                dir.display()
            );
            cluster
        }
        DevAction::Down => {
            match open_dev_cluster()? {
                Some(cluster) => {
                    cluster.down()?;
                    eprintln!("redquorum: dev cluster stopped and its files removed");
                }
                None => eprintln!("redquorum: no dev cluster to stop"),
            }
            return Ok(exit::OK);
        }
        action => {
            let cluster = open_dev_cluster()?.ok_or_else(|| {
                CliError::usage("no dev cluster: start one with `redquorum dev up`")
            })?;
            match action {
                DevAction::Kill { node } => cluster.kill(node)?,
                DevAction::Pause { node } => cluster.pause(node)?,
                DevAction::Resume { node } => cluster.resume(node)?,
                DevAction::Restart { node } => cluster.restart(node)?,
                DevAction::Status | DevAction::Up { .. } | DevAction::Down => {}
            }
            cluster
        }
    };
    print_status(&cluster, as_json);
    Ok(exit::OK)
}

fn print_status(cluster: &DevCluster, as_json: bool) {
    let timeout = Duration::from_millis(200);
    if as_json {
        let nodes: Vec<_> = cluster
            .nodes
            .iter()
            .map(|n| {
                let ping = n.ping(timeout);
                json!({
                    "node": n.index,
                    "server": n.kind.program(),
                    "url": n.url(),
                    "pid": n.pid(),
                    "state": n.state().label(),
                    "ping_us": ping.as_ref().ok().map(|d| d.as_micros() as u64),
                    "ping_error": ping.err(),
                })
            })
            .collect();
        say!("{}", json!({ "nodes": nodes }));
        return;
    }
    for n in &cluster.nodes {
        let ping = match n.ping(timeout) {
            Ok(d) => format!("PONG in {:.2} ms", d.as_secs_f64() * 1e3),
            Err(e) => e,
        };
        say!(
            "node {}  {:<24} {:<13} pid {:<8} {:<7} {ping}",
            n.index,
            n.url(),
            n.kind.program(),
            n.pid().map_or("-".into(), |p| p.to_string()),
            n.state().label(),
        );
    }
    say!("REDQUORUM_NODES={}", cluster.urls().join(","));
}
