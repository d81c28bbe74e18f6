//! Verdicts that tell expiry from outage: `Expired` (the critical section may have overlapped
//! another holder's) only when the answers prove the lock could have been lost, never for
//! timeouts alone.

use std::time::Duration;

use redquorum::{LeaseOptions, NodeOutcome};

use crate::{PREFIX, client, eventually, lock_key};
use redquorum_testkit::Cluster;

const NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// A node that never held our key (another owner's key was there at the acquire, gone by the
/// release), two granting nodes paused, the other two release: not a majority released, but
/// nothing proves the lock was lost. An outage, not an expiry.
///
/// Mutation: the old rule ("fewer than a majority released and not an outage by count" →
/// `Expired`) makes this test fail with `Expired`.
#[tokio::test]
async fn a_release_that_times_out_is_an_outage_not_an_expiry() {
    let mut cluster = Cluster::start(5);
    let rl = client(&cluster, NODE_TIMEOUT);
    let key = lock_key(b"verdict-release");
    cluster.set(0, &key, b"someone else", Duration::from_secs(60));
    let lock = rl
        .try_acquire("verdict-release", Duration::from_secs(30))
        .await
        .expect("acquire on 4 of 5");
    // Every granting node has its key before we pause two of them.
    let token = lock.token().expose().as_bytes().to_vec();
    assert!(
        eventually(Duration::from_secs(3), || {
            (1..5).all(|i| cluster.get(i, &key).as_deref() == Some(&token[..]))
        })
        .await
    );
    // Node 0 must have refused our SET before the other owner's key goes: a SET still in
    // flight would land after the DEL and make node 0 ours.
    let set_calls = || {
        let stats: String = cluster.run(0, redis::cmd("INFO").arg("commandstats"));
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_set:calls="))
            .and_then(|v| v.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(
        eventually(Duration::from_secs(3), || set_calls() >= 2).await,
        "the other owner's SET and ours"
    );
    let _: () = cluster.run(0, redis::cmd("DEL").arg(&key));
    cluster.pause(1);
    cluster.pause(2);
    let err = match lock.release().await {
        Ok(report) => panic!("2 of 5 released, yet Ok: {report:?}"),
        Err(err) => err,
    };
    cluster.resume(1);
    cluster.resume(2);
    assert!(err.is_no_quorum(), "an outage, not an expiry: {err}");
    // The paused nodes ran the release once resumed: it was queued on their connections.
    assert!(
        eventually(Duration::from_secs(3), || (0..5)
            .all(|i| cluster.get(i, &key).is_none()))
        .await
    );
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// The lock sits on a bare majority (two nodes hold another owner's key); one granting node
/// stops answering for a while. Each renewal in that time gets 2 yes, 2 "someone else's" from
/// nodes that never held it, and a timeout: no majority, but no evidence either. The lease
/// retries until its deadline and lives on once the node is back.
///
/// Mutation: the old rule (such a renewal → `Expired` → the lease is lost at once) makes
/// this test fail.
#[tokio::test]
async fn a_renewal_that_times_out_on_a_granting_node_keeps_the_lease() {
    let mut cluster = Cluster::start(5);
    let rl = client(&cluster, NODE_TIMEOUT);
    let key = lock_key(b"verdict-lease");
    for node in [3, 4] {
        cluster.set(node, &key, b"someone else", Duration::from_secs(60));
    }
    let ttl = Duration::from_secs(3);
    let lock = rl
        .try_acquire("verdict-lease", ttl)
        .await
        .expect("acquire on 3 of 5");
    let first_deadline = lock.valid_until();
    let lease = lock.into_lease(
        LeaseOptions::default()
            .renew_every(Duration::from_millis(200))
            .expect("valid interval"),
    );
    cluster.pause(2);
    // Several renewals fail on the paused node, well inside the 3 s deadline.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!lease.is_lost(), "a timeout is no proof the lock is gone");
    cluster.resume(2);
    // Renewed again once the node answers: past the first deadline, still held.
    assert!(
        eventually(Duration::from_secs(2), || lease.valid_until()
            > first_deadline)
        .await,
        "the lease renews once the node is back"
    );
    assert!(!lease.is_lost());
    lease.release().await.expect("release");
    for node in [3, 4] {
        let _: () = cluster.run(node, redis::cmd("DEL").arg(&key));
    }
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// A lease granted by a bare majority (two nodes held another owner's key) spreads to those
/// two nodes once they are free, so it survives losing one of the three that granted it.
///
/// Mutation: no re-add (`readd_on: None` in `Lock::extend`) makes this fail: the key never
/// reaches the two nodes, and the lease is lost at its deadline after the kill.
#[tokio::test]
async fn a_lease_on_a_bare_majority_spreads_and_survives_losing_a_granting_node() {
    let mut cluster = Cluster::start(5);
    let (proxies, rl) = crate::first_behind_proxies(&cluster, 3, NODE_TIMEOUT).await;
    let key = lock_key(b"verdict-spread");
    for node in [3, 4] {
        cluster.set(node, &key, b"someone else", Duration::from_secs(60));
    }
    let ttl = Duration::from_secs(2);
    // A renewal re-adds the key only where the grant's round heard for certain that it never
    // got there: nodes 0–2 answer slowly during the acquire, so 3 and 4 have refused before
    // the round is decided (without it, a loaded run decided first, every time).
    let lock = crate::slowly(&proxies, rl.try_acquire("verdict-spread", ttl))
        .await
        .expect("acquire on 3 of 5");
    let refused = lock
        .report()
        .iter()
        .filter(|line| matches!(line.outcome(), NodeOutcome::HeldByOther { .. }))
        .count();
    assert_eq!(refused, 2, "{}", lock.report());
    let token = lock.token().expose().as_bytes().to_vec();
    let lease = lock.into_lease(
        LeaseOptions::default()
            .renew_every(Duration::from_millis(200))
            .expect("valid interval"),
    );
    for node in [3, 4] {
        let _: () = cluster.run(node, redis::cmd("DEL").arg(&key));
    }
    assert!(
        eventually(Duration::from_secs(3), || {
            [3, 4]
                .iter()
                .all(|n| cluster.get(*n, &key).as_deref() == Some(&token[..]))
        })
        .await,
        "the renewals re-add the key on the nodes that are free now"
    );
    cluster.kill(0);
    let deadline_then = lease.valid_until();
    tokio::time::sleep(ttl * 2).await;
    assert!(!lease.is_lost(), "4 of 5 still hold it");
    assert!(lease.valid_until() > deadline_then + ttl);
    lease.release().await.expect("release");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// Re-added keys never hide a possible loss: the lock was granted by nodes 0–2 (3 and 4 held
/// another owner's key), those two are free now, and our key vanished early from node 0.
/// The extend re-adds 3 and 4 and renews 1 and 2 (4 of 5 hold it now), but nodes 0, 3 and 4
/// could have been a majority for another client in between: `Expired` (the extend waits for
/// every answer while it re-adds). So is the release.
///
/// Mutation: re-added keys counted toward the round's majority (no `Readded` case in
/// `heard::record`) together with `Won` checked before the proof in `verdict::judge` makes
/// this fail: the extend succeeds.
#[tokio::test]
async fn a_re_added_majority_does_not_hide_a_possible_loss() {
    let cluster = Cluster::start(5);
    // Nodes 0–2 answer slowly during the acquire, so 3 and 4 have refused before the round
    // is decided: the lock knows they never took its key (a straggler might have).
    let (proxies, rl) = crate::first_behind_proxies(&cluster, 3, NODE_TIMEOUT).await;
    let key = lock_key(b"verdict-proof");
    for node in [3, 4] {
        cluster.set(node, &key, b"someone else", Duration::from_secs(60));
    }
    let mut lock = crate::slowly(
        &proxies,
        rl.try_acquire("verdict-proof", Duration::from_secs(30)),
    )
    .await
    .expect("acquire on 3 of 5");
    for node in [0, 3, 4] {
        let _: () = cluster.run(node, redis::cmd("DEL").arg(&key));
    }
    let err = lock
        .extend(Duration::from_secs(30))
        .await
        .expect_err("a possible loss");
    assert!(err.is_expired(), "{err}");
    // A majority did answer for us: the free nodes got our key again.
    let token = lock.token().expose().as_bytes().to_vec();
    assert!(
        eventually(Duration::from_secs(3), || {
            [3, 4]
                .iter()
                .all(|n| cluster.get(*n, &key).as_deref() == Some(&token[..]))
        })
        .await
    );
    let err = lock.release().await.expect_err("the same proof");
    assert!(err.is_expired(), "{err}");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}
