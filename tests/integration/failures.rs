//! Masters killed, paused and restarted under the client.

use std::time::{Duration, Instant};

use redquorum::{NodeError, NodeOutcome, RedLock};

use crate::{PREFIX, client, eventually, lock_key};
use redquorum_testkit::Cluster;

const TTL: Duration = Duration::from_secs(10);

#[tokio::test]
async fn two_of_five_killed_still_acquires_extends_and_releases() {
    let mut cluster = Cluster::start(5);
    cluster.kill(1);
    cluster.kill(3);
    let rl = client(&cluster, Duration::from_millis(250));
    let mut lock = rl.try_acquire("ha", TTL).await.expect("3 of 5 alive");
    lock.extend(TTL).await.expect("extend with 3 of 5");
    let report = lock.release().await.expect("release with 3 of 5");
    assert_eq!(report.successes(), 3);
    for i in [1, 3] {
        let outcome = report.iter().nth(i).map(|r| r.outcome().clone());
        assert!(
            matches!(outcome, Some(NodeOutcome::Failed(_))),
            "node {i}: {outcome:?}"
        );
    }
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn three_of_five_killed_is_no_quorum_not_contention_and_prompt() {
    let mut cluster = Cluster::start(5);
    for i in [0, 2, 4] {
        cluster.kill(i);
    }
    let rl = client(&cluster, Duration::from_millis(250));
    let started = Instant::now();
    let err = rl.try_acquire("ha", TTL).await.expect_err("2 of 5 alive");
    let elapsed = started.elapsed();
    assert!(err.is_no_quorum(), "{err}");
    assert!(!err.is_conflict());
    let report = err.report().expect("report");
    let failed: Vec<usize> = report.failures().map(|(node, _)| node.index()).collect();
    assert_eq!(failed, vec![0, 2, 4], "{report}");
    // Connection refused is reported with the redis error as the source chain.
    let source = std::error::Error::source(&err).expect("the first node's error");
    assert!(
        source.source().is_some(),
        "the redis error is kept: {source:?}"
    );
    // Generous bound: refused connections fail fast, never near the 10 s ttl.
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    cluster.assert_no_keys_under(PREFIX);

    // A node known to be down fails fast on the next call, without waiting for its timeout.
    let slow = RedLock::builder(cluster.urls())
        .per_node_timeout(Duration::from_secs(5))
        .build()
        .expect("config");
    let _ = slow.connect_all().await;
    let err = slow.try_acquire("ha", TTL).await.expect_err("still down");
    let report = err.report().expect("report");
    for (node, error) in report.failures() {
        assert!(
            matches!(error, NodeError::Unreachable(_) | NodeError::Redis(_)),
            "{node}: {error} should fail fast, not time out"
        );
    }
}

#[tokio::test]
async fn one_paused_master_does_not_delay_the_decision() {
    let mut cluster = Cluster::start(5);
    // A per-node timeout far longer than the rest of the round: if the round waited for the
    // paused node, its outcome would be a timeout, not "not waited for".
    let rl = client(&cluster, Duration::from_secs(2));
    rl.connect_all().await.expect("connected");
    cluster.pause(2);
    let lock = rl.try_acquire("paused", TTL).await.expect("4 of 5 answer");
    let paused = lock.report().iter().nth(2).map(|r| r.outcome().clone());
    assert!(matches!(paused, Some(NodeOutcome::NoReply)), "{paused:?}");
    assert!(lock.report().successes() >= 3);
    // Release is decided by the other four too: the paused node's line says "not waited for".
    let report = lock.release().await.expect("release");
    let paused = report.iter().nth(2).map(|r| r.outcome().clone());
    assert!(matches!(paused, Some(NodeOutcome::NoReply)), "{paused:?}");
    // When it resumes, the queued SET and the compare-and-delete behind it run in order:
    // nothing of ours is left there.
    cluster.resume(2);
    let key = lock_key(b"paused");
    assert!(eventually(Duration::from_secs(3), || cluster.get(2, &key).is_none()).await);
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

/// A master that stopped answering on a live connection becomes suspect once a request to
/// it times out, and a round that waits for every node does not wait for it again: here a
/// release that began after the deadline (it is `Expired` whatever the answers, and waits for
/// them all to show who holds the lock): the paused node's line says "not waited for", not a
/// timeout. The deletes queued for it are tracked: settling cannot finish while it sleeps, and
/// does once it wakes, when they run behind the acquires' `SET`s: nothing of ours is left.
///
/// Mutations: waiting for suspect nodes too (dropping `|| voter.is_suspect()` from
/// `Wait::ForAll` in `Wait::is_over`) makes the paused node's line a timeout and fails this test; spawning
/// the engine's background deliveries untracked (`tokio::spawn` in `deliver_in_background`)
/// fails it with "settled while paused".
#[tokio::test]
async fn a_round_does_not_wait_again_for_a_master_that_timed_out() {
    let mut cluster = Cluster::start(5);
    let node_timeout = Duration::from_millis(100);
    let rl = client(&cluster, node_timeout);
    rl.connect_all().await.expect("connected");
    cluster.pause(2);
    let first = rl
        .try_acquire("suspect-1", TTL)
        .await
        .expect("4 of 5 answer");
    // Decided at the majority: the paused node is not waited for (or timed out, if the
    // decision needed it on a slow machine).
    let report = first.release().await.expect("release");
    let paused = report.iter().nth(2).map(|r| r.outcome().clone());
    assert!(
        matches!(
            paused,
            Some(NodeOutcome::Failed(NodeError::TimedOut(_)) | NodeOutcome::NoReply)
        ),
        "{paused:?}"
    );
    let ttl = Duration::from_millis(600);
    let short = rl
        .try_acquire("suspect-2", ttl)
        .await
        .expect("4 of 5 answer");
    // Past the acquire's timeout, the paused node is suspect; past the deadline, the release
    // waits for every node but a suspect one.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let err = short
        .release()
        .await
        .expect_err("released after its deadline");
    assert!(err.is_expired(), "{err}");
    let report = err.report().expect("report");
    // The four others answered (the key had expired there: "key not found").
    let answered = report
        .iter()
        .filter(|r| !matches!(r.outcome(), NodeOutcome::NoReply))
        .count();
    assert_eq!(answered, 4, "{report}");
    let paused = report.iter().nth(2).map(|r| r.outcome().clone());
    assert!(matches!(paused, Some(NodeOutcome::NoReply)), "{paused:?}");
    assert!(
        !rl.settle(Duration::from_millis(300)).await,
        "settled while paused"
    );
    cluster.resume(2);
    assert!(
        rl.settle(Duration::from_secs(5)).await,
        "not settled once resumed"
    );
    for name in [&b"suspect-1"[..], b"suspect-2"] {
        let key = lock_key(name);
        assert_eq!(cluster.get(2, &key), None);
    }
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn three_paused_masters_fail_within_a_small_multiple_of_the_node_timeout() {
    let mut cluster = Cluster::start(5);
    let node_timeout = Duration::from_millis(100);
    let rl = client(&cluster, node_timeout);
    rl.connect_all().await.expect("connected");
    for i in [0, 1, 2] {
        cluster.pause(i);
    }
    let started = Instant::now();
    let err = rl.try_acquire("hung", TTL).await.expect_err("3 of 5 hung");
    let elapsed = started.elapsed();
    assert!(err.is_no_quorum(), "{err}");
    for i in [0, 1, 2] {
        let outcome = err
            .report()
            .and_then(|r| r.iter().nth(i))
            .map(|r| r.outcome().clone());
        assert!(
            matches!(outcome, Some(NodeOutcome::Failed(NodeError::TimedOut(_)))),
            "{outcome:?}"
        );
    }
    // The round (100 ms) plus its cleanup (100 ms); generous for a loaded machine, and far
    // below the redis crate's 500 ms default response timeout per node had it been used.
    assert!(elapsed < node_timeout * 15, "took {elapsed:?}");
    for i in [0, 1, 2] {
        cluster.resume(i);
    }
    // The SETs queued on the paused nodes land now, followed by the cleanup queued behind them.
    let key = lock_key(b"hung");
    assert!(
        eventually(Duration::from_secs(3), || (0..5)
            .all(|i| cluster.get(i, &key).is_none()))
        .await
    );
}

#[tokio::test]
async fn a_restarted_master_is_reconnected_in_the_background() {
    let mut cluster = Cluster::start(5);
    let rl = client(&cluster, Duration::from_millis(250));
    rl.try_acquire("r", TTL)
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    cluster.kill(0);
    let lock = rl.try_acquire("r", TTL).await.expect("4 of 5");
    // Failed, or (on a loaded machine, where the four others answer before the broken
    // connection is noticed) no reply before the round was decided: never a vote.
    assert!(
        lock.report()
            .iter()
            .next()
            .is_some_and(|r| !r.outcome().is_success()),
        "{}",
        lock.report()
    );
    lock.release().await.expect("release");
    cluster.restart(0);
    // Without any action from the caller, node 0 comes back into service.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lock = rl.try_acquire("r", TTL).await.expect("acquire");
        let back = lock
            .report()
            .iter()
            .next()
            .is_some_and(|r| matches!(r.outcome(), NodeOutcome::Granted));
        lock.release().await.expect("release");
        if back {
            break;
        }
        assert!(Instant::now() < deadline, "node 0 never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn connect_reports_which_nodes_are_unreachable() {
    let mut cluster = Cluster::start(3);
    cluster.kill(1);
    let rl = client(&cluster, Duration::from_millis(250));
    let report = rl.connect_all().await.expect("2 of 3");
    assert_eq!(report.successes(), 2);
    assert_eq!(
        report
            .failures()
            .map(|(n, _)| n.index())
            .collect::<Vec<_>>(),
        vec![1]
    );
    cluster.kill(0);
    let rl = client(&cluster, Duration::from_millis(250));
    let err = rl.connect().await.expect_err("1 of 3");
    assert!(err.is_no_quorum(), "{err}");
}

/// One master of five stopped (SIGSTOP: its port accepts, nothing answers): `connect` returns
/// once the other four connected and the grace after them passed, with the stopped one not
/// waited for, long before its 60 s connect timeout. `connect_all` would wait that out.
///
/// Mutation: `connect` waiting for every node (`connect_until(false)`): the 30 s limit below
/// fails it.
#[tokio::test]
async fn a_hung_master_is_not_waited_for_by_connect() {
    let mut cluster = Cluster::start(5);
    cluster.pause(4);
    let rl = RedLock::builder(cluster.urls())
        .key_prefix(PREFIX)
        .connect_timeout(Duration::from_secs(60))
        .build()
        .expect("config");
    let report = tokio::time::timeout(Duration::from_secs(30), rl.connect())
        .await
        .expect("connect returns without the stopped master")
        .expect("four of five connect");
    assert_eq!(report.successes(), 4, "{report}");
    let stopped = report.iter().nth(4).map(|line| line.outcome().clone());
    assert!(matches!(stopped, Some(NodeOutcome::NoReply)), "{stopped:?}");
    cluster.resume(4);
}
