//! Real network partitions (issue 35 §4): masters in network namespaces the test creates, on
//! addresses of their own inside them, cut by taking their links down
//! (`redquorum_testkit::NetnsServer`). Where namespaces cannot be made here (no root, no
//! `ip`, a container without `CAP_NET_ADMIN`), the same case runs through the TCP proxy,
//! and the test says so on its output.

use std::time::{Duration, Instant};

use redquorum::{LeaseOptions, LostReason, RedLock};
use redquorum_testkit::{Cluster, Fault, NetnsServer, Proxy, ServerKind};

use crate::eventually;

/// Masters the test can cut from the clients, each reached over `links` links (one per
/// client side): in namespaces of their own, or, where those cannot be made here, behind a
/// proxy per link.
enum Cuttable {
    Namespaces(Vec<NetnsServer>),
    Proxied(Cluster, Vec<Vec<Proxy>>),
}

impl Cuttable {
    async fn start(n: usize, links: usize) -> Self {
        match (0..n)
            .map(|_| NetnsServer::start_with_links(ServerKind::Redis, links))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(servers) => Self::Namespaces(servers),
            Err(why) => {
                eprintln!(
                    "network namespaces cannot be made here ({why}): the partition runs \
                     through the TCP proxy instead"
                );
                let cluster = Cluster::start(n);
                let mut proxies = Vec::new();
                for i in 0..n {
                    let port = cluster.server(i).port();
                    let mut each = Vec::new();
                    for _ in 0..links {
                        each.push(Proxy::start(port).await);
                    }
                    proxies.push(each);
                }
                Self::Proxied(cluster, proxies)
            }
        }
    }

    /// The masters as a client on `link` reaches them.
    fn urls(&self, link: usize) -> Vec<String> {
        match self {
            Self::Namespaces(servers) => servers.iter().map(|s| s.url_on(link)).collect(),
            Self::Proxied(_, proxies) => proxies.iter().map(|p| p[link].url()).collect(),
        }
    }

    /// Cuts `link` of `masters`; a client on another link still reaches them.
    fn cut(&self, link: usize, masters: &[usize]) {
        for &m in masters {
            match self {
                Self::Namespaces(servers) => servers[m].cut_link(link),
                Self::Proxied(_, proxies) => proxies[m][link].set(Fault::BlackHole),
            }
        }
    }

    /// Cuts every master from every client.
    fn cut_all(&self) {
        match self {
            Self::Namespaces(servers) => servers.iter().for_each(NetnsServer::cut),
            Self::Proxied(_, proxies) => proxies
                .iter()
                .flatten()
                .for_each(|p| p.set(Fault::BlackHole)),
        }
    }

    fn heal(&self) {
        match self {
            Self::Namespaces(servers) => servers.iter().for_each(NetnsServer::heal),
            Self::Proxied(_, proxies) => proxies.iter().flatten().for_each(|p| p.set(Fault::None)),
        }
    }

    /// How many keys are left on them.
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
    let far = Cuttable::start(3, 1).await;
    let ttl = Duration::from_secs(2);
    // A per-node timeout near the ttl: a renewal hangs past the deadline. Drift factor 0.05:
    // 102 ms between the deadline and the servers' expiry, wide enough for a loaded machine.
    let urls = near.urls().into_iter().chain(far.urls(0));
    let rl = RedLock::builder(urls)
        .per_node_timeout(Duration::from_millis(1500))
        .drift_factor(0.05)
        .build()
        .expect("config");
    rl.connect_all().await.expect("every master answers");
    let lock = rl.try_acquire("cut", ttl).await.expect("acquire");
    let lease = lock.into_lease(LeaseOptions::default());
    far.cut_all();
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

