//! The chaos suite: mutual exclusion under real faults, with figures, and negative controls
//! that prove the checker can fail.
//!
//! Each scenario runs three contenders on one lock over five real masters behind fault
//! proxies, while a seeded nemesis injects faults, and prints one line of figures. Bounded for
//! CI by default; `REDQUORUM_SOAK_SECS=120` runs each scenario longer, and
//! `REDQUORUM_CHAOS_SEED=n` replays another fault schedule.

#[path = "support/chaos.rs"]
mod chaos;

use std::time::{Duration, Instant};

use chaos::{
    Action, Figures, Hold, PermitHold, Scenario, overlaps, permit_violations, random_schedule,
};
use redquorum::RedLock;
use redquorum_testkit::{Fault, Proxy};

const TTL: Duration = Duration::from_millis(500);
const NODE_TIMEOUT: Duration = Duration::from_millis(50);

fn scenario(
    name: &'static str,
    schedule: Vec<(Duration, Action)>,
    duration: Duration,
    aof: bool,
) -> Scenario {
    Scenario {
        name,
        duration,
        ttl: TTL,
        per_node_timeout: NODE_TIMEOUT,
        contenders: 3,
        schedule,
        aof,
        permits: None,
        read_write: false,
        sentinel_groups: 0,
        redis_clusters: 0,
        restart_grace: None,
    }
}

/// The safety targets of scenarios 1–8.
fn assert_safe(f: &Figures) {
    println!("{f}");
    assert_eq!(
        f.overlaps, 0,
        "{}: overlapping holds; faults: {:#?}",
        f.name, f.fault_log
    );
    assert_eq!(f.keys_left, 0, "{}: keys left behind", f.name);
    // Mutation: a release script that answers "done" without deleting fails this at once,
    // before any ttl (the count above alone could not see it).
    assert_eq!(
        f.released_keys_left, 0,
        "{}: keys of released locks left right after the run",
        f.name
    );
    assert!(
        f.holds_to_deadline > 0,
        "{}: no hold lasted to its deadline",
        f.name
    );
    assert_eq!(
        f.optimistic_validity, 0,
        "{}: a lock claimed validity a majority no longer gave it",
        f.name
    );
    assert!(f.acquisitions > 0, "{}: nobody ever held the lock", f.name);
}

fn kill_then_restart_later(n: usize) -> (Action, Action) {
    (Action::Kill(n), Action::Restart(n))
}

fn pause_then_resume(n: usize) -> (Action, Action) {
    (Action::Pause(n), Action::Resume(n))
}

fn black_hole(n: usize) -> (Action, Action) {
    (
        Action::Net(n, Fault::BlackHole),
        Action::Net(n, Fault::None),
    )
}

fn latency_spike(n: usize) -> (Action, Action) {
    (
        Action::Net(n, Fault::Delay(NODE_TIMEOUT * 2)),
        Action::Net(n, Fault::None),
    )
}

