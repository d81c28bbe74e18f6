//! Real network partitions (issue 35 §4): masters in network namespaces the test creates, on
//! addresses of their own inside them, cut by taking their links down
//! (`redquorum_testkit::NetnsServer`). Where namespaces cannot be made here (no root, no
//! `ip`, a container without `CAP_NET_ADMIN`), the same case runs through the TCP proxy,
//! and the test says so on its output.

use std::time::{Duration, Instant};

use redquorum::{LeaseOptions, LostReason, RedLock};
use redquorum_testkit::{Cluster, Fault, NetnsServer, Proxy, ServerKind};

use crate::eventually;

/// Three masters the test can cut from the client: in namespaces, or behind proxies.
enum Far {
    Namespaces(Vec<NetnsServer>),
    Proxied(Cluster, Vec<Proxy>),
}

impl Far {
    async fn start() -> Self {
        match (0..3)
            .map(|_| NetnsServer::start(ServerKind::Redis))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(servers) => Self::Namespaces(servers),
            Err(why) => {
                eprintln!(
                    "network namespaces cannot be made here ({why}): the partition runs \
                     through the TCP proxy instead"
                );
                let cluster = Cluster::start(3);
                let mut proxies = Vec::new();
                for i in 0..3 {
                    proxies.push(Proxy::start(cluster.server(i).port()).await);
                }
                Self::Proxied(cluster, proxies)
            }
        }
    }

    fn urls(&self) -> Vec<String> {
        match self {
            Self::Namespaces(servers) => servers.iter().map(NetnsServer::url).collect(),
            Self::Proxied(_, proxies) => proxies.iter().map(Proxy::url).collect(),
        }
    }

    fn cut(&self) {
        match self {
            Self::Namespaces(servers) => servers.iter().for_each(NetnsServer::cut),
            Self::Proxied(_, proxies) => proxies.iter().for_each(|p| p.set(Fault::BlackHole)),
        }
    }

    fn heal(&self) {
        match self {
            Self::Namespaces(servers) => servers.iter().for_each(NetnsServer::heal),
            Self::Proxied(_, proxies) => proxies.iter().for_each(|p| p.set(Fault::None)),
        }
    }

    /// How many keys are left on the three.
    fn keys(&self) -> usize {
        let all = redis::cmd("KEYS").arg("*").clone();
        match self {
            Self::Namespaces(servers) => servers
                .iter()
                .map(|s| s.run::<Vec<String>>(&all).len())
                .sum(),
            Self::Proxied(cluster, _) => cluster.keys().len(),
        }
    }
}

/// A client cut from a majority of its masters while it holds a lease (three of five masters
/// in namespaces whose links go down; nothing resets the connections, the requests just
/// hang): the lease reports `lost()` by the lock's deadline, before the servers' expiry,
/// though every renewal is still waiting for its answers. Healed, the release says the lock
/// was lost, and the keys go by their ttl.
///
/// Mutation: the keep-alive's renewal awaited without its deadline (`timeout_at(deadline, …)`
/// dropped in `keep_alive.rs`): `lost()` fires only when the hanging renewal gives up, 277 ms
/// past the deadline, past the servers' expiry (run, caught).
#[tokio::test]
async fn a_client_cut_from_a_majority_loses_its_lease_by_the_deadline() {
    let near = Cluster::start(2);
    let far = Far::start().await;
    let ttl = Duration::from_secs(2);
    // A per-node timeout near the ttl: a renewal hangs past the deadline. Drift factor 0.05:
    // 102 ms between the deadline and the servers' expiry, wide enough for a loaded machine.
    let urls = near.urls().into_iter().chain(far.urls());
    let rl = RedLock::builder(urls)
        .per_node_timeout(Duration::from_millis(1500))
        .drift_factor(0.05)
        .build()
        .expect("config");
    rl.connect_all().await.expect("every master answers");
    let lock = rl.try_acquire("cut", ttl).await.expect("acquire");
    let lease = lock.into_lease(LeaseOptions::default());
    far.cut();
    let reason = lease.lost().await;
    let lost_at = Instant::now();
    assert!(matches!(reason, LostReason::DeadlinePassed), "{reason}");
    let deadline = lease.valid_until();
    assert!(lost_at >= deadline, "fired {:?} early", deadline - lost_at);
    assert!(
        lost_at < deadline + Duration::from_millis(102),
        "fired {:?} late, past the servers' expiry",
        lost_at - deadline
    );
    far.heal();
    let err = lease.release().await.expect_err("it had been lost");
    assert!(err.is_expired(), "{err}");
    assert!(
        eventually(Duration::from_secs(4), || near.keys().is_empty()
            && far.keys() == 0)
        .await,
        "keys left after their ttl"
    );
}
