//! Network faults between client and masters, through the in-process TCP proxy: black-holes,
//! connection resets, replies cut mid-way.

use std::time::{Duration, Instant};

use redquorum::{NodeError, NodeOutcome, RedLock};

use crate::{PREFIX, eventually};
use redquorum_testkit::Cluster;
use redquorum_testkit::{Fault, Proxy};

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(200);

async fn proxied(cluster: &Cluster) -> (Vec<Proxy>, RedLock) {
    let mut proxies = Vec::new();
    for i in 0..cluster.len() {
        proxies.push(Proxy::start(cluster.server(i).port()).await);
    }
    let rl = RedLock::builder(proxies.iter().map(Proxy::url))
        .per_node_timeout(NODE_TIMEOUT)
        .build()
        .expect("config");
    rl.connect_all()
        .await
        .expect("connected through the proxies");
    (proxies, rl)
}

fn outcome(report: &redquorum::Report, i: usize) -> NodeOutcome {
    report
        .iter()
        .nth(i)
        .map(|r| r.outcome().clone())
        .expect("node in report")
}

#[tokio::test]
async fn black_holed_masters_cost_at_most_the_node_timeout() {
    let cluster = Cluster::start(5);
    let (proxies, rl) = proxied(&cluster).await;
    for i in [0, 1] {
        proxies[i].set(Fault::BlackHole);
    }
    let lock = rl.try_acquire("bh", TTL).await.expect("3 of 5 answer");
    for i in [0, 1] {
        // Decided by the other three, without waiting for the black-holed nodes.
        assert!(
            matches!(outcome(lock.report(), i), NodeOutcome::NoReply),
            "{}",
            lock.report()
        );
    }
    // Decided by the other three: a black-holed node is not waited for (no reply before the
    // decision), or timed out if the decision needed it.
    let report = lock.release().await.expect("release on 3 of 5");
    for i in [0, 1] {
        assert!(
            matches!(
                outcome(&report, i),
                NodeOutcome::Failed(NodeError::TimedOut(_)) | NodeOutcome::NoReply
            ),
            "{report}"
        );
    }

    proxies[2].set(Fault::BlackHole);
    let started = Instant::now();
    let err = rl.try_acquire("bh", TTL).await.expect_err("2 of 5 answer");
    let elapsed = started.elapsed();
    assert!(err.is_no_quorum(), "{err}");
    // One round (200 ms) and its cleanup (200 ms); generous for a loaded machine.
    assert!(elapsed < NODE_TIMEOUT * 10, "took {elapsed:?}");
    for p in &proxies {
        p.set(Fault::None);
    }
    // The black-holed nodes never saw our requests: nothing there, nothing anywhere.
    assert!(eventually(Duration::from_secs(2), || cluster.keys().is_empty()).await);
}

