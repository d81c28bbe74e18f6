//! One configured voter: a Redis master (standalone, or found through Sentinel) behind one
//! self-repairing connection (`crate::voters::server_link`), or a Redis Cluster whose masters each have
//! one (`crate::voters::shards`).
//!
//! Every request names the key it is about, so a Cluster voter can send it to the master of
//! that key's hash slot; the other kinds ignore it.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::{ConnectionAddr, RedisError, ServerErrorKind};

use crate::core::node_id::NodeId;
use crate::core::resource::slot_of;
use crate::core::server_clock::ServerClock;
use crate::errors::node_error::NodeError;
use crate::voters::server_identity::ServerIdentities;
use crate::voters::server_link::{Connected, ServerLink, ServerRole};
use crate::voters::shards::Shards;
use crate::voters::source::{NodeSource, Place};

/// One configured voter.
pub(crate) struct Node {
    id: NodeId,
    source: NodeSource,
    identity: Identity,
    restart_grace: Option<Duration>,
    route: Route,
    /// A request to this node timed out and nothing has come back from it since: a hung (or
    /// paused) master on a live connection. Rounds that would wait for every node stop
    /// waiting for a suspect one; its requests still go out, and its first answer clears it.
    suspect: AtomicBool,
}

/// Where a voter's requests go.
enum Route {
    /// One server (a standalone master, or the master the sentinels name).
    One(ServerLink),
    /// The master of the key's slot.
    Cluster(Arc<Shards>),
}

/// Where a request that a Cluster master redirected goes instead.
pub(crate) struct Redirected {
    /// A connection to the master that serves the slot (`MOVED`) or is importing it (`ASK`).
    pub(crate) ready: Connected,
    /// `ASK`: the request must follow `ASKING`, in the same write.
    pub(crate) asking: bool,
}

/// What makes two node entries the same server (or Sentinel group, or cluster), for the
/// duplicate check.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    Tcp(String, u16),
    Unix(std::path::PathBuf),
    /// A master name and its sentinels' places, sorted.
    Sentinel(String, Vec<Identity>),
    /// A cluster's seeds' places, sorted.
    Cluster(Vec<Identity>),
}

impl Identity {
    /// The identity of an address, and how reports name it.
    fn of(addr: &ConnectionAddr) -> (Self, String) {
        match addr {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => (
                Self::Tcp(canonical_host(host), *port),
                format!("{}:{port}", bracket_ipv6(host)),
            ),
            ConnectionAddr::Unix(path) => (Self::Unix(path.clone()), path.display().to_string()),
            // `ConnectionAddr` is non-exhaustive: any future kind is compared by its text.
            #[allow(unreachable_patterns)]
            other => (Self::Tcp(other.to_string(), 0), other.to_string()),
        }
    }

    /// The places of several servers, sorted and without repeats.
    fn places(addrs: Vec<&ConnectionAddr>) -> Vec<Self> {
        let mut places: Vec<Self> = addrs.into_iter().map(|a| Self::of(a).0).collect();
        places.sort_by_key(|place| format!("{place:?}"));
        places.dedup();
        places
    }
}

impl Node {
    pub(crate) fn new(
        index: usize,
        source: NodeSource,
        connect_timeout: Duration,
        restart_grace: Option<Duration>,
        servers: Arc<ServerIdentities>,
    ) -> Self {
        #[cfg(any(feature = "tls", feature = "tls-aws-lc-rs"))]
        if source.uses_tls() {
            crate::voters::tls::ensure_crypto_provider();
        }
        let (identity, address) = match source.place() {
            Place::Address(addr) => Identity::of(addr),
            Place::Sentinel(master, sentinels) => (
                Identity::Sentinel(master.to_owned(), Identity::places(sentinels)),
                source.group_name().unwrap_or_default(),
            ),
            Place::Cluster(seeds) => (
                Identity::Cluster(Identity::places(seeds)),
                source.group_name().unwrap_or_default(),
            ),
        };
        let id = NodeId::new(index, address.into());
        let route = if source.cluster_seeds().is_some() {
            Route::Cluster(Arc::new(Shards::new(
                index,
                source.clone(),
                connect_timeout,
                restart_grace,
                servers,
            )))
        } else {
            Route::One(ServerLink::new(
                id.clone(),
                source.clone(),
                connect_timeout,
                restart_grace,
                servers,
                if source.follows_failovers() {
                    ServerRole::Sentinel
                } else {
                    ServerRole::Fixed
                },
            ))
        };
        Self {
            id,
            source,
            identity,
            restart_grace,
            route,
            suspect: AtomicBool::new(false),
        }
    }

