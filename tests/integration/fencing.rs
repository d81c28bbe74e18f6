//! Fencing tokens: strictly increasing from one holder to the next, never shared, and enough
//! for a store to reject every write from a holder that stalled past its lock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redquorum::{RedLock, RetryPolicy};

use crate::eventually;
use redquorum_testkit::{Cluster, Persistence};

const NODE_TIMEOUT: Duration = Duration::from_millis(250);

fn fenced(cluster: &Cluster) -> RedLock {
    RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .fencing(true)
        .build()
        .expect("config")
}

#[tokio::test]
async fn tokens_strictly_increase_across_holders_and_master_failures() {
    let mut cluster = Cluster::start(5);
    let clients = [fenced(&cluster), fenced(&cluster), fenced(&cluster)];
    let plain = crate::client(&cluster, NODE_TIMEOUT);
    let mut last = 0;
    for n in 0..30 {
        if n == 10 {
            cluster.kill(0);
        }
        if n == 20 {
            cluster.pause(4);
        }
        // Waits, rather than one round: a release returns at the majority, and on a loaded
        // machine the previous holder's delete on a slow master can still be behind its
        // acquire's late request there when the next client asks (seen: refused by that
        // master, which with two masters down left no majority).
        let lock = clients[n % 3]
            .acquire_within("ledger", Duration::from_secs(5), Duration::from_secs(10))
            .await
            .expect("acquire");
        let token = lock.fencing_token().expect("fenced client");
        assert!(token > last, "acquisition {n}: token {token} after {last}");
        last = token;
        // The claim is the tokens' order. A release starved past the 250 ms node timeout
        // (seen with two CPU hogs beside the tests: every live master timed out) is an
        // outage, and the next acquire waits out the ttl; any other error fails the test.
        if let Err(e) = lock.release().await {
            assert!(e.is_no_quorum(), "release {n}: {e}");
        }
    }
    // A client without fencing hands out none.
    let lock = plain
        .try_acquire("ledger", Duration::from_secs(5))
        .await
        .expect("acquire");
    assert_eq!(lock.fencing_token(), None);
    lock.release().await.expect("release");
    cluster.resume(4);
    // The deletes queued on the paused master run once it resumes.
    for client in clients.iter().chain([&plain]) {
        crate::settled(client).await;
    }
    // Only the persistent counters and their re-seed markers remain: one each per hash
    // slot, here one each per master.
    let left: Vec<_> = cluster.keys().into_iter().map(|(_, k)| k).collect();
    assert!(
        left.iter()
            .all(|k| k.ends_with(b"}:slot:fence") || k.ends_with(b"}:slot:seeded")),
        "{left:?}"
    );
}

#[tokio::test]
async fn concurrent_holders_never_share_a_token_and_tokens_follow_acquisition_order() {
    let cluster = Cluster::start(5);
    let acquired = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let rl = fenced(&cluster);
        let acquired = acquired.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let lock = rl
                    .acquire_within("counter", Duration::from_secs(2), Duration::from_secs(10))
                    .await
                    .expect("acquire");
                let at = Instant::now();
                acquired
                    .lock()
                    .expect("list")
                    .push((at, lock.fencing_token().expect("token")));
                lock.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let mut acquired = acquired.lock().expect("list").clone();
    acquired.sort();
    assert_eq!(acquired.len(), 60);
    for pair in acquired.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "token {} acquired after token {}",
            pair[1].1,
            pair[0].1
        );
    }
}

/// A fenced store (accepts a write only with a token at least the highest it has accepted),
/// checked against a ground truth that does not look at tokens: a write is late exactly when a
/// holder that acquired the lock later (on the shared monotonic clock) has already written.
#[derive(Default)]
struct FencedStore {
    highest_token: u64,
    newest_writer_acquired: Option<Instant>,
    writes: u32,
    late_writes: u32,
    rejected: u32,
    verdicts_wrong: Vec<String>,
}

impl FencedStore {
    fn write(&mut self, token: u64, acquired_at: Instant) {
        self.writes += 1;
        let late = self
            .newest_writer_acquired
            .is_some_and(|newest| newest > acquired_at);
        self.newest_writer_acquired = self.newest_writer_acquired.max(Some(acquired_at));
        let rejected = token < self.highest_token;
        if rejected {
            self.rejected += 1;
        } else {
            self.highest_token = token;
        }
        if late {
            self.late_writes += 1;
        }
        if rejected != late {
            self.verdicts_wrong.push(format!(
                "token {token}: {} but it was {}",
                if rejected { "rejected" } else { "accepted" },
                if late { "late" } else { "in order" }
            ));
        }
    }
}

