//! Integration tests against real `redis-server` processes (one test binary, several modules).

mod acl;
mod acquire;
mod clock;
mod cluster_voters;
mod deploy;
#[cfg(feature = "testing")]
mod double;
mod election;
mod failures;
mod fence_seeding;
mod fencing;
mod half_moved_slots;
mod handoff;
mod identity;
mod interop;
mod leases;
mod lifecycle;
mod many;
mod metric_recording;
mod misbehaving;
mod native;
mod network;
mod partitions;
mod readme;
mod redis_cluster;
#[path = "../support/repo_files.rs"]
mod repo_files;
mod restarts;
mod rwlock;
mod semaphore;
mod sentinel;
mod servers;
mod tls;
mod types;
mod validity;
mod verdicts;
mod waiting;

use std::time::Duration;

use redquorum::RedLock;
pub(crate) use redquorum_testkit::eventually;
use redquorum_testkit::{Cluster, Fault, Proxy};

pub(crate) const PREFIX: &[u8] = b"redquorum:";
/// How many Lua scripts redquorum loads on every new connection (`scripts::all`).
pub(crate) const SCRIPT_COUNT: u64 = 28;

/// A client over every server of `cluster`, with a per-node timeout generous enough for a
/// loaded 2-core CI machine.
pub(crate) fn client(cluster: &Cluster, per_node_timeout: Duration) -> RedLock {
    RedLock::builder(cluster.urls())
        .per_node_timeout(per_node_timeout)
        .build()
        .expect("valid configuration")
}

/// A client over `urls` (spellings the builder's address check cannot tell apart, Sentinel
/// voters, …) with the given per-node timeout.
pub(crate) fn client_of(urls: Vec<String>, per_node_timeout: Duration) -> RedLock {
    RedLock::builder(urls)
        .per_node_timeout(per_node_timeout)
        .build()
        .expect("valid configuration")
}

/// A client over `cluster` whose acquires retry forever, every 10 s and without jitter: long
/// enough that a test sees a waiter woken by a release, never by its retry timer.
pub(crate) fn woken_by_releases_only(
    cluster: &Cluster,
    per_node_timeout: Duration,
    fencing: bool,
) -> RedLock {
    RedLock::builder(cluster.urls())
        .per_node_timeout(per_node_timeout)
        .fencing(fencing)
        .retry(
            redquorum::RetryPolicy::default()
                .max_attempts(None)
                .delay(Duration::from_secs(10))
                .jitter(Duration::ZERO),
        )
        .build()
        .expect("config")
}

pub(crate) fn lock_key(resource: &[u8]) -> Vec<u8> {
    let mut key = PREFIX.to_vec();
    key.push(b'{');
    key.extend_from_slice(resource);
    key.push(b'}');
    key
}

/// Waits until every running server holds `lock`'s key with its token. A round is decided at the
/// majority; the slower nodes' requests finish in the background, so tests that inspect every
/// node right after an acquire must wait for them.
pub(crate) async fn held_everywhere(cluster: &Cluster, lock: &redquorum::Lock) -> bool {
    let key = lock_key(lock.resource());
    let token = lock.token().expose();
    eventually(Duration::from_secs(3), || {
        (0..cluster.len())
            .filter(|i| cluster.server(*i).is_running())
            .all(|i| {
                cluster
                    .get(i, &key)
                    .is_some_and(|value| redquorum_testkit::holds_token(&value, token))
            })
    })
    .await
}

/// A client over `cluster` whose first `slow` nodes are reached through proxies (so a test can
/// slow them down, see [`slowly`]), the others directly; every connection made.
pub(crate) async fn first_behind_proxies(
    cluster: &Cluster,
    slow: usize,
    per_node_timeout: Duration,
) -> (Vec<Proxy>, RedLock) {
    let mut proxies = Vec::new();
    for node in 0..slow {
        proxies.push(Proxy::start(cluster.server(node).port()).await);
    }
    let mut urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    urls.extend((slow..cluster.len()).map(|node| cluster.server(node).url()));
    let rl = client_of(urls, per_node_timeout);
    rl.connect_all().await.expect("connect");
    (proxies, rl)
}

