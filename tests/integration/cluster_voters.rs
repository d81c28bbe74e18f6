//! Redis Cluster voters: a voter named by seed nodes of a cluster, each request sent to the
//! master of its key's hash slot, mixed with standalone masters; a slot that moves (`ASK`
//! while it migrates, `MOVED` once it has) is followed; one server is one vote across voters.
//!
//! Each cluster is three cluster-enabled masters without replicas, formed by the test on
//! loopback (`redquorum_testkit::RedisCluster`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redquorum::{ConfigError, Error, NodeOutcome, RedLock, Report};
use redquorum_testkit::{Cluster, RedisCluster};

use crate::{PREFIX, eventually, lock_key, settled};

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(500);

fn client(urls: Vec<String>) -> RedLock {
    crate::client_of(urls, NODE_TIMEOUT)
}

fn line(report: &Report, node: usize) -> (&NodeOutcome, Option<String>) {
    report
        .iter()
        .find(|line| line.node().index() == node)
        .map(|line| (line.outcome(), line.server().map(str::to_owned)))
        .expect("a line per node")
}

/// A client over `cluster` (node 0) and the `standalone` masters with a restart `grace`, made
/// once every server has been up for longer than the grace (so none is quarantined at first
/// sight).
async fn graced_client(cluster: &RedisCluster, standalone: &Cluster, grace: Duration) -> RedLock {
    tokio::time::sleep(grace + Duration::from_millis(200)).await;
    let mut urls = vec![cluster.url()];
    urls.extend(standalone.urls());
    RedLock::builder(urls)
        .per_node_timeout(NODE_TIMEOUT)
        .restart_grace(grace)
        .build()
        .expect("valid configuration")
}

