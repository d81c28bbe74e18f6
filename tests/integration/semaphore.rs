//! Counting semaphores: at most P holders at once, while masters fail; grants of different
//! permits never add up to one; clients that count other permits are refused; waiters wake on
//! a release; bad input is typed; nothing is left behind.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redquorum::{ConfigError, Error, NodeOutcome, RedLock, RetryPolicy};
use redquorum_testkit::Cluster;

use crate::{PREFIX, client, settled};

const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// The key of permit `index` of the semaphore "pool".
fn permit_key(index: u32) -> Vec<u8> {
    [
        crate::lock_key(b"pool"),
        format!(":permit:{index}").into_bytes(),
    ]
    .concat()
}

/// The key of the record of how many permits the semaphore "pool" has.
fn count_record() -> Vec<u8> {
    [crate::lock_key(b"pool"), b":permits".to_vec()].concat()
}

/// One holder's use of a permit: from the grant to the earlier of its deadline and the start
/// of its release.
#[derive(Debug, Clone, Copy)]
struct Hold {
    index: u32,
    /// The number of permits its client gave.
    permits: u32,
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
        permits: 2,
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
/// the first master is killed and the second paused; every hold is recorded from its grant to
/// the earlier of its deadline and its release. Also answers how many acquires were refused
/// because the semaphore was in use with another number of permits.
async fn contend(
    cluster: &mut Cluster,
    clients: &[RedLock],
    permits: &[u32],
) -> (Vec<Hold>, usize) {
    let holds = Arc::new(Mutex::new(Vec::new()));
    let count_differs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (n, rl) in clients.iter().enumerate() {
        let semaphore = rl.semaphore("pool", permits[n]).expect("semaphore");
        for _ in 0..2 {
            let (semaphore, holds) = (semaphore.clone(), holds.clone());
            let count_differs = count_differs.clone();
            tasks.push(tokio::spawn(async move {
                let mut taken = 0;
                while Instant::now() < stop {
                    let permit = match semaphore
                        .acquire_within(Duration::from_secs(2), Duration::from_secs(2))
                        .await
                    {
                        Ok(permit) => permit,
                        Err(e) => {
                            if e.is_permit_count_differs() {
                                count_differs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                            continue;
                        }
                    };
                    let from = Instant::now();
                    tokio::time::sleep(Duration::from_millis(taken % 7)).await;
                    let until = permit.valid_until().min(Instant::now());
                    let index = permit.index();
                    let permits = semaphore.permits();
                    holds.lock().expect("holds").push(Hold {
                        index,
                        permits,
                        from,
                        until,
                    });
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
    let holds = holds.lock().expect("holds").clone();
    (
        holds,
        count_differs.load(std::sync::atomic::Ordering::Relaxed),
    )
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
    let (holds, _) = contend(&mut cluster, &clients, &[2, 2, 2]).await;
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

/// Clients that disagree about the number of permits (two say 2, one says 3), while masters
/// fail: the masters' record of the number in use refuses whichever count came second
/// ([`Error::PermitCountDiffers`]), so holders of the two counts never hold at once, and no
/// more than two hold at once; nothing is left behind, the record included.
///
/// Mutation: `ACQUIRE_PERMIT` without its check of the record: run, holders of both counts at
/// once and three holders (as in the control below), and no refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_counting_other_permits_never_hold_beside_the_others() {
    let mut cluster = Cluster::start(5);
    let clients: Vec<RedLock> = (0..3).map(|_| client(&cluster, NODE_TIMEOUT)).collect();
    let (holds, refused) = contend(&mut cluster, &clients, &[2, 2, 3]).await;
    let (most, shared_permit) = most_at_once(&holds);
    let mixed = holds.iter().any(|h| {
        holds
            .iter()
            .any(|o| o.permits != h.permits && o.from <= h.from && h.from < o.until)
    });
    println!(
        "semaphore of 2 and 3: {} holds, at most {most} at once, {refused} refused",
        holds.len()
    );
    assert!(holds.len() > 20, "too few holds: {}", holds.len());
    assert!(refused > 0, "no client was refused for its count");
    assert!(!mixed, "holders of 2 and of 3 permits at once");
    assert!(most <= 2, "{most} holders at once");
    assert!(!shared_permit, "two holders of one permit at once");
    for rl in &clients {
        settled(rl).await;
    }
    cluster.assert_no_keys_under(PREFIX);
}

/// The negative control: with the record of the number of permits deleted on every master as
/// fast as the grants write it (as if clients from before the record took the permits),
/// clients that disagree about the number admit three holders, and the checker sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_more_holders_than_permits() {
    let mut cluster = Cluster::start(5);
    let clients: Vec<RedLock> = (0..3).map(|_| client(&cluster, NODE_TIMEOUT)).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let record = count_record();
    // One thread per master: `contend` kills one and pauses another, which must not stall
    // the deletes on the rest.
    let forgetters: Vec<_> = cluster
        .urls()
        .into_iter()
        .map(|url| {
            let (stop, record) = (stop.clone(), record.clone());
            std::thread::spawn(move || {
                let mut master = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("a connection");
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let deleted: redis::RedisResult<i64> =
                        redis::cmd("DEL").arg(&record).query(&mut master);
                    if deleted.is_err() {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect();
    let (holds, _) = contend(&mut cluster, &clients, &[2, 2, 3]).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for forgetter in forgetters {
        forgetter.join().expect("the record's deleter");
    }
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
    let key = permit_key;
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

/// The masters' record of a semaphore's number of permits, step by step:
/// - a client that counts 3 permits is refused while holders of 2 hold
///   ([`Error::PermitCountDiffers`], exit 64 in the command), and takes nothing;
/// - the record outlives every holder's permit: a holder's shorter renewal does not cut
///   another's longer one short;
/// - it goes with the last permit's release, and then any count may use the name;
/// - a client of another count never deletes it, even where it sees no permit of its own.
///
/// Mutations: `ACQUIRE_PERMIT` without the record check: run, the third client is granted
/// permit 2. `EXTEND_PERMIT` setting the record even where that shortens it: run, the
/// record's ttl falls under the longer holder's. `RELEASE_PERMIT` without
/// `forget_permit_count`: run, the record is left behind. `forget_permit_count` without its
/// check that the record names the caller's number: run, the refused client of 2 deletes the
/// record of 3 (found by `clients_counting_other_permits_never_hold_beside_the_others`, which
/// then saw holders of both numbers at once).
#[tokio::test]
async fn a_semaphore_in_use_refuses_another_count_until_its_last_permit_goes() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    rl.connect_all().await.expect("connected");
    let two = rl.semaphore("pool", 2).expect("semaphore");
    let mut long = two
        .try_acquire(Duration::from_secs(30))
        .await
        .expect("a permit");
    let mut short = two
        .try_acquire(Duration::from_secs(20))
        .await
        .expect("another");
    let record = count_record();
    assert!(
        crate::eventually(Duration::from_secs(3), || (0..3)
            .all(|i| cluster.get(i, &record) == Some(b"2".to_vec())))
        .await
    );

    let other = client(&cluster, NODE_TIMEOUT);
    let three = other.semaphore("pool", 3).expect("semaphore");
    let err = three
        .try_acquire(Duration::from_secs(10))
        .await
        .expect_err("the semaphore is in use with 2 permits");
    match &err {
        Error::PermitCountDiffers {
            permits: 3,
            in_use_with: 2,
            ..
        } => {}
        other => panic!("expected PermitCountDiffers, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "semaphore pool is in use with 2 permits, not 3: every client of one semaphore must give the same number"
    );
    let refusals = err
        .report()
        .expect("a round ran")
        .iter()
        .filter(|line| matches!(line.outcome(), NodeOutcome::PermitCountDiffers(2)))
        .count();
    assert!(refusals >= 2, "{}", err.report().expect("report"));
    let permit_2 = permit_key(2);
    assert!(
        (0..3).all(|i| cluster.get(i, &permit_2).is_none()),
        "the refused client took permit 2"
    );

    // Renewals: the short holder renews for 1 s after the long one renewed for 60 s; the
    // record keeps the longer.
    long.extend(Duration::from_secs(60)).await.expect("extend");
    short.extend(Duration::from_secs(1)).await.expect("extend");
    assert!(
        crate::eventually(Duration::from_secs(3), || (0..3)
            .all(|i| cluster.pttl(i, &record) > 50_000))
        .await,
        "the record's ttl fell under the longer holder's: {:?}",
        (0..3).map(|i| cluster.pttl(i, &record)).collect::<Vec<_>>()
    );

    long.release().await.expect("release");
    short.release().await.expect("release");
    settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
    // Unused, the name takes any count. A client of 3 holding only permit 2, which a client
    // of 2 never sees: that client's refused round gives back what it has (nothing) and
    // must leave the record of 3 alone.
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(
            three
                .try_acquire(Duration::from_secs(10))
                .await
                .expect("unused, the name takes any count"),
        );
    }
    let mut last = None;
    for permit in taken {
        if permit.index() == 2 {
            last = Some(permit);
        } else {
            permit.release().await.expect("release");
        }
    }
    settled(&other).await;
    let last = last.expect("permit 2");
    let token = last.token().expose().as_bytes().to_vec();
    let landed = || {
        (0..3).all(|i| {
            cluster.get(i, &permit_2).as_ref() == Some(&token)
                && cluster.get(i, &record) == Some(b"3".to_vec())
        })
    };
    assert!(crate::eventually(Duration::from_secs(3), landed).await);
    let err = two
        .try_acquire(Duration::from_secs(10))
        .await
        .expect_err("in use with 3");
    assert!(err.is_permit_count_differs(), "{err}");
    settled(&rl).await;
    assert!(
        (0..3).all(|i| cluster.get(i, &record) == Some(b"3".to_vec())),
        "a client of 2 deleted the record of 3"
    );
    last.release().await.expect("release");
    settled(&other).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// A permit round that fails (two of three masters paused: no majority) gives back what it
/// was granted, and the record of the number of permits with it, on every master, the
/// paused ones included once they wake and run the round's acquire late.
///
/// Mutation: `GIVE_BACK_PERMITS` without `forget_permit_count`: run, the record is left on
/// every master.
#[tokio::test]
async fn a_failed_permit_round_leaves_nothing_behind() {
    let mut cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    rl.connect_all().await.expect("connected");
    cluster.pause(1);
    cluster.pause(2);
    let err = rl
        .semaphore("pool", 2)
        .expect("semaphore")
        .try_acquire(Duration::from_secs(10))
        .await
        .expect_err("no majority");
    assert!(err.is_no_quorum(), "{err}");
    cluster.resume(1);
    cluster.resume(2);
    settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// A master that granted another permit than the one a majority chose (it holds another
/// holder's key on the chosen one) gives that grant back at once but keeps the record of the
/// number of permits; once the other key is gone, the permit's release, which finds nothing
/// of ours there, still deletes the record: nothing is left.
///
/// Mutation: `RELEASE_PERMIT` calling `forget_permit_count` only after deleting our key: run,
/// the record is left on the first master (first seen as a rare leftover in the command's
/// `--permits` test).
#[tokio::test]
async fn a_master_that_granted_another_permit_keeps_no_record_after_the_release() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    rl.connect_all().await.expect("connected");
    let semaphore = rl.semaphore("pool", 2).expect("semaphore");
    let permit_0 = permit_key(0);
    // The round's order is random: tried until it starts at permit 0, where the first master
    // holds another key and grants permit 1 instead.
    for _ in 0..40 {
        cluster.set(0, &permit_0, b"another holder", Duration::from_millis(300));
        let permit = semaphore
            .try_acquire(Duration::from_secs(10))
            .await
            .expect("a permit");
        let permit_index = permit.index();
        // The other holder's key is gone before ours is released (a key that expires under
        // a record, with no release after it, leaves the record to its own ttl).
        tokio::time::sleep(Duration::from_millis(400)).await;
        permit.release().await.expect("release");
        settled(&rl).await;
        cluster.assert_no_keys_under(PREFIX);
        if permit_index == 0 {
            return;
        }
    }
    panic!("no round started at permit 0 in 40 tries");
}

/// A permit that an extend re-adds on a master that never took it gets its record there too:
/// the master, one of three, held other keys on both permits when the permit was granted;
/// once they are gone, the extend re-adds our key, and the record beside it. Without it, that
/// master would count for the holder's majority while a client of another number is granted
/// there (the review's schedule: the first masters then lost).
///
/// Mutation: `EXTEND_PERMIT` re-adding the key without the record: run, no record on the
/// third master.
#[tokio::test]
async fn a_permit_re_added_by_an_extend_gets_its_record() {
    let cluster = Cluster::start(3);
    // An extend re-adds only where the grant's round heard for certain that our key never
    // got there: the first two masters answer slowly during the grant, so the third has
    // refused before the round is decided.
    let (proxies, rl) = crate::first_behind_proxies(&cluster, 2, NODE_TIMEOUT).await;
    let record = count_record();
    for index in 0..2 {
        cluster.set(
            2,
            &permit_key(index),
            b"another holder",
            Duration::from_secs(60),
        );
    }
    let semaphore = rl.semaphore("pool", 2).expect("semaphore");
    let mut permit = crate::slowly(&proxies, semaphore.try_acquire(Duration::from_secs(10)))
        .await
        .expect("granted by the first two");
    let heard = permit.report().iter().any(|line| {
        line.node().index() == 2 && matches!(line.outcome(), NodeOutcome::HeldByOther { .. })
    });
    assert!(heard, "{}", permit.report());
    assert_eq!(cluster.get(2, &record), None);
    let _: i64 = cluster.run(2, redis::cmd("DEL").arg(permit_key(0)).arg(permit_key(1)));
    permit
        .extend(Duration::from_secs(10))
        .await
        .expect("extend");
    let ours = permit.token().expose().as_bytes().to_vec();
    assert_eq!(
        cluster.get(2, &permit_key(permit.index())),
        Some(ours),
        "re-added"
    );
    assert_eq!(
        cluster.get(2, &record),
        Some(b"2".to_vec()),
        "the record beside it"
    );
    permit.release().await.expect("release");
    settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// A round's grant of another permit, still to be given back when the permit is released at
/// once, is deleted by the release itself: whichever of the two reaches the master first,
/// nothing is left, the record included.
///
/// Mutation: `RELEASE_PERMIT` without its `delete_ours` over the other permits' keys: run,
/// the record is left on the first master (4 runs of 4: the release is sent before the
/// give-back).
#[tokio::test]
async fn a_release_at_once_after_a_split_round_leaves_nothing() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    rl.connect_all().await.expect("connected");
    let semaphore = rl.semaphore("pool", 2).expect("semaphore");
    let permit_0 = permit_key(0);
    let mut splits = 0;
    for _ in 0..40 {
        cluster.set(0, &permit_0, b"another holder", Duration::from_secs(60));
        let permit = semaphore
            .try_acquire(Duration::from_secs(10))
            .await
            .expect("a permit");
        // The other holder goes at once; our release follows without a pause, racing the
        // give-back of the first master's grant of permit 1.
        let _: i64 = cluster.run(0, redis::cmd("DEL").arg(&permit_0));
        let split = permit.index() == 0;
        permit.release().await.expect("release");
        settled(&rl).await;
        cluster.assert_no_keys_under(PREFIX);
        if split {
            splits += 1;
            if splits == 5 {
                return;
            }
        }
    }
    panic!("only {splits} split rounds in 40 tries");
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

/// Waiters for a full semaphore, of separate clients (as separate processes would be), are
/// served in the order they queued: a released permit is reserved for the first waiter, so
/// the releaser, asking again at once, is refused, and each waiter needs two rounds (the
/// refused one that queued it, and the one that takes its reserved permit), never its timer.
/// Nothing is left once all is released.
///
/// Mutations: `RELEASE_PERMIT` deleting instead of handing over: the releaser's immediate
/// `try_acquire` takes the freed permit; permits not queueing (`queues` false in
/// `acquire_permit`): no waiter is ever queued.
#[tokio::test]
async fn waiters_for_permits_are_served_in_the_order_they_queued() {
    const TIMER: Duration = Duration::from_secs(10);
    const TTL: Duration = Duration::from_secs(10);
    let cluster = Cluster::start(5);
    let holder = client(&cluster, NODE_TIMEOUT);
    let semaphore = holder.semaphore("pool", 2).expect("semaphore");
    let held = [
        semaphore.try_acquire(TTL).await.expect("a permit"),
        semaphore.try_acquire(TTL).await.expect("the other permit"),
    ];
    let patient = || {
        RedLock::builder(cluster.urls())
            .per_node_timeout(NODE_TIMEOUT)
            .retry(
                RetryPolicy::default()
                    .max_attempts(None)
                    .delay(TIMER)
                    .jitter(Duration::ZERO),
            )
            .build()
            .expect("config")
    };
    let queued = |i: usize| -> usize {
        cluster.run(
            i,
            redis::cmd("ZCARD").arg([count_record(), b":2:queue".to_vec()].concat()),
        )
    };
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for name in ["first", "second"] {
        let (rl, order) = (patient(), order.clone());
        waiters.push(tokio::spawn(async move {
            let semaphore = rl.semaphore("pool", 2).expect("semaphore");
            let permit = semaphore
                .acquire_within(TTL, Duration::from_secs(20))
                .await
                .expect("its turn comes");
            order
                .lock()
                .expect("order")
                .push((name, permit.lock().attempts(), Instant::now()));
            permit
        }));
        let n = waiters.len();
        assert!(
            crate::eventually(Duration::from_secs(5), || (0..cluster.len())
                .all(|i| queued(i) == n))
            .await,
            "waiter {n} queued on every node: {:?}",
            (0..cluster.len()).map(queued).collect::<Vec<_>>()
        );
    }
    let released = Instant::now();
    let [one, other] = held;
    one.release().await.expect("release");
    let again = semaphore.try_acquire(TTL).await;
    assert!(
        again.as_ref().is_err_and(Error::is_conflict),
        "the releaser took the permit back from the queue: {again:?}"
    );
    other.release().await.expect("release");
    let mut permits = Vec::new();
    for w in waiters {
        permits.push(w.await.expect("waiter"));
    }
    let order = order.lock().expect("order").clone();
    let names: Vec<&str> = order.iter().map(|(name, ..)| *name).collect();
    assert_eq!(names, ["first", "second"], "{order:?}");
    for (name, attempts, at) in &order {
        assert!(
            at.saturating_duration_since(released) < TIMER / 2,
            "{name} waited for its timer: {order:?}"
        );
        // Refused once, then a round that takes the reserved permit (one more per master
        // whose hand-off came after the waiter's round there, at most).
        assert!(
            (2..=1 + cluster.len() as u32).contains(attempts),
            "{name}: {attempts} rounds"
        );
    }
    let indices: Vec<u32> = permits.iter().map(|p| p.index()).collect();
    assert!(indices.contains(&0) && indices.contains(&1), "{indices:?}");
    for permit in permits {
        permit.release().await.expect("release");
    }
    settled(&holder).await;
    cluster.assert_no_keys_under(PREFIX);
}
