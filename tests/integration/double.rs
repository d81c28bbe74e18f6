//! The in-memory double of the `testing` feature against the real client: one scenario,
//! written once against the `LockService` and `HeldLock` traits, runs on five real masters and
//! on `MemoryLocks`, and both must meet the same outcomes (conflict, expiry, loss signal,
//! outage, the caller's own lock) in the same order.

use std::sync::Mutex;
use std::time::Duration;

use redquorum::testing::MemoryLocks;
use redquorum::{HeldLock, LockService, Result};
use redquorum_testkit::Cluster;

use crate::{PREFIX, client, lock_key};

const TTL: Duration = Duration::from_secs(3);
const NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// How a scenario breaks the service under it.
trait Faults: Sync {
    /// The lock's key is lost (a majority of masters restarted empty, or evicted it).
    fn lose(&self, resource: &str);
    /// A majority of masters is unreachable (`true`) or back (`false`).
    fn outage(&self, down: bool);
}

/// Five real masters: a lost key is deleted on every one, an outage pauses three of them.
struct RealFaults(Mutex<Cluster>);

impl Faults for RealFaults {
    fn lose(&self, resource: &str) {
        let cluster = self.0.lock().expect("not poisoned");
        for i in 0..cluster.len() {
            let _: i64 = cluster.run(i, redis::cmd("DEL").arg(lock_key(resource.as_bytes())));
        }
    }

    fn outage(&self, down: bool) {
        let mut cluster = self.0.lock().expect("not poisoned");
        for i in 0..3 {
            if down {
                cluster.pause(i);
            } else {
                cluster.resume(i);
            }
        }
    }
}

impl Faults for MemoryLocks {
    fn lose(&self, resource: &str) {
        assert!(self.forget(resource), "the key was there");
    }

    fn outage(&self, down: bool) {
        self.set_outage(down);
    }
}

/// What a call came to, by kind.
fn kind<T>(outcome: &Result<T>) -> &'static str {
    match outcome {
        Ok(_) => "ok",
        Err(e) if e.is_conflict() => "conflict",
        Err(e) if e.is_expired() => "expired",
        Err(e) if e.is_no_quorum() => "no quorum",
        Err(e) if e.is_held_by_caller() => "held by caller",
        Err(e) if e.is_lease_lost() => "lease lost",
        Err(e) if e.is_config() => "config",
        Err(_) => "other",
    }
}

/// The scenario, written once against the traits (as a user's code under test would be);
/// `b` is another client of the same service. Returns each step and what it came to.
async fn scenario<S: LockService>(
    a: &S,
    b: &S,
    faults: &impl Faults,
) -> Vec<(&'static str, &'static str)> {
    let mut seen = Vec::new();
    let held = a.try_acquire("double", TTL).await;
    seen.push(("acquire", kind(&held)));
    let mut lock = held.expect("acquired");
    seen.push(("another client", kind(&b.try_acquire("double", TTL).await)));
    seen.push(("extend", kind(&lock.extend(TTL).await)));
    faults.lose("double");
    seen.push(("extend a lost lock", kind(&lock.extend(TTL).await)));
    let taken = b.try_acquire("double", TTL).await;
    seen.push(("another client after the loss", kind(&taken)));
    seen.push(("release a lost lock", kind(&lock.release().await)));
    if let Ok(taken) = taken {
        seen.push(("release", kind(&taken.release().await)));
    }

    let inner = a
        .with_lock("scoped", TTL, async |_signal| {
            kind(&a.try_acquire("scoped", TTL).await)
        })
        .await;
    seen.push(("with_lock", kind(&inner)));
    seen.push(("acquire from within with_lock", inner.unwrap_or("-")));
    let lost: Result<()> = a
        .with_lock("scoped", TTL, async |_signal| {
            faults.lose("scoped");
            std::future::pending().await
        })
        .await;
    seen.push(("with_lock whose key is lost", kind(&lost)));

    let mut kept = a.try_acquire("outage", TTL).await.expect("acquired");
    let late = a
        .try_acquire("late", Duration::from_millis(600))
        .await
        .expect("acquired");
    faults.outage(true);
    seen.push((
        "acquire in an outage",
        kind(&b.try_acquire("other", TTL).await),
    ));
    seen.push(("extend in an outage", kind(&kept.extend(TTL).await)));
    tokio::time::sleep(late.remaining() + Duration::from_millis(10)).await;
    seen.push((
        "release after the deadline, in an outage",
        kind(&late.release().await),
    ));
    faults.outage(false);
    seen.push((
        "still valid after the outage",
        if kept.is_expired() { "expired" } else { "ok" },
    ));
    seen.push(("release after the outage", kind(&kept.release().await)));
    seen.push((
        "bad input",
        kind(&a.try_acquire("", TTL).await.map(drop::<S::Lock>)),
    ));
    seen
}

