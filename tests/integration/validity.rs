//! The deadline a lock reports never outlasts the servers' keys, even when rounds are slow.
//!
//! The classic Redlock mistake is to count validity from when the round was *decided* rather
//! than from before its *first send*: harmless on a fast network, unsafe whenever a round is
//! slow, and invisible to tests whose rounds take a millisecond. Here every link is slowed
//! by a proxy, and the lock's deadline is compared with each server's own expiry of the key,
//! read directly from the server. The comparison is between instants ordered by causality,
//! not a wall-clock bound: a correct deadline is earlier than every server's expiry by at
//! least the drift plus the request's time on the wire (here 150 ms).

use std::time::{Duration, Instant};

use redquorum::RedLock;

use crate::{PREFIX, lock_key};
use redquorum_testkit::Cluster;
use redquorum_testkit::{Fault, Proxy};

/// Every node holding `key` expires it no earlier than `deadline`. Reads `PTTL` straight from
/// each server: the server's expiry is at least `asked + pttl` (it counted the ttl after we
/// asked), so `deadline ≤ asked + pttl` (+1 ms for the server's whole-ms rounding) must hold.
fn assert_servers_outlast(cluster: &Cluster, key: &[u8], deadline: Instant, what: &str) {
    let mut holding = 0;
    for node in 0..cluster.len() {
        let asked = Instant::now();
        let pttl = cluster.pttl(node, key);
        if pttl < 0 {
            continue;
        }
        holding += 1;
        let expiry_at_least = asked + Duration::from_millis(pttl as u64 + 1);
        assert!(
            deadline <= expiry_at_least,
            "{what}: node {node} expires the key {:?} before the lock's deadline",
            deadline - expiry_at_least
        );
    }
    assert!(holding >= 2, "{what}: a majority of 3 holds the key");
}

/// Mutation: `valid_until` counted from `round.decided` instead of `round.start`
/// (`redlock::valid_until`) makes this fail by about 150 ms, for the acquire and the extend.
#[tokio::test]
async fn a_slow_round_never_yields_a_deadline_past_the_servers_expiry() {
    let cluster = Cluster::start(3);
    let proxies = [
        Proxy::start(cluster.server(0).port()).await,
        Proxy::start(cluster.server(1).port()).await,
        Proxy::start(cluster.server(2).port()).await,
    ];
    let rl = RedLock::builder(proxies.iter().map(Proxy::url))
        .per_node_timeout(Duration::from_secs(1))
        .build()
        .expect("config");
    rl.connect()
        .await
        .expect("connect before the links slow down");
    for proxy in &proxies {
        proxy.set(Fault::Delay(Duration::from_millis(150)));
    }
    let ttl = Duration::from_secs(3);
    let key = lock_key(b"slow-rounds");
    let mut lock = rl.try_acquire("slow-rounds", ttl).await.expect("acquire");
    assert_servers_outlast(&cluster, &key, lock.valid_until(), "acquire");
    lock.extend(ttl).await.expect("extend");
    assert_servers_outlast(&cluster, &key, lock.valid_until(), "extend");
    for proxy in &proxies {
        proxy.set(Fault::None);
    }
    lock.release().await.expect("release");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}