/// Holders that stall past their ttl before writing (a GC pause, a stopped process), while a
/// nemesis kills, restarts (with `appendfsync always`) and pauses masters. The fenced store
/// must reject exactly the late writes and accept every other one. Without fencing every late
/// write would be taken: the negative control is that the scenario does produce late writes.
#[tokio::test]
async fn a_fenced_store_rejects_every_write_from_a_stalled_holder() {
    let cluster = Arc::new(Mutex::new(Cluster::start_with(5, Persistence::AofAlways)));
    let urls = cluster.lock().expect("cluster").urls();
    let stores = Arc::new(Mutex::new(FencedStore::default()));
    let ttl = Duration::from_millis(300);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut contenders = Vec::new();
    for id in 0..3u64 {
        let rl = RedLock::builder(&urls)
            .per_node_timeout(Duration::from_millis(50))
            .fencing(true)
            .retry(
                RetryPolicy::default()
                    .delay(Duration::from_millis(5))
                    .jitter(Duration::from_millis(20)),
            )
            .retry_seed(id)
            .build()
            .expect("config");
        let (stores, stop) = (stores.clone(), stop.clone());
        contenders.push(tokio::spawn(async move {
            let mut round = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                let Ok(lock) = rl
                    .acquire_within("store", ttl, Duration::from_secs(2))
                    .await
                else {
                    continue;
                };
                let acquired_at = Instant::now();
                let token = lock.fencing_token().expect("token");
                if (round + id).is_multiple_of(3) {
                    // Stall past the lock without noticing: another holder takes over and
                    // writes first; this write arrives late.
                    tokio::time::sleep(ttl * 2).await;
                }
                stores.lock().expect("stores").write(token, acquired_at);
                let _ = lock.release().await;
            }
        }));
    }
    let nemesis = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || {
            let step = |f: &dyn Fn(&mut Cluster)| {
                std::thread::sleep(Duration::from_millis(700));
                f(&mut cluster.lock().expect("cluster"));
            };
            step(&|c| c.kill(1));
            step(&|c| c.pause(3));
            step(&|c| c.restart(1));
            step(&|c| c.resume(3));
            step(&|c| c.kill(4));
            step(&|c| c.restart(4));
            std::thread::sleep(Duration::from_millis(700));
        })
    };
    nemesis.await.expect("nemesis");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in contenders {
        c.await.expect("contender");
    }
    let (writes, late, rejected, wrong, highest) = {
        let s = stores.lock().expect("stores");
        (
            s.writes,
            s.late_writes,
            s.rejected,
            s.verdicts_wrong.clone(),
            s.highest_token,
        )
    };
    println!(
        "fenced store: {writes} writes, {late} late (an unfenced store takes them all), {rejected} rejected, {} wrong verdicts; highest token {highest}",
        wrong.len()
    );
    assert!(
        late >= 1,
        "negative control: the scenario produced no late write"
    );
    assert!(
        wrong.is_empty(),
        "the fenced store must reject exactly the late writes: {wrong:?}"
    );
    // Only the persistent fence counters and their markers outlive the run (stalled
    // holders' keys expire).
    let only_counters = || {
        let keys = cluster.lock().expect("cluster").keys();
        keys.iter()
            .all(|(_, k)| k.ends_with(b":fence") || k.ends_with(b":seeded"))
    };
    assert!(eventually(Duration::from_secs(3), only_counters).await);
}

