//! Counting semaphores: at most P holders at once, while masters fail; grants of different
//! permits never add up to one; waiters wake on a release; bad input is typed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redquorum::{ConfigError, Error, NodeOutcome, RedLock, RetryPolicy};
use redquorum_testkit::Cluster;

use crate::{PREFIX, client, settled};

const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// One holder's use of a permit: from the grant to the earlier of its deadline and the start
/// of its release.
#[derive(Debug, Clone, Copy)]
struct Hold {
    index: u32,
    from: Instant,
    until: Instant,
}

/// The most holds valid at one instant, and whether two holds of one permit ever overlapped.
fn most_at_once(holds: &[Hold]) -> (usize, bool) {
    let mut most = 0;
    let mut shared_permit = false;
    for h in holds {
        let at_once: Vec<&Hold> = holds
            .iter()
            .filter(|o| o.from <= h.from && h.from < o.until)
            .collect();
        most = most.max(at_once.len());
        shared_permit |= at_once
            .iter()
            .any(|o| !std::ptr::eq(*o, h) && o.index == h.index);
    }
    (most, shared_permit)
}

/// The checker itself: three overlapping holds are three at once; back-to-back holds are not.
#[test]
fn the_checker_counts_holders_at_once() {
    let t = Instant::now();
    let ms = |n| t + Duration::from_millis(n);
    let hold = |index, from, until| Hold {
        index,
        from: ms(from),
        until: ms(until),
    };
    assert_eq!(
        most_at_once(&[hold(0, 0, 10), hold(1, 5, 20), hold(0, 10, 30)]),
        (2, false)
    );
    assert_eq!(
        most_at_once(&[hold(0, 0, 10), hold(1, 5, 20), hold(2, 9, 30)]),
        (3, false)
    );
    assert_eq!(most_at_once(&[hold(1, 0, 10), hold(1, 5, 20)]), (2, true));
}

