//! Hand-off to queued waiters: a release gives the lock to the waiter that queued first on each
//! node, reserving it so nobody else can take it in between, and wakes only that waiter's
//! client; waiters that gave up or died are skipped; a waiter that gives up leaves the queue
//! before it returns.
//!
//! The queue's layout on a node is ours (`scripts::QUEUED_ACQUIRE`): `<key>:queue`, a sorted set
//! of waiter ids by first registration, and `<key>:waiters`, each waiter's liveness in the
//! server's milliseconds. The first tests write it by hand, so the release is checked alone,
//! without a live waiter racing to take the reservation.

use std::time::{Duration, Instant};

use futures::StreamExt;
use redquorum::{RedLock, RetryPolicy};

use crate::PREFIX;
use redquorum_testkit::Cluster;

const NODE_TIMEOUT: Duration = Duration::from_millis(500);
const TTL: Duration = Duration::from_secs(10);
/// The served-in-order tests' timed retries: a waiter served sooner was woken.
const TIMER: Duration = Duration::from_secs(10);

fn key(resource: &str) -> String {
    format!("redquorum:{{{resource}}}")
}

/// Queues `waiter` on every node by hand, live until `live_until_ms` (server time), and marks
/// the holder's value as a joining waiter does (`n-` becomes `w-`, `scripts/lua/mark_waited.lua`).
fn queue_by_hand(cluster: &Cluster, resource: &str, waiter: &str, score: u64, live_until_ms: u64) {
    for i in 0..cluster.len() {
        if let Some(holder) = value(cluster, i, &key(resource))
            && let Some(rest) = holder.strip_prefix("n-")
        {
            let _: () = cluster.run(
                i,
                redis::cmd("SET")
                    .arg(key(resource))
                    .arg(format!("w-{rest}"))
                    .arg("KEEPTTL"),
            );
        }
        let _: i64 = cluster.run(
            i,
            redis::cmd("ZADD")
                .arg(format!("{}:queue", key(resource)))
                .arg(score)
                .arg(waiter),
        );
        let _: i64 = cluster.run(
            i,
            redis::cmd("HSET")
                .arg(format!("{}:waiters", key(resource)))
                .arg(waiter)
                .arg(live_until_ms),
        );
    }
}

/// How many waiters node `i` has queued for `resource`.
/// What a waiter's leaving does to the queue on every node, by hand: as if it gave up.
fn leave_by_hand(cluster: &Cluster, resource: &str, waiter: &str) {
    for i in 0..cluster.len() {
        let _: i64 = cluster.run(
            i,
            redis::cmd("ZREM")
                .arg(format!("{}:queue", key(resource)))
                .arg(waiter),
        );
        let _: i64 = cluster.run(
            i,
            redis::cmd("HDEL")
                .arg(format!("{}:waiters", key(resource)))
                .arg(waiter)
                .arg(format!("{waiter}:h")),
        );
    }
}