/// F1, the counterexample the review reproduced, replayed through the public API on three
/// real masters X, Y, Z (counters 9, 1, 9 from earlier locks while Y was away; the 9s set as
/// the per-resource counters older versions kept, so this also shows the upgrade: the first
/// fenced acquire on each master folds them into the slot's counter):
///
/// 1. A's fenced acquire: X → 10, Y → 2; decided at the majority, T_A = 10. A's request to Z
///    sits in a slow proxy (2 s each way); Y's link is slower than X's (200 ms).
/// 2. A's key disappears early from Y (a server clock step: deleted on the server).
/// 3. B, connected directly: X refuses; Y → 3, Z → 10; T_B = 10. B confirms, releases.
/// 4. A's slow `SET`+`INCR` lands on Z (→ 11, never part of T_A); A's confirm reaches Z.
///
/// With the old confirm rule A counted X and Z and was confirmed with B's token, 10.
/// Must hold: A is refused, and says why: its key is gone from Y, a node that granted it
/// (evidence, not a timeout), and Z's grant came after A's decision, so it does not count.
///
/// Mutation: counting every master's confirmation (`.counting_only(..)` dropped in
/// `confirm::confirm_fence`, the old rule) makes this test fail: A returns a lock with token
/// 10, B's.
#[tokio::test]
async fn a_late_grant_never_confirms_a_token_another_holder_has() {
    use redquorum_testkit::{Fault, Proxy};
    let cluster = Cluster::start(3);
    let fence_key = b"redquorum:{f1}:fence";
    let lock_key = crate::lock_key(b"f1");
    // A deployment in service: every master's counter for this slot seeded (at 1) by a first
    // fenced lock, so no re-seed round changes the timing below.
    let first = fenced(&cluster)
        .try_acquire("f1", Duration::from_secs(30))
        .await
        .expect("first lock");
    assert_eq!(first.fencing_token(), Some(1));
    first.release().await.expect("first release");
    for (node, counter) in [(0, b"9"), (2, b"9")] {
        let _: () = cluster.run(node, redis::cmd("SET").arg(fence_key).arg(counter));
    }
    let proxies = [
        Proxy::start(cluster.server(0).port()).await,
        Proxy::start(cluster.server(1).port()).await,
        Proxy::start(cluster.server(2).port()).await,
    ];
    let a = RedLock::builder(proxies.iter().map(Proxy::url))
        .per_node_timeout(Duration::from_secs(8))
        .fencing(true)
        .build()
        .expect("config");
    // Connect (and load the scripts) before the links slow down.
    a.connect_all().await.expect("A connects");
    proxies[1].set(Fault::Delay(Duration::from_millis(200)));
    proxies[2].set(Fault::Delay(Duration::from_secs(2)));
    let b = RedLock::builder(cluster.urls())
        .per_node_timeout(Duration::from_millis(250))
        .fencing(true)
        .build()
        .expect("config");

    let a_acquires = tokio::spawn(async move {
        let result = a.try_acquire("f1", Duration::from_secs(30)).await;
        (a, result)
    });
    // Step 2: as soon as A's key is on Y, it vanishes there.
    assert!(
        eventually(Duration::from_secs(3), || cluster
            .get(1, &lock_key)
            .is_some())
        .await,
        "A's SET reached Y"
    );
    let _: () = cluster.run(1, redis::cmd("DEL").arg(&lock_key));
    // Step 3, well before A's SET reaches Z.
    let lock_b = b
        .try_acquire("f1", Duration::from_secs(30))
        .await
        .expect("B acquires");
    let token_b = lock_b.fencing_token().expect("fenced");
    assert_eq!(token_b, 10, "B's token is the max of Y (3) and Z (10)");
    lock_b.release().await.expect("B releases");
    // The replay is F1 only if A's SET had not reached Z yet: Z's counter is B's 10, not 11.
    assert_eq!(crate::fence_counter(&cluster, 2), Some(10));

    let (a, result) = a_acquires.await.expect("A's task");
    match result {
        Ok(lock) => panic!(
            "A was confirmed with token {:?} after B held token {token_b}",
            lock.fencing_token()
        ),
        Err(e) => {
            assert!(
                e.is_expired(),
                "A's key is gone from Y, which granted it: {e}"
            );
            let text = e.to_string();
            assert!(
                text.contains("granted after the acquire was decided"),
                "{text}"
            );
            assert!(text.contains("key not found"), "{text}");
        }
    }
    // Z's counter went on from A's late INCR; nothing of A's or B's is left but counters,
    // checked right after the failed acquire's cleanup, long before the 30 s ttl. The old
    // per-resource counters were folded in and are gone.
    assert_eq!(crate::fence_counter(&cluster, 2), Some(11));
    for node in 0..3 {
        assert_eq!(cluster.get(node, &lock_key), None, "node {node}");
        assert_eq!(cluster.get(node, fence_key), None, "node {node}");
    }
    drop(a);
}

