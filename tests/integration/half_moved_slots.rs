//! Clean-ups on a Cluster voter whose slot is half moved. While a slot migrates, a script
//! naming keys on both sides (some still on the master the slot leaves, some already on the
//! one it goes to, or nowhere) is refused with `TRYAGAIN`, and stays refused until the whole
//! slot has moved. Every request that deletes or leaves something is then sent again key by
//! key (`request::InParts`), each key routed on its own, so nothing is left behind until its
//! ttl. Each test checks the cluster right after the operation (and the background work it
//! left) has finished, with ttls of 10 s or more still running.
//!
//! One cluster voter of three masters beside two standalone masters: a majority needs two of
//! the three voters, so the standalone masters decide and the cluster voter's answer only
//! decides what is left on it.

use std::time::Duration;

use redquorum::{RedLock, RetryPolicy};
use redquorum_testkit::{Cluster, RedisCluster};

use crate::{PREFIX, eventually, lock_key, settled};

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
/// What another owner's key holds.
const FOREIGN: &[u8] = b"another-owner";

/// A cluster of three masters and two standalone masters, and a client over them with the
/// cluster voter first.
fn voters(per_node_timeout: Duration) -> (RedisCluster, Cluster, RedLock) {
    let cluster = RedisCluster::start(3);
    let standalone = Cluster::start(2);
    let mut urls = vec![cluster.url()];
    urls.extend(standalone.urls());
    let rl = crate::client_of(urls, per_node_timeout);
    (cluster, standalone, rl)
}

/// Every key of ours on `servers`, as `server: key`, sorted.
fn our_keys(servers: &Cluster) -> Vec<String> {
    let mut keys: Vec<String> = servers
        .keys()
        .into_iter()
        .filter(|(_, key)| key.starts_with(PREFIX))
        .map(|(i, key)| format!("{i}: {}", key.escape_ascii()))
        .collect();
    keys.sort();
    keys
}

/// `key` on each of `servers`, as [`our_keys`] lists it.
fn only(key: &[u8], servers: impl IntoIterator<Item = usize>) -> Vec<String> {
    servers
        .into_iter()
        .map(|i| format!("{i}: {}", key.escape_ascii()))
        .collect()
}

/// How many times server `i` of `servers` ran `command` since its statistics were reset.
fn calls(servers: &Cluster, i: usize, command: &str) -> u64 {
    let stats: String = servers.run(i, redis::cmd("INFO").arg("commandstats"));
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a count"))
}

/// The slot of `key`, the master it is on, and another to move it to.
fn migration_of(cluster: &RedisCluster, key: &[u8]) -> (u16, usize, usize) {
    let from = cluster.owner_of(key);
    (cluster.slot_of(key), from, (from + 1) % 3)
}

/// A release while the slot starts to move, its lock key still on the master the slot leaves
/// and no queue: that master has one of the release's keys and not the others, and refuses it
/// with `TRYAGAIN` (Redis 7.0 on; older servers answered `ASK`, and the importing master
/// refused it). The lock key alone is then released where it is.
///
/// Mutation (run, caught): `InParts::Never` for the release: refused ten times over 200 ms, and
/// the key stays on the leaving master for its ttl. Not caught here, as the refusal comes from
/// the leaving master: a one-key part sent where the whole was last sent (the code before
/// this test), which would be the importing master after `ASKING` on servers before 7.0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_finds_its_key_on_the_master_the_slot_leaves() {
    let (cluster, standalone, rl) = voters(NODE_TIMEOUT);
    let key = lock_key(b"staying");
    let lock = rl.try_acquire("staying", TTL).await.expect("acquired");
    settled(&rl).await;
    let (slot, from, to) = migration_of(&cluster, &key);
    assert_eq!(our_keys(cluster.servers()), only(&key, [from]));

    cluster.begin_migration(slot, from, to);
    lock.release().await.expect("released");
    settled(&rl).await;
    assert_eq!(our_keys(cluster.servers()), Vec::<String>::new());
    assert_eq!(our_keys(&standalone), Vec::<String>::new());
}