#[tokio::test]
async fn reset_connections_are_failed_votes_and_heal_by_themselves() {
    let cluster = Cluster::start(5);
    let (proxies, rl) = proxied(&cluster).await;
    for i in [3, 4] {
        proxies[i].set(Fault::Reset);
    }
    let lock = rl.try_acquire("rst", TTL).await.expect("3 of 5");
    let report = lock.release().await.expect("release");
    for i in [3, 4] {
        assert!(
            matches!(outcome(&report, i), NodeOutcome::Failed(_)),
            "{report}"
        );
    }
    for i in [3, 4] {
        proxies[i].set(Fault::None);
    }
    // The broken connections are replaced in the background.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lock = rl.try_acquire("rst", TTL).await.expect("acquire");
        let report = lock.release().await.expect("release");
        if report.successes() == 5 {
            break;
        }
        assert!(Instant::now() < deadline, "never healed: {report}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn replies_cut_mid_way_are_failed_votes_and_leave_only_expiring_keys() {
    let cluster = Cluster::start(5);
    let (proxies, rl) = proxied(&cluster).await;
    for i in [0, 4] {
        proxies[i].set(Fault::CutReplies);
    }
    let ttl = Duration::from_millis(1500);
    let lock = rl.try_acquire("cut", ttl).await.expect("3 of 5");
    let report = lock.release().await.expect("release on 3 of 5");
    for i in [0, 4] {
        // Failed, or not waited for once the three others had decided the release.
        let o = outcome(&report, i);
        assert!(
            matches!(o, NodeOutcome::Failed(_) | NodeOutcome::NoReply),
            "node {i}: {o}"
        );
    }
    // The cut nodes executed our SET but we never learned it, and cannot reach them to delete
    // it: what is left there carries the ttl and expires, it is never permanent.
    for (i, key) in cluster.keys() {
        let pttl = cluster.pttl(i, &key);
        assert!(
            pttl > 0 && pttl <= 1500,
            "node {i}: {} has pttl {pttl}",
            key.escape_ascii()
        );
    }
    for p in &proxies {
        p.set(Fault::None);
    }
    assert!(eventually(Duration::from_secs(3), || cluster.keys().is_empty()).await);
}

/// Regression test for the fault proxy: a black hole must behave like a partition (traffic
/// stalls and resumes in order), never drop bytes on a live connection, or the client's FIFO
/// reply matching is off by one for good after it heals (what a 60 s chaos soak once showed).
#[tokio::test]
async fn a_healed_black_hole_delivers_in_order() {
    let cluster = Cluster::start(1);
    let proxy = Proxy::start(cluster.server(0).port()).await;
    let client = redis::Client::open(proxy.url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    proxy.set(Fault::BlackHole);
    let swallowed = tokio::time::timeout(
        Duration::from_millis(200),
        redis::cmd("ECHO")
            .arg("during")
            .query_async::<String>(&mut conn),
    )
    .await;
    assert!(swallowed.is_err(), "a black hole answers nothing");
    proxy.set(Fault::None);
    let after: String = tokio::time::timeout(
        Duration::from_secs(2),
        redis::cmd("ECHO").arg("after").query_async(&mut conn),
    )
    .await
    .expect("answered once healed")
    .expect("reply");
    assert_eq!(after, "after", "each request gets its own reply");
}

/// Releases behind a master that stopped reading, enough of them to fill the connection's
/// buffers, are sent when it heals, not dropped: within seconds of the heal (the 8 MiB of
/// queued releases take a moment on a loaded machine), long before the 60 s ttl, no key of a
/// released lock is left on it.
///
/// The redis crate skips a queued request whose caller went away before its connection took
/// it; each release's per-node timeout fires while it is still queued behind the full buffers.
///
/// Mutation: dropping the timed-out requests of a release round (no
/// `deliver_in_background` in `Fanout::stop_waiting`) makes this fail with keys left behind.
#[tokio::test]
async fn releases_queued_behind_a_stalled_master_are_delivered_when_it_heals() {
    const LOCKS: usize = 4_000;
    let cluster = Cluster::start(3);
    let stalled = Proxy::start_with_receive_buffer(cluster.server(0).port(), 4096).await;
    let urls = [
        stalled.url(),
        cluster.server(1).url(),
        cluster.server(2).url(),
    ];
    let rl = RedLock::builder(urls)
        .per_node_timeout(Duration::from_millis(100))
        .build()
        .expect("config");
    rl.connect_all().await.expect("connect");
    // Long names: each release carries about 2 KiB (key, and the channel it publishes on).
    let names: Vec<String> = (0..LOCKS)
        .map(|i| format!("{i:05}{}", "x".repeat(1000)))
        .collect();
    let locks = futures::future::join_all(
        names
            .iter()
            .map(|name| rl.try_acquire(name, Duration::from_secs(60))),
    )
    .await;
    let locks: Vec<_> = locks.into_iter().map(|l| l.expect("acquire")).collect();
    assert!(
        eventually(Duration::from_secs(5), || cluster
            .keys()
            .iter()
            .filter(|(i, _)| *i == 0)
            .count()
            == LOCKS)
        .await,
        "every lock is on the master that will stall"
    );
    stalled.set(Fault::BlackHole);
    let released = futures::future::join_all(locks.into_iter().map(|l| l.release())).await;
    assert!(
        released.iter().all(Result::is_ok),
        "2 of 3 masters released each"
    );
    stalled.set(Fault::None);
    let left = || cluster.keys().iter().filter(|(i, _)| *i == 0).count();
    assert!(
        eventually(Duration::from_secs(15), || left() == 0).await,
        "{} released locks' keys left on the healed master",
        left()
    );
}
