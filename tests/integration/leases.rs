//! Leases: renewal, the loss signal and its deadline, and the scoped `with_lock`.

use std::time::{Duration, Instant};

use redquorum::{LeaseOptions, LostReason};

use crate::{PREFIX, client, eventually, held_everywhere, lock_key};
use redquorum_testkit::Cluster;

const NODE_TIMEOUT: Duration = Duration::from_millis(100);

#[tokio::test]
async fn a_lease_outlives_its_ttl_by_renewing() {
    let cluster = Cluster::start(5);
    let rl = client(&cluster, NODE_TIMEOUT);
    let ttl = Duration::from_millis(600);
    let lock = rl.try_acquire("renewed", ttl).await.expect("acquire");
    assert!(held_everywhere(&cluster, &lock).await);
    let token = lock.token().expose().as_bytes().to_vec();
    let first_deadline = lock.valid_until();
    let lease = lock.into_lease(LeaseOptions::default());
    // Five ttls later it is still ours on every node, and never reported lost.
    tokio::time::sleep(ttl * 5).await;
    assert!(!lease.is_lost());
    assert!(lease.valid_until() > first_deadline + ttl * 3);
    let key = lock_key(b"renewed");
    assert!((0..5).all(|i| cluster.get(i, &key).as_deref() == Some(&token[..])));
    lease.release().await.expect("release");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// `LeaseSignal::renewed` reports each extension's new deadline, and `None` once the lease
/// has ended. Mutation: return the old deadline (`borrow` before `changed`) and the second
/// deadline is not later than the first.
#[tokio::test]
async fn renewed_reports_each_extension_and_ends_with_the_lease() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let ttl = Duration::from_millis(600);
    let lock = rl.try_acquire("renewals", ttl).await.expect("acquire");
    let acquired = lock.valid_until();
    let lease = lock.into_lease(LeaseOptions::default());
    let mut signal = lease.signal();
    let first = tokio::time::timeout(ttl, signal.renewed())
        .await
        .expect("renewed within a ttl")
        .expect("a deadline");
    assert!(first > acquired);
    let second = tokio::time::timeout(ttl, signal.renewed())
        .await
        .expect("renewed again")
        .expect("a deadline");
    assert!(second > first);
    lease.release().await.expect("release");
    assert_eq!(
        tokio::time::timeout(ttl, signal.renewed())
            .await
            .expect("ends with the lease"),
        None
    );
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn losing_the_majority_fires_lost_by_the_deadline_even_while_extend_hangs() {
    let mut cluster = Cluster::start(5);
    // A per-node timeout as long as the ttl: the extension hangs past the deadline.
    let ttl = Duration::from_secs(2);
    // Drift factor 0.05: a 102 ms margin between our deadline and the servers' expiry, wide
    // enough that scheduling noise on a loaded test machine does not eat it.
    let rl = redquorum::RedLock::builder(cluster.urls())
        .per_node_timeout(Duration::from_millis(1500))
        .drift_factor(0.05)
        .build()
        .expect("config");
    let lock = rl.try_acquire("hung", ttl).await.expect("acquire");
    let lease = lock.into_lease(LeaseOptions::default());
    for i in [0, 1, 2] {
        cluster.pause(i);
    }
    let reason = lease.lost().await;
    let lost_at = Instant::now();
    assert!(matches!(reason, LostReason::DeadlinePassed), "{reason}");
    // The safety claim: lost before any other client could hold the lock, i.e. before the
    // servers' expiry, which is at least `drift` (2 s × 0.05 + 2 ms = 102 ms) after the deadline.
    let deadline = lease.valid_until();
    assert!(lost_at >= deadline, "fired {:?} early", deadline - lost_at);
    assert!(
        lost_at < deadline + Duration::from_millis(102),
        "fired {:?} late",
        lost_at - deadline
    );
    for i in [0, 1, 2] {
        cluster.resume(i);
    }
    let err = lease.release().await.expect_err("it had been lost");
    assert!(err.is_expired(), "{err}");
    assert!(eventually(Duration::from_secs(4), || cluster.keys().is_empty()).await);
}

#[tokio::test]
async fn a_lock_deleted_under_the_lease_is_lost_at_the_next_renewal() {
    let cluster = Cluster::start(5);
    let rl = client(&cluster, NODE_TIMEOUT);
    let ttl = Duration::from_secs(3);
    let lock = rl.try_acquire("deleted", ttl).await.expect("acquire");
    assert!(held_everywhere(&cluster, &lock).await);
    let lease = lock.into_lease(
        LeaseOptions::default()
            .renew_every(Duration::from_millis(200))
            .expect("valid interval"),
    );
    let stop = lease.cancellation_token();
    assert!(!stop.is_cancelled(), "held: the work goes on");
    let key = lock_key(b"deleted");
    for i in 0..5 {
        let _: i64 = cluster.run(i, redis::cmd("DEL").arg(&key));
    }
    let started = Instant::now();
    let reason = lease.lost().await;
    assert!(matches!(reason, LostReason::Gone(_)), "{reason}");
    // Mutation: a loss that does not cancel the token (the `ended.cancel()` in `into_lease`'s
    // `lose`) fails this.
    assert!(stop.is_cancelled(), "lost: the work must stop");
    assert!(
        started.elapsed() < ttl / 2,
        "reported at the next renewal, not at the deadline"
    );
    assert!(lease.is_lost());
    drop(lease);
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn a_dropped_lease_stops_renewing_and_releases() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let lease = rl
        .try_acquire("dropped", Duration::from_millis(900))
        .await
        .expect("acquire")
        .into_lease(
            LeaseOptions::default()
                .renew_every(Duration::from_millis(100))
                .expect("valid interval"),
        );
    tokio::time::sleep(Duration::from_millis(250)).await;
    drop(lease);
    // Gone by the background release, well before the key's ttl (900 ms, renewed at most
    // 100 ms before the drop) could have removed it.
    // Mutation: a drop that releases nothing fails this.
    assert!(eventually(Duration::from_millis(500), || cluster.keys().is_empty()).await);
    // And no renewal resurrects it (a renewal never creates a key, but keep watching).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(cluster.keys().is_empty());
}

#[tokio::test]
async fn a_lease_limit_ends_renewals_and_fires_lost_at_the_last_deadline() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let ttl = Duration::from_millis(600);
    let lease = rl
        .try_acquire("limited", ttl)
        .await
        .expect("acquire")
        .into_lease(LeaseOptions::default().max_extensions(Some(2)));
    let reason = lease.lost().await;
    assert!(matches!(reason, LostReason::LimitReached), "{reason}");
    let _ = lease.release().await;
    assert!(eventually(Duration::from_secs(2), || cluster.keys().is_empty()).await);
}

