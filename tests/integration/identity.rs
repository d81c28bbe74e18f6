//! One server, one vote: configured nodes that reach one server under different names.
//!
//! Set-if-absent grants a key once per server whatever the name, so the danger is in every
//! compare-and-set: an extension counts one server once per name, and reports a majority that
//! one server gave. Both tests show exactly that lie, and that the `run_id` check prevents it.

use std::collections::BTreeSet;
use std::time::Duration;

use redquorum::{ConfigError, Error, NodeError, NodeOutcome, RedLock, Report};
use redquorum_testkit::{Cluster, Proxy};

use crate::{PREFIX, lock_key, settled};

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// The addresses differ, so the builder cannot tell they are one server.
fn client(urls: Vec<String>) -> RedLock {
    crate::client_of(urls, NODE_TIMEOUT)
}

/// The nodes refused as another node's server, each with the node it named.
fn same_server(report: &Report) -> Vec<(usize, usize)> {
    report
        .iter()
        .filter_map(|line| match line.outcome() {
            NodeOutcome::Failed(NodeError::SameServer { other, .. }) => {
                Some((line.node().index(), other.index()))
            }
            _ => None,
        })
        .collect()
}

/// Five entries, three servers: the third server is also `127.1` and its own Unix socket.
/// The builder's address check passes them; `connect` finds them by `run_id` and names two
/// of them, and on the lock path exactly one of the three names votes. Then two of the five
/// "voters" forget the lock (within the two failures five voters are believed to tolerate):
/// the extension must fail, since one server of three still holds it.
///
/// Mutation: no claim in `node::supervise` (the `servers.claim(&id, run_id)` check removed):
/// `connect` succeeds, and the extension succeeds on one server counted three times.
#[tokio::test]
async fn one_server_under_three_names_votes_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("redis.sock");
    let mut cluster = Cluster::start(2);
    let socket_arg = socket.to_str().expect("utf-8 path");
    let aliased = cluster.add(&["--unixsocket", socket_arg, "--unixsocketperm", "700"]);
    let port = cluster.server(aliased).port();
    let names = [0usize, 3, 4];
    let rl = client(vec![
        cluster.server(aliased).url(),
        cluster.server(0).url(),
        cluster.server(1).url(),
        format!("redis://127.1:{port}"),
        format!("unix://{socket_arg}"),
    ]);

    match rl.connect().await {
        Err(Error::Config(ConfigError::DuplicateNode { first, second })) => {
            assert!(first.index() < second.index(), "{first} {second}");
            assert!(names.contains(&first.index()) && names.contains(&second.index()));
        }
        other => panic!("expected the duplicate to be found, got {other:?}"),
    }

    let mut lock = rl
        .try_acquire("job", TTL)
        .await
        .expect("three servers grant");
    let refused = same_server(lock.report());
    assert_eq!(refused.len(), 2, "{}", lock.report());
    let voter = refused[0].1;
    let refused_nodes: BTreeSet<usize> = refused.iter().map(|(node, _)| *node).collect();
    assert!(refused.iter().all(|(_, other)| *other == voter));
    assert_eq!(
        refused_nodes
            .iter()
            .chain([&voter])
            .copied()
            .collect::<BTreeSet<_>>(),
        names.into_iter().collect(),
    );

    let key = lock_key(b"job");
    for i in [0, 1] {
        let _: i64 = cluster.run(i, redis::cmd("DEL").arg(&key));
    }
    let extended = lock.extend(TTL).await;
    let err = extended.expect_err("one server of three holds the lock");
    let report = err.report().expect("a round ran");
    assert_eq!(same_server(report).len(), 2, "{report}");

    drop(lock);
    settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// Five servers, five nodes; then the fifth server dies and its address starts reaching the
/// first server (a port forward, a DNS name that moved). The fifth node must stop voting at
/// its reconnect, naming the first; then, with two servers forgetting a lock, the extension
/// must fail (two real holders of five).
///
/// Mutation: the same as above (no claim): the fifth node never reports `SameServer`, and the
/// extension succeeds on the first server counted twice.
#[tokio::test]
async fn a_name_that_moves_to_another_voters_server_stops_voting() {
    let mut cluster = Cluster::start(5);
    let rl = client(cluster.urls());
    rl.connect_all().await.expect("five servers of their own");
    let moved = cluster.server(4).port();
    cluster.kill(4);
    let _forward = Proxy::start_on(moved, cluster.server(0).port()).await;

    // Rounds until the fifth node has reconnected, through the forward, and been refused.
    let mut refused = Vec::new();
    for _ in 0..100 {
        let lock = rl
            .try_acquire("moved", TTL)
            .await
            .expect("four servers grant");
        refused = same_server(lock.report());
        lock.release().await.expect("release");
        if !refused.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refused, vec![(4, 0)]);

    let mut lock = rl
        .try_acquire("job", TTL)
        .await
        .expect("four servers grant");
    let key = lock_key(b"job");
    for i in [1, 2] {
        let _: i64 = cluster.run(i, redis::cmd("DEL").arg(&key));
    }
    let err = lock
        .extend(TTL)
        .await
        .expect_err("two servers of five hold the lock");
    assert_eq!(
        same_server(err.report().expect("a round ran")),
        vec![(4, 0)]
    );

    drop(lock);
    settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}
