//! Where a node's servers are found: a standalone master at a fixed address, whatever master
//! the sentinels of a Redis Sentinel group name at each connection, or the masters of a Redis
//! Cluster (`crate::voters::shards` routes each request to its slot's master).
//!
//! A Sentinel-resolved node is still one vote. Its master is looked up through its sentinels
//! (the redis crate's [`SentinelClient`], which also checks that the server it names says it is
//! a master) whenever the node connects: at first use, after a broken connection, and after
//! the server answered `READONLY` (it was demoted by a failover). A failover brings another
//! server, with another `run_id`, into the node: one server, one vote, and the restart grace
//! and the fence re-seeding treat it as a restart of that vote, because it may have lost keys
//! that were not replicated yet.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Client, ConnectionAddr, RedisError};

use crate::voters::cluster::{CLUSTER_SCHEME, ClusterNode};
use crate::voters::sentinel::{
    LOOKUP_SLACK, REWATCH_DELAY, SENTINEL_SCHEME, SentinelNode, watch_for_switch,
};
use crate::voters::url::invalid;

/// Anything that names one node: a URL (`redis://host:port/db`, `rediss://…` with TLS
/// compiled in, `unix:///path`, `redis+sentinel://host:port,host:port/master` for a master
/// found through Redis Sentinel, or `redis+cluster://host:port,host:port` for a Redis Cluster),
/// a [`redis::ConnectionInfo`], an existing [`redis::Client`], a [`SentinelNode`], a
/// [`ClusterNode`], or a [`NodeSource`].
///
/// URLs of every kind mix in one list; to mix other kinds, turn each into a [`NodeSource`]
/// first.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rl = redquorum::RedLock::new([
///     "redis://127.0.0.1:7001",
///     "redis://127.0.0.1:7002",
///     "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/orders",
///     "redis+cluster://127.0.0.1:7100,127.0.0.1:7101,127.0.0.1:7102",
/// ])?;
/// assert_eq!(rl.node_count(), 4);
///
/// use redquorum::IntoNode;
/// let mixed = redquorum::RedLock::new([
///     redis::Client::open("redis://127.0.0.1:7001")?.into_node()?,
///     redquorum::SentinelNode::new("orders", ["redis://127.0.0.1:26379"])?.into_node()?,
///     "redis://127.0.0.1:7003".into_node()?,
/// ])?;
/// # Ok(()) }
/// ```
pub trait IntoNode {
    /// Turns `self` into the source of one node.
    ///
    /// # Errors
    /// The redis crate's error when a URL cannot be parsed or names an unsupported scheme,
    /// or a Sentinel URL names no sentinel or no master.
    fn into_node(self) -> Result<NodeSource, RedisError>;
}

/// One node, as given to [`RedLock::new`](crate::RedLock::new): a standalone master, the
/// master a Sentinel group names ([`SentinelNode`]), or a Redis Cluster ([`ClusterNode`]).
/// Opaque; made by [`IntoNode`].
#[derive(Clone)]
pub struct NodeSource {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    /// Boxed: a client is large, and a node is made once.
    Master(Box<Client>),
    Sentinel(Arc<Resolver>),
    Cluster(Arc<Seeds>),
}

/// A Cluster node's seeds, and which one the next pub/sub listener tries.
struct Seeds {
    cluster: ClusterNode,
    next: AtomicUsize,
}

/// The lookup of one Sentinel-resolved node's master.
struct Resolver {
    sentinel: SentinelNode,
    /// The redis crate's client, which keeps a connection to the sentinel that answered
    /// last; one lookup at a time (the node's connection and its pub/sub listener share it).
    client: tokio::sync::Mutex<SentinelClient>,
}