/// A multi-resource lock released while one of its keys has moved and the other has not:
/// each master has one key of the set, so each refuses the set. Each key is then released on
/// its own master.
///
/// Mutation (run, caught): `InParts::Never` for `RELEASE_MANY`: refused ten times over 200 ms,
/// and both keys stay for their ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_released_key_by_key_across_a_half_moved_slot() {
    let (cluster, standalone, rl) = voters(NODE_TIMEOUT);
    let names = ["{order}:stock", "{order}:invoice"];
    let lock = rl.try_acquire_many(&names, TTL).await.expect("acquired");
    settled(&rl).await;
    let stock = lock_key(names[0].as_bytes());
    let (slot, from, to) = migration_of(&cluster, &stock);

    cluster.begin_migration(slot, from, to);
    cluster.move_key(&stock, from, to);
    let invoice = lock_key(names[1].as_bytes());
    let mut split = [only(&stock, [to]), only(&invoice, [from])].concat();
    split.sort();
    assert_eq!(our_keys(cluster.servers()), split, "half moved");

    lock.release().await.expect("released");
    settled(&rl).await;
    assert_eq!(our_keys(cluster.servers()), Vec::<String>::new());
    assert_eq!(our_keys(&standalone), Vec::<String>::new());
}

/// A waiting acquire on a slot that started to move before it came: its first round is
/// granted on the importing master (after `ASK`) and refused by the two standalone masters,
/// held by another owner. Its clean-up, which also queues the waiter, names the lock key
/// (there) and the queue's keys (nowhere): refused. The grant alone is undone instead, and the
/// waiter is not queued on the cluster voter; it waits on the standalone masters, gives up,
/// and leaves their queues.
///
/// Mutation (run, caught): `InParts::Never` for `UNDO_AND_QUEUE`: our key stays on the
/// importing master for its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_round_that_queues_is_undone_on_a_half_moved_slot() {
    let (cluster, standalone, rl) = voters(NODE_TIMEOUT);
    let key = lock_key(b"queued");
    let (slot, from, to) = migration_of(&cluster, &key);
    for i in 0..2 {
        standalone.set(i, &key, FOREIGN, TTL);
    }
    cluster.begin_migration(slot, from, to);
    let _: () = cluster
        .servers()
        .run(to, redis::cmd("CONFIG").arg("RESETSTAT"));

    let policy = RetryPolicy::default().max_wait(Some(Duration::from_millis(300)));
    let refused = rl
        .acquire_with("queued", TTL, &policy)
        .await
        .expect_err("held on both standalone masters");
    assert!(refused.is_conflict(), "{refused}");
    assert_eq!(
        calls(cluster.servers(), to, "set"),
        1,
        "the first round granted on the importing master"
    );
    settled(&rl).await;
    assert_eq!(our_keys(cluster.servers()), Vec::<String>::new());
    assert_eq!(our_keys(&standalone), only(&key, [0, 1]), "queues left");
}

