//! Fenced locks survive any minority of masters down (issue 29, §2): on resources never locked
//! before, after a rolling restart with persistence, and after an empty restart within the
//! grace. Every slot's fence counter is seeded on every master ahead of need
//! (`fence_sweep`), and an operator can see that it is (`RedLock::fence_seeding`).

use std::time::Duration;

use redquorum::{RedLock, Seeding};
use redquorum_testkit::{Cluster, Persistence};

const NODE_TIMEOUT: Duration = Duration::from_millis(250);
const TTL: Duration = Duration::from_secs(10);

fn fenced(urls: Vec<String>) -> RedLock {
    RedLock::builder(urls)
        .per_node_timeout(NODE_TIMEOUT)
        .fencing(true)
        .build()
        .expect("config")
}

/// A fenced lock on `resource`, taken within 3 s and released: its token.
async fn take(rl: &RedLock, resource: &str) -> Result<u64, redquorum::Error> {
    let lock = rl
        .acquire_within(resource, TTL, Duration::from_secs(3))
        .await?;
    let token = lock.fencing_token().expect("fenced");
    lock.release().await?;
    Ok(token)
}

fn states(rl_seeding: &redquorum::FenceSeeding) -> Vec<Seeding> {
    rl_seeding.masters().iter().map(|(_, s)| *s).collect()
}