/// What the duplicate check compares: two entries with the same place name one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place<'a> {
    /// A standalone master's address.
    Address(&'a ConnectionAddr),
    /// A Sentinel group's master name and its sentinels' addresses, in the given order.
    Sentinel(&'a str, Vec<&'a ConnectionAddr>),
    /// A Redis Cluster's seeds' addresses, in the given order.
    Cluster(Vec<&'a ConnectionAddr>),
}

impl NodeSource {
    /// A client for the server this node speaks for now: the fixed master, or the master
    /// the sentinels name (checked to say it is a master). For a Cluster node, one seed after
    /// the other (what the pub/sub listener needs: a cluster carries every `PUBLISH` to all
    /// its nodes); its requests go through `crate::voters::shards` instead.
    ///
    /// # Errors
    /// A Sentinel lookup that found no sentinel answering, or none naming a reachable
    /// master, is the redis crate's error.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped lookup leaves the sentinel connection cache as the redis
    /// crate's cancel-safe lookup leaves it.
    pub(crate) async fn client(&self) -> Result<Client, RedisError> {
        match &self.kind {
            Kind::Master(client) => Ok((**client).clone()),
            Kind::Sentinel(resolver) => resolver.client.lock().await.async_get_client().await,
            Kind::Cluster(seeds) => {
                let turn = seeds.next.fetch_add(1, Ordering::Relaxed);
                let count = seeds.cluster.seeds.len().max(1);
                let seed = seeds.cluster.seeds.get(turn % count).cloned();
                Client::open(seed.ok_or_else(|| invalid("a Cluster node needs a seed"))?)
            }
        }
    }

    /// A Cluster node's seeds; `None` for any other node.
    pub(crate) fn cluster_seeds(&self) -> Option<&[redis::ConnectionInfo]> {
        match &self.kind {
            Kind::Cluster(seeds) => Some(&seeds.cluster.seeds),
            Kind::Master(_) | Kind::Sentinel(_) => None,
        }
    }

    /// The standalone master at `host:port` of this Cluster node, reached with the seeds'
    /// settings (credentials, TLS); `None` for another node kind.
    pub(crate) fn shard(&self, host: &str, port: u16) -> Option<NodeSource> {
        let client = Client::open(self.shard_info(host, port)?).ok()?;
        Some(NodeSource {
            kind: Kind::Master(Box::new(client)),
        })
    }

    /// How to reach the server at `host:port` of this Cluster node: the first seed's settings
    /// at that address; `None` for another node kind.
    pub(crate) fn shard_info(&self, host: &str, port: u16) -> Option<redis::ConnectionInfo> {
        let seed = self.cluster_seeds()?.first()?;
        let addr = match seed.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        Some(seed.clone().set_addr(addr))
    }

    /// How long finding and connecting to this node's server may take, given a connection's
    /// own `timeout`: a Sentinel lookup gets [`LOOKUP_SLACK`] more.
    pub(crate) fn lookup_budget(&self, timeout: Duration) -> Duration {
        match self.kind {
            Kind::Master(_) | Kind::Cluster(_) => timeout,
            Kind::Sentinel(_) => timeout.saturating_add(LOOKUP_SLACK),
        }
    }

    /// Whether the server behind this node can change (a failover): a `READONLY` answer
    /// then means "look the master up again", not "misconfigured".
    pub(crate) fn follows_failovers(&self) -> bool {
        matches!(self.kind, Kind::Sentinel(_))
    }

    /// Where this node is, for the duplicate check.
    pub(crate) fn place(&self) -> Place<'_> {
        match &self.kind {
            Kind::Master(client) => Place::Address(client.get_connection_info().addr()),
            Kind::Sentinel(resolver) => Place::Sentinel(
                &resolver.sentinel.master,
                resolver
                    .sentinel
                    .sentinels
                    .iter()
                    .map(redis::ConnectionInfo::addr)
                    .collect(),
            ),
            Kind::Cluster(seeds) => Place::Cluster(
                seeds
                    .cluster
                    .seeds
                    .iter()
                    .map(redis::ConnectionInfo::addr)
                    .collect(),
            ),
        }
    }

    /// Whether this node connects to its servers with TLS (a Sentinel-resolved master never
    /// does).
    #[cfg(any(feature = "tls", feature = "tls-aws-lc-rs"))]
    pub(crate) fn uses_tls(&self) -> bool {
        let tls = |addr: &ConnectionAddr| matches!(addr, ConnectionAddr::TcpTls { .. });
        match &self.kind {
            Kind::Master(client) => tls(client.get_connection_info().addr()),
            Kind::Sentinel(_) => false,
            Kind::Cluster(seeds) => seeds.cluster.seeds.iter().any(|seed| tls(seed.addr())),
        }
    }

    /// How reports name a node of several servers: `sentinel <master>@<sentinel>,…` or
    /// `cluster <seed>,…`; `None` for a standalone master.
    pub(crate) fn group_name(&self) -> Option<String> {
        match &self.kind {
            Kind::Master(_) => None,
            Kind::Sentinel(resolver) => Some(resolver.sentinel.to_string()),
            Kind::Cluster(seeds) => Some(seeds.cluster.to_string()),
        }
    }
}