fn resets(n: usize) -> (Action, Action) {
    (Action::Net(n, Fault::Reset), Action::Net(n, Fault::None))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_1_kill_and_delayed_empty_restart() {
    let seed = chaos::seed();
    let duration = chaos::duration(Duration::from_secs(5));
    // Restarted empty only after more than a ttl: the delayed-restart rule.
    let schedule = random_schedule(
        seed,
        duration,
        TTL * 3,
        0.45..0.95,
        2,
        &[kill_then_restart_later],
    );
    let f = chaos::run(
        scenario("1a kill + delayed restart", schedule, duration, false),
        seed,
    )
    .await;
    assert_safe(&f);
    assert!(f.availability() >= 0.95, "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_1_kill_and_durable_restart() {
    let seed = chaos::seed() + 1;
    let duration = chaos::duration(Duration::from_secs(5));
    // appendfsync always: an immediate restart keeps every acknowledged key.
    let schedule = random_schedule(
        seed,
        duration,
        TTL * 2,
        0.05..0.3,
        2,
        &[kill_then_restart_later],
    );
    let f = chaos::run(
        scenario("1b kill + AOF restart", schedule, duration, true),
        seed,
    )
    .await;
    assert_safe(&f);
    assert!(f.availability() >= 0.95, "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_2_paused_masters() {
    let seed = chaos::seed() + 2;
    let duration = chaos::duration(Duration::from_secs(5));
    // Paused for 0.1–3 × ttl.
    let schedule = random_schedule(seed, duration, TTL * 3, 0.033..1.0, 2, &[pause_then_resume]);
    let f = chaos::run(
        scenario("2 pause 1-2 masters", schedule, duration, false),
        seed,
    )
    .await;
    assert_safe(&f);
    assert!(f.availability() >= 0.95, "{f}");
    // With two masters hung, no acquire waits longer than the per-node timeout, plus margin.
    assert!(
        f.acquire_max < NODE_TIMEOUT + Duration::from_millis(100),
        "{f}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_3_network_faults() {
    let seed = chaos::seed() + 3;
    let duration = chaos::duration(Duration::from_secs(5));
    let schedule = random_schedule(
        seed,
        duration,
        TTL * 2,
        0.2..0.9,
        2,
        &[black_hole, latency_spike, resets],
    );
    let f = chaos::run(
        scenario("3 latency/black-hole/reset", schedule, duration, false),
        seed,
    )
    .await;
    assert_safe(&f);
    assert!(f.availability() >= 0.95, "{f}");
}

/// Asymmetric partitions: client 0 cannot reach two masters, client 1 two others, client 2
/// reaches all; each still sees a majority, and no two may hold the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_3_asymmetric_client_partitions() {
    use rand::{RngExt, SeedableRng};
    let seed = chaos::seed() + 30;
    let duration = chaos::duration(Duration::from_secs(5));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut schedule = Vec::new();
    let mut at = TTL * 2;
    while at + TTL * 4 < duration {
        let mut nodes: Vec<usize> = (0..5).collect();
        for client in [0, 1] {
            for _ in 0..2 {
                let node = nodes.remove(rng.random_range(0..nodes.len()));
                schedule.push((
                    at,
                    Action::Partition {
                        client,
                        node,
                        fault: Fault::BlackHole,
                    },
                ));
                schedule.push((
                    at + TTL * 3,
                    Action::Partition {
                        client,
                        node,
                        fault: Fault::None,
                    },
                ));
            }
            nodes = (0..5).collect();
        }
        at += TTL * 4;
    }
    schedule.sort_by_key(|(t, _)| *t);
    let f = chaos::run(
        scenario("3b asymmetric partitions", schedule, duration, false),
        seed,
    )
    .await;
    assert_safe(&f);
}

/// The mixed nemesis of scenario 4 (and of the semaphore's scenario 7): every three ttls,
/// one or two nodes killed, paused, black-holed, slowed or reset, healed within the period.
fn mixed_schedule(seed: u64, duration: Duration) -> Vec<(Duration, Action)> {
    random_schedule(
        seed,
        duration,
        TTL * 3,
        0.4..0.95,
        2,
        &[
            kill_then_restart_later,
            pause_then_resume,
            black_hole,
            latency_spike,
            resets,
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_4_mixed_nemesis() {
    let seed = chaos::seed() + 4;
    let duration = chaos::duration(Duration::from_secs(6));
    let schedule = mixed_schedule(seed, duration);
    let f = chaos::run(scenario("4 mixed nemesis", schedule, duration, false), seed).await;
    assert_safe(&f);
    assert!(f.availability() >= 0.95, "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_6_quorum_loss_and_recovery() {
    let seed = chaos::seed() + 6;
    let s = Duration::from_secs(1);
    let schedule = vec![
        (s, Action::Kill(0)),
        (s, Action::Kill(2)),
        (s, Action::Kill(4)),
        (s * 3, Action::Restart(0)),
        (s * 3, Action::Restart(2)),
        (s * 3, Action::Restart(4)),
    ];
    let f = chaos::run(
        scenario("6 quorum loss, then heal", schedule, s * 5, false),
        seed,
    )
    .await;
    assert_safe(&f);
    assert!(
        f.no_quorum > 0,
        "acquisitions must fail as no quorum while 3 of 5 are down: {f}"
    );
    assert!(f.availability() >= 0.95, "{f}");
}

/// The semaphore under the mixed nemesis: four contenders, each its own client, on a
/// semaphore of two permits; never more than two holders at once, never two on one permit,
/// nothing left behind.
///
/// Mutation: the permit round keeping the engine's plain tally (grants of any permit added
/// up, as a per-master count would; `round.tally = tally` dropped in `permit::permit_round`):
/// run, fails with overlaps (holders beyond the permits). The checker's own mutation is at
/// `the_permit_checker_counts_violations_exactly`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_7_semaphore_under_the_mixed_nemesis() {
    let seed = chaos::seed() + 7;
    let duration = chaos::duration(Duration::from_secs(6));
    let schedule = mixed_schedule(seed, duration);
    let semaphore = Scenario {
        contenders: 4,
        permits: Some(2),
        ..scenario("7 semaphore of 2, mixed", schedule, duration, false)
    };
    let f = chaos::run(semaphore, seed).await;
    assert_safe(&f);
    // Availability is measured here, not asserted (92–97 % in runs on this machine): with two
    // masters of five down, a permit needs all three others to grant the *same* permit, and a
    // master that still holds a stale grant (a give-back queued behind a slow request) grants
    // another, so some rounds with a permit free end without a majority. The lock's scenarios
    // assert ≥ 95 %; the semaphore's safety is what this one is for.
}

/// A read-write lock under the mixed nemesis: four contenders, two writing and two reading, on
/// five masters while the seeded nemesis kills, pauses, black-holes, delays and resets them.
/// An overlap here is a write hold whose window meets any other hold's; readers must share
/// for real (at most one reader at a time would mean reads serialise).
///
/// Mutation: `hold_for_readers` not setting the readers' mark (a write granted beside live
/// shares): run, fails with writers beside readers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_10_read_write_lock_under_the_mixed_nemesis() {
    let seed = chaos::seed() + 10;
    let duration = chaos::duration(Duration::from_secs(6));
    let schedule = mixed_schedule(seed, duration);
    let read_write = Scenario {
        contenders: 4,
        read_write: true,
        ..scenario("10 read-write, mixed", schedule, duration, false)
    };
    let f = chaos::run(read_write, seed).await;
    assert_safe(&f);
    assert!(
        f.most_readers >= 2,
        "{}: readers never held together ({})",
        f.name,
        f.most_readers
    );
    // Else no overlap would prove nothing: writers starved by readers meet nobody.
    assert!(f.writes > 0, "{}: no write was ever held", f.name);
}

/// Sentinel-resolved voters under failovers: three standalone masters and two Sentinel
/// groups (a master, a replica, a sentinel each) as the five voters, while the groups are
/// failed over (forced, whatever the replica has so far) and a standalone master is killed and
/// restarted empty. The groups run as the deploy guide asks (`min-replicas-to-write 1`,
/// `min-replicas-max-lag 1`), and the clients' restart grace covers the ttl plus the time a
/// demoted master may still grant: a promoted master does not vote while a lock it may lack
/// can still be valid. The probe counts a group as holding a lock's key until its failover's
/// grace has passed (the promoted master votes for nobody before).
///
/// Found by this scenario under load: with a grace of only the ttl and no
/// `min-replicas-to-write`, one lock claimed validity that the masters the sentinels named no
/// longer gave it (granted by the demoted master after the switch).
///
/// Mutation: `promoted` ignored and no `run_id` change seen (the grace computed from the
/// uptime: `grace_starts` returning `now − uptime` always): not run here, see the integration
/// test `sentinel::a_failover_counts_as_a_restart_of_the_voters_vote`; this scenario checks
/// exclusion and that nothing is left behind through real failovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_8_sentinel_voters_failing_over() {
    let seed = chaos::seed() + 8;
    let duration = chaos::duration(Duration::from_secs(9));
    let s = Duration::from_secs(1);
    let schedule = vec![
        (s, Action::Failover(0)),
        (s * 2, Action::Failover(1)),
        (s * 3, Action::Kill(0)),
        (s * 4, Action::Restart(0)),
        (s * 5, Action::Failover(0)),
        (s * 6, Action::Failover(1)),
    ];
    let sentinels = Scenario {
        sentinel_groups: 2,
        // Above the ttl plus the second a demoted master may still grant before
        // `min-replicas-max-lag` stops it, and a margin for the replica's ack period.
        restart_grace: Some(TTL + Duration::from_millis(2500)),
        ..scenario("8 Sentinel voters failing over", schedule, duration, false)
    };
    let f = chaos::run(sentinels, seed).await;
    assert_safe(&f);
    let failovers = f
        .fault_log
        .iter()
        .filter(|line| line.contains("failover started"))
        .count();
    assert!(
        failovers >= 2,
        "the sentinels refused the failovers: {:#?}",
        f.fault_log
    );
    // Availability is printed, not asserted: each failover costs its voter a restart grace.
}

/// Redis Cluster voters under faults and a resharding: three standalone masters and two
/// clusters (three masters each) as the five voters. The master serving the lock's slot in
/// one cluster is killed and restarted empty within the ttl (its cluster config kept), then
/// paused; the lock's slot in the other is moved to another master and back, keys and all,
/// while the contenders run (`ASK` during the migration, `MOVED` after). The clients' restart
/// grace covers the ttl: the restarted shard master does not vote while a lock it lost may
/// still be valid, and the probe counts that cluster as holding the key until then.
///
/// This scenario checks exclusion, validity and "nothing left behind" through real shard
/// restarts and slot moves. The per-shard grace itself is checked, with its mutation, by
/// `cluster_voters::a_restarted_shard_master_does_not_vote_within_the_grace` (here the grace
/// off went unnoticed in a run: the restarted master rarely decides a round, and it answers
/// `CLUSTERDOWN` until it rejoins); following `MOVED`/`ASK` and retrying `TRYAGAIN`, by the
/// other tests of `cluster_voters`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_9_cluster_voters_restarted_and_resharded() {
    let seed = chaos::seed() + 9;
    let duration = chaos::duration(Duration::from_secs(8));
    let ms = Duration::from_millis;
    let schedule = vec![
        (ms(1000), Action::Reshard(1)),
        (ms(1500), Action::ShardKill(0)),
        (ms(1800), Action::ShardRestart(0)),
        (ms(3000), Action::Reshard(1)),
        (ms(3500), Action::Kill(0)),
        (ms(3700), Action::Restart(0)),
        (ms(5000), Action::ShardPause(1)),
        (ms(5300), Action::ShardResume(1)),
        (ms(6000), Action::Reshard(0)),
        (ms(6500), Action::Reshard(1)),
    ];
    let clusters = Scenario {
        redis_clusters: 2,
        restart_grace: Some(TTL + Duration::from_millis(200)),
        ..scenario(
            "9 Cluster voters, restarts + resharding",
            schedule,
            duration,
            false,
        )
    };
    let f = chaos::run(clusters, seed).await;
    assert_safe(&f);
    let moves = f
        .fault_log
        .iter()
        .filter(|line| line.contains("slot moved"))
        .count();
    assert_eq!(
        moves, 4,
        "the resharding did not happen: {:#?}",
        f.fault_log
    );
    // Availability is printed, not asserted: a restarted shard master costs its cluster's
    // vote for a grace.
}

/// A hold recorded by hand, for the negative controls.
async fn hold(rl: &RedLock) -> (redquorum::Lock, Instant) {
    let lock = rl
        .try_acquire(chaos::RESOURCE, Duration::from_secs(10))
        .await
        .expect("acquire");
    (lock, Instant::now())
}

fn record(
    holder: usize,
    lock: &redquorum::Lock,
    acquired: Instant,
    release_started: Instant,
) -> Hold {
    Hold {
        holder,
        acquired,
        valid_until: lock.valid_until(),
        release_started,
    }
}

/// Negative control (a): a master of the holder's quorum restarts empty at once (breaking the
/// delayed-restart assumption) while another client reaches it. The checker must see it.
#[tokio::test]
async fn negative_control_a_empty_restart_without_delay_is_detected() {
    let mut cluster = redquorum_testkit::Cluster::start(5);
    let a = RedLock::builder(cluster.urls())
        .per_node_timeout(Duration::from_millis(250))
        .build()
        .expect("config");
    let b = RedLock::builder(cluster.urls())
        .per_node_timeout(Duration::from_millis(250))
        .build()
        .expect("config");
    let (lock_a, acquired_a) = hold(&a).await;
    for i in [0, 1, 2] {
        cluster.restart(i);
    }
    b.connect_all().await.expect("connected");
    let (lock_b, acquired_b) = hold(&b).await;
    let now = Instant::now();
    let holds = [
        record(0, &lock_a, acquired_a, now),
        record(1, &lock_b, acquired_b, now),
    ];
    let found = overlaps(&holds);
    println!("negative control (a) empty restart without delay: overlaps {found}");
    assert!(
        found >= 1,
        "the checker missed a violation it was set up to see"
    );
    drop((lock_a, lock_b));
}

/// Negative control (b): the holder's key expires early on one master of its quorum (a server
/// clock jump) while another client acquires through that master. The checker must see it.
#[tokio::test]
async fn negative_control_b_premature_expiry_is_detected() {
    let cluster = redquorum_testkit::Cluster::start(5);
    let mut proxies = Vec::new();
    for i in 0..5 {
        proxies.push(Proxy::start(cluster.server(i).port()).await);
    }
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let a = RedLock::builder(&urls)
        .per_node_timeout(Duration::from_millis(100))
        .build()
        .expect("config");
    let b = RedLock::builder(&urls)
        .per_node_timeout(Duration::from_millis(100))
        .build()
        .expect("config");
    a.connect_all().await.expect("connected");
    b.connect_all().await.expect("connected");
    // A's quorum is exactly masters 0, 1, 2: its connections to 3 and 4 are reset, so its SETs
    // never reach them. (A black hole would only delay them: they would land when it heals.)
    for i in [3, 4] {
        proxies[i].set(Fault::Reset);
    }
    let (lock_a, acquired_a) = hold(&a).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    for i in [3, 4] {
        proxies[i].set(Fault::None);
    }
    // Premature expiry on master 0, then B reaches 0, 3 and 4.
    let _: i64 = cluster.run(
        0,
        redis::cmd("DEL").arg(format!("redquorum:{{{}}}", chaos::RESOURCE)),
    );
    // The optimistic-validity probe sees it too: A's deadline is now past the moment a majority
    // held its key.
    let ports: Vec<u16> = (0..5).map(|i| cluster.server(i).port()).collect();
    let majority_until = chaos::majority_holds_until(&ports, lock_a.token().expose()).await;
    assert!(
        lock_a.valid_until() > majority_until,
        "the optimistic-validity probe missed it"
    );
    let deadline = Instant::now() + Duration::from_secs(3);
    let (lock_b, acquired_b) = loop {
        match b
            .try_acquire(chaos::RESOURCE, Duration::from_secs(10))
            .await
        {
            Ok(lock) => break (lock, Instant::now()),
            Err(e) => assert!(Instant::now() < deadline, "B never got in: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let now = Instant::now();
    let holds = [
        record(0, &lock_a, acquired_a, now),
        record(1, &lock_b, acquired_b, now),
    ];
    let found = overlaps(&holds);
    println!("negative control (b) premature expiry on one master: overlaps {found}");
    assert!(
        found >= 1,
        "the checker missed a violation it was set up to see"
    );
    drop((lock_a, lock_b));
}

#[test]
fn the_checker_counts_overlaps_exactly() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let h = |holder, from: u64, to: u64| Hold {
        holder,
        acquired: t0 + ms(from),
        valid_until: t0 + ms(to),
        release_started: t0 + ms(to + 100),
    };
    assert_eq!(
        overlaps(&[h(0, 0, 10), h(1, 10, 20), h(2, 20, 30)]),
        0,
        "touching is not overlapping"
    );
    assert_eq!(overlaps(&[h(0, 0, 10), h(1, 9, 20)]), 1);
    assert_eq!(
        overlaps(&[h(0, 0, 100), h(1, 10, 20), h(2, 30, 40)]),
        2,
        "both overlap the long hold"
    );
    // The window ends at the release when it comes first.
    let released_early = Hold {
        holder: 0,
        acquired: t0,
        valid_until: t0 + ms(100),
        release_started: t0 + ms(5),
    };
    assert_eq!(overlaps(&[released_early, h(1, 10, 20)]), 0);
}

/// The semaphore checker: a third hold while two are valid, or a second hold of one permit,
/// is a violation; holds that only touch are not. Mutation: `>` for `>=` in
/// `permit_violations` (a third holder allowed): run, fails.
#[test]
fn the_permit_checker_counts_violations_exactly() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let h = |index, from: u64, to: u64| PermitHold {
        index,
        hold: Hold {
            holder: 0,
            acquired: t0 + ms(from),
            valid_until: t0 + ms(to),
            release_started: t0 + ms(to + 100),
        },
    };
    assert_eq!(
        permit_violations(&[h(0, 0, 10), h(1, 5, 20), h(0, 10, 30)], 2),
        0
    );
    assert_eq!(
        permit_violations(&[h(0, 0, 10), h(1, 5, 20), h(2, 9, 30)], 2),
        1
    );
    assert_eq!(permit_violations(&[h(1, 0, 10), h(1, 5, 20)], 2), 1);
    assert_eq!(permit_violations(&[h(0, 0, 10), h(0, 10, 20)], 1), 0);
    assert_eq!(permit_violations(&[h(0, 0, 10), h(0, 9, 20)], 1), 1);
}

/// A contender's pause between two holds in scenario 5.
const BETWEEN_JOBS: Duration = Duration::from_millis(250);

/// Set in a child process: it is a contender, not a test run.
const CHILD_ENV: &str = "REDQUORUM_CHAOS_CONTENDER";

/// The host's monotonic clock (`CLOCK_MONOTONIC`), shared by every process on the machine.
fn monotonic() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("monotonic clock");
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

/// An `Instant` of this process on the shared monotonic clock.
fn to_monotonic(at: Instant) -> Duration {
    let (now_i, now_m) = (Instant::now(), monotonic());
    if at <= now_i {
        now_m - (now_i - at)
    } else {
        now_m + (at - now_i)
    }
}

/// A time on the shared monotonic clock as an `Instant` of this process.
fn from_monotonic(at: Duration) -> Instant {
    let (now_i, now_m) = (Instant::now(), monotonic());
    if at <= now_m {
        now_i - (now_m - at)
    } else {
        now_i + (at - now_m)
    }
}

/// Entry point of a contender process (this test binary, re-executed with [`CHILD_ENV`] set).
/// Without the variable it returns at once: it is not a test of its own.
#[tokio::test]
async fn contender_process_entry() {
    let Ok(config) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (urls, secs) = config.split_once('|').expect("urls|seconds");
    let urls: Vec<&str> = urls.split(',').collect();
    let until = Instant::now() + Duration::from_secs(secs.parse().expect("seconds"));
    let rl = RedLock::builder(&urls)
        .per_node_timeout(NODE_TIMEOUT)
        .build()
        .expect("config");
    while Instant::now() < until {
        let Ok(lock) = rl
            .acquire_within(chaos::RESOURCE, TTL, Duration::from_secs(1))
            .await
        else {
            continue;
        };
        let acquired = Instant::now();
        println!("ACQUIRED");
        tokio::time::sleep(Duration::from_millis(30).min(lock.remaining())).await;
        let valid_until = lock.valid_until();
        let release_started = Instant::now();
        let released = lock.release().await;
        println!(
            "HOLD {} {} {} {}",
            to_monotonic(acquired).as_nanos(),
            to_monotonic(valid_until).as_nanos(),
            to_monotonic(release_started).as_nanos(),
            released.map_or_else(
                |e| if e.is_expired() { "expired" } else { "failed" },
                |_| "released"
            ),
        );
        // Between jobs, longer than the retry delays (50–200 ms), so that the others get their
        // turn: retry-with-jitter waiting is not fair, and fairness is not what this tests.
        tokio::time::sleep(BETWEEN_JOBS).await;
    }
    // A release returns at the majority: let its other deletes finish before the process exits.
    rl.settle(Duration::from_secs(2)).await;
}

/// Scenario 5: contenders in separate OS processes (and one in this process); one contender
/// process is SIGSTOPped while it holds the lock, for three ttls. It must not count as a
/// violation as long as it stops acting at `valid_until` (its window ends there), and nobody
/// else may hold the lock before that. It releases late, and is told so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_5_a_contender_process_paused_while_holding() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    use std::sync::{Arc, Mutex};

    let cluster = redquorum_testkit::Cluster::start(5);
    let secs = chaos::duration(Duration::from_secs(4)).as_secs().max(2);
    let config = format!("{}|{secs}", cluster.urls().join(","));
    let holds = Arc::new(Mutex::new(Vec::<Hold>::new()));
    let late_releases = Arc::new(Mutex::new(0u32));
    let mut children = Vec::new();
    let mut readers = Vec::new();
    for child in 0..2usize {
        let mut process = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "contender_process_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &config)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn contender process");
        let pid = nix::unistd::Pid::from_raw(process.id() as i32);
        let stdout = process.stdout.take().expect("stdout");
        let (holds, late) = (holds.clone(), late_releases.clone());
        readers.push(std::thread::spawn(move || {
            let mut acquisitions = 0;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if line == "ACQUIRED" {
                    acquisitions += 1;
                    // The first process is frozen while it holds its second lock.
                    if child == 0 && acquisitions == 2 {
                        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP)
                            .expect("stop");
                        std::thread::sleep(TTL * 3);
                        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT)
                            .expect("continue");
                    }
                } else if let Some(rest) = line.strip_prefix("HOLD ") {
                    let f: Vec<&str> = rest.split(' ').collect();
                    let at = |i: usize| {
                        from_monotonic(Duration::from_nanos(f[i].parse::<u64>().expect("ns")))
                    };
                    holds.lock().expect("holds").push(Hold {
                        holder: child,
                        acquired: at(0),
                        valid_until: at(1),
                        release_started: at(2),
                    });
                    if f[3] == "expired" {
                        *late.lock().expect("late") += 1;
                    }
                }
            }
        }));
        children.push(process);
    }
    // One contender in this process as well.
    let rl = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .build()
        .expect("config");
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        if let Ok(lock) = rl
            .acquire_within(chaos::RESOURCE, TTL, Duration::from_secs(1))
            .await
        {
            let acquired = Instant::now();
            tokio::time::sleep(Duration::from_millis(30)).await;
            let hold = Hold {
                holder: 9,
                acquired,
                valid_until: lock.valid_until(),
                release_started: Instant::now(),
            };
            let _ = lock.release().await;
            holds.lock().expect("holds").push(hold);
            tokio::time::sleep(BETWEEN_JOBS).await;
        }
    }
    for mut c in children {
        assert!(
            c.wait().expect("contender process").success(),
            "a contender process failed"
        );
    }
    for r in readers {
        r.join().expect("reader");
    }
    let holds = holds.lock().expect("holds").clone();
    let late = *late_releases.lock().expect("late");
    let found = overlaps(&holds);
    let per = |h: usize| holds.iter().filter(|x| x.holder == h).count();
    println!(
        "5 paused contender process | holds: process A {}, process B {}, in-process {} | overlaps {found} | releases reported expired {late}",
        per(0),
        per(1),
        per(9)
    );
    assert_eq!(found, 0, "overlapping holds");
    assert!(
        late >= 1,
        "the paused holder must be told its release came too late"
    );
    assert!(
        per(0) >= 3 && per(1) >= 1 && per(9) >= 1,
        "every contender held the lock"
    );
    tokio::time::sleep(TTL).await;
    assert!(rl.settle(std::time::Duration::from_secs(5)).await);
    cluster.assert_no_keys_under(chaos::PREFIX);
}
