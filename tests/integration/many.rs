//! Several resources as one lock: all or nothing on each master, renewed and released together,
//! no deadlock between overlapping sets asked in different orders, typed bad input.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redquorum::{ConfigError, Error, RedLock};
use redquorum_testkit::Cluster;

use crate::{PREFIX, client, lock_key, settled};

const NODE_TIMEOUT: Duration = Duration::from_millis(250);
const TTL: Duration = Duration::from_secs(10);

/// The whole set is held under one token on every master, blocks each of its resources, is
/// renewed whole, and is released whole (waking the waiters of each resource).
///
/// Mutations: `EXTEND` renewing `KEYS[1]` and `KEYS[2]` only (as it did): the third key keeps
/// its old ttl; `RELEASE_MANY` deleting `KEYS[1]` only: the others stay after the release.
#[tokio::test]
async fn a_set_is_held_renewed_and_released_whole() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let mut lock = rl
        .try_acquire_many(&["c", "a", "b"], Duration::from_secs(2))
        .await
        .expect("a free set");
    assert_eq!(lock.resources(), [&b"a"[..], b"b", b"c"]);
    // Decided at the majority: let the last master's grant land before looking at it.
    settled(&rl).await;
    let token = lock.token().expose().as_bytes().to_vec();
    for resource in [b"a", b"b", b"c"] {
        for node in 0..3 {
            assert_eq!(
                cluster.get(node, &lock_key(resource)).as_deref(),
                Some(token.as_slice()),
                "{} on node {node}",
                resource.escape_ascii()
            );
        }
    }
    let other = client(&cluster, NODE_TIMEOUT);
    let busy = other
        .try_acquire("b", TTL)
        .await
        .expect_err("b is part of the set");
    assert!(busy.is_conflict(), "{busy}");

    lock.extend(Duration::from_secs(30)).await.expect("extend");
    for resource in [b"a", b"b", b"c"] {
        let pttl = cluster.pttl(0, &lock_key(resource));
        assert!(pttl > 20_000, "{} renewed: {pttl}", resource.escape_ascii());
    }

    // A waiter for one resource of the set is woken by the set's release.
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move {
            other
                .acquire_within("c", TTL, Duration::from_secs(10))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    lock.release().await.expect("release");
    settled(&rl).await;
    for resource in [b"a", b"b"] {
        for node in 0..3 {
            assert_eq!(cluster.get(node, &lock_key(resource)), None);
        }
    }
    let c = waiter.await.expect("task").expect("c after the release");
    c.release().await.expect("release c");
    settled(&other).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// All or nothing on each master: a master where one resource of the set is held sets none of
/// the others (checked right after the acquire); the set still wins on the other two.
///
/// Mutation: `ACQUIRE_MANY` setting each free key (`SET NX` per key, no check first): the
/// master keeps `a` and `c` for the set while `b` is someone else's.
#[tokio::test]
async fn a_master_grants_a_set_whole_or_not_at_all() {
    let cluster = Cluster::start(3);
    cluster.set(0, &lock_key(b"b"), b"someone-else", Duration::from_secs(10));
    let rl = client(&cluster, NODE_TIMEOUT);
    let lock = rl
        .try_acquire_many(&["a", "b", "c"], TTL)
        .await
        .expect("two masters of three");
    // The first master may answer after the decision: wait for its answer, then look.
    settled(&rl).await;
    assert_eq!(cluster.get(0, &lock_key(b"a")), None);
    assert_eq!(cluster.get(0, &lock_key(b"c")), None);
    assert_eq!(
        cluster.get(0, &lock_key(b"b")).as_deref(),
        Some(&b"someone-else"[..])
    );
    lock.release().await.expect("release");
    settled(&rl).await;
    let _: i64 = cluster.run(0, redis::cmd("DEL").arg(lock_key(b"b")));
    cluster.assert_no_keys_under(PREFIX);
}

/// One resource held from one instant to another.
type Hold = (&'static str, Instant, Instant);

/// Two clients take overlapping sets in opposite orders, a third the shared resource alone,
/// for two seconds: no resource is ever held twice at once, every client makes progress (no
/// deadlock), and nothing is left.
///
/// Mutation: `ACQUIRE_MANY` answering "granted" when it set any key of the set: holds of `y`
/// overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_in_opposite_orders_neither_overlap_nor_deadlock() {
    let cluster = Cluster::start(3);
    let holds: Arc<Mutex<Vec<Hold>>> = Arc::default();
    let stop = Instant::now() + Duration::from_secs(2);
    let sets: [&'static [&'static str]; 3] = [&["x", "y"], &["y", "x"], &["y"]];
    let mut tasks = Vec::new();
    for set in sets {
        let rl = client(&cluster, NODE_TIMEOUT);
        let holds = holds.clone();
        tasks.push(tokio::spawn(async move {
            let mut taken = 0u32;
            while Instant::now() < stop {
                let Ok(lock) = rl
                    .acquire_many_with(
                        set,
                        Duration::from_secs(2),
                        &redquorum::RetryPolicy::default()
                            .max_attempts(None)
                            .max_wait(Some(Duration::from_secs(2)))
                            .delay(Duration::from_millis(5))
                            .jitter(Duration::from_millis(10)),
                    )
                    .await
                else {
                    continue;
                };
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(u64::from(taken % 3))).await;
                let until = lock.valid_until().min(Instant::now());
                for resource in set {
                    holds.lock().expect("holds").push((resource, from, until));
                }
                let _ = lock.release().await;
                taken += 1;
            }
            settled(&rl).await;
            taken
        }));
    }
    let mut taken = Vec::new();
    for task in tasks {
        taken.push(task.await.expect("contender"));
    }
    assert!(taken.iter().all(|n| *n >= 3), "a client starved: {taken:?}");
    let holds = holds.lock().expect("holds").clone();
    for (i, (resource, from, until)) in holds.iter().enumerate() {
        for (other, other_from, other_until) in holds.iter().skip(i + 1) {
            let overlap = from < other_until && other_from < until;
            assert!(
                !(resource == other && overlap),
                "{resource} held twice at once"
            );
        }
    }
    cluster.assert_no_keys_under(PREFIX);
}

