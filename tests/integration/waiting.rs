//! Waiting without spinning: waiters wake on release, never sleep past the holder's expiry,
//! respect their deadline and leave no subscription behind.

use std::time::{Duration, Instant};

use redquorum::{RedLock, RetryPolicy};

use crate::cluster::Cluster;
use crate::{PREFIX, eventually};

const LONG: Duration = Duration::from_secs(5);

/// A waiter whose timed retries come only every 5 s: anything faster is the release message.
fn patient(cluster: &Cluster) -> RedLock {
    RedLock::builder(cluster.urls())
        .per_node_timeout(Duration::from_millis(250))
        .retry(RetryPolicy::default().delay(LONG).jitter(Duration::ZERO))
        .build()
        .expect("config")
}

#[tokio::test]
async fn a_waiter_wakes_as_soon_as_the_lock_is_released() {
    let cluster = Cluster::start(5);
    let holder = crate::client(&cluster, Duration::from_millis(250));
    let lock = holder
        .try_acquire("queue", Duration::from_secs(10))
        .await
        .expect("acquire");
    let waiter = patient(&cluster);
    let waiting = tokio::spawn(async move {
        let lock = waiter
            .acquire_within("queue", Duration::from_secs(10), Duration::from_secs(20))
            .await;
        (lock, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let released_at = Instant::now();
    lock.release().await.expect("release");
    let (got, acquired_at) = waiting.await.expect("task");
    let got = got.expect("the waiter gets the lock");
    let hand_off = acquired_at - released_at;
    println!("hand-off after release: {hand_off:?} (timed retries every {LONG:?})");
    assert!(
        hand_off < Duration::from_secs(1),
        "woken by the release, not the 5 s retry: {hand_off:?}"
    );
    got.release().await.expect("release");
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn without_a_message_a_waiter_never_sleeps_past_the_holders_expiry() {
    let cluster = Cluster::start(5);
    let holder = crate::client(&cluster, Duration::from_millis(250));
    // Held for 800 ms and never released: no message will come.
    std::mem::forget(
        holder
            .try_acquire("crashed", Duration::from_millis(800))
            .await
            .expect("acquire"),
    );
    let started = Instant::now();
    let lock = patient(&cluster)
        .acquire_within("crashed", Duration::from_secs(10), Duration::from_secs(20))
        .await
        .expect("acquired after the holder's expiry");
    let waited = started.elapsed();
    println!("acquired {waited:?} after starting to wait on an 800 ms lock");
    assert!(
        waited < Duration::from_secs(2),
        "slept past the expiry: {waited:?}"
    );
    lock.release().await.expect("release");
}

#[tokio::test]
async fn waiting_respects_its_deadline_and_unsubscribes() {
    let cluster = Cluster::start(5);
    let holder = crate::client(&cluster, Duration::from_millis(250));
    let lock = holder
        .try_acquire("busy", Duration::from_secs(10))
        .await
        .expect("acquire");
    let started = Instant::now();
    let err = patient(&cluster)
        .acquire_within("busy", Duration::from_secs(10), Duration::from_millis(300))
        .await
        .expect_err("still held");
    let waited = started.elapsed();
    assert!(err.is_conflict(), "{err}");
    assert!(
        waited < Duration::from_millis(1500),
        "waited {waited:?} for a 300 ms deadline"
    );
    // The subscription is gone from every node once nobody waits.
    let channel = "redquorum:{busy}:released";
    let no_subscribers = || {
        (0..5).all(|i| {
            let counts: Vec<(String, i64)> =
                cluster.run(i, redis::cmd("PUBSUB").arg("NUMSUB").arg(channel));
            counts.iter().all(|(_, n)| *n == 0)
        })
    };
    assert!(eventually(Duration::from_secs(2), no_subscribers).await);
    lock.release().await.expect("release");
}

#[tokio::test]
async fn with_notifications_off_waiters_fall_back_to_timed_retries() {
    let cluster = Cluster::start(3);
    let holder = crate::client(&cluster, Duration::from_millis(250));
    let lock = holder
        .try_acquire("timed", Duration::from_secs(10))
        .await
        .expect("acquire");
    let waiter = RedLock::builder(cluster.urls())
        .per_node_timeout(Duration::from_millis(250))
        .retry(
            RetryPolicy::default()
                .delay(Duration::from_millis(1500))
                .jitter(Duration::ZERO),
        )
        .wait_for_release(false)
        .build()
        .expect("config");
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let lock = waiter
            .acquire_within("timed", Duration::from_secs(10), Duration::from_secs(10))
            .await;
        (lock, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    lock.release().await.expect("release");
    let (got, waited) = waiting.await.expect("task");
    got.expect("acquired").release().await.expect("release");
    assert!(
        waited >= Duration::from_millis(1400),
        "no notification: the next timed retry ({waited:?})"
    );
}