fn queued(cluster: &Cluster, i: usize, resource: &str) -> usize {
    let n: i64 = cluster.run(
        i,
        redis::cmd("ZCARD").arg(format!("{}:queue", key(resource))),
    );
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn value(cluster: &Cluster, i: usize, key: &str) -> Option<String> {
    cluster.run(i, redis::cmd("GET").arg(key))
}

/// Takes `resource` and waits until every node holds it (an acquire returns at the
/// majority), so that the release is checked on every node.
async fn acquire_everywhere(cluster: &Cluster, rl: &RedLock, resource: &str) -> redquorum::Lock {
    let lock = rl.try_acquire(resource, TTL).await.expect("acquire");
    assert!(
        crate::eventually(Duration::from_secs(5), || (0..cluster.len())
            .all(|i| value(cluster, i, &key(resource)).is_some()))
        .await,
        "every node holds the key"
    );
    lock
}

/// A release hands the lock to the queued waiter: on every node the key now says
/// `handoff:<waiter>` for a short reservation (twice the per-node timeout), the waiter stays
/// queued (until its round takes the reservation, `DESIGN.md` §7), and the message went to its
/// client's own channel. Meanwhile nobody else, not even the releaser at once, can take the
/// lock; once the reservation lapses, anyone can, and its release reserves the lock for the
/// waiter again.
///
/// Mutation: the release deleting the key whatever the queue (the `RELEASE` before the
/// hand-off) fails the first check; publishing on the common channel fails the message check;
/// `hand_over` taking the reserved waiter out of the queue fails the queue check (run).
#[tokio::test]
async fn a_release_hands_the_lock_to_the_queued_waiter_and_reserves_it() {
    let cluster = Cluster::start(5);
    let rl = crate::client(&cluster, NODE_TIMEOUT);
    let lock = acquire_everywhere(&cluster, &rl, "baton").await;
    queue_by_hand(&cluster, "baton", "c1.w1", 1, u64::MAX / 2);
    let client = redis::Client::open(cluster.urls()[0].as_str()).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe(format!("{}:released:c1", key("baton")))
        .await
        .expect("subscribe");
    lock.release().await.expect("release");
    // Returned at the majority: the other masters' releases finish in the background.
    crate::settled(&rl).await;
    for i in 0..cluster.len() {
        assert_eq!(
            value(&cluster, i, &key("baton")).as_deref(),
            Some("handoff:c1.w1"),
            "node {i}: reserved for the waiter"
        );
        let pttl: i64 = cluster.run(i, redis::cmd("PTTL").arg(key("baton")));
        assert!(
            (0..=1000).contains(&pttl),
            "node {i}: reserved for at most 2 × 500 ms, not {pttl} ms"
        );
        assert_eq!(
            queued(&cluster, i, "baton"),
            1,
            "node {i}: the waiter left the queue before taking its reservation"
        );
    }
    let message = tokio::time::timeout(Duration::from_secs(2), pubsub.on_message().next())
        .await
        .expect("a message on the client's channel")
        .expect("stream");
    let payload: String = message.get_payload().expect("payload");
    assert!(payload.ends_with(":c1.w1"), "names the waiter: {payload}");
    // The reservation holds off the releaser and everyone else.
    let err = rl.try_acquire("baton", TTL).await.expect_err("reserved");
    assert!(err.is_conflict(), "{err}");
    crate::settled(&rl).await;
    assert!(
        crate::eventually(Duration::from_secs(3), || (0..cluster.len())
            .all(|i| value(&cluster, i, &key("baton")).is_none()))
        .await,
        "the reservation lapses"
    );
    let lock = acquire_everywhere(&cluster, &rl, "baton").await;
    // The waiter's next round would mark the new holder; by hand, as it was queued.
    queue_by_hand(&cluster, "baton", "c1.w1", 1, u64::MAX / 2);
    lock.release().await.expect("release");
    crate::settled(&rl).await;
    for i in 0..cluster.len() {
        assert_eq!(
            value(&cluster, i, &key("baton")).as_deref(),
            Some("handoff:c1.w1"),
            "node {i}: reserved again for the waiter that still waits"
        );
    }
    leave_by_hand(&cluster, "baton", "c1.w1");
    assert!(
        crate::eventually(Duration::from_secs(3), || (0..cluster.len())
            .all(|i| value(&cluster, i, &key("baton")).is_none()))
        .await,
        "the reservation lapses"
    );
    cluster.assert_no_keys_under(PREFIX);
}

/// A waiter whose liveness has passed (it gave up or died without leaving) is skipped and
/// dropped; the next live one gets the lock. With none live, the key is deleted.
///
/// Mutation: ignoring the liveness (`live >= now` dropped from `RELEASE`) hands the lock to
/// the dead waiter.
#[tokio::test]
async fn a_release_skips_waiters_that_are_no_longer_live() {
    let cluster = Cluster::start(3);
    let rl = crate::client(&cluster, NODE_TIMEOUT);
    let lock = acquire_everywhere(&cluster, &rl, "relay").await;
    queue_by_hand(&cluster, "relay", "c1.dead", 1, 1);
    queue_by_hand(&cluster, "relay", "c2.alive", 2, u64::MAX / 2);
    lock.release().await.expect("release");
    crate::settled(&rl).await;
    for i in 0..cluster.len() {
        assert_eq!(
            value(&cluster, i, &key("relay")).as_deref(),
            Some("handoff:c2.alive"),
            "node {i}"
        );
        let waiters: Vec<String> = cluster.run(
            i,
            redis::cmd("HKEYS").arg(format!("{}:waiters", key("relay"))),
        );
        assert_eq!(
            waiters,
            ["c2.alive"],
            "node {i}: the dead waiter left, the reserved one waits on"
        );
    }
    // Only dead waiters: deleted, as with no queue at all.
    assert!(
        crate::eventually(Duration::from_secs(3), || (0..cluster.len())
            .all(|i| value(&cluster, i, &key("relay")).is_none()))
        .await,
        "the reservation lapses"
    );
    leave_by_hand(&cluster, "relay", "c2.alive");
    let lock = rl.try_acquire("relay", TTL).await.expect("acquire");
    queue_by_hand(&cluster, "relay", "c1.dead", 1, 1);
    lock.release().await.expect("release");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// Two clients (as two processes would be) wait in turn: the one that queued first gets the
/// lock first, the other next, and the releaser cannot take it back in between, though it
/// asks at once. Each waiter needs one round: the refused one that queued it; the releases
/// then hand it the lock with its own token, and a majority of their messages is its lock,
/// without a round of its own (`DESIGN.md` §7).
///
/// Mutations: without the hand-off (the release deletes), the releaser's immediate
/// `try_acquire` wins the free lock, failing the first assertion; `Queue::handed_lock`
/// answering `None` (run, caught): each waiter's second round takes the handed keys, two
/// rounds where one should do.
#[tokio::test]
async fn waiters_of_separate_clients_are_served_in_the_order_they_queued() {
    served_in_the_order_they_queued(false).await;
}

/// The same with fencing (every `redquorum run --wait`, every election): fenced waiters queue
/// too, are handed the lock in turn with their own tokens (the fenced release raising the
/// counter as it hands it over), so with no round of their own but the confirmation, and
/// each gets a higher token than the one before.
///
/// Mutations: fenced acquires not queueing (`waiting.queues && !fencing` in `acquire`):
/// the releaser's immediate fenced `try_acquire` races the waiters for the free lock and
/// wins, failing the first assertion; a fenced lock's release without the fence keys
/// (`fence: None` in `Lock::delete`): the waiters are reserved the lock and take it with a
/// round of their own (2 attempts, not 1).
#[tokio::test]
async fn fenced_waiters_are_served_in_the_order_they_queued() {
    served_in_the_order_they_queued(true).await;
}

async fn served_in_the_order_they_queued(fencing: bool) {
    let cluster = Cluster::start(5);
    let holder = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .fencing(fencing)
        .build()
        .expect("config");
    let patient = || {
        RedLock::builder(cluster.urls())
            .per_node_timeout(NODE_TIMEOUT)
            .fencing(fencing)
            .retry(
                RetryPolicy::default()
                    .max_attempts(None)
                    .delay(TIMER)
                    .jitter(Duration::ZERO),
            )
            .build()
            .expect("config")
    };
    let lock = holder.try_acquire("turns", TTL).await.expect("acquire");
    let first_token = lock.fencing_token();
    assert_eq!(first_token.is_some(), fencing);
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for name in ["first", "second"] {
        let (rl, order) = (patient(), order.clone());
        waiters.push(tokio::spawn(async move {
            let lock = rl
                .acquire_within("turns", TTL, Duration::from_secs(20))
                .await
                .expect("its turn comes");
            order.lock().expect("lock").push((
                name,
                lock.attempts(),
                lock.fencing_token(),
                Instant::now(),
            ));
            tokio::time::sleep(Duration::from_millis(50)).await;
            lock.release().await.expect("release");
            crate::settled(&rl).await;
        }));
        // Queued on every node before the next one comes.
        let n = waiters.len();
        assert!(
            crate::eventually(Duration::from_secs(5), || (0..cluster.len())
                .all(|i| queued(&cluster, i, "turns") == n))
            .await,
            "waiter {n} queued on every node"
        );
    }
    let released = Instant::now();
    lock.release().await.expect("release");
    let again = holder.try_acquire("turns", TTL).await;
    assert!(
        again.as_ref().is_err_and(redquorum::Error::is_conflict),
        "the releaser took the lock back from the queue: {again:?}"
    );
    for w in waiters {
        w.await.expect("waiter");
    }
    let order = order.lock().expect("lock").clone();
    let names: Vec<&str> = order.iter().map(|(name, ..)| *name).collect();
    assert_eq!(names, ["first", "second"]);
    if fencing {
        let tokens: Vec<Option<u64>> = order.iter().map(|(_, _, token, _)| *token).collect();
        assert!(
            first_token < tokens[0] && tokens[0] < tokens[1],
            "tokens rise in the order of the holders: {first_token:?}, then {tokens:?}"
        );
    }
    // Woken, never by their timers: both were served well inside the first timed retry.
    for (name, _, _, at) in &order {
        let after = at.saturating_duration_since(released);
        assert!(
            after < TIMER / 2,
            "{name} served {after:?} after the release"
        );
    }
    assert_eq!(
        order[0].1, 1,
        "first: refused once, then handed the lock with its token, no round of its own: {order:?}"
    );
    // The masters hand the lock over at different moments (a release that tried the
    // server's own delete first runs its script a round trip later; under load they spread
    // further): a waiter woken by the first master's hand-off can lose its round on masters
    // not handed over yet, and each of those masters' own hand-off message wakes it again
    // (`DESIGN.md` §3). So at most one round more per master: never the retry delay.
    assert!(
        (1..=1 + cluster.len() as u32).contains(&order[1].1),
        "second: refused once, then a round per master's hand-off at most: {order:?}"
    );
    crate::settled(&holder).await;
    if fencing {
        // Nothing but the fence's own keys: no lock key, no queue, no waiter's liveness.
        let left: Vec<String> = cluster
            .keys()
            .into_iter()
            .filter(|(_, k)| {
                k.starts_with(PREFIX)
                    && !k.ends_with(b"}:slot:fence")
                    && !k.ends_with(b"}:slot:seeded")
                    && k.as_slice() != b"redquorum:fence:seeded"
            })
            .map(|(i, k)| format!("server {i}: {}", k.escape_ascii()))
            .collect();
        assert!(left.is_empty(), "keys left: {left:?}");
    } else {
        cluster.assert_no_keys_under(PREFIX);
    }
}

/// An acquire that gives up leaves the queue before it returns: right after the error, no
/// node lists it, so no release can hand it the lock.
///
/// Mutation: leaving in the background (as after a won round) instead of awaiting it shows
/// the waiter still queued right after the error.
#[tokio::test]
async fn a_waiter_that_gives_up_has_left_the_queue_when_it_returns() {
    let cluster = Cluster::start(5);
    let holder = crate::client(&cluster, NODE_TIMEOUT);
    let lock = holder.try_acquire("door", TTL).await.expect("acquire");
    let waiter = crate::client(&cluster, NODE_TIMEOUT);
    let started = Instant::now();
    let err = waiter
        .acquire_within("door", TTL, Duration::from_millis(300))
        .await
        .expect_err("held");
    assert!(err.is_conflict(), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    for i in 0..cluster.len() {
        assert_eq!(
            queued(&cluster, i, "door"),
            0,
            "node {i}: still queued after giving up"
        );
    }
    lock.release().await.expect("release");
    crate::settled(&holder).await;
    crate::settled(&waiter).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// A master in its restart grace hands over no lock that counts: the schedule a review of the
/// hand-off found. Three masters; the holder took the lock on masters 0 and 1 (2 was held by
/// another value then). Master 1 restarts empty, so the holder's key there is gone, and the
/// waiter's client sees it in its grace. The waiter's round skips master 1 (a round counts no
/// vote of a master in its grace), is refused on 0 and granted on 2: lost. Its cleanup deletes
/// its grant on 2 and queues it there; on master 1, where the key is free, it queues it and
/// hands it the lock itself. Another client then holds and releases master 2 alone, handing it
/// the lock there too. Two hand-offs of three masters name the waiter's nonce while the holder
/// still holds: the waiter must not count master 1's, and gets the lock only once the holder
/// releases.
///
/// Mutation: `Queue::handed_by` without `would_vote_now` (run, caught): the waiter holds
/// masters 1 and 2 while the holder's lock is valid.
#[tokio::test]
async fn a_master_in_its_restart_grace_hands_over_no_lock_that_counts() {
    // The grace covers the longest ttl, as it must: under load the steps below can take
    // seconds, and a grace shorter than the holder's ttl would let the restarted master vote
    // again while the holder still holds (a shorter grace once let the waiter win fairly).
    const GRACE: Duration = Duration::from_secs(5);
    const TTL: Duration = GRACE;
    let mut cluster = Cluster::start(3);
    let resource = "grace";
    let k = key(resource);
    // `uptime_in_seconds` is whole seconds: up for longer than the grace.
    tokio::time::sleep(GRACE + Duration::from_millis(1100)).await;
    let client = |urls: Vec<String>| {
        RedLock::builder(urls)
            .per_node_timeout(NODE_TIMEOUT)
            .restart_grace(GRACE)
            .build()
            .expect("config")
    };
    let waiter = {
        let mut builder = RedLock::builder(cluster.urls())
            .per_node_timeout(NODE_TIMEOUT)
            .restart_grace(GRACE);
        builder = builder.retry(
            RetryPolicy::default()
                .max_attempts(None)
                .delay(TIMER)
                .jitter(Duration::ZERO),
        );
        builder.build().expect("config")
    };
    waiter.connect_all().await.expect("connected");
    cluster.set(2, k.as_bytes(), b"foreign", TTL);
    let holder = client(cluster.urls());
    let held = holder.try_acquire(resource, TTL).await.expect("acquire");
    // Its request to master 2 refused there before the value goes (a straggler landing after
    // would give the holder master 2 as well: seen under two CPU hogs).
    crate::settled(&holder).await;
    assert_eq!(value(&cluster, 2, &k).as_deref(), Some("foreign"));
    let _: i64 = cluster.run(2, redis::cmd("DEL").arg(&k));
    cluster.restart(1);
    let started = Instant::now();
    // The waiter's client is connected to master 1 again and sees it in its grace (a round
    // of its own on another resource says so), so the waiter's cleanup reaches master 1.
    // (Under two CPU hogs it once had not reconnected yet, and the cleanup never got there.)
    let sees_the_grace = |report: &redquorum::Report| {
        report.iter().any(|r| {
            r.node().index() == 1
                && matches!(
                    r.outcome(),
                    redquorum::NodeOutcome::Failed(redquorum::NodeError::RecentlyRestarted { .. })
                )
        })
    };
    loop {
        let seen = match waiter.try_acquire("probe", TTL).await {
            Ok(probe) => {
                let seen = sees_the_grace(probe.report());
                probe.release().await.expect("release");
                seen
            }
            Err(e) => e.report().is_some_and(sees_the_grace),
        };
        if seen {
            break;
        }
        assert!(
            started.elapsed() < GRACE / 2,
            "master 1 never seen in its grace"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let lock = waiter
                .acquire_within(resource, TTL, Duration::from_secs(20))
                .await
                .expect("its turn comes");
            (lock, Instant::now())
        })
    };
    assert!(
        crate::eventually(Duration::from_secs(3), || queued(&cluster, 2, resource)
            == 1
            && value(&cluster, 2, &k).is_none())
        .await,
        "the waiter queued on master 2, its grant there undone (a message from master 1 may \
         wake it for one more round first): {:?} {:?} {:?}, {} queued, {:?}",
        value(&cluster, 0, &k),
        value(&cluster, 1, &k),
        value(&cluster, 2, &k),
        queued(&cluster, 2, resource),
        cluster.pttl(2, k.as_bytes())
    );
    assert!(
        crate::eventually(Duration::from_secs(3), || value(&cluster, 1, &k)
            .is_some_and(|v| v.starts_with("h-")))
        .await,
        "its cleanup handed it master 1: {:?}",
        value(&cluster, 1, &k)
    );
    // Scripts only: the passer-by never met the waiter, so its lock is unmarked, and the
    // release of an unmarked lock hands nothing over (the server's `DELIFEQ`, or the release
    // script's shortcut for it; `DESIGN.md` §3: a waiter whose cleanup deleted its own grant
    // here is woken by the other masters). With scripts only nothing is marked and every
    // release looks for waiters, as this step needs.
    let other = RedLock::builder(vec![cluster.urls()[2].clone()])
        .per_node_timeout(NODE_TIMEOUT)
        .restart_grace(GRACE)
        .native_commands(false)
        .build()
        .expect("config");
    let passing = other
        .try_acquire(resource, TTL)
        .await
        .expect("master 2 alone");
    passing.release().await.expect("release");
    assert!(
        value(&cluster, 2, &k).is_some_and(|v| v.starts_with("h-")),
        "the release handed it master 2: {:?}",
        value(&cluster, 2, &k)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the waiter holds by the hand-offs of masters 1 (in its grace) and 2 while the holder holds"
    );
    assert!(!held.is_expired() && started.elapsed() < GRACE);
    let released = Instant::now();
    // Released on master 0 only: master 1 forgot the key (and the holder's link to it broke),
    // master 2 is handed to the waiter. So the release says "no quorum", and hands master 0
    // over.
    let release = held.release().await;
    assert!(release.is_err_and(|e| e.is_no_quorum()));
    let (lock, at) = waiting.await.expect("task");
    assert!(at >= released, "served after the release");
    lock.release().await.expect("release");
    for rl in [&holder, &other, &waiter] {
        crate::settled(rl).await;
    }
    cluster.assert_no_keys_under(PREFIX);
}