#[tokio::test]
async fn with_lock_runs_the_work_and_releases() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let value = rl
        .with_lock("scoped", Duration::from_secs(5), async |signal| {
            assert!(!signal.is_lost());
            assert!(cluster.keys().len() >= 2, "held while the work runs");
            7
        })
        .await
        .expect("work done");
    assert_eq!(value, 7);
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn with_lock_cancels_the_work_when_the_lease_is_lost() {
    let mut cluster = Cluster::start(5);
    let rl = client(&cluster, NODE_TIMEOUT);
    let ttl = Duration::from_secs(1);
    let started = Instant::now();
    let (paused, mut paused_rx) = tokio::sync::oneshot::channel::<()>();
    let pauser = async {
        let _ = (&mut paused_rx).await;
    };
    let work = rl.with_lock("doomed", ttl, async |_signal| {
        let _ = paused.send(());
        std::future::pending::<()>().await;
    });
    let (result, ()) = tokio::join!(work, async {
        pauser.await;
        for i in [0, 1, 2] {
            cluster.pause(i);
        }
    });
    let err = result.expect_err("the lease was lost");
    assert!(err.is_lease_lost(), "{err}");
    assert!(
        started.elapsed() < ttl * 3,
        "cancelled at the deadline, not later"
    );
    for i in [0, 1, 2] {
        cluster.resume(i);
    }
    assert!(eventually(Duration::from_secs(3), || cluster.keys().is_empty()).await);
}