    /// Whether a request to this node timed out with no answer from it since.
    pub(crate) fn is_suspect(&self) -> bool {
        self.suspect.load(Ordering::Relaxed)
    }

    /// Records that a request timed out (`true`) or that the node answered (`false`). A
    /// Cluster voter whose request timed out reads its slot map again soon: the cluster may be
    /// failing a hung master over.
    pub(crate) fn set_suspect(&self, suspect: bool) {
        if let (true, Route::Cluster(shards)) = (suspect, &self.route) {
            shards.refresh_soon();
        }
        if self.suspect.swap(suspect, Ordering::Relaxed) != suspect {
            tracing::debug!(node = %self.id, suspect, "node suspicion changed");
        }
    }

    pub(crate) fn id(&self) -> &NodeId {
        &self.id
    }

    /// True when both entries name the same server (same port, and the same host once
    /// `localhost` and the loopback addresses are treated as one), the same master of the
    /// same sentinels, or the same cluster seeds.
    pub(crate) fn same_server(&self, other: &Node) -> bool {
        self.identity == other.identity
    }

    /// Whether this voter is a Redis Cluster: its requests are routed by hash slot, so every
    /// key of one request must share a slot.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.route, Route::Cluster(_))
    }

    /// A connection to send a request about `key` on (report a broken one with
    /// [`Connected::report_broken`]): the voter's server, or the master of `key`'s slot.
    ///
    /// Fails at once while that server is known to be down; waits while a connection attempt
    /// is under way (the caller bounds that wait with its per-node timeout). Must run inside a
    /// tokio runtime: supervisors are spawned on first use.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits for a connection (or the cluster's slot map).
    pub(crate) async fn connection(&self, key: &[u8]) -> Result<Connected, NodeError> {
        if let Some(ready) = self.ready_to_send(key) {
            return Ok(ready);
        }
        // Boxed: waiting for a connection (or, on a Cluster voter, for the slot map) is rare,
        // and its future would size every request's, which the round allocates once per node.
        Box::pin(self.wait_for_connection(key)).await
    }

    /// What [`Node::connection`] answers at once, without waiting: the connection to the
    /// server of `key`, when there is one now (on a Cluster voter, this keeps the slot map
    /// read, as every request does).
    fn ready_to_send(&self, key: &[u8]) -> Option<Connected> {
        match &self.route {
            Route::One(link) => link.ready_now(),
            Route::Cluster(shards) => shards.ready_now(slot_of(key)),
        }
    }

    /// [`Node::connection`] when no connection is ready.
    ///
    /// # Cancel safety
    /// As [`Node::connection`].
    async fn wait_for_connection(&self, key: &[u8]) -> Result<Connected, NodeError> {
        match &self.route {
            Route::One(link) => link.connection().await,
            Route::Cluster(shards) => shards.connection(slot_of(key)).await,
        }
    }

    /// For a Cluster voter whose master answered `err` with `MOVED` or `ASK`: a connection to
    /// the master to ask instead (after `MOVED`, the slot is routed there from now on). `None`
    /// for any other answer or voter. The redirected request was not run: sending it again
    /// is safe.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn redirect(
        &self,
        err: &RedisError,
        from: &Connected,
    ) -> Option<Result<Redirected, NodeError>> {
        let Route::Cluster(shards) = &self.route else {
            return None;
        };
        let (address, _) = err.redirect_node()?;
        let address = with_host(address, from);
        let asking = err.kind() == redis::ErrorKind::Server(ServerErrorKind::Ask);
        self.learn(err, from);
        Some(
            shards
                .connection_to(&address)
                .await
                .map(|ready| Redirected { ready, asking }),
        )
    }

    /// For a Cluster voter whose master (reached through `from`) answered `err` with `MOVED`:
    /// the slot is routed to the master named from now on, and the one that answered is asked
    /// its role again before its next vote. Nothing otherwise.
    pub(crate) fn learn(&self, err: &RedisError, from: &Connected) {
        if let (Route::Cluster(shards), Some((address, slot))) = (&self.route, err.redirect_node())
            && err.kind() == redis::ErrorKind::Server(ServerErrorKind::Moved)
        {
            shards.moved(slot, &with_host(address, from), Some(from));
        }
    }

    /// What a request sent outside a round (a re-seed, a fence sweep) learns from its error:
    /// a redirection ([`learn`](Self::learn)), or a broken connection, which the supervisor is
    /// told of so it reconnects (a round's requests do the same in `crate::engine::voter`).
    pub(crate) fn learn_from_error(&self, err: &RedisError, from: &Connected) {
        self.learn(err, from);
        if crate::voters::server_link::breaks_connection(err) {
            from.report_broken();
        }
    }

    /// With a restart grace configured: fails when the server `ready` reaches has been up for
    /// less than the grace, so it may have restarted empty while someone else's lock was still
    /// valid.
    pub(crate) fn check_settled(&self, ready: &Connected) -> Result<(), NodeError> {
        let settled = ready.check_settled(self.restart_grace);
        if let (Err(NodeError::NotMaster), Route::Cluster(shards)) = (&settled, &self.route) {
            // The map named a replica: it is stale.
            shards.refresh_soon();
        }
        settled
    }

    /// Waits until the first connection attempt has finished, either way, and says how it
    /// went (for a Cluster voter: the slot map read, and every master connected).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn wait_connected(&self) -> Result<(), NodeError> {
        match &self.route {
            Route::One(link) => link.connection().await.map(drop),
            Route::Cluster(shards) => shards.connect_all().await,
        }
    }

    /// Whether the server behind this node can change with a failover (Sentinel), so that a
    /// `READONLY` answer calls for looking the master up again.
    pub(crate) fn follows_failovers(&self) -> bool {
        self.source.follows_failovers()
    }

    /// The server inside the voter that serves `key` now (`host:port`): the master a
    /// Sentinel-resolved voter speaks for, or a cluster's master of `key`'s slot; `None` for
    /// a standalone master, or while not known.
    pub(crate) fn server(&self, key: &[u8]) -> Option<Arc<str>> {
        match &self.route {
            Route::One(link) => link.ready_now().and_then(|ready| ready.server()),
            Route::Cluster(shards) => shards.owner(slot_of(key)),
        }
    }

    /// What the server that serves `key` said it runs (`valkey 9.1.2`, `redis 7.0.15`) on the
    /// connection this node has now; `None` while not connected, or when it would not say.
    pub(crate) fn software(&self, key: &[u8]) -> Option<Arc<str>> {
        self.ready_now(key)?.software.clone()
    }

    /// The wall clock of the server that serves `key`, as read on the connection this node
    /// has now; `None` while not connected, or when it would not say.
    pub(crate) fn server_clock(&self, key: &[u8]) -> Option<ServerClock> {
        self.ready_now(key)?.clock
    }

    /// Whether a round's vote from this node for `key` would count now: connected (not as
    /// another node's alias), to the master, past its restart grace (`check_settled`). Without
    /// waiting for a connection.
    pub(crate) fn would_vote_now(&self, key: &[u8]) -> bool {
        self.ready_now(key)
            .is_some_and(|ready| self.check_settled(&ready).is_ok())
    }

    /// The connection this node has now to the server that serves `key`, without waiting for
    /// one (nor reading a cluster's slot map).
    fn ready_now(&self, key: &[u8]) -> Option<Connected> {
        match &self.route {
            Route::One(link) => link.ready_now(),
            Route::Cluster(shards) => shards.link_of(slot_of(key))?.ready_now(),
        }
    }
}