/// A waiter queued on the cluster voter gives up while the slot is half moved: the held lock
/// key has moved to the importing master, the queue's keys are still on the leaving one. Its
/// leaving round names both: refused. It then leaves the queue with one command per key.
///
/// Mutation (run, caught): `InParts::Never` for `DEQUEUE`: its place and liveness stay in the
/// queue's keys on the leaving master (live for 11 s here), where a release would hand the
/// lock to a waiter that no longer waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_leaves_a_queue_on_a_half_moved_slot() {
    let (cluster, standalone, rl) = voters(NODE_TIMEOUT);
    let key = lock_key(b"leaving");
    let (slot, from, to) = migration_of(&cluster, &key);
    for i in 0..2 {
        standalone.set(i, &key, FOREIGN, TTL * 3);
    }
    cluster.servers().set(from, &key, FOREIGN, TTL * 3);

    // Rounds 5 s apart: the waiter's liveness (twice a round and its wait) outlasts the test.
    let policy = RetryPolicy::default()
        .delay(Duration::from_secs(5))
        .max_wait(Some(Duration::from_secs(3)));
    let waiter = {
        let rl = rl.clone();
        tokio::spawn(async move { rl.acquire_with("leaving", TTL, &policy).await })
    };
    let mut queue = key.clone();
    queue.extend_from_slice(b":queue");
    assert!(
        eventually(Duration::from_secs(2), || our_keys(cluster.servers())
            .contains(&only(&queue, [from])[0]))
        .await,
        "queued on the cluster voter: {:?}",
        our_keys(cluster.servers())
    );

    cluster.begin_migration(slot, from, to);
    cluster.move_key(&key, from, to);
    assert!(
        !waiter.is_finished(),
        "the waiter gave up before the slot was half moved"
    );
    let refused = waiter.await.expect("joined").expect_err("held everywhere");
    assert!(refused.is_conflict(), "{refused}");
    settled(&rl).await;
    assert_eq!(our_keys(cluster.servers()), only(&key, [to]), "queue left");
    assert_eq!(our_keys(&standalone), only(&key, [0, 1]), "queues left");
}

/// A permit round that fails while its grant moves: the cluster voter granted a permit, and
/// while the round waits for a paused standalone master (the other one has no free permit),
/// the slot starts to move and the granted permit's key moves. The give-back names every
/// permit's key: the granted one is on the importing master, the other nowhere, so it is
/// refused. Each key is given back on its own instead; the semaphore's record of its number
/// of permits is then left to its ttl (DESIGN.md §7a).
///
/// Mutation (run, caught): `InParts::Never` for `GIVE_BACK_PERMITS`: the granted permit stays
/// on the importing master for its ttl, one of two permits taken by nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_permit_round_gives_back_across_a_half_moved_slot() {
    // Long enough for the slot to start moving while the round waits for the paused master.
    let (cluster, mut standalone, rl) = voters(Duration::from_secs(2));
    let semaphore = rl.semaphore("pool", 2).expect("a semaphore");
    let permits: Vec<Vec<u8>> = (0..2)
        .map(|i| [lock_key(b"pool"), format!(":permit:{i}").into_bytes()].concat())
        .collect();
    for permit in &permits {
        standalone.set(0, permit, FOREIGN, TTL);
    }
    standalone.pause(1);

    let round = tokio::spawn(async move { semaphore.try_acquire(TTL).await });
    let granted = || {
        cluster
            .servers()
            .keys()
            .into_iter()
            .find(|(_, key)| permits.contains(key))
    };
    assert!(
        eventually(Duration::from_secs(1), || granted().is_some()).await,
        "a permit granted by the cluster voter"
    );
    let (from, permit) = granted().expect("granted");
    let slot = cluster.slot_of(&permit);
    let to = (from + 1) % 3;
    cluster.begin_migration(slot, from, to);
    cluster.move_key(&permit, from, to);
    assert!(
        !round.is_finished(),
        "the round ended before the slot was half moved"
    );
    let failed = round
        .await
        .expect("joined")
        .expect_err("one grant of three");
    standalone.resume(1);
    settled(&rl).await;
    assert!(!failed.is_config(), "{failed}");
    // The semaphore's record of its number of permits cannot be judged key by key (whether a
    // permit is still held may be on the other master): it stays where the grant wrote it,
    // until the grant's ttl, and nothing else does.
    let record = [lock_key(b"pool"), b":permits".to_vec()].concat();
    assert_eq!(our_keys(cluster.servers()), only(&record, [from]));
    let left = cluster.servers().pttl(from, &record);
    assert!(left > 0 && left <= TTL.as_millis() as i64, "{left}");
    let mut foreign: Vec<String> = permits.iter().flat_map(|p| only(p, [0])).collect();
    foreign.sort();
    assert_eq!(our_keys(&standalone), foreign);
}
