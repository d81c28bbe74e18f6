//! Which servers the tests run (`REDQUORUM_TEST_SERVER`, see `redquorum_testkit::ServerKind`),
//! and a list of masters mixing Redis and Valkey, as in a rolling migration from one to the
//! other: every lock kind works across the mix, whatever the variable says.

use std::time::Duration;

use redquorum::RedLock;
use redquorum_testkit::{Cluster, Persistence, ServerKind};

const NODE_TIMEOUT: Duration = Duration::from_millis(250);
const TTL: Duration = Duration::from_secs(10);

/// What `INFO server` says the server at `i` is: Valkey says `server_name:valkey` and its
/// `valkey_version`; Redis 7.0 says neither.
fn kind_by_info(cluster: &Cluster, i: usize) -> ServerKind {
    let info: String = cluster.run(i, redis::cmd("INFO").arg("server"));
    if info.lines().any(|l| l.trim() == "server_name:valkey") {
        assert!(info.contains("valkey_version:"), "{info}");
        ServerKind::Valkey
    } else {
        ServerKind::Redis
    }
}

/// The servers are what the harness says they are: a run meant for Valkey that started Redis
/// would pass without testing Valkey at all.
///
/// Mutation: `ServerKind::program` naming `redis-server` for Valkey fails it under `valkey`
/// and `mixed` (run, caught).
#[test]
fn the_servers_are_the_kind_the_harness_says() {
    let cluster = Cluster::start(3);
    let kinds: Vec<ServerKind> = (0..cluster.len())
        .map(|i| kind_by_info(&cluster, i))
        .collect();
    for (i, kind) in kinds.iter().enumerate() {
        assert_eq!(cluster.server(i).kind(), *kind, "server {i}");
        assert_eq!(ServerKind::of_master(i), *kind, "server {i}");
    }
    let chosen = std::env::var(redquorum_testkit::TEST_SERVER_VARIABLE);
    match chosen.as_deref().unwrap_or("redis") {
        "mixed" => assert_ne!(kinds[0], kinds[1], "a mixed list alternates"),
        "valkey" => assert_eq!(kinds, [ServerKind::Valkey; 3]),
        _ => assert_eq!(kinds, [ServerKind::Redis; 3]),
    }
    let mixed = Cluster::start_kinds(
        &[ServerKind::Valkey, ServerKind::Redis],
        Persistence::None,
        &[],
    );
    assert_eq!(kind_by_info(&mixed, 0), ServerKind::Valkey);
    assert_eq!(kind_by_info(&mixed, 1), ServerKind::Redis);
}

/// Five masters, three Valkey and two Redis: a plain lock, a fenced one, a semaphore permit
/// and a two-resource lock are taken and released, contention is refused, and nothing is left
/// behind right after the releases. Then a minority of each kind fails in turn (one master
/// down of each), and locks still go on.
#[tokio::test]
async fn a_list_mixing_redis_and_valkey_masters_serves_every_lock_kind() {
    use ServerKind::{Redis, Valkey};
    let mut cluster = Cluster::start_kinds(
        &[Valkey, Redis, Valkey, Redis, Valkey],
        Persistence::None,
        &[],
    );
    let rl = crate::client(&cluster, NODE_TIMEOUT);
    let fenced = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .fencing(true)
        .build()
        .expect("config");

    let lock = rl.try_acquire("mixed", TTL).await.expect("lock");
    assert!(crate::held_everywhere(&cluster, &lock).await);
    let busy = rl.try_acquire("mixed", TTL).await.expect_err("held");
    assert!(busy.is_conflict(), "{busy}");
    lock.release().await.expect("release");

    let first = fenced.try_acquire("ledger", TTL).await.expect("fenced");
    let first_token = first.fencing_token().expect("fenced");
    first.release().await.expect("release");
    let second = fenced.try_acquire("ledger", TTL).await.expect("fenced");
    assert!(second.fencing_token().expect("fenced") > first_token);
    second.release().await.expect("release");

    let permit = rl
        .semaphore("pool", 2)
        .expect("semaphore")
        .try_acquire(TTL)
        .await
        .expect("permit");
    permit.release().await.expect("release");

    let both = rl
        .try_acquire_many(&["a", "b"], TTL)
        .await
        .expect("two resources");
    both.release().await.expect("release");

    crate::settled(&rl).await;
    crate::settled(&fenced).await;
    crate::assert_no_lock_keys(&cluster);

    cluster.kill(0);
    cluster.kill(1);
    let lock = rl
        .try_acquire("mixed", TTL)
        .await
        .expect("a Valkey and a Redis master down: three of five");
    lock.release().await.expect("release");
    crate::settled(&rl).await;
    crate::assert_no_lock_keys(&cluster);
}