/// Mutation (in `src/testing/memory_lock.rs`): an extend during an outage answering `Rejection::Gone`
/// makes the double say "expired" where the real client says "no quorum". Mutation: a
/// release of a forgotten key that succeeds makes it say "ok" where the real one says
/// "expired". Mutation: a release in an outage that is `NoQuorum` even after the deadline
/// (the double's first version) says "no quorum" where the real one says "expired".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_double_meets_the_outcomes_of_five_real_masters() {
    let cluster = Cluster::start(5);
    let a = client(&cluster, NODE_TIMEOUT);
    let b = client(&cluster, NODE_TIMEOUT);
    a.connect_all().await.expect("connected");
    b.connect_all().await.expect("connected");
    let faults = RealFaults(Mutex::new(cluster));
    let real = scenario(&a, &b, &faults).await;

    let memory = MemoryLocks::new();
    let double = scenario(&memory, &memory.another_client(), &memory).await;

    assert_eq!(real, double, "real:\n{real:#?}\ndouble:\n{double:#?}");
    let expected = [
        ("acquire", "ok"),
        ("another client", "conflict"),
        ("extend", "ok"),
        ("extend a lost lock", "expired"),
        ("another client after the loss", "ok"),
        ("release a lost lock", "expired"),
        ("release", "ok"),
        ("with_lock", "ok"),
        ("acquire from within with_lock", "held by caller"),
        ("with_lock whose key is lost", "lease lost"),
        ("acquire in an outage", "no quorum"),
        ("extend in an outage", "no quorum"),
        ("release after the deadline, in an outage", "expired"),
        ("still valid after the outage", "ok"),
        ("release after the outage", "ok"),
        ("bad input", "config"),
    ];
    assert_eq!(real, expected);

    crate::settled(&a).await;
    crate::settled(&b).await;
    faults
        .0
        .lock()
        .expect("not poisoned")
        .assert_no_keys_under(PREFIX);
    for resource in ["double", "scoped", "outage", "other", "late"] {
        assert!(!memory.is_held(resource), "{resource} left behind");
    }
}

/// The read-write scenario, written once against the traits: readers together, the lock (the
/// write lock) refused beside them, readers refused beside it, the caller's own lock from
/// within `with_read_lock`, renewals and releases, and bad input.
async fn read_write_scenario<S: LockService>(a: &S, b: &S) -> Vec<(&'static str, &'static str)> {
    let mut seen = Vec::new();
    let first = a.try_read("shelf", TTL).await;
    seen.push(("read", kind(&first)));
    let second = b.try_read("shelf", TTL).await;
    seen.push(("another client's read", kind(&second)));
    seen.push((
        "write beside readers",
        kind(&b.try_acquire("shelf", TTL).await),
    ));
    let mut first = first.expect("read");
    seen.push(("extend a read", kind(&first.extend(TTL).await)));
    seen.push(("release a read", kind(&first.release().await)));
    seen.push((
        "write beside a reader",
        kind(&a.try_acquire("shelf", TTL).await),
    ));
    seen.push((
        "release the last read",
        kind(&second.expect("read").release().await),
    ));
    let write = a.try_acquire("shelf", TTL).await;
    seen.push(("write", kind(&write)));
    seen.push((
        "read beside the writer",
        kind(&b.try_read("shelf", TTL).await),
    ));
    seen.push((
        "release the write",
        kind(&write.expect("write").release().await),
    ));
    let inner = a
        .with_read_lock("shelf", TTL, async |_signal| {
            (
                kind(&b.try_read("shelf", TTL).await.map(drop::<S::Lock>)),
                kind(&a.try_acquire("shelf", TTL).await),
            )
        })
        .await;
    seen.push(("with_read_lock", kind(&inner)));
    let (read, write) = inner.unwrap_or(("-", "-"));
    seen.push(("another read from within with_read_lock", read));
    seen.push(("the lock from within with_read_lock", write));
    seen.push((
        "bad input",
        kind(&a.try_read("", TTL).await.map(drop::<S::Lock>)),
    ));
    seen
}

/// Mutations (in `src/testing/`): the double's write not refused by a key held for readers
/// (`attempt` filtering out every readers' key): "ok" where the real client says "conflict";
/// a read's release not freeing the key once no share is left (`hold_for_readers` keeping
/// it): the write after the last release is a "conflict" where the real one is "ok".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_double_meets_the_read_write_outcomes_of_five_real_masters() {
    let cluster = Cluster::start(5);
    let a = client(&cluster, NODE_TIMEOUT);
    let b = client(&cluster, NODE_TIMEOUT);
    let real = read_write_scenario(&a, &b).await;
    let memory = MemoryLocks::new();
    let double = read_write_scenario(&memory, &memory.another_client()).await;
    assert_eq!(real, double, "real:\n{real:#?}\ndouble:\n{double:#?}");
    let expected = [
        ("read", "ok"),
        ("another client's read", "ok"),
        ("write beside readers", "conflict"),
        ("extend a read", "ok"),
        ("release a read", "ok"),
        ("write beside a reader", "conflict"),
        ("release the last read", "ok"),
        ("write", "ok"),
        ("read beside the writer", "conflict"),
        ("release the write", "ok"),
        ("with_read_lock", "ok"),
        ("another read from within with_read_lock", "ok"),
        ("the lock from within with_read_lock", "held by caller"),
        ("bad input", "config"),
    ];
    assert_eq!(real, expected);
    crate::settled(&a).await;
    crate::settled(&b).await;
    cluster.assert_no_keys_under(PREFIX);
    assert!(!memory.is_held("shelf"), "shelf left behind in the double");
}

/// A user's function written against `LockService`, as the `testing` module's documentation
/// shows one.
async fn nightly_report(locks: &impl LockService) -> redquorum::Result<bool> {
    match locks
        .try_acquire("nightly-report", Duration::from_secs(60))
        .await
    {
        Ok(lock) => {
            lock.release().await?;
            Ok(true)
        }
        Err(e) if e.is_conflict() => Ok(false),
        Err(e) => Err(e),
    }
}

#[tokio::test(start_paused = true)]
async fn the_readme_example_skips_while_another_instance_runs_it() {
    let locks = MemoryLocks::new();
    let other = locks
        .another_client()
        .try_acquire("nightly-report", Duration::from_secs(60))
        .await
        .expect("free");
    assert!(!nightly_report(&locks).await.expect("no error"));
    tokio::time::advance(Duration::from_secs(61)).await; // the other instance died: its key expired
    assert!(nightly_report(&locks).await.expect("no error"));
    drop(other);
}
