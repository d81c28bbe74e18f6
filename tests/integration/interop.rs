//! Sharing a lock with other languages' Redlock clients: node-redlock (v4, from npm, installed
//! by `.ci/test` into `tests/interop/node_modules`) and pottery (Python, from PyPI, installed
//! by `.ci/test` into `tests/interop/.venv`) against redquorum's shared key layout, on five
//! real masters, each blocking the other both ways.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use redquorum::{ConfigError, Error, KeyLayout, RedLock};
use redquorum_testkit::Cluster;

const RESOURCE: &str = "jobs:nightly";
const TTL: Duration = Duration::from_secs(10);

/// A running peer, killed (by its pid) if the test ends before it does, also on a panic.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Another language's client.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// node-redlock 4: the key is the name.
    NodeRedlock,
    /// pottery 3: the key is `redlock:` + the name.
    Pottery,
}

impl Kind {
    /// The prefix redquorum needs to name the key as this peer does.
    fn prefix(self) -> &'static str {
        match self {
            Self::NodeRedlock => "",
            Self::Pottery => "redlock:",
        }
    }

    fn key(self) -> String {
        format!("{}{RESOURCE}", self.prefix())
    }
}

/// The peer, or a panic that says how to install it: never skipped.
fn peer(cluster: &Cluster, kind: Kind, mode: &str) -> (Peer, BufReader<ChildStdout>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    let mut command = match kind {
        Kind::NodeRedlock => {
            assert!(
                dir.join("node_modules/redlock").is_dir(),
                "node-redlock is not installed: run `npm ci --prefix tests/interop` (Node.js 18+), or `bash .ci/test`, which does"
            );
            let mut node = Command::new("node");
            node.arg(dir.join("redlock-peer.js"));
            node
        }
        Kind::Pottery => {
            let python = dir.join(".venv/bin/python");
            assert!(
                python.is_file(),
                "pottery is not installed: run `python3 -m venv tests/interop/.venv && tests/interop/.venv/bin/pip install -r tests/interop/requirements.txt`, or `bash .ci/test`, which does"
            );
            let mut python = Command::new(python);
            python.arg(dir.join("pottery_peer.py"));
            python
        }
    };
    let ports: Vec<String> = (0..cluster.len())
        .map(|i| cluster.server(i).port().to_string())
        .collect();
    let mut child = command
        .arg(ports.join(","))
        .arg(RESOURCE)
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the peer's interpreter (`bash .ci/test` installs it)");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    (Peer(child), stdout)
}

fn next_line(stdout: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    stdout.read_line(&mut line).expect("peer output");
    line.trim().to_owned()
}

/// Runs the peer in `try` mode to the end: what it said first.
fn peer_tries(cluster: &Cluster, kind: Kind) -> String {
    let (mut peer, mut stdout) = peer(cluster, kind, "try");
    let first = next_line(&mut stdout);
    assert!(peer.0.wait().expect("peer").success(), "peer said {first}");
    first
}

/// Mutation: the shared layout ignored (the key stays `{jobs:nightly}`): redquorum takes the
/// lock node-redlock holds, and node-redlock the one redquorum holds.
#[tokio::test]
async fn a_lock_shared_with_node_redlock_blocks_both_ways() {
    shares_both_ways(Kind::NodeRedlock).await;
}

/// The same with pottery, whose key is `redlock:` + the name. Mutation: as above.
#[tokio::test]
async fn a_lock_shared_with_pottery_blocks_both_ways() {
    shares_both_ways(Kind::Pottery).await;
}

async fn shares_both_ways(kind: Kind) {
    let cluster = Cluster::start(5);
    let key = kind.key();
    let rl = RedLock::builder(cluster.urls())
        .key_prefix(kind.prefix())
        .key_layout(KeyLayout::Shared)
        .per_node_timeout(Duration::from_millis(250))
        .build()
        .expect("config");
    rl.connect_all().await.expect("connected");

    // The peer holds it: redquorum is refused, and sees the peer's value as holder.
    let (mut holder, mut stdout) = peer(&cluster, kind, "hold");
    let said = next_line(&mut stdout);
    let value = said
        .strip_prefix("acquired ")
        .unwrap_or_else(|| panic!("{kind:?} took it: {said}"));
    let on_masters = (0..5)
        .filter(|i| cluster.get(*i, key.as_bytes()).as_deref() == Some(value.as_bytes()))
        .count();
    assert!(on_masters >= 3, "{kind:?}'s key on {on_masters} masters");
    let err = rl
        .try_acquire(RESOURCE, TTL)
        .await
        .expect_err("the peer holds it");
    assert!(err.is_conflict(), "{err}");
    holder
        .0
        .stdin
        .as_mut()
        .expect("stdin")
        .write_all(b"release\n")
        .expect("tell the peer");
    assert_eq!(next_line(&mut stdout), "released");
    assert!(holder.0.wait().expect("peer").success());

    // redquorum holds it: the peer is refused; released, the peer takes it.
    let lock = rl
        .try_acquire(RESOURCE, TTL)
        .await
        .expect("free after the peer released it");
    // On a majority: one master may still hold the peer's key (see below).
    let token = lock.token().expose().as_bytes().to_vec();
    let holding = || {
        (0..5)
            .filter(|i| cluster.get(*i, key.as_bytes()) == Some(token.clone()))
            .count()
    };
    assert!(
        crate::eventually(Duration::from_secs(3), || holding() >= 3).await,
        "the key is exactly the peer's name for it"
    );
    assert_eq!(peer_tries(&cluster, kind), "busy");
    lock.release().await.expect("release");
    crate::settled(&rl).await;
    // Nothing of redquorum's is left. (pottery's own release returns at its quorum and the
    // process exits, so one of its deletes may never be sent: a key of the peer's can stay
    // until its ttl on one master. The peer's keys are its business.)
    let ours: Vec<usize> = (0..5)
        .filter(|i| cluster.get(*i, key.as_bytes()) == Some(token.clone()))
        .collect();
    assert!(ours.is_empty(), "redquorum's key left on {ours:?}");
    assert!(peer_tries(&cluster, kind).starts_with("acquired "));
    if matches!(kind, Kind::NodeRedlock) {
        // node-redlock's release waits for every master: nothing of anyone's is left.
        assert!(cluster.keys().is_empty(), "{:?}", cluster.keys());
    }
}

#[test]
fn the_shared_layout_refuses_what_needs_keys_of_its_own() {
    let shared = || RedLock::builder(["redis://127.0.0.1:1"]).key_layout(KeyLayout::Shared);
    let needs_tagged = |result: Result<(), Error>| {
        matches!(result, Err(Error::Config(ConfigError::NeedsTaggedKeys(_))))
    };
    assert!(needs_tagged(shared().fencing(true).build().map(drop)));
    let rl = shared().build().expect("plain locks are fine");
    assert!(needs_tagged(
        rl.election("e", Duration::from_secs(1)).map(drop)
    ));
    assert!(needs_tagged(rl.semaphore("s", 2).map(drop)));
}
