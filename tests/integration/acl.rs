//! The least-privilege ACL user given in the deploy guide is enough, and nothing less is.

use std::time::{Duration, Instant};

use redquorum::RedLock;

use crate::{PREFIX, eventually};
use redquorum_testkit::Cluster;

const TTL: Duration = Duration::from_secs(10);

/// The rule the deploy guide (`deploy/README.md`) gives operators, word for word (checked by
/// `deploy::the_deploy_docs_give_the_tested_acl_rule`).
pub(crate) const ACL_RULE: &str = "ACL SETUSER redquorum on >CHANGE-ME resetkeys ~redquorum:* resetchannels &redquorum:* -@all +eval +evalsha +script|load +set +get +mget +incr +hget +hmget +hset +hdel +hincrby +del +exists +time +zadd +zrange +zrem +zremrangebyscore +zscore +pexpire +pttl +publish +subscribe +unsubscribe +info";

fn set_user(cluster: &Cluster, rule: &str) {
    for i in 0..cluster.len() {
        let mut cmd = redis::Cmd::new();
        for word in rule.split_whitespace() {
            cmd.arg(word);
        }
        let _: () = cluster.run(i, &cmd);
    }
}

fn client_as_user(cluster: &Cluster) -> RedLock {
    let urls = cluster.urls_with("redquorum:CHANGE-ME");
    RedLock::builder(&urls)
        .per_node_timeout(Duration::from_millis(250))
        .build()
        .expect("config")
}

#[tokio::test]
async fn the_least_privilege_user_can_acquire_extend_and_release() {
    let cluster = Cluster::start(3);
    set_user(&cluster, ACL_RULE);
    let rl = client_as_user(&cluster);
    let mut lock = rl
        .try_acquire("orders:42", TTL)
        .await
        .expect("acquire as the ACL user");
    lock.extend(TTL).await.expect("extend as the ACL user");
    lock.release().await.expect("release as the ACL user");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
    // Other key names are out of its reach: a prefix outside ~redquorum:* is refused.
    let outside = RedLock::builder(cluster.urls_with("redquorum:CHANGE-ME"))
        .key_prefix("other:")
        .per_node_timeout(Duration::from_millis(250))
        .build()
        .expect("config");
    let err = outside
        .try_acquire("x", TTL)
        .await
        .expect_err("no key permission");
    assert!(err.is_no_quorum(), "{err}");
    assert!(
        err.to_string().to_lowercase().contains("no permission")
            || err.to_string().contains("NOPERM"),
        "{err}"
    );
    assert!(cluster.keys().is_empty());
}

