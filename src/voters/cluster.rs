//! A Redis Cluster as one node: its URL form and its seeds.

use std::fmt;

use redis::{ConnectionAddr, IntoConnectionInfo, RedisError};

use crate::voters::url::{invalid, redis_urls, write_addresses};

/// The URL scheme of a Redis Cluster node.
pub(super) const CLUSTER_SCHEME: &str = "redis+cluster://";
/// The port a cluster seed listens on when its URL gives none.
const REDIS_PORT: u16 = 6379;

/// A Redis Cluster as one node: its seeds (any of its nodes) tell its masters, and each
/// request goes to the master of its key's hash slot (every key redquorum keeps for one
/// resource shares that slot).
///
/// A cluster is **one vote**, however many shards it has: distinct resources spread over its
/// shards, which is how lock throughput grows past one server per node (see the deploy
/// guide's "Which topology", `deploy/README.md`). Each shard master is a server of its own for the identity check and the
/// restart grace: a shard that restarted (or a replica the cluster promoted) does not vote on
/// the slots it serves until the grace has passed. A failover inside the cluster can lose a key
/// (replication is asynchronous), which costs this node's vote for that resource, as a
/// restarted master does.
///
/// The URL form is `redis+cluster://[user:password@]host:port[,host:port…]`; the credentials
/// are every shard's. With TLS compiled in, give `rediss://` seeds to [`ClusterNode::new`]:
/// every shard is then reached with the first seed's TLS settings (untested: the tests
/// run no TLS cluster). A client whose nodes
/// include a cluster refuses a multi-resource lock whose resources do not share one hash slot
/// ([`ConfigError::CrossSlot`](crate::ConfigError::CrossSlot)).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let orders = redquorum::ClusterNode::new(["redis://10.0.0.7:7000", "redis://10.0.0.8:7000"])?;
/// let same = redquorum::ClusterNode::parse("redis+cluster://10.0.0.7:7000,10.0.0.8:7000")?;
/// assert_eq!(orders.to_string(), same.to_string());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ClusterNode {
    pub(super) seeds: Vec<redis::ConnectionInfo>,
}

impl ClusterNode {
    /// The cluster that the nodes at `seeds` belong to (URLs such as `redis://host:7000`, or
    /// connection infos); the first seed's credentials and TLS settings serve every shard.
    ///
    /// # Errors
    /// No seed, a seed that is a Unix socket or has a database other than 0 (a cluster has
    /// only database 0), or a seed the redis crate cannot parse.
    pub fn new<I>(seeds: I) -> Result<Self, RedisError>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        let seeds = seeds
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<Result<Vec<_>, _>>()?;
        if seeds.is_empty() {
            return Err(invalid("a Cluster node needs at least one seed"));
        }
        for seed in &seeds {
            if !matches!(
                seed.addr(),
                ConnectionAddr::Tcp(..) | ConnectionAddr::TcpTls { .. }
            ) {
                return Err(invalid("a Cluster node's seeds are host:port addresses"));
            }
            if seed.redis_settings().db() != 0 {
                return Err(invalid("a Redis Cluster has only database 0"));
            }
        }
        Ok(Self { seeds })
    }

    /// Parses `redis+cluster://[user:password@]host:port[,host:port…]` (port 6379 when
    /// omitted).
    ///
    /// # Errors
    /// Another scheme, no seed, a path or query, or a part the redis crate cannot parse.
    pub fn parse(url: &str) -> Result<Self, RedisError> {
        let rest = url
            .strip_prefix(CLUSTER_SCHEME)
            .ok_or_else(|| invalid("a Cluster node's URL starts with redis+cluster://"))?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(invalid(
                "a Cluster node's URL names seeds only: no database, path or query",
            ));
        }
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (
                authority.get(..=at).unwrap_or(""),
                authority.get(at + 1..).unwrap_or(""),
            ),
            None => ("", authority),
        };
        Self::new(redis_urls(hosts, userinfo, REDIS_PORT))
    }
}

impl fmt::Display for ClusterNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cluster ")?;
        write_addresses(f, &self.seeds)
    }
}

impl fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Addresses only, never credentials.
        f.debug_tuple("ClusterNode")
            .field(&self.to_string())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::voters::source::IntoNode;

    #[test]
    fn a_cluster_url_names_its_seeds_and_their_credentials() {
        let node = ClusterNode::parse("redis+cluster://lock%40er:p%40ss@127.0.0.1:7000,[::1],h/")
            .expect("valid");
        assert_eq!(node.to_string(), "cluster 127.0.0.1:7000,[::1]:6379,h:6379");
        for seed in &node.seeds {
            assert_eq!(seed.redis_settings().username(), Some("lock@er"));
            assert_eq!(seed.redis_settings().password(), Some("p@ss"));
        }
        assert!(
            !format!("{node:?}").contains("p@ss"),
            "credentials never shown"
        );
        let source = node.into_node().expect("a node");
        let shard = source.shard("10.0.0.1", 7005).expect("a shard");
        assert_eq!(format!("{shard:?}"), "Master(\"10.0.0.1:7005\")");
        for url in [
            "redis+cluster://",
            "redis+cluster://127.0.0.1:7000/1",
            "redis+cluster://127.0.0.1:7000?x=1",
            "redis://127.0.0.1:7000",
        ] {
            assert!(ClusterNode::parse(url).is_err(), "{url}");
        }
        assert!(ClusterNode::new(["redis://127.0.0.1:7000/2"]).is_err());
        assert!(ClusterNode::new(["unix:///tmp/redis.sock"]).is_err());
    }
}