/// The lease's cancellation token is cancelled when the lease ends, released or dropped, and
/// a holder's own token is a child: cancelling it stops only what waits on it.
///
/// Mutation: handing out the lease's own token (not a child) lets the first holder's cancel
/// reach the second; not cancelling on release or drop leaves the work running.
#[tokio::test]
async fn the_cancellation_token_stops_the_work_when_the_lease_ends() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let ttl = Duration::from_secs(5);
    let lease = rl
        .try_acquire("token", ttl)
        .await
        .expect("acquire")
        .into_lease(LeaseOptions::default());
    let (mine, other) = (
        lease.cancellation_token(),
        lease.signal().cancellation_token(),
    );
    mine.cancel();
    assert!(!other.is_cancelled(), "one holder's cancel reached another");
    assert!(!lease.is_lost());
    lease.release().await.expect("release");
    assert!(other.is_cancelled(), "released: the work must stop");
    let dropped = rl
        .try_acquire("token", ttl)
        .await
        .expect("acquire again")
        .into_lease(LeaseOptions::default());
    let stop = dropped.cancellation_token();
    drop(dropped);
    assert!(stop.is_cancelled(), "dropped: the work must stop");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// `try_with_lock` (issue 31 §7): fallible work gives one error type, not a nested result.
/// The work's own error comes back as it was, a busy lock as the work's error type converted
/// from `Conflict`, and the lock is released on every path.
///
/// Mutation: `try_with_lock` returning the lock's error for a failed work (`map_err` of the
/// inner result into a lock error) fails the second assertion; built on `try_acquire` without
/// the release, the key check.
#[tokio::test]
async fn try_with_lock_gives_the_work_and_the_lock_one_error_type() {
    #[derive(Debug)]
    enum JobError {
        Lock(redquorum::Error),
        Work(&'static str),
    }
    impl From<redquorum::Error> for JobError {
        fn from(e: redquorum::Error) -> Self {
            Self::Lock(e)
        }
    }
    let cluster = Cluster::start(3);
    let rl = redquorum::RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .retry(redquorum::RetryPolicy::default().max_attempts(Some(1)))
        .build()
        .expect("config");
    let ttl = Duration::from_secs(10);
    let done: Result<u32, JobError> = rl.try_with_lock("job", ttl, async |_| Ok(7)).await;
    assert!(matches!(done, Ok(7)), "{done:?}");
    let failed: Result<u32, JobError> = rl
        .try_with_lock("job", ttl, async |_| Err(JobError::Work("disk full")))
        .await;
    assert!(
        matches!(failed, Err(JobError::Work("disk full"))),
        "{failed:?}"
    );
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
    let other = client(&cluster, NODE_TIMEOUT);
    let held = other
        .try_acquire("job", ttl)
        .await
        .expect("free after both");
    let busy: Result<u32, JobError> = rl.try_with_lock("job", ttl, async |_| Ok(1)).await;
    assert!(
        matches!(&busy, Err(JobError::Lock(e)) if e.is_conflict()),
        "{busy:?}"
    );
    held.release().await.expect("release");
    crate::settled(&rl).await;
    crate::settled(&other).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// A dropped lease's release is one of the client's clean-ups: `settle` right after the drop
/// waits for it, even when nothing else is running (the runtime drops the aborted renewal
/// task, and so schedules the lock's release, only after the drop returns).
///
/// Mutation: `Lease`'s `Drop` without its tracked wait for the aborted task: `settle` finds
/// nothing to wait for and returns at once, with the key still on every master (run, caught;
/// the cancellation-token test above met it as a rare flake).
#[tokio::test]
async fn settle_right_after_a_lease_is_dropped_waits_for_its_release() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let lease = rl
        .try_acquire("dropped", Duration::from_secs(30))
        .await
        .expect("acquire")
        .into_lease(LeaseOptions::default());
    // Nothing of the acquire's is still running.
    crate::settled(&rl).await;
    drop(lease);
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// `with_lock_using` waits as its policy says and renews as its lease options say: two
/// attempts on a held lock, then `Conflict`; a lease limited to no renewal at all is lost at
/// its first deadline while the work still runs, and the work is cancelled.
///
/// Mutation: `with_lock_using` ignoring `policy` (the client's default, 10 attempts) or `lease`
/// (default options: renewed, the work finishes) fails this.
#[tokio::test]
async fn with_lock_using_follows_its_wait_and_lease_options() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let held = rl
        .try_acquire("options", Duration::from_secs(10))
        .await
        .expect("acquire");
    let twice = redquorum::RetryPolicy::default()
        .max_attempts(Some(2))
        .delay(Duration::from_millis(10))
        .jitter(Duration::ZERO);
    let err = rl
        .with_lock_using(
            "options",
            Duration::from_secs(1),
            &twice,
            LeaseOptions::default(),
            async |_| {},
        )
        .await
        .expect_err("held");
    assert!(err.is_conflict(), "{err}");
    assert_eq!(err.failure().map(|f| f.attempts()), Some(2), "{err}");
    held.release().await.expect("release");
    let no_renewal = LeaseOptions::default().max_extensions(Some(0));
    let err = rl
        .with_lock_using(
            "options",
            Duration::from_millis(500),
            &twice,
            no_renewal,
            async |_| tokio::time::sleep(Duration::from_secs(3)).await,
        )
        .await
        .expect_err("lost at its first deadline");
    match err {
        redquorum::Error::LeaseLost { reason, .. } => {
            assert!(matches!(reason, LostReason::LimitReached), "{reason}");
        }
        other => panic!("expected LeaseLost, got {other}"),
    }
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// Work under `with_lock` that asks its own client for the same lock is told at once
/// (`HeldByCaller`, nothing sent) instead of waiting for itself until its own lock expires;
/// other owners of the same process (a spawned task, a sibling future) wait their turn as
/// always.
///
/// Mutation: no `held_locks::held_here` check in `RedLock::acquire_checked`: the inner
/// acquire waits out its retries against its own lock and ends in `Conflict`.
#[tokio::test]
async fn asking_again_for_the_lock_the_work_holds_is_an_error_at_once() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, Duration::from_millis(250));
    let ttl = Duration::from_secs(5);
    let same_client = rl.clone();
    let spawned = std::sync::Mutex::new(None);
    let outer = rl.with_lock("report", ttl, async |_signal| {
        let again = same_client
            .acquire("report", ttl)
            .await
            .expect_err("held here");
        assert!(again.is_held_by_caller(), "{again}");
        assert!(again.to_string().contains("report"), "{again}");
        // Nested work under another lock still knows the outer one.
        let nested = same_client
            .with_lock("other", ttl, async |_| {
                same_client.try_acquire("report", ttl).await
            })
            .await
            .expect("the other lock");
        assert!(nested.expect_err("still held here").is_held_by_caller());
        // A spawned task is another owner: it waits for the release.
        let waiter = same_client.clone();
        let task = tokio::spawn(async move {
            let lock = waiter
                .acquire_within("report", ttl, Duration::from_secs(10))
                .await?;
            lock.release().await.map(drop)
        });
        *spawned.lock().expect("slot") = Some(task);
    });
    // A sibling future of the same task is another owner too.
    let sibling = async {
        tokio::task::yield_now().await;
        let lock = rl
            .acquire_within("report", ttl, Duration::from_secs(10))
            .await?;
        lock.release().await.map(drop)
    };
    let (outer, sibling) = tokio::join!(outer, sibling);
    outer.expect("with_lock");
    sibling.expect("the sibling waited its turn");
    let task = spawned.lock().expect("slot").take().expect("spawned");
    task.await
        .expect("task")
        .expect("the spawned task waited its turn");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}
