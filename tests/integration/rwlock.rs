//! Read-write locks on real masters: readers together, a writer alone, a waiting writer
//! blocking new readers, fenced writers' rising tokens, shares that expire by themselves,
//! exclusion under failing masters, and nothing left behind.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redquorum::{ConfigError, Error, KeyLayout, RedLock, RetryPolicy};
use redquorum_testkit::Cluster;

use crate::{PREFIX, client, settled};

const NODE_TIMEOUT: Duration = Duration::from_millis(250);
const TTL: Duration = Duration::from_secs(10);

/// The readers' set of the read-write lock "catalog".
fn readers_key() -> Vec<u8> {
    [crate::lock_key(b"catalog"), b":readers".to_vec()].concat()
}

/// Two readers of two clients hold at once; a writer is refused while either does, and so is
/// the lock of the same name (the write lock is that lock); the writer takes the lock once both
/// are gone; while it holds, a reader is refused. Nothing is left after.
///
/// Mutations: `ACQUIRE_READ` without its lock-key check (the reader is granted over the
/// writer's key); `hold_for_readers` not setting the readers' mark (the writer is granted
/// beside the readers' shares).
#[tokio::test]
async fn readers_hold_together_and_a_writer_holds_alone() {
    let cluster = Cluster::start(5);
    let (a, b) = (
        client(&cluster, NODE_TIMEOUT),
        client(&cluster, NODE_TIMEOUT),
    );
    let (ra, rb) = (
        a.rw_lock("catalog").expect("rw"),
        b.rw_lock("catalog").expect("rw"),
    );
    let first = ra.try_read(TTL).await.expect("a reader");
    let second = rb
        .try_read(TTL)
        .await
        .expect("a second reader beside the first");
    let refused = rb.try_write(TTL).await;
    assert!(
        refused.as_ref().is_err_and(Error::is_conflict),
        "a writer beside readers: {refused:?}"
    );
    let refused = b.try_acquire("catalog", TTL).await;
    assert!(
        refused.as_ref().is_err_and(Error::is_conflict),
        "the lock of the same name beside readers: {refused:?}"
    );
    first.release().await.expect("release");
    let refused = ra.try_write(TTL).await;
    assert!(
        refused.as_ref().is_err_and(Error::is_conflict),
        "a writer beside a reader: {refused:?}"
    );
    second.release().await.expect("release");
    let writer = ra.try_write(TTL).await.expect("the writer, alone");
    let refused = rb.try_read(TTL).await;
    assert!(
        refused.as_ref().is_err_and(Error::is_conflict),
        "a reader beside the writer: {refused:?}"
    );
    let refused = rb.try_write(TTL).await;
    assert!(
        refused.as_ref().is_err_and(Error::is_conflict),
        "a second writer: {refused:?}"
    );
    writer.release().await.expect("release");
    let after = rb.try_read(TTL).await.expect("readers again");
    after.release().await.expect("release");
    settled(&a).await;
    settled(&b).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// `RedLock::inspect` (what `redquorum status` shows) counts the readers: each master's live
/// shares, and the readers whose share is live on a majority, who are the readers that hold.
/// A share on one master only (a reader that failed elsewhere) counts on that master and not
/// as a holding reader; an expired share counts nowhere.
///
/// Mutations: `live_shares` keeping expired shares (the masters count 4, 3, 3); the majority
/// count taking a token seen on any master (4 readers).
#[tokio::test]
async fn inspection_counts_the_readers_that_hold() {
    let cluster = Cluster::start(3);
    let (a, b) = (
        client(&cluster, NODE_TIMEOUT),
        client(&cluster, NODE_TIMEOUT),
    );
    let first = a
        .rw_lock("catalog")
        .expect("rw")
        .try_read(TTL)
        .await
        .expect("a reader");
    let second = b
        .rw_lock("catalog")
        .expect("rw")
        .try_read(TTL)
        .await
        .expect("a second reader");
    // Each read decided at the majority: its share on the third master may still be on its
    // way.
    settled(&a).await;
    settled(&b).await;
    let (secs, micros): (u64, u64) = cluster.run(0, &redis::cmd("TIME"));
    let in_a_minute = secs * 1000 + micros / 1000 + 60_000;
    let _: i64 = cluster.run(
        0,
        redis::cmd("ZADD")
            .arg(readers_key())
            .arg(in_a_minute)
            .arg("stray"),
    );
    for i in 0..cluster.len() {
        let _: i64 = cluster.run(
            i,
            redis::cmd("ZADD").arg(readers_key()).arg(1).arg("lapsed"),
        );
    }
    let seen = a.inspect("catalog").await.expect("inspect");
    assert_eq!(seen.majority_holder().as_deref(), Some("readers"));
    assert_eq!(seen.readers_on_majority(), 2);
    let each: Vec<usize> = seen
        .nodes()
        .iter()
        .map(|n| n.state().expect("answered").readers())
        .collect();
    assert_eq!(each, [3, 2, 2]);
    first.release().await.expect("release");
    second.release().await.expect("release");
    let seen = a.inspect("catalog").await.expect("inspect");
    assert_eq!(seen.readers_on_majority(), 0);
    assert!(seen.free_on_majority());
    // The stray share keeps its master's mark for its minute: cleaned up by hand.
    for i in 0..cluster.len() {
        let _: i64 = cluster.run(
            i,
            redis::cmd("DEL")
                .arg(readers_key())
                .arg(crate::lock_key(b"catalog")),
        );
    }
    settled(&a).await;
    settled(&b).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// A writer that waits for a reader blocks new readers (so overlapping readers cannot starve
/// it), is woken by the reader's release rather than its timer, and takes the lock; readers
/// come back after it.
///
/// Mutation: `ACQUIRE_READ` without `writer_waits`: the new reader is granted while the writer
/// waits.
#[tokio::test]
async fn a_waiting_writer_blocks_new_readers_and_is_woken_by_the_last_release() {
    const TIMER: Duration = Duration::from_secs(10);
    let cluster = Cluster::start(5);
    let reader = client(&cluster, NODE_TIMEOUT);
    let writer = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .retry(
            RetryPolicy::default()
                .max_attempts(None)
                .delay(TIMER)
                .jitter(Duration::ZERO),
        )
        .build()
        .expect("config");
    let catalog = reader.rw_lock("catalog").expect("rw");
    let held = catalog.try_read(TTL).await.expect("a reader");
    let waiting = {
        let catalog = writer.rw_lock("catalog").expect("rw");
        tokio::spawn(async move {
            let lock = catalog
                .write_within(TTL, Duration::from_secs(20))
                .await
                .expect("the writer's turn comes");
            (lock, Instant::now())
        })
    };
    let queue = [crate::lock_key(b"catalog"), b":queue".to_vec()].concat();
    assert!(
        crate::eventually(Duration::from_secs(5), || (0..cluster.len()).all(|i| {
            cluster.run::<usize>(i, redis::cmd("ZCARD").arg(&queue)) == 1
        }))
        .await,
        "the writer queued on every master"
    );
    let refused = catalog.try_read(TTL).await;
    assert!(
        refused.as_ref().is_err_and(Error::is_conflict),
        "a new reader while a writer waits: {refused:?}"
    );
    let released = Instant::now();
    held.release().await.expect("release");
    let (lock, at) = waiting.await.expect("writer");
    assert!(
        at.saturating_duration_since(released) < TIMER / 2,
        "the writer waited for its timer"
    );
    let refused = catalog.try_read(TTL).await;
    assert!(refused.as_ref().is_err_and(Error::is_conflict));
    lock.release().await.expect("release");
    catalog
        .try_read(TTL)
        .await
        .expect("readers after the writer")
        .release()
        .await
        .expect("release");
    settled(&reader).await;
    settled(&writer).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// With fencing, every write lock gets a token from the lock's counters (it is the lock of the
/// same name), rising from one holder to the next; a reader gets the last one's.
///
/// Mutation: `ACQUIRE_READ_FENCED` answering the counter plus one: the reader's token is above
/// the last write's.
#[tokio::test]
async fn fenced_writers_get_rising_tokens() {
    let cluster = Cluster::start(3);
    let rl = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .fencing(true)
        .build()
        .expect("config");
    let catalog = rl.rw_lock("catalog").expect("rw");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let w = catalog.try_write(TTL).await.expect("write");
        tokens.push(w.fencing_token().expect("a writer's token"));
        w.release().await.expect("release");
        let lock = rl.try_acquire("catalog", TTL).await.expect("the lock");
        tokens.push(lock.fencing_token().expect("a lock's token"));
        lock.release().await.expect("release");
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let r = catalog.try_read(TTL).await.expect("read");
    assert_eq!(r.fencing_token(), tokens.last().copied());
    r.release().await.expect("release");
}

/// A reader that dies frees its share by its own expiry: a writer is refused while it lasts
/// and granted right after, though nobody released it. A live reader with a longer share
/// renews and releases its own beside it; its release leaves the dead share's hold on the
/// lock, for that share's time only.
///
/// Mutations: `RELEASE_READ` handing the lock over whatever shares are live (`readers_live`
/// not asked): the writer is granted beside the dead reader's live share; `RELEASE_READ`
/// not shortening the readers' mark to the live shares: the writer stays refused for the
/// released share's 3 s.
#[tokio::test]
async fn a_dead_readers_share_expires_by_itself() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, Duration::from_millis(50));
    let catalog = rl.rw_lock("catalog").expect("rw");
    // A reader that died: its share and the readers' mark, written as ACQUIRE_READ writes
    // them, with 600 ms left.
    for i in 0..cluster.len() {
        let time: Vec<String> = cluster.run(i, &redis::cmd("TIME"));
        let now_ms =
            time[0].parse::<u64>().expect("s") * 1000 + time[1].parse::<u64>().expect("us") / 1000;
        let _: i64 = cluster.run(
            i,
            redis::cmd("ZADD")
                .arg(readers_key())
                .arg(now_ms + 600)
                .arg("dead"),
        );
        let _: () = cluster.run(
            i,
            redis::cmd("SET")
                .arg(crate::lock_key(b"catalog"))
                .arg("readers")
                .arg("PX")
                .arg(600),
        );
    }
    let refused = catalog.try_write(TTL).await;
    assert!(
        refused.as_ref().is_err_and(Error::is_conflict),
        "a writer beside a live share: {refused:?}"
    );
    let mut live = catalog
        .try_read(Duration::from_secs(2))
        .await
        .expect("read");
    live.extend(Duration::from_secs(3)).await.expect("extend");
    live.release().await.expect("release");
    let refused = catalog.try_write(TTL).await;
    assert!(
        refused.as_ref().is_err_and(Error::is_conflict),
        "a writer beside the dead reader's live share: {refused:?}"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let w = catalog.try_write(TTL).await.expect("the share expired");
    w.release().await.expect("release");
    settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// Readers and writers of three clients, while one master is killed and another paused: never
/// a writer beside anyone (by the holders' own validity windows), and readers really share.
///
/// Mutation: `hold_for_readers` not setting the readers' mark: writers overlap readers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_a_writer_beside_anyone_while_masters_fail() {
    #[derive(Debug, Clone, Copy)]
    struct Hold {
        write: bool,
        from: Instant,
        until: Instant,
    }
    let mut cluster = Cluster::start(5);
    let clients: Vec<RedLock> = (0..3).map(|_| client(&cluster, NODE_TIMEOUT)).collect();
    let holds = Arc::new(Mutex::new(Vec::new()));
    let stop = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (n, rl) in clients.iter().enumerate() {
        let catalog = rl.rw_lock("catalog").expect("rw");
        for t in 0..2 {
            let (catalog, holds) = (catalog.clone(), holds.clone());
            // One writer task per client; the others read.
            let write = t == 0 && n < 2;
            tasks.push(tokio::spawn(async move {
                let mut taken = 0u64;
                while Instant::now() < stop {
                    let ttl = Duration::from_secs(2);
                    let wait = Duration::from_secs(2);
                    let lock = if write {
                        catalog.write_within(ttl, wait).await
                    } else {
                        catalog.read_within(ttl, wait).await
                    };
                    let Ok(lock) = lock else { continue };
                    let from = Instant::now();
                    tokio::time::sleep(Duration::from_millis(3 + taken % 5)).await;
                    let until = lock.valid_until().min(Instant::now());
                    holds
                        .lock()
                        .expect("holds")
                        .push(Hold { write, from, until });
                    let _ = lock.release().await;
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
    let overlap = |a: &Hold, b: &Hold| a.from < b.until && b.from < a.until;
    let mut writer_beside = 0;
    let mut most_readers = 0;
    for (i, h) in holds.iter().enumerate() {
        let beside: Vec<&Hold> = holds
            .iter()
            .enumerate()
            .filter(|(j, o)| *j != i && overlap(h, o))
            .map(|(_, o)| o)
            .collect();
        if h.write && !beside.is_empty() {
            writer_beside += 1;
        }
        if !h.write {
            let readers_at_start = holds
                .iter()
                .filter(|o| !o.write && o.from <= h.from && h.from < o.until)
                .count();
            most_readers = most_readers.max(readers_at_start);
        }
    }
    let writes = holds.iter().filter(|h| h.write).count();
    println!(
        "read-write lock: {} holds ({writes} writes), at most {most_readers} readers at once, {writer_beside} writers beside anyone",
        holds.len()
    );
    assert_eq!(writer_beside, 0, "a writer beside another holder");
    assert!(writes >= 5, "too few writes to mean anything: {writes}");
    assert!(
        most_readers >= 2,
        "readers never held together: {most_readers}"
    );
    for rl in &clients {
        settled(rl).await;
    }
    cluster.assert_no_keys_under(PREFIX);
}

/// Bad input is a typed error before any I/O: an empty name, and the shared key layout, which
/// has no read-write format to share with other libraries.
#[tokio::test]
async fn bad_read_write_locks_are_typed_errors() {
    let rl = RedLock::builder(["redis://127.0.0.1:1"])
        .build()
        .expect("config");
    assert!(matches!(
        rl.rw_lock(""),
        Err(Error::Config(ConfigError::EmptyResource))
    ));
    let shared = RedLock::builder(["redis://127.0.0.1:1"])
        .key_layout(KeyLayout::Shared)
        .build()
        .expect("config");
    assert!(matches!(
        shared.rw_lock("catalog"),
        Err(Error::Config(ConfigError::NeedsTaggedKeys(_)))
    ));
}

/// With fencing, a reader carries the token of the last write it may observe: at least every
/// earlier write's, and below every later write's, even when a failed write round left one
/// master's counter ahead of the others and the reader's token came from it. The reader's
/// confirmation raises its majority's counters to its token, so a later writer whose majority
/// avoids that master still gets a higher one.
///
/// Mutation: `CONFIRM_FENCE_READ` not raising the counter (its `SET` dropped): the later
/// writer, on the two other masters, gets a token below the reader's.
#[tokio::test]
async fn a_readers_token_is_every_earlier_writes_and_below_every_later_one() {
    let mut cluster = Cluster::start(3);
    let rl = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .fencing(true)
        .build()
        .expect("config");
    let catalog = rl.rw_lock("catalog").expect("rw");
    let w = catalog.try_write(TTL).await.expect("write");
    let first = w.fencing_token().expect("a writer's token");
    w.release().await.expect("release");
    settled(&rl).await;
    let counter: Vec<u8> = cluster
        .keys()
        .into_iter()
        .map(|(_, k)| k)
        .find(|k| k.ends_with(b":slot:fence"))
        .expect("the slot's fence counter");
    // A failed write round raised master 0's counter alone.
    let _: i64 = cluster.run(0, redis::cmd("INCRBY").arg(&counter).arg(10));
    // Until a read's decision heard master 0 (most do): its token is master 0's counter.
    let mut read = None;
    for _ in 0..20 {
        let r = catalog.try_read(TTL).await.expect("read");
        let token = r.fencing_token().expect("a reader's token with fencing");
        assert!(
            token >= first,
            "a reader below an earlier write: {token} < {first}"
        );
        if token > first {
            read = Some((r, token));
            break;
        }
        r.release().await.expect("release");
    }
    let (r, token) = read.expect("a read decided with master 0 among 20");
    assert_eq!(token, first + 10);
    r.release().await.expect("release");
    settled(&rl).await;
    // The next writer's majority avoids master 0.
    cluster.kill(0);
    let w = catalog
        .try_write(TTL)
        .await
        .expect("write on masters 1 and 2");
    let later = w.fencing_token().expect("a writer's token");
    assert!(
        later > token,
        "a later write at or below a reader's token: {later} <= {token}"
    );
    w.release().await.expect("release");
}

/// A release that names nobody wakes every waiting reader of a client, not one at a time:
/// three readers of one client, waiting behind a writer, all hold within a few hundred ms of
/// its release, though their timed retries come every 10 s, past their 8 s wait.
///
/// Mutation: queued readers subscribing as any queued waiter (`subscribe` for
/// `subscribe_reader` in `Queue::listen`): one reader is woken, the other two give up after 8 s
/// (run, caught).
#[tokio::test]
async fn a_release_wakes_every_waiting_reader_of_a_client() {
    let cluster = Cluster::start(3);
    let writer = client(&cluster, NODE_TIMEOUT);
    let readers = crate::woken_by_releases_only(&cluster, NODE_TIMEOUT, false);
    let held = writer
        .rw_lock("woken")
        .expect("name")
        .try_write(TTL)
        .await
        .expect("write");
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let rw = readers.rw_lock("woken").expect("name");
        waiting.push(tokio::spawn(async move {
            let lock = rw.read_within(TTL, Duration::from_secs(8)).await;
            (Instant::now(), lock)
        }));
    }
    // Each refused once and waiting on its timer, subscribed: the first waiter of a client
    // waits up to 200 ms for its listeners and 200 ms for its subscriptions, which a loaded
    // machine stretches.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = Instant::now();
    held.release().await.expect("release");
    let mut shares = Vec::new();
    for task in waiting {
        let (at, lock) = task.await.expect("reader task");
        let lock = lock.expect("woken by the release, not by its timer");
        assert!(
            at.saturating_duration_since(released) < Duration::from_secs(3),
            "held {:?} after the release",
            at.saturating_duration_since(released)
        );
        shares.push(lock);
    }
    for share in shares {
        share.release().await.expect("release");
    }
    settled(&readers).await;
    settled(&writer).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// Readers and writers take their turns in the order they began to wait: with a writer
/// holding, two readers queue, then a writer, then a third reader. The holder's release hands
/// the lock to the first two readers together (the run before the waiting writer); the third
/// reader waits behind that writer; the writer takes the lock after the two readers' releases,
/// and the third reader after the writer's. Each is woken by the release before it, never by
/// its 10 s timer. With fencing too: the writer's token is above the first holder's, and the
/// third reader's is the writer's.
///
/// Mutations (run, each caught): readers not queueing (`waiting.queues = false` for readers,
/// the rule before: the waiting writer goes first, and the first readers time out);
/// `writer_waits` ignoring the reader's place (the readers are refused by the writer behind
/// them, which waits on the readers' mark: every waiter times out); `hand_over` freeing the
/// key for a reader at the head instead of setting the readers' mark (the writer takes the
/// free key first).
#[tokio::test]
async fn readers_and_writers_take_turns_in_the_order_they_began_to_wait() {
    let cluster = Cluster::start(5);
    for fencing in [false, true] {
        turns_in_arrival_order(&cluster, fencing).await;
    }
    // Neither lock's key, queue, liveness nor readers is left; fenced clients seed every
    // slot's counter, which stays.
    let left: Vec<String> = cluster
        .keys()
        .into_iter()
        .filter(|(_, k)| k.windows(6).any(|w| w == b"{turns"))
        .filter(|(_, k)| !k.ends_with(b":fence") && !k.ends_with(b":seeded"))
        .map(|(i, k)| format!("server {i}: {}", k.escape_ascii()))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

async fn turns_in_arrival_order(cluster: &Cluster, fencing: bool) {
    const WOKEN_WITHIN: Duration = Duration::from_secs(4);
    let name = if fencing { "turns-fenced" } else { "turns" };
    let holder = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .fencing(fencing)
        .build()
        .expect("config");
    let first = holder
        .rw_lock(name)
        .expect("name")
        .try_write(TTL)
        .await
        .expect("the first writer");
    let queue = [crate::lock_key(name.as_bytes()), b":queue".to_vec()].concat();
    let queued_everywhere = |n: usize| {
        let queue = queue.clone();
        crate::eventually(Duration::from_secs(5), move || {
            (0..cluster.len())
                .all(|i| cluster.run::<usize>(i, redis::cmd("ZCARD").arg(&queue)) == n)
        })
    };
    // One client each, so that each is its own waiter in the masters' queue.
    let clients: Vec<RedLock> = (0..4)
        .map(|_| crate::woken_by_releases_only(cluster, NODE_TIMEOUT, fencing))
        .collect();
    let mut waiting = Vec::new();
    for (i, (rl, read)) in clients.iter().zip([true, true, false, true]).enumerate() {
        let rw = rl.rw_lock(name).expect("name");
        waiting.push(tokio::spawn(async move {
            let wait = Duration::from_secs(20);
            let lock = if read {
                rw.read_within(TTL, wait).await
            } else {
                rw.write_within(TTL, wait).await
            };
            (Instant::now(), lock.expect("its turn comes"))
        }));
        assert!(
            queued_everywhere(i + 1).await,
            "waiter {i} queued everywhere"
        );
    }
    let [r1, r2, writer, third]: [_; 4] = waiting.try_into().expect("four waiters");
    // Each waiter's lock, held within `WOKEN_WITHIN` of the release (at `after`) before it.
    let turn = |task: tokio::task::JoinHandle<(Instant, redquorum::Lock)>, after: Instant| async move {
        let (at, lock) = tokio::time::timeout(WOKEN_WITHIN * 2, task)
            .await
            .expect("woken by the release before it")
            .expect("waiter task");
        let after = at.saturating_duration_since(after);
        assert!(
            after < WOKEN_WITHIN,
            "held {after:?} after the release before it"
        );
        lock
    };
    let released = Instant::now();
    let first_token = first.fencing_token();
    first.release().await.expect("release");
    let (r1, r2) = (turn(r1, released).await, turn(r2, released).await);
    // The two readers hold; the writer behind them and the reader behind it wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !writer.is_finished(),
        "the writer came before the readers left"
    );
    assert!(
        !third.is_finished(),
        "a reader passed the writer queued before it"
    );
    r1.release().await.expect("release");
    let released = Instant::now();
    r2.release().await.expect("release");
    let w = turn(writer, released).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!third.is_finished(), "a reader came beside the writer");
    if fencing {
        assert!(w.fencing_token() > first_token, "the writer's token rises");
    }
    let w_token = w.fencing_token();
    let released = Instant::now();
    w.release().await.expect("release");
    let r3 = turn(third, released).await;
    if fencing {
        assert_eq!(
            r3.fencing_token(),
            w_token,
            "the reader's token is the last write's"
        );
    }
    r3.release().await.expect("release");
    for rl in clients.iter().chain([&holder]) {
        settled(rl).await;
    }
}