/// A fresh deployment: one fenced acquire starts the client's background seeding, which
/// marks every slot on every master while all five are up. Then one master is killed, and
/// fenced locks on 20 resources nobody ever locked all succeed (the issue measured 0 of 20).
///
/// Mutation: no background seeding (`start_fence_sweep` not called by the acquire): the
/// seeding never completes (run, caught at the wait); past it, the issue measured each
/// of the 20 acquires failing.
#[tokio::test]
async fn fenced_locks_on_new_resources_survive_a_master_down() {
    let mut cluster = Cluster::start(5);
    let rl = fenced(cluster.urls());
    assert_eq!(take(&rl, "first").await.expect("first lock"), 1);
    // The operator's check: every master seeded (the client's sweeper does it in the
    // background; the first look may find it still at work). The sweep's work is fixed
    // (16,384 slots, two reading rounds and a write each on a new deployment), so its time
    // is the machine's: 18 s in a debug build under two CPU hogs with this test alone, over
    // 30 s with the other tests beside it. The bound is for a sweep that never finishes, not
    // a speed claim.
    let started = std::time::Instant::now();
    let mut seeded = false;
    while started.elapsed() < Duration::from_secs(180) {
        let seeding = rl.fence_seeding().await.expect("seeding");
        if seeding.is_complete() {
            seeded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(seeded, "seeded in the background within 180 s");
    println!("seeded in the background in {:.1?}", started.elapsed());

    cluster.kill(4);
    let seeding = rl.fence_seeding().await.expect("seeding");
    assert_eq!(states(&seeding)[..4], [Seeding::Seeded; 4]);
    assert_eq!(states(&seeding)[4], Seeding::Unreachable);
    assert!(!seeding.is_complete());
    let fresh = fenced(cluster.urls());
    for n in 0..20 {
        let rl = if n % 2 == 0 { &rl } else { &fresh };
        let token = take(rl, &format!("never-locked-{n}"))
            .await
            .unwrap_or_else(|err| panic!("resource {n} with one master down: {err:#}"));
        assert!(token >= 1);
    }
    crate::settled(&rl).await;
    crate::settled(&fresh).await;
    crate::assert_no_lock_keys(&cluster);
}

/// A rolling restart with persistence (`appendfsync always`): each master is restarted once
/// the one before is seeded again, as the deploy guide's rule says, and `fence_seeding` shows
/// the restarted master unseeded until `seed_fencing` (what `redquorum fence` runs) seeds it.
/// Then, with one master down, fenced locks on the resource locked before and on a new one
/// succeed, from the old client and from a fresh one, and tokens keep growing.
///
/// Mutation: `seed_fencing` that only reads the records (no sweep): the restarted master
/// stays unseeded, and the loop's assertion fails (run, caught). Without the sweep at all,
/// the issue measured every fenced acquire failing after the rolling restart.
#[tokio::test]
async fn fenced_locks_survive_a_rolling_restart_and_a_master_down() {
    // Three masters: each restart costs a sweep of every slot, fsynced write by write.
    const MASTERS: usize = 3;
    let mut cluster = Cluster::start_with(MASTERS, Persistence::AofAlways);
    // The operator's client takes no lock, so no sweeper of its own seeds behind the test's
    // back; each lock is taken by a client dropped right after (its sweeper ends with it).
    let rl = fenced(cluster.urls());
    let seeding = rl.seed_fencing().await.expect("seed");
    assert!(seeding.is_complete(), "{seeding:?}");
    assert_eq!(seeding.slots_left(), Some(0));
    let mut last = take(&fenced(cluster.urls()), "ledger")
        .await
        .expect("before");
    for i in 0..MASTERS {
        cluster.restart(i);
        let mut seen = Seeding::Unreachable;
        for _ in 0..50 {
            seen = states(&rl.fence_seeding().await.expect("seeding"))[i];
            if seen != Seeding::Unreachable {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(seen, Seeding::NotSeeded, "master {i} restarted: a new term");
        let seeding = rl.seed_fencing().await.expect("seed");
        assert!(seeding.is_complete(), "after restarting {i}: {seeding:?}");
        let token = take(&fenced(cluster.urls()), "ledger")
            .await
            .expect("between restarts");
        assert!(token > last, "{token} after {last}");
        last = token;
    }
    cluster.kill(2);
    let fresh = fenced(cluster.urls());
    for (who, rl) in [("the old client", &rl), ("a fresh client", &fresh)] {
        for resource in ["ledger", "new-after-the-restarts"] {
            let token = take(rl, resource)
                .await
                .unwrap_or_else(|err| panic!("{who}, {resource}: {err:#}"));
            if resource == "ledger" {
                assert!(token > last, "{who}: {token} after {last}");
                last = token;
            }
        }
    }
    crate::settled(&rl).await;
    crate::settled(&fresh).await;
    crate::assert_no_lock_keys(&cluster);
}

/// An empty restart of a minority within the restart grace: master 0 comes back with nothing
/// (no persistence) while master 1 is down. Master 0 does not vote during the grace; the
/// three others are seeded, so fenced locks go on, on old and new resources; after the grace
/// master 0 is re-seeded from them and votes again with a counter at least the last token.
#[tokio::test]
async fn fenced_locks_survive_an_empty_restart_within_the_grace_and_a_master_down() {
    let mut cluster = Cluster::start(5);
    let grace = Duration::from_secs(2);
    let rl = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .restart_grace(grace)
        .fencing(true)
        .build()
        .expect("config");
    // Connected long enough ago that the grace does not hold the first lock back.
    tokio::time::sleep(grace).await;
    assert!(rl.seed_fencing().await.expect("seed").is_complete());
    let mut last = take(&rl, "ledger").await.expect("before");
    cluster.restart(0);
    cluster.kill(1);
    for resource in ["ledger", "new-during-the-grace"] {
        let token = take(&rl, resource)
            .await
            .unwrap_or_else(|err| panic!("{resource} during the grace: {err:#}"));
        if resource == "ledger" {
            assert!(token > last, "{token} after {last}");
            last = token;
        }
    }
    tokio::time::sleep(grace).await;
    let seeding = rl.seed_fencing().await.expect("seed");
    assert_eq!(states(&seeding)[0], Seeding::Seeded, "{seeding:?}");
    let token = take(&rl, "ledger").await.expect("after the grace");
    assert!(token > last, "{token} after {last}");
    crate::settled(&rl).await;
    crate::assert_no_lock_keys(&cluster);
}

/// The sweep seeds each slot from that slot's own readings, many slots per request: with
/// distinct counters on the slots of 200 resources on masters 0 and 1 (the higher one on
/// master 1 for half of them, on master 0 for the others) and master 2 restarted empty, once
/// `seed_fencing` completes every one of those slots on master 2 holds the higher of the two.
///
/// Mutation: `reseed_slots` taking every slot's value from the first slot's readings
/// (`readings.get(0)` for `readings.get(at)`) fails it (run, caught).
#[tokio::test]
async fn a_sweep_seeds_each_slot_from_its_own_readings() {
    let mut cluster = Cluster::start(3);
    let rl = fenced(cluster.urls());
    for n in 0..200 {
        take(&rl, &format!("slot-{n}")).await.expect("lock");
    }
    crate::settled(&rl).await;
    assert!(rl.seed_fencing().await.expect("seed").is_complete());
    let counters: Vec<Vec<u8>> = cluster
        .keys()
        .into_iter()
        .filter(|(node, key)| *node == 0 && key.ends_with(b"}:slot:fence"))
        .map(|(_, key)| key)
        .collect();
    assert!(counters.len() > 150, "{} slots", counters.len());
    let mut expected = Vec::new();
    for (i, key) in counters.iter().enumerate() {
        let (on_0, on_1) = if i % 2 == 0 {
            (1_000 + i, 5_000 + i)
        } else {
            (9_000 + i, 10 + i)
        };
        for (node, value) in [(0, on_0), (1, on_1)] {
            let _: () = cluster.run(node, redis::cmd("SET").arg(key).arg(value));
        }
        expected.push(on_0.max(on_1).to_string().into_bytes());
    }
    cluster.restart(2);
    let mut complete = false;
    for _ in 0..50 {
        if rl.seed_fencing().await.expect("seed").is_complete() {
            complete = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(complete, "master 2 seeded again");
    for (key, expected) in counters.iter().zip(&expected) {
        assert_eq!(
            cluster.get(2, key).as_deref(),
            Some(expected.as_slice()),
            "{}",
            key.escape_ascii()
        );
    }
    crate::assert_no_lock_keys(&cluster);
}