/// An asymmetric partition: client A is cut from three of five masters while it holds a
/// lease, and client B, which still reaches all five, tries for the lock all along. A's
/// lease reports `lost()` at its deadline, and B gets the lock only after that (the keys go
/// by their ttl, which outlasts A's deadline by the drift): never two clients that each
/// believe they hold it.
///
/// Mutation: the keep-alive's renewal awaited without its deadline (as for the test above):
/// A's lease fires 277 ms late, past the servers' expiry, when B may already hold (run,
/// caught).
#[tokio::test]
async fn an_asymmetric_partition_never_lets_two_clients_hold_at_once() {
    let masters = Cuttable::start(5, 2).await;
    let ttl = Duration::from_secs(2);
    let a = RedLock::builder(masters.urls(0))
        .per_node_timeout(Duration::from_millis(1500))
        .drift_factor(0.05)
        .build()
        .expect("config");
    let b = RedLock::builder(masters.urls(1))
        .per_node_timeout(Duration::from_millis(250))
        .build()
        .expect("config");
    a.connect_all().await.expect("A reaches every master");
    b.connect_all().await.expect("B reaches every master");
    let lease = a
        .try_acquire("asymmetric", ttl)
        .await
        .expect("acquire")
        .into_lease(LeaseOptions::default());
    masters.cut(0, &[0, 1, 2]);
    let contender = tokio::spawn(async move {
        let lock = b
            .acquire_within("asymmetric", ttl, Duration::from_secs(10))
            .await;
        (Instant::now(), lock, b)
    });
    let reason = lease.lost().await;
    let lost_at = Instant::now();
    assert!(matches!(reason, LostReason::DeadlinePassed), "{reason}");
    let deadline = lease.valid_until();
    assert!(
        lost_at < deadline + Duration::from_millis(102),
        "A's lease fired {:?} late",
        lost_at - deadline
    );
    let (b_at, b_lock, b) = contender.await.expect("B's task");
    let b_lock = b_lock.expect("B gets the lock once A's keys expire");
    assert!(
        b_at > lost_at,
        "B held the lock {:?} before A's lease said it was lost",
        lost_at - b_at
    );
    masters.heal();
    let err = lease.release().await.expect_err("A's lock had been lost");
    assert!(err.is_expired(), "{err}");
    b_lock.release().await.expect("B releases");
    crate::settled(&b).await;
    assert!(
        eventually(Duration::from_secs(4), || masters.keys() == 0).await,
        "keys left"
    );
}

/// A minority of the voters cut from every client (two of five masters in namespaces, their
/// links down): locks are still taken, renewed and released by the other three, another
/// client is refused (a conflict, not an outage), each report names the two as failed or not
/// waited for (never a refusal or a lost key), and a release is never called an expiry.
/// Healed, the requests that waited in the cut connections land, and nothing is left behind
/// right after (not by the ttl).
///
/// Mutation: a lost round called an outage once the failed masters leave no more than a bare
/// majority (`<=` for `<` in `Tally::lost_to_outage`): the other client is told `NoQuorum`
/// while the lock is simply held (run, caught).
#[tokio::test]
async fn a_minority_cut_from_every_client_costs_nothing_but_its_votes() {
    let near = Cluster::start(3);
    let far = Cuttable::start(2, 1).await;
    let urls: Vec<String> = near.urls().into_iter().chain(far.urls(0)).collect();
    let rl = RedLock::builder(urls.clone())
        .per_node_timeout(Duration::from_millis(200))
        .build()
        .expect("config");
    let other = RedLock::builder(urls)
        .per_node_timeout(Duration::from_millis(200))
        .build()
        .expect("config");
    rl.connect_all().await.expect("every master answers");
    far.cut_all();
    for round in 0..3 {
        let mut lock = rl
            .try_acquire("minority", Duration::from_secs(5))
            .await
            .expect("three masters grant it");
        let cut_ones_failed = |report: &redquorum::Report| {
            report.iter().skip(3).all(|r| {
                matches!(
                    r.outcome(),
                    redquorum::NodeOutcome::Failed(_) | redquorum::NodeOutcome::NoReply
                )
            })
        };
        assert!(
            cut_ones_failed(lock.report()),
            "round {round}: {:?}",
            lock.report()
        );
        let refused = other.try_acquire("minority", Duration::from_secs(5)).await;
        assert!(
            refused.as_ref().is_err_and(redquorum::Error::is_conflict),
            "round {round}: another client is refused by the three, not told of an outage: \
             {refused:?}"
        );
        lock.extend(Duration::from_secs(5))
            .await
            .expect("renewed by the three");
        let report = lock.release().await.expect("released, not expired");
        assert!(cut_ones_failed(&report), "round {round}: {report:?}");
    }
    // The requests sent to the cut masters wait in their connections (nothing resets them);
    // healed, they land in order, each acquire's `SET` before the deletes behind it, which
    // the client delivers however late (`settled` waits for them).
    far.heal();
    crate::settled(&rl).await;
    crate::settled(&other).await;
    near.assert_no_keys_under(crate::PREFIX);
    assert_eq!(far.keys(), 0, "a request sent while cut landed and stayed");
}