/// Fence counters are one per hash slot, not one per resource name: 2,000 distinct fenced
/// resources whose names fall in only 32 hash slots leave at most 32 counters per master and
/// no lock key (checked right after the releases, long before the 30 s ttl). The names are
/// picked by the slot Redis Cluster gives them (CRC16), so the bound is tight at a tenth of
/// the acquisitions the pigeonhole over all 16,384 slots would take.
///
/// Mutation: per-resource counters (`resource::fence_key` returning `prefix{resource}:fence`,
/// the old naming) make this fail with one counter per resource: 2,000, over the bound.
#[tokio::test]
async fn distinct_resources_leave_at_most_one_counter_per_hash_slot() {
    const RESOURCES: usize = 2_000;
    const SLOTS: u16 = 32;
    const TASKS: usize = 16;
    // The lock key is `redquorum:{<name>}`: its slot is the CRC16 of the name, modulo 16,384.
    let names: Vec<String> = (0u32..)
        .map(|n| format!("job:{n}"))
        .filter(|name| crc16::State::<crc16::XMODEM>::calculate(name.as_bytes()) % 16_384 < SLOTS)
        .take(RESOURCES)
        .collect();
    let names = std::sync::Arc::new(names);
    let cluster = Cluster::start(3);
    let rl = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .fencing(true)
        .build()
        .expect("config");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let rl = rl.clone();
        let names = names.clone();
        tasks.push(tokio::spawn(async move {
            for name in names.iter().skip(task).step_by(TASKS) {
                let lock = rl
                    .try_acquire(name.as_str(), Duration::from_secs(30))
                    .await
                    .expect("acquire");
                assert!(lock.fencing_token().is_some());
                lock.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    crate::settled(&rl).await;
    let keys = cluster.keys();
    for node in 0..3 {
        let on_node: Vec<&Vec<u8>> = keys
            .iter()
            .filter(|(i, _)| *i == node)
            .map(|(_, k)| k)
            .collect();
        let counters = on_node
            .iter()
            .filter(|k| k.ends_with(b"}:slot:fence"))
            .count();
        let markers = on_node
            .iter()
            .filter(|k| k.ends_with(b"}:slot:seeded"))
            .count();
        // And at most the server's seeding record (`fence_sweep`), once the client's
        // background seeding finished on it.
        let records = on_node
            .iter()
            .filter(|k| k.as_slice() == b"redquorum:fence:seeded")
            .count();
        assert_eq!(
            counters + markers + records,
            on_node.len(),
            "only slot counters, their re-seed markers and the seeding record are left"
        );
        assert!(
            counters <= usize::from(SLOTS) && markers <= 16_384,
            "node {node}: {counters} counters, {markers} markers"
        );
        println!(
            "node {node}: {counters} counters and {markers} markers for {RESOURCES} fenced \
             resources ({:.1?})",
            started.elapsed()
        );
    }
}

/// A master that restarts empty must not lower the next token (`DESIGN.md` §5, `crate::reseed`).
///
/// Three masters, each behind a proxy. The first fenced lock seeds every master's counter.
/// Tokens 2 to 6 are then handed out while Z is cut off, so X and Y count to 6 and Z stays at
/// 1. Y restarts empty (counter 0, a new run), and X is cut off: Y and Z are a majority, and
/// with Y trusted as it is the next token would be max(0, 1) + 1 = 2, after 6.
///
/// Must hold: while only Y and Z answer, the fenced acquire is refused (for all of a 3 s
/// wait), and says that Y's counter was not re-seeded (Z alone cannot vouch for it: one marked master is no
/// majority); a plain lock on the same masters is unaffected. Once X is back, Y is re-seeded
/// from X and Z, and every later token is higher than any before Y's restart (6, unless a
/// round was retried), also when X is cut off again.
/// Checked right after each step, never after a ttl.
///
/// Mutation: dropping the marker check from `ACQUIRE_FENCED` (the `-6` line) makes this fail
/// at once (run: no master is ever marked); past that check, the acquire on Y and Z would
/// succeed with token 2. The model (`crate::model`, `reseed: false`) finds the same.
#[tokio::test]
async fn a_master_restarting_empty_never_lowers_the_next_token() {
    use redquorum_testkit::{Fault, Proxy};
    let mut cluster = Cluster::start(3);
    let proxies = [
        Proxy::start(cluster.server(0).port()).await,
        Proxy::start(cluster.server(1).port()).await,
        Proxy::start(cluster.server(2).port()).await,
    ];
    let through = |fencing: bool| {
        RedLock::builder(proxies.iter().map(Proxy::url))
            .per_node_timeout(NODE_TIMEOUT)
            .fencing(fencing)
            .build()
            .expect("config")
    };
    let rl = through(true);
    let ttl = Duration::from_secs(30);
    // Each take may wait a little: links that were reset reconnect in the background.
    let take = |rl: RedLock| async move {
        let lock = rl
            .acquire_within("ledger", ttl, Duration::from_secs(3))
            .await?;
        let token = lock.fencing_token().expect("fenced");
        lock.release().await?;
        Ok::<u64, redquorum::Error>(token)
    };

    // A new deployment: nothing is marked, every master answers, the first lock seeds all.
    assert_eq!(take(rl.clone()).await.expect("first lock"), 1);
    for node in 0..3 {
        let (run, run_id) = crate::seed_marker(&cluster, node);
        assert_eq!(run.as_deref(), Some(run_id.as_str()), "node {node} seeded");
    }

    // A release returns at the majority; its delete to the last master may still be on the
    // way, and a reset now would drop it (seen once under load: the first lock's key left on
    // Z until its ttl). Let the deletes land before each fault.
    crate::settled(&rl).await;
    crate::assert_no_lock_keys(&cluster);
    proxies[2].set(Fault::Reset);
    let mut last = 1;
    for _ in 0..5 {
        let token = take(rl.clone()).await.expect("lock without Z");
        assert!(token > last, "{token} after {last}");
        last = token;
    }
    // 6 when no round of a take was retried; a retried round (a round timing out on a loaded
    // machine) bumps the counters once more, which only raises the tokens.
    assert!(last >= 6, "{last}");
    let highest_before_restart = last;
    assert_eq!(crate::fence_counter(&cluster, 2), Some(1));

    proxies[2].set(Fault::None);
    crate::settled(&rl).await;
    cluster.restart(1);
    proxies[0].set(Fault::Reset);
    match take(rl.clone()).await {
        Ok(token) => panic!("token {token} after {last}, with Y's counter lost"),
        Err(err) => assert_not_seeded(&err, "the acquire without X"),
    }
    let (run, run_id) = crate::seed_marker(&cluster, 1);
    assert_ne!(run.as_deref(), Some(run_id.as_str()), "Y stays unseeded");
    crate::settled(&rl).await;
    crate::assert_no_lock_keys(&cluster);
    let plain = through(false)
        .acquire_within("ledger", ttl, Duration::from_secs(3))
        .await
        .expect("a plain lock needs no counter");
    plain.release().await.expect("release");

    proxies[0].set(Fault::None);
    let token = take(rl.clone()).await.expect("lock with X back");
    assert!(token > last, "{token} after {last}");
    last = token;
    // The acquire won without Y and re-seeds it in the background.
    assert!(
        crate::eventually(Duration::from_secs(3), || {
            let (run, run_id) = crate::seed_marker(&cluster, 1);
            run.as_deref() == Some(run_id.as_str())
        })
        .await,
        "Y re-seeded"
    );
    assert!(crate::fence_counter(&cluster, 1) >= Some(highest_before_restart));
    proxies[0].set(Fault::Reset);
    let token = take(rl.clone())
        .await
        .expect("lock on the re-seeded Y and Z");
    assert!(token > last, "{token} after {last}");
    crate::settled(&rl).await;
    crate::assert_no_lock_keys(&cluster);
}

/// Issue 29's schedule on real servers: a master's dataset replaced by an older copy of
/// itself, `run_id` unchanged (a failover to its replica and a failback), and the backlog
/// then freed, which put the term of the rule before it back where the old copy was marked.
/// Three voters X, B, C, and Y, a replica of X that is no voter.
///
/// Mutation: the fence term as the `run_id` alone (`fence_term.lua` without the replication
/// id, which is also the old rule once `second_repl_offset` is back to -1): the second
/// holder gets token 2, and the fresh client's acquire on {X, C} with B paused token 2 again.
#[tokio::test]
async fn a_failed_back_master_never_hands_out_a_token_again() {
    let mut cluster = Cluster::start(3);
    let y = cluster.add(&[]);
    let voters: Vec<String> = cluster.urls()[..3].to_vec();
    let client = || {
        RedLock::builder(voters.clone())
            .per_node_timeout(NODE_TIMEOUT)
            .fencing(true)
            .build()
            .expect("config")
    };
    let ttl = Duration::from_secs(30);
    let take = |rl: RedLock, within: Duration| async move {
        let lock = rl.acquire_within("ledger", ttl, within).await?;
        let token = lock.fencing_token().expect("fenced");
        lock.release().await?;
        Ok::<u64, redquorum::Error>(token)
    };
    let replicate = |replica: usize, of: Option<usize>| {
        let cmd = match of {
            Some(master) => redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(cluster.server(master).port())
                .clone(),
            None => redis::cmd("REPLICAOF").arg("NO").arg("ONE").clone(),
        };
        let _: String = cluster.run(replica, &cmd);
    };
    let info = |node: usize, name: &str| -> String {
        let info: String = cluster.run(node, redis::cmd("INFO").arg("replication"));
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let synced = |replica: usize| {
        info(replica, "master_link_status:") == "up"
            && info(replica, "master_sync_in_progress:") == "0"
    };
    let counter_of = |node: usize| crate::fence_counter(&cluster, node);

    // 1. Token 1 on a fresh deployment.
    let first = client();
    assert_eq!(
        take(first.clone(), Duration::from_secs(3))
            .await
            .expect("first"),
        1
    );
    crate::settled(&first).await;

    // 2. Y copies X, then is promoted while X keeps serving (a failover, as seen from Y).
    replicate(y, Some(0));
    assert!(
        crate::eventually(Duration::from_secs(10), || synced(y)
            && counter_of(y) == Some(1))
        .await,
        "Y copied X"
    );
    replicate(y, None);

    // 3. C holds another client's key, so the next majority is {X, B}: token 2 (or 3: X's
    // replication id changed when Y attached, a new term, so X may be re-seeded from B and C
    // first). X's counter has it, Y's copy still says 1.
    let lock_key = b"redquorum:{ledger}";
    cluster.set(2, lock_key, b"someone else", Duration::from_secs(60));
    let second = take(client(), Duration::from_secs(3))
        .await
        .expect("second");
    assert!(second >= 2, "token {second}");
    assert_eq!(counter_of(0), Some(second));

    // 4. X fails back: it resyncs from Y (counter 1, and the marker X wrote itself) and is
    // promoted again. 5. It frees its backlog: the replication history of the old rule's
    // "promoted" is gone.
    let _: String = cluster.run(
        0,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("repl-backlog-ttl")
            .arg("1"),
    );
    replicate(0, Some(y));
    assert!(
        crate::eventually(Duration::from_secs(10), || synced(0)
            && counter_of(0) == Some(1))
        .await,
        "X resynced from Y"
    );
    replicate(0, None);
    assert!(
        crate::eventually(Duration::from_secs(10), || {
            info(0, "second_repl_offset:") == "-1"
        })
        .await,
        "X freed its backlog"
    );
    // 6. B paused, C free again: a fresh client and the first one (its connection to X made
    // before all this) each meet X and C. X's counter says 1 again; unless a background
    // seeding re-seeded X from B and C before B was paused (then X has the second token), X
    // is unseeded and C alone cannot vouch for it. Either way no token at or below the
    // highest handed out may be handed out again.
    let _: i64 = cluster.run(2, redis::cmd("DEL").arg(&lock_key[..]));
    cluster.pause(1);
    let fresh = client();
    let mut highest = second;
    for (who, rl) in [
        ("a fresh client", fresh.clone()),
        ("the first client", first.clone()),
    ] {
        match take(rl.clone(), Duration::from_millis(600)).await {
            Ok(token) if token > highest => highest = token,
            Ok(token) => panic!("{who} got token {token} after {highest}, X's counter gone back"),
            Err(err) => assert_not_seeded(&err, who),
        }
    }

    // B back: X is re-seeded from the marked majority {B, C} (B has the second token), and
    // the next token is higher than every token handed out.
    cluster.resume(1);
    let token = take(client(), Duration::from_secs(3))
        .await
        .expect("with B back");
    assert!(token > highest, "token {token} after {highest}");
    crate::settled(&first).await;
    crate::settled(&fresh).await;
    crate::assert_no_lock_keys(&cluster);
}

/// `err` is a missing quorum (never an expiry) because a master's fence counter was not
/// seeded for its current term.
fn assert_not_seeded(err: &redquorum::Error, who: &str) {
    assert!(err.is_no_quorum() && !err.is_expired(), "{who}: {err}");
    let text = format!("{err:#}");
    assert!(
        text.contains("not seeded for the server's current term"),
        "{who}: {text}"
    );
}