impl fmt::Debug for NodeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Addresses only: never a URL, which may carry a password.
        match &self.kind {
            Kind::Master(client) => f
                .debug_tuple("Master")
                .field(&client.get_connection_info().addr().to_string())
                .finish(),
            Kind::Sentinel(resolver) => f
                .debug_tuple("Sentinel")
                .field(&resolver.sentinel.to_string())
                .finish(),
            Kind::Cluster(seeds) => f
                .debug_tuple("Cluster")
                .field(&seeds.cluster.to_string())
                .finish(),
        }
    }
}

impl IntoNode for NodeSource {
    fn into_node(self) -> Result<NodeSource, RedisError> {
        Ok(self)
    }
}

impl IntoNode for Client {
    fn into_node(self) -> Result<NodeSource, RedisError> {
        Ok(NodeSource {
            kind: Kind::Master(Box::new(self)),
        })
    }
}

impl IntoNode for redis::ConnectionInfo {
    fn into_node(self) -> Result<NodeSource, RedisError> {
        Client::open(self)?.into_node()
    }
}

impl IntoNode for &str {
    fn into_node(self) -> Result<NodeSource, RedisError> {
        if self.starts_with(SENTINEL_SCHEME) {
            SentinelNode::parse(self)?.into_node()
        } else if self.starts_with(CLUSTER_SCHEME) {
            ClusterNode::parse(self)?.into_node()
        } else {
            Client::open(self)?.into_node()
        }
    }
}

impl IntoNode for &&str {
    fn into_node(self) -> Result<NodeSource, RedisError> {
        (*self).into_node()
    }
}

impl IntoNode for String {
    fn into_node(self) -> Result<NodeSource, RedisError> {
        self.as_str().into_node()
    }
}

impl IntoNode for &String {
    fn into_node(self) -> Result<NodeSource, RedisError> {
        self.as_str().into_node()
    }
}

impl IntoNode for SentinelNode {
    fn into_node(self) -> Result<NodeSource, RedisError> {
        let settings = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(self.master_settings.clone());
        let client = SentinelClient::build(
            self.sentinels.clone(),
            self.master.clone(),
            Some(settings),
            SentinelServerType::Master,
        )?;
        Ok(NodeSource {
            kind: Kind::Sentinel(Arc::new(Resolver {
                sentinel: self,
                client: tokio::sync::Mutex::new(client),
            })),
        })
    }
}

impl IntoNode for ClusterNode {
    fn into_node(self) -> Result<NodeSource, RedisError> {
        Ok(NodeSource {
            kind: Kind::Cluster(Arc::new(Seeds {
                cluster: self,
                next: AtomicUsize::new(0),
            })),
        })
    }
}

impl NodeSource {
    /// Resolves when a sentinel names another master than `current` (`host:port`, as the
    /// lookup gave it) for this node: when one announces a switch (`+switch-master` naming
    /// this master), when the watched sentinel names another address at the start (with
    /// `compare`), or when its answer changes (asked every [`REPOLL_EVERY`]). A demoted master keeps accepting writes until
    /// the sentinels reconfigure it, which can take seconds; a node that follows the
    /// sentinels moves its vote to the new master as soon as they switch. The sentinels are
    /// watched one at a time, in turn: one that does not connect, subscribe or answer within
    /// [`SENTINEL_TIMEOUT`] is left for the next. Never resolves for a standalone master.
    ///
    /// `compare` is off right after a reconnect that found the same master again: sentinels
    /// that disagree for a moment (one still naming a dead master) must not make the node
    /// reconnect in a loop; announcements and the periodic asking still count.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it only stops watching (its connections close with it).
    pub(crate) async fn switched_from(&self, current: &str, compare: bool) {
        let Kind::Sentinel(resolver) = &self.kind else {
            return std::future::pending().await;
        };
        let node = &resolver.sentinel;
        for sentinel in node.sentinels.iter().cycle() {
            match watch_for_switch(sentinel, &node.master, current, compare).await {
                Ok(()) => return,
                Err(err) => {
                    tracing::debug!(master = %node.master, sentinel = %sentinel.addr(), error = %err, "cannot watch this sentinel; trying the next");
                    tokio::time::sleep(REWATCH_DELAY).await;
                }
            }
        }
    }
}