/// Read-write locks under the least-privilege rule: a read and a write each acquire, extend
/// and release, and nothing is left.
///
/// Mutation: the rule without `+zremrangebyscore` (as the deploy guide's was before read-write
/// locks): every read and write fails as a refused vote.
#[tokio::test]
async fn the_least_privilege_user_can_read_and_write() {
    let cluster = Cluster::start(3);
    set_user(&cluster, ACL_RULE);
    let rl = client_as_user(&cluster);
    let catalog = rl.rw_lock("catalog").expect("rw");
    let mut read = catalog.try_read(TTL).await.expect("read as the ACL user");
    read.extend(TTL).await.expect("extend a read");
    read.release().await.expect("release a read");
    let mut write = catalog.try_write(TTL).await.expect("write as the ACL user");
    write.extend(TTL).await.expect("extend a write");
    write.release().await.expect("release a write");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// The extend script needs `PEXPIRE`: without it, a client that uses scripts only cannot
/// extend (a server's own `SET … IFEQ … PX` needs only `SET`, so the client's default renews
/// on Valkey masters under this rule).
#[tokio::test]
async fn a_rule_without_pexpire_cannot_extend() {
    let cluster = Cluster::start(3);
    set_user(&cluster, &ACL_RULE.replace(" +pexpire", ""));
    let rl = RedLock::builder(cluster.urls_with("redquorum:CHANGE-ME"))
        .per_node_timeout(Duration::from_millis(250))
        .native_commands(false)
        .build()
        .expect("config");
    let mut lock = rl
        .try_acquire("r", TTL)
        .await
        .expect("acquire needs no PEXPIRE");
    let err = lock.extend(TTL).await.expect_err("extend needs PEXPIRE");
    assert!(err.is_no_quorum(), "{err}");
    lock.release().await.expect("release needs no PEXPIRE");
    assert!(eventually(Duration::from_secs(2), || cluster.keys().is_empty()).await);
}

/// Without `+info` the client cannot tell a restarted master, so a fenced acquire is refused
/// with a typed error naming why, while plain locks work and nothing is left behind.
///
/// Mutation: sending the fenced acquire without a `run_id` (an empty one) gives "not
/// re-seeded" instead, which does not name the cause.
#[tokio::test]
async fn a_rule_without_info_refuses_fencing_and_says_why() {
    let cluster = Cluster::start(3);
    set_user(&cluster, &ACL_RULE.replace(" +info", ""));
    let plain = client_as_user(&cluster);
    let lock = plain
        .try_acquire("r", TTL)
        .await
        .expect("a plain lock needs no INFO");
    lock.release().await.expect("release");
    let fenced = RedLock::builder(cluster.urls_with("redquorum:CHANGE-ME"))
        .per_node_timeout(Duration::from_millis(250))
        .fencing(true)
        .build()
        .expect("config");
    let err = fenced
        .try_acquire("r", TTL)
        .await
        .expect_err("fencing needs INFO");
    assert!(err.is_no_quorum() && !err.is_expired(), "{err}");
    assert!(
        format!("{err:#}").contains("INFO server refused"),
        "{err:#}"
    );
    crate::settled(&fenced).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn the_least_privilege_user_can_fence_elect_wait_and_inspect() {
    let cluster = Cluster::start(3);
    set_user(&cluster, ACL_RULE);
    let urls = cluster.urls_with("redquorum:CHANGE-ME");
    let build = || {
        RedLock::builder(&urls)
            .per_node_timeout(Duration::from_millis(250))
            .fencing(true)
            .build()
            .expect("config")
    };
    let (rl, other) = (build(), build());

    // Fencing (INCR inside the acquire script) and waiting for a release (SUBSCRIBE, PUBLISH).
    let lock = rl.try_acquire("fenced", TTL).await.expect("fenced acquire");
    assert!(lock.fencing_token().is_some());
    let waiter = tokio::spawn(async move {
        other
            .acquire_within("fenced", TTL, Duration::from_secs(5))
            .await
            .map(|l| l.fencing_token())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Inspection (MGET, PTTL) sees the holder on every node.
    let seen = rl.inspect("fenced").await.expect("inspect");
    assert_eq!(seen.reachable(), 3, "{seen:?}");
    assert!(seen.majority_holder().is_some(), "{seen:?}");
    let first = lock.fencing_token();
    lock.release().await.expect("release");
    let second = waiter.await.expect("task").expect("the waiter acquires");
    assert!(second > first, "{second:?} after {first:?}");

    // Elections: campaign, leader (MGET), resign.
    let election = rl.election("leader", TTL).expect("election");
    let leadership = election.campaign("me").await.expect("campaign");
    let leader = election.leader().await.expect("leader as the ACL user");
    assert_eq!(leader.value(), b"me");
    assert_eq!(leader.term(), leadership.term());
    leadership.resign().await.expect("resign");
}

/// Without `+publish`, releases publish nothing (the script's `pcall` swallows the refusal),
/// yet a waiter of the same `RedLock` as the releaser still gets the lock at once: the release
/// wakes it directly. Its timed retries come every 10 s, so anything much faster is that
/// direct wake-up.
#[tokio::test]
async fn without_publish_a_release_still_wakes_the_waiters_of_its_own_redlock() {
    let cluster = Cluster::start(3);
    set_user(&cluster, &ACL_RULE.replace(" +publish", ""));
    let urls = cluster.urls_with("redquorum:CHANGE-ME");
    let retry_every = Duration::from_secs(10);
    let rl = RedLock::builder(&urls)
        .per_node_timeout(Duration::from_millis(250))
        .retry(
            redquorum::RetryPolicy::default()
                .delay(retry_every)
                .jitter(Duration::ZERO),
        )
        .build()
        .expect("config");
    let ttl = Duration::from_secs(30);
    let lock = rl.try_acquire("quiet", ttl).await.expect("acquire");
    let waiter = {
        let rl = rl.clone();
        tokio::spawn(async move {
            let got = rl
                .acquire_within("quiet", ttl, Duration::from_secs(20))
                .await;
            (got, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let released = Instant::now();
    lock.release().await.expect("release");
    let (got, acquired) = waiter.await.expect("task");
    let got = got.expect("the waiter gets the lock");
    let hand_off = acquired.saturating_duration_since(released);
    println!("hand-off without pub/sub: {hand_off:?}");
    assert!(
        hand_off < retry_every / 2,
        "woken by the release, not by its {retry_every:?} timer: {hand_off:?}"
    );
    assert_eq!(got.attempts(), 2, "one round lost to the holder, one won");
    got.release().await.expect("release");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// The deploy guide's rule before the hand-off (without `+exists +time +zadd +zrange +zrem +hdel`)
/// still acquires, waits and releases: the queue's commands are `pcall`s, so a waiter of
/// another client is woken by the release message that names nobody and takes the free lock,
/// and nothing is left behind.
///
/// Mutation: a plain `redis.call('EXISTS', …)` in `RELEASE` makes every release fail under
/// this rule ("can't run this command").
#[tokio::test]
async fn the_rule_from_before_the_hand_off_still_waits_and_releases() {
    let cluster = Cluster::start(3);
    let old_rule = ACL_RULE
        .replace(" +hdel", "")
        .replace(" +exists +time +zadd +zrange +zrem", "");
    assert_ne!(old_rule, ACL_RULE);
    set_user(&cluster, &old_rule);
    let holder = client_as_user(&cluster);
    let waiter = client_as_user(&cluster);
    let lock = holder.try_acquire("old", TTL).await.expect("acquire");
    let waiting = tokio::spawn(async move {
        let got = waiter
            .acquire_within("old", TTL, Duration::from_secs(20))
            .await;
        (got, waiter)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.release().await.expect("release under the old rule");
    let (got, waiter) = waiting.await.expect("task");
    got.expect("the waiter gets the lock")
        .release()
        .await
        .expect("release");
    // Multi-resource locks and semaphores came later, and use nothing the old rule lacks.
    // (Mutation: `EXISTS` in `ACQUIRE_MANY`, as first written: every master refuses it.)
    let mut set = holder
        .try_acquire_many(&["old", "older"], TTL)
        .await
        .expect("a set under the old rule");
    set.extend(TTL).await.expect("extend the set");
    set.release().await.expect("release the set");
    let permit = holder
        .semaphore("pool", 2)
        .expect("semaphore")
        .try_acquire(TTL)
        .await
        .expect("a permit under the old rule");
    permit.release().await.expect("release the permit");
    crate::settled(&holder).await;
    crate::settled(&waiter).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// What a Redis Cluster voter needs besides the rule, as the deploy guide says.
const CLUSTER_ADDITIONS: &str = "+cluster|slots +asking";

/// The rule plus `+cluster|slots +asking` serves a Cluster voter, a slot migration included
/// (the lock taken on the importing master through `ASKING`, and released there with the lock
/// key alone); without them the cluster voter cannot even read its slot map.
///
/// Mutation: the additions left out of the rule (run, as the last part of this test): the
/// cluster voter's connection fails with a permission error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_voter_works_under_the_rule_with_cluster_slots_and_asking() {
    let deploy = include_str!("../../deploy/README.md");
    assert!(
        deploy.contains(CLUSTER_ADDITIONS),
        "deploy/README.md must name {CLUSTER_ADDITIONS}"
    );
    let standalone = Cluster::start(2);
    let cluster = redquorum_testkit::RedisCluster::start(3);
    let rule = format!("{ACL_RULE} {CLUSTER_ADDITIONS}");
    set_user(&standalone, &rule);
    set_user(cluster.servers(), &rule);
    let client = || {
        let mut urls = vec![
            cluster
                .url()
                .replace("redis+cluster://", "redis+cluster://redquorum:CHANGE-ME@"),
        ];
        urls.extend(standalone.urls_with("redquorum:CHANGE-ME"));
        RedLock::builder(urls)
            .per_node_timeout(Duration::from_millis(250))
            .build()
            .expect("config")
    };
    let rl = client();
    let connected = rl.connect_all().await.expect("connected as the ACL user");
    assert_eq!(connected.successes(), 3, "{connected}");

    let key = crate::lock_key(b"orders:7");
    let from = cluster.owner_of(&key);
    let to = (from + 1) % 3;
    let slot = cluster.slot_of(&key);
    cluster.begin_migration(slot, from, to);
    let on_cluster = || {
        cluster
            .servers()
            .keys()
            .into_iter()
            .filter(|(_, k)| *k == key)
            .map(|(i, _)| i)
            .collect::<Vec<_>>()
    };
    let lock = rl.try_acquire("orders:7", TTL).await.expect("acquired");
    assert!(
        eventually(Duration::from_secs(3), || on_cluster() == [to]).await,
        "taken on the importing master: {:?}",
        on_cluster()
    );
    lock.release().await.expect("released");
    crate::settled(&rl).await;
    assert_eq!(on_cluster(), Vec::<usize>::new(), "released there");
    cluster.finish_migration(slot, to);

    set_user(cluster.servers(), ACL_RULE);
    let without = client()
        .connect()
        .await
        .expect("the standalone masters connect");
    assert_eq!(without.successes(), 2, "{without}");
    let line = without
        .iter()
        .find(|line| line.node().index() == 0)
        .map(|line| line.outcome().to_string())
        .unwrap_or_default();
    assert!(line.contains("unreachable"), "{line}");
}
