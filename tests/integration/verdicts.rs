//! Verdicts that tell expiry from outage: `Expired` (the critical section may have overlapped
//! another holder's) only when the answers prove the lock could have been lost, never for
//! timeouts alone.

use std::time::Duration;

use redquorum::LeaseOptions;

use crate::cluster::Cluster;
use crate::{PREFIX, client, eventually, lock_key};

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
    let _: () = cluster.run(0, redis::cmd("DEL").arg(&key));
    cluster.pause(1);
    cluster.pause(2);
    let err = lock.release().await.expect_err("2 of 5 released");
    cluster.resume(1);
    cluster.resume(2);
    assert!(err.is_no_quorum(), "an outage, not an expiry: {err}");
    // The paused nodes ran the release once resumed: it was queued on their connections.
    assert!(
        eventually(Duration::from_secs(3), || (0..5)
            .all(|i| cluster.get(i, &key).is_none()))
        .await
    );
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
    cluster.assert_no_keys_under(PREFIX);
}
