//! Servers that answer with errors: each is one failed vote, reported with the server's reply,
//! and nothing of ours is left behind.

use std::time::Duration;

use redquorum::{NodeError, NodeOutcome, RedLock};

use crate::{PREFIX, client, eventually, lock_key};
use redquorum_testkit::{Cluster, Persistence};

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(250);

fn failure_text(report: &redquorum::Report, node: usize) -> String {
    report
        .iter()
        .nth(node)
        .map(|r| r.outcome().to_string())
        .unwrap_or_default()
}

/// A wrong password, or none where one is required, is an authentication failure on every
/// node, never an outage ("unreachable"), and the password is never shown.
///
/// Mutation: `NodeError::connecting` taking every failure for `Unreachable` fails the first
/// assertions (run, caught).
#[tokio::test]
async fn wrong_password_everywhere_says_authentication() {
    let cluster = Cluster::start_with_args(3, Persistence::None, &["--requirepass", "right"]);
    let urls = cluster.urls_with(":wrong");
    let rl = RedLock::builder(&urls)
        .per_node_timeout(NODE_TIMEOUT)
        .build()
        .expect("config");
    let _ = rl.connect().await;
    let err = rl
        .try_acquire("r", TTL)
        .await
        .expect_err("no node accepts us");
    assert!(err.is_no_quorum(), "{err}");
    assert!(
        !err.is_conflict(),
        "an auth failure must not look like a busy lock"
    );
    let text = err.to_string().to_lowercase();
    assert!(text.contains("authentication failed"), "{err}");
    assert!(
        !text.contains("unreachable"),
        "never called an outage: {err}"
    );
    // Each node that answered says so (the round is decided once two of three failed):
    // refused credentials do not heal by themselves.
    let report = err.report().expect("report");
    let refused = |line: &redquorum::NodeReport| {
        matches!(
            line.outcome(),
            NodeOutcome::Failed(NodeError::AuthenticationFailed(_))
        )
    };
    assert!(
        report.iter().filter(|line| refused(line)).count() >= 2,
        "{report:?}"
    );
    assert!(
        report
            .iter()
            .all(|line| refused(line) || matches!(line.outcome(), NodeOutcome::NoReply)),
        "{report:?}"
    );
    assert!(
        !text.contains("wrong@"),
        "the URL with its password is never shown: {err}"
    );

    // No password at all: the server answers NOAUTH to the connection's first commands.
    let rl = client(&cluster, NODE_TIMEOUT);
    let err = rl.try_acquire("r", TTL).await.expect_err("NOAUTH");
    assert!(err.is_no_quorum(), "{err}");
    assert!(err.to_string().contains("authentication failed"), "{err}");

    // The right password works, and never appears in Debug output.
    let urls = cluster.urls_with(":right");
    let rl = RedLock::builder(&urls)
        .per_node_timeout(NODE_TIMEOUT)
        .build()
        .expect("config");
    assert!(!format!("{rl:?}").contains("right"), "{rl:?}");
    let lock = rl.try_acquire("r", TTL).await.expect("authenticated");
    assert!(
        !format!("{lock:?}").contains(lock.token().expose()),
        "Debug hides the token"
    );
    lock.release().await.expect("release");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn out_of_memory_nodes_are_failed_votes() {
    let mut cluster = Cluster::start(3);
    // Two more masters that refuse every write: maxmemory below what they already use.
    let oom: Vec<usize> = (0..2)
        .map(|_| cluster.add(&["--maxmemory", "1", "--maxmemory-policy", "noeviction"]))
        .collect();
    let rl = client(&cluster, NODE_TIMEOUT);
    let lock = rl
        .try_acquire("r", TTL)
        .await
        .expect("3 of 5 accept writes");
    let report = lock.release().await.expect("release");
    assert_eq!(report.successes(), 3);

    let lock = rl.try_acquire("r", TTL).await.expect("acquire");
    for i in &oom {
        let text = failure_text(lock.report(), *i);
        assert!(
            text.contains("OOM") || text.contains("not waited for"),
            "node {i}: {text}"
        );
    }
    lock.release().await.expect("release");

    // With a majority out of memory, acquire fails as an outage, naming OOM.
    cluster.kill(0);
    let err = rl
        .try_acquire("r", TTL)
        .await
        .expect_err("only 2 of 5 writable");
    assert!(err.is_no_quorum(), "{err}");
    assert!(err.to_string().contains("OOM"), "{err}");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn a_replica_listed_as_a_master_is_a_failed_vote() {
    let mut cluster = Cluster::start(3);
    let primary_port = cluster.server(0).port().to_string();
    let replica = cluster.add(&["--replicaof", "127.0.0.1", &primary_port]);
    let other_replica = cluster.add(&["--replicaof", "127.0.0.1", &primary_port]);
    let rl = client(&cluster, NODE_TIMEOUT);
    let lock = rl
        .try_acquire("r", TTL)
        .await
        .expect("3 masters of 5 nodes");
    let report = lock.release().await.expect("release");
    for i in [replica, other_replica] {
        // A replica refuses the delete (READONLY) when it has replicated our key, and reports
        // it missing when it has not yet, unless the release was decided before it answered:
        // never a success either way. (The no-quorum case below names READONLY for certain.)
        let text = failure_text(&report, i);
        assert!(
            text.to_uppercase().contains("READONLY")
                || text.contains("key not found")
                || matches!(
                    report.iter().nth(i).map(|r| r.outcome()),
                    Some(NodeOutcome::NoReply)
                ),
            "node {i}: {text}"
        );
    }
    let key = lock_key(b"r");
    let replicated = || {
        [replica, other_replica]
            .iter()
            .all(|i| cluster.get(*i, &key).is_none())
    };
    assert!(eventually(Duration::from_secs(3), replicated).await);
    // Dropping one master leaves 2 writable of 5: no quorum, READONLY named.
    cluster.kill(2);
    let err = rl.try_acquire("r", TTL).await.expect_err("2 writable of 5");
    assert!(err.is_no_quorum(), "{err}");
    assert!(err.to_string().to_uppercase().contains("READONLY"), "{err}");
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn a_lock_key_of_the_wrong_type_is_never_overwritten() {
    let cluster = Cluster::start(5);
    let key = lock_key(b"typed");
    for i in [0, 1] {
        let _: i64 = cluster.run(i, redis::cmd("RPUSH").arg(&key).arg("not-a-lock"));
    }
    let rl = client(&cluster, NODE_TIMEOUT);
    let lock = rl.try_acquire("typed", TTL).await.expect("3 of 5");
    for i in [0, 1] {
        assert!(
            matches!(
                lock.report().iter().nth(i).map(|r| r.outcome()),
                Some(NodeOutcome::HeldByOther { expires_in: None } | NodeOutcome::NoReply)
            ),
            "node {i}: {}",
            lock.report()
        );
    }
    let report = lock.release().await.expect("release");
    crate::settled(&rl).await;
    for i in [0, 1] {
        // GET on a list is WRONGTYPE: the node fails the vote (unless the release was decided
        // before it answered), and the list is untouched.
        let text = failure_text(&report, i);
        assert!(
            text.contains("WRONGTYPE")
                || matches!(
                    report.iter().nth(i).map(|r| r.outcome()),
                    Some(NodeOutcome::NoReply)
                ),
            "node {i}: {text}"
        );
        let len: i64 = cluster.run(i, redis::cmd("LLEN").arg(&key));
        assert_eq!(len, 1);
    }
    for i in 2..5 {
        assert_eq!(cluster.get(i, &key), None);
    }
}

#[tokio::test]
async fn a_node_busy_running_a_script_is_a_failed_vote() {
    let cluster =
        Cluster::start_with_args(5, Persistence::None, &["--busy-reply-threshold", "100"]);
    // Connected while the nodes are idle, and a node timeout no loaded machine reaches: a
    // busy node answers BUSY at once, and the test is about that answer, not a timeout.
    let rl = client(&cluster, Duration::from_secs(2));
    rl.connect_all().await.expect("connect");
    // Keep three nodes inside a long-running script (from other connections), up to 10 s:
    // the test kills the scripts once it has its answer.
    let mut blockers = Vec::new();
    for i in [2, 3, 4] {
        let url = cluster.server(i).url();
        blockers.push(std::thread::spawn(move || {
            let mut con = redis::Client::open(url).expect("url").get_connection().expect("connect");
            let script = "local t = redis.call('TIME') local start = t[1] while true do t = redis.call('TIME') if t[1] - start > 10 then break end end return 1";
            let _: redis::RedisResult<i64> = redis::cmd("EVAL").arg(script).arg(0).query(&mut con);
        }));
    }
    // Until each node answers BUSY: its script started and passed the threshold. A fixed
    // wait (400 ms) was too short on a loaded machine, where a blocker may not even have
    // connected by then.
    for i in [2, 3, 4] {
        let url = cluster.server(i).url();
        let busy = || {
            let reply = redis::Client::open(url.clone())
                .and_then(|client| client.get_connection())
                .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
            reply.is_err_and(|err| err.to_string().contains("BUSY"))
        };
        assert!(
            eventually(Duration::from_secs(30), busy).await,
            "node {i} never ran the blocking script"
        );
    }
    // Three of five busy: an outage, not contention, decided only once all three have
    // answered BUSY (two grants cannot win), so each is named.
    let err = rl
        .try_acquire("busy", TTL)
        .await
        .expect_err("3 of 5 are busy");
    assert!(err.is_no_quorum(), "{err}");
    let report = err.report().expect("report");
    for i in [2, 3, 4] {
        let text = failure_text(report, i);
        assert!(
            matches!(
                report.iter().nth(i).map(|r| r.outcome()),
                Some(NodeOutcome::Failed(NodeError::Redis(_)))
            ),
            "node {i}: {text}"
        );
        assert!(text.contains("BUSY"), "node {i}: {text}");
    }
    for i in [2, 3, 4] {
        let url = cluster.server(i).url();
        let mut con = redis::Client::open(url)
            .expect("url")
            .get_connection()
            .expect("connect");
        let _: redis::RedisResult<()> = redis::cmd("SCRIPT").arg("KILL").query(&mut con);
    }
    for b in blockers {
        b.join().expect("blocker thread");
    }
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}

#[tokio::test]
async fn a_node_still_loading_its_dataset_is_a_failed_vote() {
    // One healthy master and one that loads its dataset slowly (200 µs a key) and answers
    // while it does: two votes are needed, so the round is decided only by the loading one's
    // answer, which is a failed vote (an outage), named in the error.
    let mut cluster = Cluster::start(1);
    let slow = cluster.add(&[
        "--key-load-delay",
        "200",
        "--loading-process-events-interval-bytes",
        "1024",
    ]);
    let mut fill = redis::pipe();
    for n in 0..10_000 {
        fill.cmd("SET").arg(format!("filler:{n}")).arg(n).ignore();
    }
    let _: () = fill
        .query(&mut cluster.server(slow).inspect())
        .expect("fill");
    let _: () = cluster.run(slow, &redis::cmd("SAVE"));
    // Back from its dump: about two seconds of LOADING replies.
    cluster.restart(slow);
    let rl = client(&cluster, NODE_TIMEOUT);
    let err = rl
        .try_acquire("loading", TTL)
        .await
        .expect_err("1 of 2 is loaded");
    assert!(err.is_no_quorum(), "{err}");
    let text = failure_text(err.report().expect("report"), slow);
    assert!(text.contains("loading the dataset"), "node {slow}: {text}");
    let loaded = || {
        redis::cmd("SET")
            .arg("probe")
            .arg(1)
            .query::<()>(&mut cluster.server(slow).inspect())
            .is_ok()
    };
    assert!(eventually(Duration::from_secs(10), loaded).await);
    crate::settled(&rl).await;
    cluster.assert_no_keys_under(PREFIX);
}
