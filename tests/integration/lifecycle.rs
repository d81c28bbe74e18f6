//! Expiry, late release and extend, drop and cancellation.

use std::time::Duration;

use redquorum::NodeOutcome;

use crate::{PREFIX, client, eventually, held_everywhere, lock_key};
use redquorum_testkit::Cluster;

const NODE_TIMEOUT: Duration = Duration::from_millis(50);
const SHORT_TTL: Duration = Duration::from_millis(300);

#[tokio::test]
async fn release_after_expiry_is_an_error_and_leaves_the_next_holder_alone() {
    let cluster = Cluster::start(5);
    let first = client(&cluster, NODE_TIMEOUT);
    let second = client(&cluster, NODE_TIMEOUT);
    let stale = first.try_acquire("job", SHORT_TTL).await.expect("acquire");
    tokio::time::sleep(SHORT_TTL + Duration::from_millis(100)).await;
    assert!(stale.is_expired());
    let current = second
        .try_acquire("job", Duration::from_secs(10))
        .await
        .expect("free again");
    assert!(held_everywhere(&cluster, &current).await);

    let err = stale.release().await.expect_err("it had expired");
    assert!(err.is_expired(), "{err}");
    assert!(err.to_string().contains("may have overlapped"), "{err}");
    let report = err.report().expect("report");
    assert!(
        report
            .iter()
            .all(|r| matches!(r.outcome(), NodeOutcome::HeldByOther { .. })),
        "{report}"
    );
    let key = lock_key(b"job");
    for i in 0..5 {
        assert!(
            cluster
                .get(i, &key)
                .is_some_and(|v| redquorum_testkit::holds_token(&v, current.token().expose())),
            "node {i}"
        );
    }
    current.release().await.expect("release");
    crate::settled(&first).await;
    crate::settled(&second).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn release_after_keys_vanished_reports_expired() {
    let cluster = Cluster::start(5);
    let rl = client(&cluster, NODE_TIMEOUT);
    let lock = rl
        .try_acquire("gone", Duration::from_secs(10))
        .await
        .expect("acquire");
    assert!(held_everywhere(&cluster, &lock).await);
    // Premature expiry on 3 of 5 nodes (a server clock jump, or an operator): the lock is no
    // longer held by a majority, even though its local deadline has not passed.
    let key = lock_key(b"gone");
    for i in 0..3 {
        let _: i64 = cluster.run(i, &redis::cmd("DEL").arg(&key).clone());
    }
    let err = lock.release().await.expect_err("only 2 of 5 still held it");
    assert!(err.is_expired(), "{err}");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn extend_after_another_client_acquired_fails_and_touches_nothing() {
    let cluster = Cluster::start(5);
    let first = client(&cluster, NODE_TIMEOUT);
    let second = client(&cluster, NODE_TIMEOUT);
    let mut stale = first.try_acquire("job", SHORT_TTL).await.expect("acquire");
    tokio::time::sleep(SHORT_TTL + Duration::from_millis(100)).await;
    let current = second
        .try_acquire("job", Duration::from_secs(10))
        .await
        .expect("free again");
    assert!(held_everywhere(&cluster, &current).await);
    let key = lock_key(b"job");
    let ttls_before: Vec<i64> = (0..5).map(|i| cluster.pttl(i, &key)).collect();

    // Past its deadline: refused locally.
    let err = stale
        .extend(Duration::from_secs(60))
        .await
        .expect_err("expired");
    assert!(err.is_expired(), "{err}");

    // Even a lock still within its local deadline cannot extend keys it no longer owns.
    let mut other = first
        .try_acquire("job2", Duration::from_secs(10))
        .await
        .expect("acquire");
    let key2 = lock_key(b"job2");
    for i in 0..5 {
        let _: () = cluster.run(
            i,
            &redis::cmd("SET")
                .arg(&key2)
                .arg("usurper")
                .arg("PX")
                .arg(5_000)
                .clone(),
        );
    }
    let err = other
        .extend(Duration::from_secs(60))
        .await
        .expect_err("owned by someone else");
    assert!(err.is_expired(), "{err}");
    for (i, ttl_before) in ttls_before.iter().enumerate() {
        assert_eq!(cluster.get(i, &key2).as_deref(), Some(&b"usurper"[..]));
        assert!(
            cluster.pttl(i, &key2) <= 5_000,
            "node {i}: the usurper's ttl was extended"
        );
        assert!(
            cluster
                .get(i, &key)
                .is_some_and(|v| redquorum_testkit::holds_token(&v, current.token().expose())),
            "node {i}"
        );
        assert!(
            cluster.pttl(i, &key) <= *ttl_before,
            "node {i}: the holder's ttl was extended"
        );
    }
    current.release().await.expect("release");
    drop(stale);
    drop(other);
    assert!(eventually(Duration::from_secs(2), || cluster.get(0, &key).is_none()).await);
}

#[tokio::test]
async fn dropping_an_unreleased_lock_releases_it_in_the_background() {
    let cluster = Cluster::start(5);
    let rl = client(&cluster, NODE_TIMEOUT);
    let lock = rl
        .try_acquire("dropped", Duration::from_secs(30))
        .await
        .expect("acquire");
    assert!(eventually(Duration::from_secs(2), || cluster.keys().len() == 5).await);
    drop(lock);
    assert!(
        eventually(Duration::from_secs(3), || cluster.keys().is_empty()).await,
        "{:?}",
        cluster.keys()
    );
}

#[tokio::test]
async fn a_cancelled_acquire_cleans_up_its_keys() {
    let mut cluster = Cluster::start(5);
    // Three paused nodes keep the round open for the whole per-node timeout (2 s); cancel it
    // after 200 ms, once the two healthy nodes have granted.
    let rl = client(&cluster, Duration::from_secs(2));
    rl.connect_all().await.expect("connected");
    for i in [0, 1, 2] {
        cluster.pause(i);
    }
    let key = lock_key(b"cancelled");
    let attempt = rl.try_acquire("cancelled", Duration::from_secs(30));
    let cancelled = tokio::time::timeout(Duration::from_millis(200), attempt).await;
    assert!(cancelled.is_err(), "the round could not have been decided");
    // The spawned cleanup removes the keys the healthy nodes had granted.
    assert!(
        eventually(Duration::from_secs(3), || cluster.get(3, &key).is_none()
            && cluster.get(4, &key).is_none())
        .await
    );
    for i in [0, 1, 2] {
        cluster.resume(i);
    }
    assert!(
        eventually(Duration::from_secs(5), || cluster.keys().is_empty()).await,
        "{:?}",
        cluster.keys()
    );
}

/// On `#[tokio::main]`'s multi-thread runtime, a lock dropped without its release, then the
/// client, then the runtime, as a program that returns from `main` does: the dropped lock's
/// release runs in the background, and dropping the client's last handle waits for it (with a
/// master paused, so that its delete is still owed when the handle goes). Once the runtime is
/// gone and the master woke, no key is left.
///
/// Mutation: `LastHandle`'s drop returning at once: run, the keys stay (the runtime ends
/// before the release is sent).
#[test]
fn dropping_the_last_handle_waits_for_a_dropped_locks_release() {
    let mut cluster = Cluster::start(3);
    let pid = nix::unistd::Pid::from_raw(
        i32::try_from(cluster.server(2).process_id().expect("running")).expect("pid"),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let resumer = runtime.block_on(async {
        let rl = client(&cluster, Duration::from_millis(250));
        rl.connect_all().await.expect("connected");
        let lock = rl
            .try_acquire("quick-start", Duration::from_secs(30))
            .await
            .expect("acquired");
        assert!(held_everywhere(&cluster, &lock).await);
        cluster.pause(2);
        // The paused master wakes while the last handle waits for the release.
        let resumer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
        });
        drop(lock);
        drop(rl);
        resumer
    });
    drop(runtime);
    resumer.join().expect("resumer");
    cluster.resume(2);
    std::thread::sleep(Duration::from_millis(200));
    cluster.assert_no_keys_under(PREFIX);
}
