//! The servers' own compare commands (`DELIFEQ`, `SET … IFEQ … PX`; `DESIGN.md` §3): used
//! where the server has them and nobody waits, never where someone does, read again at every
//! connection, and given up on a connection whose server refuses them. Valkey 9.1 has both;
//! Debian's Redis 7.0 has neither (Redis 8.4's `DELEX` is not at hand here): it is sent the
//! compare-and-delete script that stands in for `DELIFEQ`.

use std::time::Duration;

use redquorum::RedLock;
use redquorum_testkit::{Cluster, Persistence, ServerKind};

use crate::{PREFIX, lock_key};

const NODE_TIMEOUT: Duration = Duration::from_millis(250);
const TTL: Duration = Duration::from_secs(30);

fn valkeys(n: usize, extra_args: &[&str]) -> Cluster {
    Cluster::start_kinds(&vec![ServerKind::Valkey; n], Persistence::None, extra_args)
}

/// How many times server `i` ran `command` (`INFO commandstats`).
fn calls(cluster: &Cluster, i: usize, command: &str) -> u64 {
    let info: String = cluster.run(i, redis::cmd("INFO").arg("commandstats"));
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// How many `ERR` replies server `i` gave (`INFO errorstats`): an unknown command is one.
/// Asked on the server's one inspecting connection: Redis 7.0 also answers the redis crate's
/// `CLIENT SETINFO` with `ERR` at every new connection.
fn errors(inspect: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("errorstats")
        .query(inspect)
        .expect("INFO errorstats");
    info.lines()
        .find_map(|line| line.strip_prefix("errorstat_ERR:count="))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

async fn client(cluster: &Cluster, native: bool) -> RedLock {
    let rl = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .native_commands(native)
        .build()
        .expect("config");
    rl.connect_all().await.expect("connected");
    rl
}

/// On Valkey masters a lock's value begins with `n-`, its extend is one `SET … IFEQ … PX`
/// and its release one `DELIFEQ` per master, no script; nothing is left behind. Told to use
/// scripts only, the client sends neither and writes the value as before. A Redis 7.0 master
/// in the same list is sent the scripts, and no command it lacks: its release is the
/// compare-and-delete script standing in for `DELIFEQ`, loaded again after a `SCRIPT FLUSH`,
/// not the release script.
///
/// Mutations: `NativeCommands::of` offering nothing: no `DELIFEQ` is counted (run, caught);
/// offering Valkey's commands to Redis: Redis answers `ERR unknown command` (run, caught);
/// the stand-in's `NOSCRIPT` not loading it (`NativeForm::command` giving no script to
/// load): the release script follows and is loaded instead (run, caught).
#[tokio::test]
async fn valkey_releases_and_renews_with_its_own_commands_and_redis_with_scripts() {
    let cluster = Cluster::start_kinds(
        &[ServerKind::Valkey, ServerKind::Valkey, ServerKind::Redis],
        Persistence::None,
        &[],
    );
    let mut redis = cluster.server(2).inspect();
    let rl = client(&cluster, true).await;
    let redis_errors = errors(&mut redis);
    let mut lock = rl.try_acquire("plain", TTL).await.expect("acquire");
    assert!(crate::held_everywhere(&cluster, &lock).await);
    assert!(lock.token().expose().starts_with("n-"));
    lock.extend(TTL).await.expect("extend");
    // The extend's request to the Redis master answered first (decided at the majority, it
    // may still be on its way): landing after the flush, it would load its script again.
    crate::settled(&rl).await;
    let _: () = cluster.run(2, redis::cmd("SCRIPT").arg("FLUSH"));
    lock.release().await.expect("release");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
    let stand_in = redis::Script::new(include_str!("../../src/scripts/lua/delete_if_equal.lua"));
    let loaded: Vec<bool> = cluster.run(
        2,
        redis::cmd("SCRIPT").arg("EXISTS").arg(stand_in.get_hash()),
    );
    let info: String = cluster.run(2, redis::cmd("INFO").arg("memory"));
    let stats: String = cluster.run(2, redis::cmd("INFO").arg("commandstats"));
    assert_eq!(
        loaded,
        [true],
        "redis: released by the compare-and-delete script ({}; {stats})",
        info.lines()
            .find(|l| l.starts_with("number_of_cached_scripts"))
            .unwrap_or_default()
    );
    assert!(
        info.contains("number_of_cached_scripts:1\r"),
        "redis: no other script loaded since the flush"
    );
    for i in 0..2 {
        assert_eq!(
            calls(&cluster, i, "delifeq"),
            1,
            "valkey {i}: released natively"
        );
        assert_eq!(
            calls(&cluster, i, "evalsha"),
            0,
            "valkey {i}: no script ran"
        );
        assert_eq!(calls(&cluster, i, "set"), 2, "valkey {i}: SET NX, SET IFEQ");
    }
    assert_eq!(
        calls(&cluster, 2, "evalsha"),
        3,
        "redis: the extend script, and the compare-and-delete script twice (NOSCRIPT after \
         the flush, then loaded)"
    );
    assert_eq!(
        errors(&mut redis),
        redis_errors,
        "redis was sent nothing it lacks"
    );

    let scripts = client(&cluster, false).await;
    let mut lock = scripts.try_acquire("plain", TTL).await.expect("acquire");
    assert!(!lock.token().expose().starts_with("n-"));
    lock.extend(TTL).await.expect("extend");
    lock.release().await.expect("release");
    crate::settled(&scripts).await;
    cluster.assert_no_keys_under(PREFIX);
    for i in 0..2 {
        assert_eq!(calls(&cluster, i, "delifeq"), 1, "valkey {i}: scripts only");
        assert_eq!(calls(&cluster, i, "evalsha"), 2, "valkey {i}: scripts only");
    }
}

/// A waiter the holder refuses marks the holder's value, on every master: the holder's
/// release then cannot be the server's own delete (it no longer matches), and the release
/// script hands the lock to the waiter and wakes it. The waiter's timed retries come every
/// 10 s, past its 8 s wait: only the hand-off can give it the lock. The same for a fenced
/// waiter, which queues as any other.
///
/// Mutation: `join_queue` without `mark_waited`: the holder's `DELIFEQ` deletes the lock
/// silently and each waiter, plain and fenced, gives up after 8 s (run, caught).
#[tokio::test]
async fn a_waiter_marks_the_lock_so_its_release_hands_it_over() {
    let cluster = valkeys(3, &[]);
    for fencing in [false, true] {
        let resource = if fencing { "fenced" } else { "plain" };
        let holder = RedLock::builder(cluster.urls())
            .per_node_timeout(NODE_TIMEOUT)
            .fencing(fencing)
            .build()
            .expect("config");
        let lock = holder.try_acquire(resource, TTL).await.expect("acquire");
        assert!(crate::held_everywhere(&cluster, &lock).await);
        let waiter = crate::woken_by_releases_only(&cluster, NODE_TIMEOUT, fencing);
        let waiting = tokio::spawn(async move {
            let got = waiter
                .acquire_within(resource, TTL, Duration::from_secs(8))
                .await;
            (waiter, got)
        });
        let key = lock_key(resource.as_bytes());
        let marked = || {
            (0..cluster.len()).all(|i| {
                cluster
                    .get(i, &key)
                    .is_some_and(|value| value.starts_with(b"w-"))
            })
        };
        assert!(
            crate::eventually(Duration::from_secs(5), marked).await,
            "the waiter marked the lock on every master (fencing: {fencing})"
        );
        lock.release().await.expect("release");
        let (waiter, got) = waiting.await.expect("task");
        let got = got.expect("handed the lock before its timer");
        // Refused once, then handed the lock with its token and no round of its own (fenced:
        // but its confirmation); sometimes a round more per master:
        // the holder did not know it was marked, so each master's release script followed a
        // missed `DELIFEQ`, and the waiter, woken by the first master's hand-off, can reach
        // another before its script; that master's own hand-off wakes it again (`DESIGN.md`
        // §3). Its timer could not have given it the lock within the wait.
        assert!(
            (1..=1 + cluster.len() as u32).contains(&got.attempts()),
            "refused once, then woken (fencing: {fencing}): {} attempts",
            got.attempts()
        );
        got.release().await.expect("release");
        crate::settled(&holder).await;
        crate::settled(&waiter).await;
        crate::assert_no_lock_keys(&cluster);
    }
}

/// A server that refuses its own command (here renamed away; an ACL without `+delifeq` does
/// the same with `NOPERM`) costs the round nothing: the script follows on the same
/// connection, nothing is left behind, and the connection uses scripts from then on: the
/// second release sends no `DELIFEQ` there (one `ERR` per master, not two).
///
/// Mutation: `NativeLink::refuse` doing nothing: two errors per master (run, caught);
/// `refuses_native` false: the release fails with the server's error (run, caught).
#[tokio::test]
async fn a_server_that_refuses_its_own_command_gets_the_script_from_then_on() {
    let cluster = valkeys(3, &["--rename-command", "DELIFEQ", ""]);
    let mut inspect: Vec<redis::Connection> = (0..3).map(|i| cluster.server(i).inspect()).collect();
    let rl = client(&cluster, true).await;
    for round in 0..2 {
        let lock = rl.try_acquire("renamed", TTL).await.expect("acquire");
        assert!(crate::held_everywhere(&cluster, &lock).await);
        lock.release().await.expect("released by the script");
        crate::settled(&rl).await;
        cluster.assert_no_keys_under(PREFIX);
        for (i, inspect) in inspect.iter_mut().enumerate() {
            assert_eq!(errors(inspect), 1, "round {round}, server {i}");
        }
    }
}

/// What a master offers is read at every connection: a Valkey master replaced by Redis 7.0
/// at the same address (a failover to an older server) is sent scripts, and Valkey again once
/// it is back.
///
/// Mutation: the commands read once per voter instead of per connection: Redis is sent
/// `DELIFEQ` (an `ERR` there; run, caught).
#[tokio::test]
async fn an_older_server_behind_the_same_address_gets_the_scripts() {
    let mut cluster = valkeys(3, &[]);
    let rl = client(&cluster, true).await;
    // A lock held on every master, released: retried until the restarted master takes part
    // (its old connection breaks at the first request, and the client reconnects).
    async fn cycle(rl: &RedLock, cluster: &Cluster) {
        for _ in 0..50 {
            if let Ok(lock) = rl.try_acquire("moved", TTL).await {
                let everywhere = crate::held_everywhere(cluster, &lock).await;
                lock.release().await.expect("release");
                crate::settled(rl).await;
                if everywhere {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("never held on every master after the restart");
    }
    cycle(&rl, &cluster).await;
    assert_eq!(calls(&cluster, 0, "delifeq"), 1);
    cluster.restart_as(0, ServerKind::Redis);
    rl.connect_all().await.expect("reconnected");
    cycle(&rl, &cluster).await;
    // Once connected again, a lock on every master: Redis gets the script, and no DELIFEQ.
    let mut redis = cluster.server(0).inspect();
    let (scripts, errors_before) = (calls(&cluster, 0, "evalsha"), errors(&mut redis));
    cycle(&rl, &cluster).await;
    cluster.assert_no_keys_under(PREFIX);
    assert_eq!(
        errors(&mut redis),
        errors_before,
        "redis was sent no DELIFEQ"
    );
    assert!(
        calls(&cluster, 0, "evalsha") > scripts,
        "redis released by the script"
    );
    cluster.restart_as(0, ServerKind::Valkey);
    rl.connect_all().await.expect("reconnected");
    cycle(&rl, &cluster).await;
    assert!(calls(&cluster, 0, "delifeq") >= 1, "valkey again: native");
    cluster.assert_no_keys_under(PREFIX);
}