/// A redirection's `host:port`, with the host of the server that answered when the cluster
/// announces none (`cluster-preferred-endpoint-type unknown-endpoint`: `MOVED 3999 :6381`).
fn with_host(address: &str, from: &Connected) -> String {
    match (address.strip_prefix(':'), from.server()) {
        (Some(port), Some(server)) => match crate::voters::slot_map::host_and_port(&server) {
            Some((host, _)) => format!("{host}:{port}"),
            None => address.to_owned(),
        },
        _ => address.to_owned(),
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The address only: never the URL, which may carry a password.
        f.debug_struct("Node")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The host as the address check compares it: `localhost`, `127.0.0.1`, `::1` and the
/// IPv4-mapped `::ffff:127.0.0.1` are one host; other addresses in their canonical form (a
/// mapped IPv4 address as the IPv4 address); names in lower case. What spelling cannot tell
/// (`127.1`, two names of one host) the `run_id` check finds at connect.
fn canonical_host(host: &str) -> String {
    let trimmed = host.trim_start_matches('[').trim_end_matches(']');
    if trimmed.eq_ignore_ascii_case("localhost") {
        return "loopback".to_owned();
    }
    match trimmed.parse::<IpAddr>().map(|ip| ip.to_canonical()) {
        Ok(IpAddr::V6(v6)) if v6.is_loopback() => "loopback".to_owned(),
        Ok(IpAddr::V4(v4)) if v4 == std::net::Ipv4Addr::LOCALHOST => "loopback".to_owned(),
        Ok(ip) => ip.to_string(),
        Err(_) => trimmed.to_ascii_lowercase(),
    }
}

fn bracket_ipv6(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(url: &str) -> Node {
        Node::new(
            0,
            crate::IntoNode::into_node(url).expect("valid url"),
            Duration::from_secs(1),
            None,
            ServerIdentities::new(),
        )
    }

    #[test]
    fn same_server_spelled_differently_is_detected() {
        let same = [
            ("redis://localhost:6379", "redis://127.0.0.1:6379"),
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/3"),
            ("redis://[::1]:6379", "redis://LOCALHOST:6379"),
            // Mutation: the loopback test before `to_canonical` lets the mapped form pass.
            ("redis://[::ffff:127.0.0.1]:6379", "redis://127.0.0.1:6379"),
            ("redis://[::ffff:10.0.0.7]:6379", "redis://10.0.0.7:6379"),
            (
                "redis://user:pw@example.com:7000",
                "redis://EXAMPLE.com:7000",
            ),
        ];
        for (a, b) in same {
            assert!(node(a).same_server(&node(b)), "{a} vs {b}");
        }
        let different = [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6380"),
            ("redis://127.0.0.2:6379", "redis://127.0.0.1:6379"),
            ("redis://a.example:6379", "redis://b.example:6379"),
        ];
        for (a, b) in different {
            assert!(!node(a).same_server(&node(b)), "{a} vs {b}");
        }
    }

    #[test]
    fn address_and_debug_never_show_credentials() {
        let n = node("redis://admin:s3cret@127.0.0.1:6379/2");
        assert_eq!(n.id().address(), "127.0.0.1:6379");
        let shown = format!("{n:?} {}", n.id());
        assert!(
            !shown.contains("s3cret") && !shown.contains("admin"),
            "{shown}"
        );
    }
}