/// Tries `resource` every 50 ms until half a second before `started + grace`: panics if it is
/// granted (node 0, the cluster voter, must not vote before its grace has passed, and its vote
/// is needed); counts the rounds where node 0 refused as quarantined.
async fn refused_within(
    rl: &RedLock,
    resource: &str,
    started: std::time::Instant,
    grace: Duration,
    event: &str,
) -> usize {
    let mut refused = 0;
    while started.elapsed() < grace - Duration::from_millis(500) {
        match rl.try_acquire(resource, TTL).await {
            Ok(lock) => panic!(
                "granted {:?} after {event}, within the grace: {}",
                started.elapsed(),
                lock.report()
            ),
            Err(err) => {
                let report = err.report().expect("a round's report");
                if matches!(
                    line(report, 0).0,
                    NodeOutcome::Failed(
                        redquorum::NodeError::RecentlyRestarted { .. }
                            | redquorum::NodeError::NotMaster
                    )
                ) {
                    refused += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    refused
}

/// Tries `resource` every 100 ms until granted, or `give_up` has passed.
async fn granted_by(
    rl: &RedLock,
    resource: &str,
    give_up: std::time::Instant,
) -> Option<redquorum::Lock> {
    while std::time::Instant::now() < give_up {
        match rl.try_acquire(resource, TTL).await {
            Ok(lock) => return Some(lock),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    None
}

fn address(cluster: &RedisCluster, i: usize) -> String {
    format!("127.0.0.1:{}", cluster.servers().server(i).port())
}

/// Which servers of `cluster` hold `key`.
fn holders(cluster: &RedisCluster, key: &[u8]) -> Vec<usize> {
    // Listed, not read: a master answers `MOVED` to a read of another slot's key.
    let mut found: Vec<usize> = cluster
        .servers()
        .keys()
        .into_iter()
        .filter(|(_, k)| k == key)
        .map(|(i, _)| i)
        .collect();
    found.sort_unstable();
    found
}

/// Three standalone masters and two clusters as five voters. Each of a dozen resources lands
/// on its slot's master in each cluster (and nowhere else in it), every voter grants (the
/// cluster voters' lines name the master that served), a second client is refused, and the
/// releases leave nothing on any of the nine servers. A multi-resource lock must keep to one
/// slot: refused with a typed error before any I/O otherwise, granted with a common hash tag.
///
/// Mutation (run, caught): requests sent to slot 0's master whatever their key
/// (`Shards::connection` asking `owner(0)`) with redirections not followed (`Node::redirect`
/// answering `None`): the keys never reach their slots' masters. Either change alone is
/// covered by the other (a `MOVED` is followed; a right route needs no redirection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_voters_mix_with_standalone_masters() {
    let standalone = Cluster::start(3);
    let a = RedisCluster::start(3);
    let b = RedisCluster::start(3);
    let mut urls = standalone.urls();
    urls.extend([a.url(), b.url()]);
    let rl = client(urls.clone());
    let connected = rl.connect_all().await.expect("every voter connects");

    assert_eq!(connected.successes(), 5, "{connected}");
    let names: Vec<String> = connected.iter().map(|l| l.node().to_string()).collect();
    assert!(
        names[3].starts_with("node 3 (cluster 127.0.0.1:") && names[4].contains("cluster"),
        "{names:?}"
    );

    let other = client(urls.clone());
    let mut shards_used = std::collections::BTreeSet::new();
    for n in 0..12 {
        let resource = format!("order:{n}");
        let key = lock_key(resource.as_bytes());
        let lock = rl.try_acquire(&resource, TTL).await.expect("acquired");
        for (node, cluster) in [(3, &a), (4, &b)] {
            let owner = cluster.owner_of(&key);
            shards_used.insert((node, owner));
            // The round may be decided before a cluster's answer: its request lands anyway.
            assert!(
                eventually(Duration::from_secs(3), || holders(cluster, &key) == [owner]).await,
                "{resource} not on its slot's master {owner} alone: {:?}",
                holders(cluster, &key)
            );
            assert_eq!(line(lock.report(), node).1, Some(address(cluster, owner)));
        }
        let refused = other
            .try_acquire(&resource, TTL)
            .await
            .expect_err("held by the first client");
        assert!(refused.is_conflict(), "{refused}");
        lock.release().await.expect("released");
    }
    assert!(
        shards_used.len() >= 5,
        "a dozen resources spread over the shards: {shards_used:?}"
    );

    // One slot per multi-resource lock on a cluster.
    let (x, y) = ("stock:berlin", "stock:lyon");
    assert_ne!(
        a.slot_of(&lock_key(x.as_bytes())),
        a.slot_of(&lock_key(y.as_bytes()))
    );
    let err = rl
        .try_acquire_many(&[x, y], TTL)
        .await
        .expect_err("two slots");
    assert!(
        matches!(err, Error::Config(ConfigError::CrossSlot { .. })),
        "{err}"
    );
    let both = rl
        .try_acquire_many(&["{order:42}:stock", "{order:42}:invoice"], TTL)
        .await
        .expect("one hash tag, one slot");
    let tagged = lock_key(b"{order:42}:stock");
    for cluster in [&a, &b] {
        let owner = cluster.owner_of(&tagged);
        assert!(
            eventually(Duration::from_secs(3), || cluster.servers().keys().len()
                == 2)
            .await,
            "both keys on the slot's master {owner}: {:?}",
            cluster.servers().keys()
        );
    }
    both.release().await.expect("released");

    // The shared key layout (no hash tag: the key other clients use) works on clusters too,
    // inspection included. Mutation (found by review; run, caught): inspecting with the
    // tagged fence and leader keys beside the untagged lock key: `CROSSSLOT` on both
    // clusters, 3 of 5 reachable.
    let plain = RedLock::builder(urls.clone())
        .per_node_timeout(NODE_TIMEOUT)
        .key_prefix("redlock:")
        .key_layout(redquorum::KeyLayout::Shared)
        .build()
        .expect("valid configuration");
    let lock = plain.try_acquire("nightly", TTL).await.expect("acquired");
    let seen = plain.inspect("nightly").await.expect("inspected");
    assert_eq!(seen.reachable(), 5, "{seen:?}");
    lock.release().await.expect("released");
    settled(&plain).await;

    settled(&rl).await;
    settled(&other).await;
    standalone.assert_no_keys_under(PREFIX);
    a.servers().assert_no_keys_under(PREFIX);
    b.servers().assert_no_keys_under(PREFIX);
    for cluster in [&standalone, a.servers(), b.servers()] {
        assert!(cluster.keys().is_empty(), "{:?}", cluster.keys());
    }
}

/// A slot moves while locks come and go. While it migrates, the old master answers `ASK` for a
/// key it does not have, and the lock is taken on the importing master (`ASKING` sent with
/// it); once it has moved, the old master answers `MOVED`, and the release follows it and
/// deletes the key on the new master; the next acquire goes there directly.
///
/// Mutations (run, caught): `ASKING` left out (`encoded::query` ignoring `asking`): the
/// importing master redirects back with `MOVED`, and the lock never lands there.
/// Redirections not followed (`Node::redirect` answering `None`): the same. No fallback to the
/// lock key alone on `TRYAGAIN` (`InParts::Never` for the release): the release during the
/// migration leaves the key behind (found by review: a release is refused for the whole
/// migration, not for one batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moving_slot_is_followed_with_ask_then_moved() {
    let standalone = Cluster::start(2);
    let cluster = RedisCluster::start(3);
    let mut urls = standalone.urls();
    urls.push(cluster.url());
    let rl = client(urls);
    // Every shard master connected first: the lock's redirection to the importing master
    // must not wait for a first connection there (a connect and the scripts' loading, which
    // under a loaded CI run took longer than the per-node timeout, so the vote was lost).
    rl.connect_all().await.expect("connected");
    let resource = "migrating";
    let key = lock_key(resource.as_bytes());
    // The client learns the map before the slot starts moving.
    let first = rl.try_acquire(resource, TTL).await.expect("acquired");
    let from = cluster.owner_of(&key);
    first.release().await.expect("released");
    let to = (from + 1) % 3;
    let slot = cluster.slot_of(&key);

    cluster.begin_migration(slot, from, to);
    let lock = rl.try_acquire(resource, TTL).await.expect("acquired");
    assert!(
        eventually(Duration::from_secs(3), || holders(&cluster, &key) == [to]).await,
        "taken where the slot goes, {to}: {:?}",
        holders(&cluster, &key)
    );
    // Released while the slot still migrates: the release names the waiters' queue keys,
    // which the importing master does not have, so it refuses the whole set (`TRYAGAIN`) for
    // as long as the migration lasts; the lock key alone is released instead.
    lock.release().await.expect("released");
    settled(&rl).await;
    assert_eq!(
        holders(&cluster, &key),
        Vec::<usize>::new(),
        "released during the migration"
    );
    let lock = rl.try_acquire(resource, TTL).await.expect("acquired");
    assert!(
        eventually(Duration::from_secs(3), || holders(&cluster, &key) == [to]).await,
        "taken again where the slot goes"
    );

    cluster.finish_migration(slot, to);
    lock.release().await.expect("released");
    settled(&rl).await;
    assert_eq!(holders(&cluster, &key), Vec::<usize>::new(), "nothing left");

    let again = rl.try_acquire(resource, TTL).await.expect("acquired");
    assert_eq!(
        line(again.report(), 2).1,
        Some(address(&cluster, to)),
        "routed to the new master"
    );
    again.release().await.expect("released");
    settled(&rl).await;
    standalone.assert_no_keys_under(PREFIX);
    cluster.servers().assert_no_keys_under(PREFIX);
}

/// A resharding under load: two contenders take turns on eight resources through one
/// standalone master and two clusters (a majority needs a cluster's vote), while every slot
/// those resources live in moves to another master of each cluster, keys and all, and back.
/// Never two holders of one resource; every contender keeps going; nothing left behind.
///
/// Found by this test: a release that meets a slot whose keys are half moved is refused with
/// `TRYAGAIN` (a multi-key script). Mutation (run, caught): `TRY_AGAIN_RETRIES = 0`: keys of
/// released locks are left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resharding_during_a_run_keeps_one_holder() {
    let standalone = Cluster::start(1);
    let a = Arc::new(RedisCluster::start(3));
    let b = Arc::new(RedisCluster::start(3));
    let urls = vec![standalone.server(0).url(), a.url(), b.url()];
    let resources: Vec<String> = (0..8).map(|n| format!("shard-move:{n}")).collect();

    let holding: Arc<Vec<AtomicUsize>> =
        Arc::new((0..resources.len()).map(|_| AtomicUsize::new(0)).collect());
    let overlaps = Arc::new(AtomicUsize::new(0));
    let taken = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut contenders = Vec::new();
    for c in 0..2 {
        let rl = client(urls.clone());
        let (holding, overlaps, taken, stop, resources) = (
            holding.clone(),
            overlaps.clone(),
            taken.clone(),
            stop.clone(),
            resources.clone(),
        );
        contenders.push(tokio::spawn(async move {
            let mut mine = 0usize;
            let mut n = c;
            while !stop.load(Ordering::Relaxed) {
                n = (n + 1) % resources.len();
                if let Ok(lock) = rl.try_acquire(&resources[n], Duration::from_secs(5)).await {
                    if holding[n].fetch_add(1, Ordering::SeqCst) > 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    holding[n].fetch_sub(1, Ordering::SeqCst);
                    if let Err(err) = lock.release().await {
                        eprintln!("release: {err}");
                    }
                    mine += 1;
                    taken.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            settled(&rl).await;
            mine
        }));
    }

    // Every resource's slot, in each cluster, to another master and back, twice over; a
    // slot's keys move with it.
    let keys: Vec<Vec<u8>> = resources.iter().map(|r| lock_key(r.as_bytes())).collect();
    let mut moved = 0;
    for round in 0..2 {
        for cluster in [&a, &b] {
            for key in &keys {
                let before = taken.load(Ordering::SeqCst);
                let from = cluster.owner_of(key);
                let to = (from + 1 + round) % 3;
                let (cluster, slot) = (cluster.clone(), cluster.slot_of(key));
                tokio::task::spawn_blocking(move || cluster.move_slot(slot, from, to))
                    .await
                    .expect("slot moved");
                moved += 1;
                // Let the contenders meet the moved slot before the next one moves.
                assert!(
                    eventually(Duration::from_secs(10), || taken.load(Ordering::SeqCst)
                        > before + 2)
                    .await,
                    "the contenders stalled after {moved} slot moves"
                );
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut progress = Vec::new();
    for contender in contenders {
        progress.push(contender.await.expect("contender"));
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    assert!(
        progress.iter().all(|n| *n > 0),
        "every contender took locks: {progress:?}"
    );
    standalone.assert_no_keys_under(PREFIX);
    a.servers().assert_no_keys_under(PREFIX);
    b.servers().assert_no_keys_under(PREFIX);
}

/// One server, one vote across voter kinds: a cluster's master also listed as a standalone
/// voter, or one cluster listed twice under different seeds, is a typed error naming both
/// entries, found at connect by the servers' `run_id`s.
///
/// Mutation (run, caught): shard links not claiming their server's `run_id` (the claim in
/// `supervisor::supervise` skipped when `names_server`): both entries connect. Claims kept by
/// voter index alone (shards displacing each other's claims) is the unit test
/// `server_identity::each_master_of_a_cluster_voter_keeps_its_own_claim`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_is_one_vote_under_any_name() {
    let standalone = Cluster::start(1);
    let cluster = RedisCluster::start(3);
    let seeds = cluster.seeds();
    let aliased = vec![
        cluster.url(),
        standalone.server(0).url(),
        seeds[1].replace("127.0.0.1", "localhost"),
    ];
    let err = RedLock::new(aliased)
        .expect("the builder cannot tell")
        .connect()
        .await
        .expect_err("one server listed twice");
    match err {
        Error::Config(ConfigError::DuplicateNode { first, second }) => {
            assert_eq!(
                (first.index(), second.index()),
                (0, 2),
                "{first} / {second}"
            );
        }
        other => panic!("expected a duplicate, got {other}"),
    }
    let twice = vec![
        format!("redis+cluster://{}", address(&cluster, 0)),
        standalone.server(0).url(),
        format!("redis+cluster://{}", address(&cluster, 2)),
    ];
    let err = RedLock::new(twice)
        .expect("different seeds")
        .connect()
        .await
        .expect_err("one cluster listed twice");
    assert!(
        matches!(err, Error::Config(ConfigError::DuplicateNode { .. })),
        "{err}"
    );
}

/// Fencing tokens through cluster voters: the counter lives in the resource's slot, on that
/// slot's master, next to the lock, and every new holder's token is higher.
///
/// Mutation (run, caught): the fence counter put in another slot than the lock's
/// (`resource::fence_key` taking slot 0's tag for every resource): the fenced scripts fail with
/// `CROSSSLOT` on the cluster voters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_through_cluster_voters() {
    let standalone = Cluster::start(1);
    let a = RedisCluster::start(3);
    let b = RedisCluster::start(3);
    let rl = RedLock::builder([standalone.server(0).url(), a.url(), b.url()])
        .per_node_timeout(NODE_TIMEOUT)
        .fencing(true)
        .build()
        .expect("valid configuration");
    let mut last = 0;
    for _ in 0..4 {
        let lock = rl.try_acquire("fenced", TTL).await.expect("acquired");
        let token = lock.fencing_token().expect("a fenced client's token");
        assert!(token > last, "{token} after {last}");
        last = token;
        lock.release().await.expect("released");
    }
    settled(&rl).await;
}

/// The restart grace works per shard master: the master serving one resource's slot, killed
/// and started again empty, does not vote for that resource until the grace has passed, while
/// the cluster's other masters vote as before. The cluster's vote is needed (one of the two
/// standalone masters is down), so a shard voting inside its grace would grant the lock.
///
/// Mutation: the grace not checked on a cluster's connections (`Node::check_settled` answering
/// `Ok` for a Cluster voter): run, and caught, as no report ever shows the master quarantined.
/// A restarted cluster node also answers `CLUSTERDOWN` until it has rejoined (0.5 s up to its
/// node timeout), which hides the grant itself here: that delay is no substitute for a grace
/// that covers the ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_shard_master_does_not_vote_within_the_grace() {
    const GRACE: Duration = Duration::from_secs(2);
    let mut standalone = Cluster::start(2);
    let mut cluster = RedisCluster::start(3);
    let rl = graced_client(&cluster, &standalone, GRACE).await;
    rl.connect_all().await.expect("connected");
    let restarted = "on-the-restarted-master";
    let owner = cluster.owner_of(&lock_key(restarted.as_bytes()));
    let elsewhere = (0..100)
        .map(|n| format!("elsewhere:{n}"))
        .find(|r| cluster.owner_of(&lock_key(r.as_bytes())) != owner)
        .expect("a resource on another master");

    standalone.kill(1);
    cluster.servers_mut().restart(owner);
    let started = std::time::Instant::now();
    // Until the grace has passed, the restarted master refuses to vote for its slot's
    // resource (once the client has seen the restart; before, its connection is broken).
    let quarantined = refused_within(&rl, restarted, started, GRACE, "the restart").await;
    assert!(
        quarantined > 0,
        "the restarted master was never seen as such"
    );
    // The cluster's other masters vote meanwhile.
    let other = rl
        .try_acquire(&elsewhere, TTL)
        .await
        .expect("another master of the cluster votes");
    other.release().await.expect("released");
    // And the restarted one once the grace has passed (and it has rejoined its cluster: a
    // restarted cluster node answers CLUSTERDOWN for up to its node timeout).
    let lock = granted_by(&rl, restarted, started + Duration::from_secs(15))
        .await
        .expect("granted after the grace, once the master rejoined");
    assert!(started.elapsed() > GRACE, "granted within the grace");
    lock.release().await.expect("released");
    settled(&rl).await;
    cluster.servers().assert_no_keys_under(PREFIX);
}

/// A failover inside a cluster (a manual `CLUSTER FAILOVER` to the replica of the master that
/// serves a resource), then a failback to the old master: each time, the master that takes
/// the slot does not vote for the resource until the restart grace has passed. The promoted
/// replica is met for the first time; the failed-back master is one the client knew, with a
/// connection from its first term (or made while it was a replica), which must not vote.
///
/// Mutation (found by review; run, caught): `ServerLink::recheck` a no-op: after the failback,
/// the old master votes at once on its first-term connection ("granted 1.3 ms after the
/// failover to 0"), though it may lack locks the other master granted. The replica check in
/// `Ready::check_settled` removed alone: run, not caught here (the recheck when a server joins
/// the masters covers this schedule); it guards a map refresh that missed a failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_and_a_failback_inside_a_cluster_start_the_grace() {
    const GRACE: Duration = Duration::from_secs(2);
    let mut standalone = Cluster::start(2);
    let cluster = Arc::new(RedisCluster::start_with_replicas(3, 1));
    let rl = graced_client(&cluster, &standalone, GRACE).await;
    let resource = "failing-over";
    let key = lock_key(resource.as_bytes());
    let old = cluster.owner_of(&key);
    let replica = (0..6)
        .find(|i| cluster.role_of(*i) == (false, Some(old)))
        .expect("the master's replica");
    // The cluster's vote is needed from here on.
    standalone.kill(1);
    rl.try_acquire(resource, TTL)
        .await
        .expect("the cluster votes before the failover")
        .release()
        .await
        .expect("released");

    for (to, from) in [(replica, old), (old, replica)] {
        let moved = cluster.clone();
        tokio::task::spawn_blocking(move || moved.failover(to))
            .await
            .expect("failed over");
        assert_eq!(cluster.owner_of(&key), to, "the slot follows the failover");
        let started = std::time::Instant::now();
        let event = format!("the failover to {to} (from {from})");
        let refused = refused_within(&rl, resource, started, GRACE, &event).await;
        assert!(refused > 0, "master {to} was never quarantined");
        let lock = granted_by(&rl, resource, started + Duration::from_secs(10))
            .await
            .expect("granted once the grace has passed");
        lock.release().await.expect("released");
    }
    settled(&rl).await;
    cluster.servers().assert_no_keys_under(PREFIX);
}
