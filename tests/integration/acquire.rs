//! Acquire, extend and release on five healthy masters; contention; foreign keys; NOSCRIPT.

use std::time::{Duration, Instant};

use redquorum::{Error, NodeOutcome, RedLock, RetryPolicy};

use crate::{PREFIX, client, eventually, held_everywhere, lock_key};
use redquorum_testkit::Cluster;

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(250);

#[tokio::test]
async fn happy_path_sets_the_token_everywhere_then_extends_and_releases() {
    let cluster = Cluster::start(5);
    let rl = client(&cluster, NODE_TIMEOUT);
    let before = Instant::now();
    let mut lock = rl.try_acquire("orders:42", TTL).await.expect("acquire");
    let after = Instant::now();

    // The round was decided at the majority; the slower nodes' requests finish in the
    // background, so every node soon holds exactly our token, with the ttl we asked for.
    let key = lock_key(b"orders:42");
    assert!(lock.report().successes() >= 3);
    assert!(held_everywhere(&cluster, &lock).await);
    for i in 0..5 {
        assert_eq!(
            cluster.get(i, &key).as_deref(),
            Some(lock.token().expose().as_bytes()),
            "node {i}"
        );
        let pttl = cluster.pttl(i, &key);
        assert!(pttl > 9_000 && pttl <= 10_000, "node {i}: pttl {pttl}");
    }
    assert!(
        lock.report()
            .iter()
            .all(|r| matches!(r.outcome(), NodeOutcome::Granted | NodeOutcome::NoReply))
    );
    // valid_until = start + ttl − drift, with drift = 10 s × 0.01 + 2 ms = 102 ms.
    let span = TTL - Duration::from_millis(102);
    assert!(lock.valid_until() >= before + span && lock.valid_until() <= after + span);

    // Extend: the deadline moves forward and every node's ttl is renewed.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let old_deadline = lock.valid_until();
    lock.extend(Duration::from_secs(20)).await.expect("extend");
    assert!(lock.valid_until() > old_deadline);
    // Decided at the majority; the rest are renewed in the background.
    assert!(
        eventually(Duration::from_secs(2), || (0..5)
            .all(|i| cluster.pttl(i, &key) > 19_000))
        .await
    );

    // Decided at the majority: the nodes not waited for say so, and their deletes
    // finish in the background (settled below, then nothing is left).
    let report = lock.release().await.expect("release");
    assert!(report.successes() >= 3, "{report}");
    assert!(
        report
            .iter()
            .all(|r| matches!(r.outcome(), NodeOutcome::Released | NodeOutcome::NoReply)),
        "{report}"
    );
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn two_clients_racing_for_one_resource_exactly_one_wins() {
    let cluster = Cluster::start(5);
    for round in 0..20 {
        let a = client(&cluster, NODE_TIMEOUT);
        let b = client(&cluster, NODE_TIMEOUT);
        let (ra, rb) = tokio::join!(a.try_acquire("race", TTL), b.try_acquire("race", TTL));
        let (winner, loser) = match (ra, rb) {
            (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
            (Ok(_), Ok(_)) => panic!("round {round}: both clients hold the lock"),
            // With every node answering, one client always has 3 of 5; both can lose only
            // when a node failed (a timeout on an overloaded machine). Safety is unaffected.
            (Err(x), Err(y)) => {
                let failed = |e: &redquorum::Error| {
                    e.report().is_some_and(|r| r.failures().next().is_some())
                };
                assert!(
                    failed(&x) || failed(&y),
                    "round {round}: both lost with every node answering: {x} / {y}"
                );
                cluster.assert_no_keys_under(PREFIX);
                continue;
            }
        };
        assert!(loser.is_conflict(), "round {round}: {loser}");
        assert!(!loser.is_no_quorum());
        let report = loser.report().expect("report");
        let held = report
            .iter()
            .filter(|r| matches!(r.outcome(), NodeOutcome::HeldByOther { expires_in: Some(left) } if *left <= TTL))
            .count();
        assert!(
            held >= 3,
            "round {round}: the loser's report names the holder's nodes: {report}"
        );
        assert!(
            loser.to_string().contains("held by another owner"),
            "{loser}"
        );
        // The loser cleaned up: only the winner's token is left anywhere.
        let key = lock_key(b"race");
        for i in 0..5 {
            if let Some(v) = cluster.get(i, &key) {
                assert!(
                    redquorum_testkit::holds_token(&v, winner.token().expose()),
                    "round {round}: node {i}"
                );
            }
        }
        winner.release().await.expect("release");
        crate::settled(&a).await;
        crate::settled(&b).await;
        cluster.assert_no_keys_under(PREFIX);
    }
}

#[tokio::test]
async fn foreign_keys_on_two_of_five_still_acquire_and_stay_untouched() {
    let cluster = Cluster::start(5);
    let key = lock_key(b"shared");
    for i in [0, 1] {
        cluster.set(i, &key, b"someone-else", TTL);
    }
    let rl = client(&cluster, NODE_TIMEOUT);
    let lock = rl
        .try_acquire("shared", TTL)
        .await
        .expect("3 of 5 is a majority");
    for i in [0, 1] {
        assert!(
            matches!(
                lock.report().iter().nth(i).map(|r| r.outcome()),
                Some(NodeOutcome::HeldByOther { .. } | NodeOutcome::NoReply)
            ),
            "node {i}: {}",
            lock.report()
        );
    }
    let report = lock.release().await.expect("release");
    crate::settled(&rl).await;
    for i in [0, 1] {
        // Someone else's, or not waited for once the three others had decided the release.
        assert!(
            matches!(
                report.iter().nth(i).map(|r| r.outcome()),
                Some(NodeOutcome::HeldByOther { .. } | NodeOutcome::NoReply)
            ),
            "node {i}: {report}"
        );
        assert_eq!(
            cluster.get(i, &key).as_deref(),
            Some(&b"someone-else"[..]),
            "node {i} touched"
        );
    }
    for i in 2..5 {
        assert_eq!(cluster.get(i, &key), None, "node {i}: our key left behind");
    }
}

#[tokio::test]
async fn foreign_keys_on_three_of_five_is_contention_and_leaves_nothing_of_ours() {
    let cluster = Cluster::start(5);
    let key = lock_key(b"taken");
    for i in [0, 2, 4] {
        cluster.set(i, &key, b"someone-else", TTL);
    }
    let rl = client(&cluster, NODE_TIMEOUT);
    let err = rl
        .try_acquire("taken", TTL)
        .await
        .expect_err("3 of 5 held elsewhere");
    assert!(err.is_conflict(), "{err}");
    assert!(matches!(err, Error::Conflict(_)));
    let failure = err.failure().expect("failure detail");
    assert_eq!(failure.attempts(), 1);
    assert_eq!(failure.resource(), "taken");
    for i in [1, 3] {
        assert_eq!(cluster.get(i, &key), None, "node {i}: our key left behind");
    }
    for i in [0, 2, 4] {
        assert_eq!(cluster.get(i, &key).as_deref(), Some(&b"someone-else"[..]));
    }
}

#[tokio::test]
async fn retries_follow_the_policy_and_report_the_attempts() {
    let cluster = Cluster::start(5);
    let holder = client(&cluster, NODE_TIMEOUT);
    let lock = holder.try_acquire("busy", TTL).await.expect("acquire");
    let waiter = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .retry(
            RetryPolicy::default()
                .max_attempts(Some(3))
                .delay(Duration::from_millis(10))
                .jitter(Duration::from_millis(10)),
        )
        .retry_seed(7)
        .build()
        .expect("config");
    let err = waiter.acquire("busy", TTL).await.expect_err("held");
    assert!(err.is_conflict(), "{err}");
    assert_eq!(err.failure().map(|f| f.attempts()), Some(3));
    assert!(err.to_string().contains("last of 3 attempts"), "{err}");
    lock.release().await.expect("release");
    crate::settled(&holder).await;
    crate::settled(&waiter).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn acquire_within_waits_for_an_unreleased_lock_to_expire() {
    let cluster = Cluster::start(5);
    let rl = client(&cluster, NODE_TIMEOUT);
    // Held for 600 ms and never released: the holder crashed.
    let abandoned = rl
        .try_acquire("crashy", Duration::from_millis(600))
        .await
        .expect("acquire");
    let abandoned_token = abandoned.token().expose().as_bytes().to_vec();
    std::mem::forget(abandoned);
    let lock = rl
        .acquire_within("crashy", TTL, Duration::from_secs(5))
        .await
        .expect("acquired after the abandoned lock expired");
    assert!(lock.attempts() > 1, "it had to wait");
    lock.release().await.expect("release");
    crate::settled(&rl).await;
    // Nothing left but, for a moment, the abandoned lock's own key on a master that ran its
    // `SET` late (a straggler of that round: the waiter won on the others), which expires by
    // itself. A clean-clone CI run and a run under two CPU hogs failed on it: the key listed,
    // then gone (`TYPE` none) a moment later. That key may also carry the waiter's mark
    // (`n-` turned `w-`, its ttl kept: `mark_waited.lua`), when the waiter's refused round
    // met it there: a clean-clone CI run (2026-11-28) failed on a key of another value, most
    // likely that form of it (the failure did not show the value; it now does).
    let marked = [
        b"w-".as_slice(),
        abandoned_token.get(2..).unwrap_or_default(),
    ]
    .concat();
    let abandoned_key = |value: &Vec<u8>| *value == abandoned_token || *value == marked;
    let left: Vec<String> = cluster
        .keys()
        .into_iter()
        .filter(|(_, key)| key.starts_with(PREFIX))
        .filter(|(i, key)| {
            let kind: String = cluster.run(*i, redis::cmd("TYPE").arg(key));
            kind != "none"
                && (kind != "string" || cluster.get(*i, key).is_some_and(|v| !abandoned_key(&v)))
        })
        .map(|(i, key)| {
            let value = cluster.get(i, &key).unwrap_or_default();
            format!(
                "server {i}: {} = {}",
                key.escape_ascii(),
                value.escape_ascii()
            )
        })
        .collect();
    assert!(
        left.is_empty(),
        "keys left behind: {left:?} (the abandoned token: {})",
        abandoned_token.escape_ascii()
    );
}

#[tokio::test]
async fn script_flush_is_recovered_with_evalsha_fallback() {
    let cluster = Cluster::start(5);
    // Scripts only: on Valkey the extend and release would go native and load nothing.
    let rl = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .native_commands(false)
        .build()
        .expect("config");
    // Every connection made (scripts load before a connection carries anything): a round
    // decided at the majority does not wait for a slow node's first connection, and under
    // load the check below once met a node still connecting.
    rl.connect_all().await.expect("connected");
    rl.try_acquire("warm", TTL)
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    // The script cache size, from INFO memory.
    let cached = |i: usize| -> u64 {
        let info: String = cluster.run(i, &redis::cmd("INFO").arg("memory").clone());
        info.lines()
            .find_map(|l| l.strip_prefix("number_of_cached_scripts:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("number_of_cached_scripts in INFO memory")
    };
    for i in 0..5 {
        assert_eq!(
            cached(i),
            crate::SCRIPT_COUNT,
            "node {i}: every script loaded on connect"
        );
        let _: () = cluster.run(i, &redis::cmd("SCRIPT").arg("FLUSH").clone());
        assert_eq!(cached(i), 0, "node {i}: flushed");
    }
    // Every operation still works: EVALSHA gets NOSCRIPT, the script is loaded, and retried.
    // (The plain acquire is `SET NX PX`, no script.)
    let mut lock = rl
        .try_acquire("warm", TTL)
        .await
        .expect("acquire after SCRIPT FLUSH");
    lock.extend(TTL).await.expect("extend after SCRIPT FLUSH");
    lock.release().await.expect("release after SCRIPT FLUSH");
    // The release returns at the majority: the other nodes' deletes (each reloading the
    // script) finish in the background. CI under load caught the check running before them.
    crate::settled(&rl).await;
    for i in 0..5 {
        assert_eq!(cached(i), 2, "node {i}: extend and release reloaded");
    }
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn binary_resource_names_round_trip_exactly() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    for resource in [
        &b"\0"[..],
        b"\r\n",
        b"\xff\xfe invalid utf-8",
        b"{braces}",
        b"a b\tc",
    ] {
        let lock = rl.try_acquire(resource, TTL).await.expect("acquire");
        assert_eq!(lock.resource(), resource);
        assert!(held_everywhere(&cluster, &lock).await);
        lock.release().await.expect("release");
    }
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// A lock's errors name its resource escaped once, as the acquire's errors do: for a single
/// lock and for each resource of a set.
///
/// Mutation: the lock's failures built from `resource_display()` (already escaped) instead
/// of the raw names, as this session first did: `\x00` shows as `\\x00`.
#[tokio::test]
async fn a_locks_errors_name_its_resources_escaped_once() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let single = rl.try_acquire(b"bin\0", TTL).await.expect("acquire");
    let set = rl
        .try_acquire_many(&[&b"x\0"[..], b"y"], TTL)
        .await
        .expect("acquire the set");
    crate::settled(&rl).await;
    for key in [lock_key(b"bin\0"), lock_key(b"x\0"), lock_key(b"y")] {
        for node in 0..3 {
            let _: i64 = cluster.run(node, redis::cmd("DEL").arg(&key));
        }
    }
    let err = single.release().await.expect_err("the key vanished");
    assert!(err.to_string().contains("bin\\x00"), "{err}");
    assert!(!err.to_string().contains("\\\\x00"), "{err}");
    let err = set.release().await.expect_err("the keys vanished");
    assert!(err.to_string().contains("x\\x00 + y"), "{err}");
    assert!(!err.to_string().contains("\\\\x00"), "{err}");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// Property, against a real server: any byte string (seeded random, 1 to 300 bytes, every byte
/// value) round-trips exactly as the resource name and key.
#[tokio::test]
async fn random_binary_resource_names_round_trip_exactly() {
    use rand::{RngExt, SeedableRng};
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xb1_7e5);
    for _ in 0..200 {
        let len = rng.random_range(1..=300);
        let resource: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let lock = rl.try_acquire(&resource, TTL).await.expect("acquire");
        assert_eq!(lock.resource(), &resource[..]);
        assert!(
            held_everywhere(&cluster, &lock).await,
            "{}",
            resource.escape_ascii()
        );
        lock.release().await.expect("release");
    }
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
    assert!(cluster.keys().is_empty());
}

#[tokio::test]
async fn a_custom_prefix_is_the_only_namespace_written() {
    let cluster = Cluster::start(3);
    let rl = RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .key_prefix("app:locks:")
        .build()
        .expect("config");
    // Unrelated keys, including ones that look like ours under the default prefix.
    let unrelated: [(&[u8], &[u8]); 3] = [
        (b"redquorum:{job}", b"theirs"),
        (b"job", b"plain"),
        (b"app:locks:job", b"near"),
    ];
    for i in 0..3 {
        for (k, v) in unrelated {
            cluster.set(i, k, v, Duration::from_secs(60));
        }
    }
    let mut lock = rl.try_acquire("job", TTL).await.expect("acquire");
    lock.extend(TTL).await.expect("extend");
    let on_all = || {
        cluster
            .keys()
            .iter()
            .filter(|(_, k)| k == b"app:locks:{job}")
            .count()
            == 3
    };
    assert!(eventually(Duration::from_secs(2), on_all).await);
    let ours: Vec<_> = cluster
        .keys()
        .into_iter()
        .filter(|(_, k)| !unrelated.iter().any(|(u, _)| k.as_slice() == *u))
        .collect();
    assert_eq!(ours.len(), 3, "{ours:?}");
    assert!(
        ours.iter().all(|(_, k)| k == b"app:locks:{job}"),
        "{ours:?}"
    );
    lock.release().await.expect("release");
    // The release returns at the majority; its last delete may still be on its way.
    crate::settled(&rl).await;
    for i in 0..3 {
        for (k, v) in unrelated {
            let shown = k.escape_ascii();
            assert_eq!(
                cluster.get(i, k).as_deref(),
                Some(v),
                "node {i}: {shown} was touched"
            );
            let pttl = cluster.pttl(i, k);
            assert!(
                pttl > 50_000 && pttl <= 60_000,
                "node {i}: ttl of {shown} is {pttl}"
            );
        }
    }
    assert_eq!(cluster.keys().len(), 9, "only the unrelated keys remain");
}

#[tokio::test]
async fn invalid_arguments_fail_before_any_io() {
    let cluster = Cluster::start(3);
    let rl = client(&cluster, NODE_TIMEOUT);
    let empty = rl.try_acquire("", TTL).await.expect_err("empty resource");
    assert!(
        matches!(empty, Error::Config(redquorum::ConfigError::EmptyResource)),
        "{empty}"
    );
    let long = vec![b'x'; redquorum::MAX_RESOURCE_LEN + 1];
    let err = rl.try_acquire(&long, TTL).await.expect_err("too long");
    assert!(
        matches!(
            err,
            Error::Config(redquorum::ConfigError::ResourceTooLong { .. })
        ),
        "{err}"
    );
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(100),
        redquorum::MAX_TTL * 2,
    ] {
        let err = rl.try_acquire("r", ttl).await.expect_err("bad ttl");
        assert!(err.is_config(), "{ttl:?}: {err}");
        assert!(err.report().is_none());
    }
    assert!(cluster.keys().is_empty());
}

#[tokio::test]
async fn one_node_and_even_node_counts_work_with_a_strict_majority() {
    let cluster = Cluster::start(4);
    let urls = cluster.urls();
    let single = RedLock::builder(&urls[..1])
        .per_node_timeout(NODE_TIMEOUT)
        .build()
        .expect("one node");
    assert_eq!(single.quorum(), 1);
    single
        .try_acquire("solo", TTL)
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");

    let four = client(&cluster, NODE_TIMEOUT);
    assert_eq!(four.quorum(), 3);
    let key = lock_key(b"even");
    for i in [0, 1] {
        cluster.set(i, &key, b"other", TTL);
    }
    // 2 of 4 is not a majority.
    let err = four.try_acquire("even", TTL).await.expect_err("2 of 4");
    assert!(err.is_conflict(), "{err}");
    for i in [2, 3] {
        assert_eq!(cluster.get(i, &key), None);
    }
}