/// Runs `work` while every proxy delays its traffic by 30 ms: a round then hears the other
/// nodes before it is decided.
pub(crate) async fn slowly<T>(proxies: &[Proxy], work: impl std::future::Future<Output = T>) -> T {
    for proxy in proxies {
        proxy.set(Fault::Delay(Duration::from_millis(30)));
    }
    let done = work.await;
    for proxy in proxies {
        proxy.set(Fault::None);
    }
    done
}

/// Waits for what `rl` left running in the background: a release is decided at the majority
/// and the rest of its deletes finish after it returns. Checks that "nothing is left behind"
/// come after this, not after the ttl.
pub(crate) async fn settled(rl: &RedLock) {
    assert!(
        rl.settle(Duration::from_secs(5)).await,
        "background deletes still running after 5 s"
    );
}

/// Panics listing them if a running server holds a lock key (`prefix{…}`); counters,
/// markers and leader info may stay.
pub(crate) fn assert_no_lock_keys(cluster: &Cluster) {
    let left: Vec<String> = cluster
        .keys()
        .into_iter()
        .filter(|(_, k)| k.starts_with(PREFIX) && k.ends_with(b"}"))
        .map(|(i, k)| format!("server {i}: {}", k.escape_ascii()))
        .collect();
    assert!(left.is_empty(), "lock keys left: {left:?}");
}

/// The one key on server `node` ending with `suffix`, if any: fenced tests lock one
/// resource, so each server has at most one counter (one per hash slot; a client's background
/// seeding marks every slot, but writes a counter only where one is above 0).
fn only_key_ending(cluster: &Cluster, node: usize, suffix: &[u8]) -> Option<Vec<u8>> {
    let mut found: Vec<Vec<u8>> = cluster
        .keys()
        .into_iter()
        .filter(|(i, k)| *i == node && k.ends_with(suffix))
        .map(|(_, k)| k)
        .collect();
    assert!(
        found.len() <= 1,
        "one fenced resource, one such key: {found:?}"
    );
    found.pop()
}

/// The re-seed marker of the (one) fenced slot: next to the one counter any server has.
fn the_marker(cluster: &Cluster) -> Option<Vec<u8>> {
    let counter = (0..cluster.len())
        .filter(|i| cluster.server(*i).is_running())
        .find_map(|i| only_key_ending(cluster, i, b"}:slot:fence"))?;
    let mut marker = counter;
    marker.truncate(marker.len() - b"fence".len());
    marker.extend_from_slice(b"seeded");
    Some(marker)
}

/// The term the re-seed marker of the (one) fenced slot names on server `node`, and the
/// server's own term (its `run_id` and its `master_replid`, as `run_id/replid`):
/// equal once the server's counter was seeded for its current term.
pub(crate) fn seed_marker(cluster: &Cluster, node: usize) -> (Option<String>, String) {
    let run = the_marker(cluster)
        .and_then(|key| cluster.run(node, redis::cmd("HGET").arg(key).arg("run")));
    let field = |section: &str, name: &str| {
        let info: String = cluster.run(node, redis::cmd("INFO").arg(section));
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .expect("INFO has the field")
            .trim()
            .to_owned()
    };
    // The fence term: the run_id and the replication id, always (`scripts/lua/fence_term.lua`).
    let term = format!(
        "{}/{}",
        field("server", "run_id:"),
        field("replication", "master_replid:")
    );
    (run, term)
}

/// The value of the (one) slot fence counter on server `node`: fenced tests lock one resource,
/// so each server has at most one counter (`prefix{TAG}:slot:fence`, one per hash slot).
pub(crate) fn fence_counter(cluster: &Cluster, node: usize) -> Option<u64> {
    let key = only_key_ending(cluster, node, b"}:slot:fence")?;
    let value = cluster.get(node, &key)?;
    Some(String::from_utf8_lossy(&value).parse().expect("a counter"))
}