/// A master where one key of the set now belongs to someone else (evicted, then taken) does not
/// hold the set: the extend must not renew the other client's key there, and with two of three
/// masters like that the extend fails instead of reporting the set held.
///
/// Mutation: `EXTEND_MANY` comparing the first key only (as `EXTEND` does): the extend succeeds
/// and the other client's key is renewed to the set's ttl.
#[tokio::test]
async fn an_extend_never_renews_a_key_of_the_set_that_is_not_ours() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let mut lock = rl
        .try_acquire_many(&["a", "b"], TTL)
        .await
        .expect("a free set");
    settled(&rl).await;
    for node in [0, 1] {
        cluster.set(
            node,
            &lock_key(b"b"),
            b"someone-else",
            Duration::from_secs(5),
        );
    }
    let err = lock
        .extend(Duration::from_secs(30))
        .await
        .expect_err("the set is not held on a majority");
    assert!(err.is_expired() || err.is_conflict(), "{err}");
    for node in [0, 1] {
        let pttl = cluster.pttl(node, &lock_key(b"b"));
        assert!(
            pttl <= 5_000,
            "node {node}: the other client's key renewed to {pttl} ms"
        );
    }
    // The release deletes our keys and leaves the other client's.
    let _ = lock.release().await;
    settled(&rl).await;
    for node in [0, 1] {
        assert_eq!(cluster.get(node, &lock_key(b"a")), None);
        assert_eq!(
            cluster.get(node, &lock_key(b"b")).as_deref(),
            Some(&b"someone-else"[..])
        );
        let _: i64 = cluster.run(node, redis::cmd("DEL").arg(lock_key(b"b")));
    }
    cluster.assert_no_keys_under(PREFIX);
}

#[test]
fn bad_sets_are_typed_errors_before_any_io() {
    let rl = RedLock::new(["redis://127.0.0.1:1"]).expect("config");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let config = |result: Result<redquorum::Lock, Error>| match result {
        Err(Error::Config(e)) => e,
        other => panic!("expected a configuration error, got {other:?}"),
    };
    runtime.block_on(async {
        let none: [&str; 0] = [];
        assert!(matches!(
            config(rl.try_acquire_many(&none, TTL).await),
            ConfigError::NoResources
        ));
        assert!(matches!(
            config(rl.try_acquire_many(&["a", "b", "a"], TTL).await),
            ConfigError::DuplicateResource(name) if name == "a"
        ));
        let many: Vec<String> = (0..=redquorum::MAX_RESOURCES_PER_LOCK)
            .map(|i| format!("r{i}"))
            .collect();
        assert!(matches!(
            config(rl.try_acquire_many(&many, TTL).await),
            ConfigError::TooManyResources { len, max } if len == max + 1
        ));
        assert!(matches!(
            config(rl.try_acquire_many(&["a", ""], TTL).await),
            ConfigError::EmptyResource
        ));
        let fenced = RedLock::builder(["redis://127.0.0.1:1"])
            .fencing(true)
            .build()
            .expect("config");
        assert!(matches!(
            config(fenced.try_acquire_many(&["a", "b"], TTL).await),
            ConfigError::Unfenced(_)
        ));
    });
}