/// Contenders in tasks of several clients hold and release permits of one semaphore while
/// one master is killed and another paused; every hold is recorded from its grant to the
/// earlier of its deadline and its release.
async fn contend(cluster: &mut Cluster, clients: &[RedLock], permits: &[u32]) -> Vec<Hold> {
    let holds = Arc::new(Mutex::new(Vec::new()));
    let stop = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (n, rl) in clients.iter().enumerate() {
        let semaphore = rl.semaphore("pool", permits[n]).expect("semaphore");
        for _ in 0..2 {
            let (semaphore, holds) = (semaphore.clone(), holds.clone());
            tasks.push(tokio::spawn(async move {
                let mut taken = 0;
                while Instant::now() < stop {
                    let Ok(permit) = semaphore
                        .acquire_within(Duration::from_secs(2), Duration::from_secs(2))
                        .await
                    else {
                        continue;
                    };
                    let from = Instant::now();
                    tokio::time::sleep(Duration::from_millis(taken % 7)).await;
                    let until = permit.valid_until().min(Instant::now());
                    let index = permit.index();
                    holds
                        .lock()
                        .expect("holds")
                        .push(Hold { index, from, until });
                    let _ = permit.release().await;
                    taken += 1;
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    cluster.kill(0);
    tokio::time::sleep(Duration::from_millis(800)).await;
    cluster.pause(1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    cluster.resume(1);
    for task in tasks {
        task.await.expect("contender");
    }
    holds.lock().expect("holds").clone()
}

/// At most two holders of a two-permit semaphore at any instant, never two on one permit,
/// while masters fail; nothing left once they are done.
///
/// Mutation: the permit round judging its plain tally (grants of any permit added up, as a
/// per-master count would) instead of the chosen permit's: run, fails with three holders at
/// once (the failures make the masters disagree often enough); the next test builds that
/// split on purpose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_the_permits_hold_at_once_while_masters_fail() {
    let mut cluster = Cluster::start(5);
    let clients: Vec<RedLock> = (0..3).map(|_| client(&cluster, NODE_TIMEOUT)).collect();
    let holds = contend(&mut cluster, &clients, &[2, 2, 2]).await;
    let (most, shared_permit) = most_at_once(&holds);
    println!(
        "semaphore of 2: {} holds, at most {most} at once",
        holds.len()
    );
    assert!(
        holds.len() > 20,
        "too few holds to mean anything: {}",
        holds.len()
    );
    assert!(most <= 2, "{most} holders of 2 permits at once");
    assert!(!shared_permit, "two holders of one permit at once");
    assert!(holds.iter().all(|h| h.index < 2));
    for rl in &clients {
        settled(rl).await;
    }
    cluster.assert_no_keys_under(PREFIX);
}

/// The negative control: clients that disagree about the number of permits (two say 2, one
/// says 3) admit three holders, and the checker sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_more_holders_than_permits() {
    let mut cluster = Cluster::start(5);
    let clients: Vec<RedLock> = (0..3).map(|_| client(&cluster, NODE_TIMEOUT)).collect();
    let holds = contend(&mut cluster, &clients, &[2, 2, 3]).await;
    let (most, _) = most_at_once(&holds);
    assert!(
        most > 2,
        "the checker missed a third holder: at most {most}"
    );
}

/// Two valid holders of a two-permit semaphore, each on a different bare majority of three
/// masters (each lost its key on one master): the first master has only permit A free, the
/// second only permit B, the third none. A third client is granted A by one master and B by
/// another — two grants, a majority of three if added up, and a third holder of two permits.
/// It must be refused, and what it was granted given back before the error returns.
///
/// Mutation: the permit round judging its plain tally (any permit's grants counted) instead of
/// the chosen permit's: the third client gets a permit.
#[tokio::test]
async fn grants_of_different_permits_never_add_up_to_a_permit() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    rl.connect_all().await.expect("connected");
    let semaphore = rl.semaphore("pool", 2).expect("semaphore");
    let ttl = Duration::from_secs(10);
    let a = semaphore.try_acquire(ttl).await.expect("first permit");
    let b = semaphore.try_acquire(ttl).await.expect("second permit");
    assert_ne!(a.index(), b.index());
    let key = |index: u32| {
        let mut key = crate::lock_key(b"pool");
        key.extend_from_slice(format!(":permit:{index}").as_bytes());
        key
    };
    // Every grant has landed (a round may return before its last master answers).
    let everywhere = |permit: &redquorum::Permit| {
        let token = permit.token().expose().as_bytes().to_vec();
        (0..3).all(|i| cluster.get(i, &key(permit.index())) == Some(token.clone()))
    };
    assert!(crate::eventually(Duration::from_secs(3), || everywhere(&a) && everywhere(&b)).await);
    let _: i64 = cluster.run(0, redis::cmd("DEL").arg(key(a.index())));
    let _: i64 = cluster.run(1, redis::cmd("DEL").arg(key(b.index())));

    let third = client(&cluster, NODE_TIMEOUT)
        .semaphore("pool", 2)
        .expect("semaphore");
    let err = third
        .try_acquire(ttl)
        .await
        .expect_err("two permits, two holders");
    assert!(err.is_conflict(), "{err}");
    let report = err.report().expect("a round ran");
    let other_permits = report
        .iter()
        .filter(|line| matches!(line.outcome(), NodeOutcome::OtherPermit(_)))
        .count();
    assert_eq!(other_permits, 1, "{report}");
    // Given back before the error returned: the freed permits are free again.
    assert_eq!(cluster.get(0, &key(a.index())), None);
    assert_eq!(cluster.get(1, &key(b.index())), None);

    // Each lost its key on a master that had granted it: their releases may rightly answer
    // "expired" (a key vanished under them); what matters here is that nothing stays.
    let _ = a.release().await;
    let _ = b.release().await;
    settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// A waiter wakes when a permit is released: its retry delay is a minute, and the holder's
/// permit has 30 s left, so without the release message its next round would come 30 s later
/// (the retry never sleeps past the holder's reported expiry); it must have the permit within
/// 10 s of the release (a bound for liveness, a third of the other path, not a speed claim).
/// A holder that dies (its permit forgotten, never released) leaks nothing: its permit is free
/// once its ttl has passed.
///
/// Mutation: no subscription to the semaphore's release channel in `permit::acquire_permit`:
/// the waiter is still asleep 10 s after the release.
#[tokio::test]
async fn a_release_wakes_a_waiter_and_a_dead_holders_permit_expires() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let semaphore = rl.semaphore("single", 1).expect("semaphore");
    let held = semaphore
        .try_acquire(Duration::from_secs(30))
        .await
        .expect("the permit");
    let patient = RetryPolicy::default()
        .max_attempts(None)
        .delay(Duration::from_secs(60))
        .jitter(Duration::ZERO)
        .max_wait(Some(Duration::from_secs(60)));
    let waiter = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move {
            semaphore
                .acquire_with(Duration::from_millis(600), &patient)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("release");
    let taken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the release, not by its timer")
        .expect("task")
        .expect("the permit");
    assert_eq!(taken.index(), 0);

    // Its holder dies: nothing releases it, and no one else gets it before its ttl.
    std::mem::forget(taken);
    let busy = semaphore
        .try_acquire(Duration::from_secs(1))
        .await
        .expect_err("still held");
    assert!(busy.is_conflict(), "{busy}");
    let after = semaphore
        .acquire_within(Duration::from_secs(1), Duration::from_secs(5))
        .await
        .expect("free once the dead holder's ttl passed");
    after.release().await.expect("release");
    settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[test]
fn bad_semaphores_are_typed_errors_before_any_io() {
    let rl = RedLock::new(["redis://127.0.0.1:1"]).expect("config");
    let config = |result: Result<redquorum::Semaphore, Error>| match result {
        Err(Error::Config(e)) => e,
        other => panic!("expected a configuration error, got {other:?}"),
    };
    assert!(matches!(
        config(rl.semaphore("pool", 0)),
        ConfigError::NoPermits
    ));
    assert!(matches!(
        config(rl.semaphore("pool", redquorum::MAX_PERMITS + 1)),
        ConfigError::TooManyPermits { permits, max } if permits == redquorum::MAX_PERMITS + 1 && max == redquorum::MAX_PERMITS
    ));
    assert!(matches!(
        config(rl.semaphore("", 2)),
        ConfigError::EmptyResource
    ));
    assert_eq!(
        rl.semaphore("pool", redquorum::MAX_PERMITS)
            .expect("the maximum")
            .permits(),
        redquorum::MAX_PERMITS
    );
}
