//! Where a voter's servers are found: a standalone master at a fixed address, whatever master
//! the sentinels of a Redis Sentinel group name at each connection, or the masters of a Redis
//! Cluster (`crate::voters::shards` routes each request to its slot's master).
//!
//! A Sentinel-resolved voter is still one vote. Its master is looked up through its sentinels
//! (the redis crate's [`SentinelClient`], which also checks that the server it names says it is
//! a master) whenever the voter connects: at first use, after a broken connection, and after
//! the server answered `READONLY` (it was demoted by a failover). A failover brings another
//! server, with another `run_id`, into the voter: one server, one vote, and the restart grace
//! and the fence re-seeding treat it as a restart of that vote, because it may have lost keys
//! that were not replicated yet.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;

use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Client, ConnectionAddr, IntoConnectionInfo, RedisError};

/// How long a broken watch of the sentinels' announcements waits before it tries again.
const REWATCH_DELAY: Duration = Duration::from_millis(250);
/// How long the watch gives one sentinel to connect, subscribe or answer.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the watch asks its sentinel again which master it names: a sentinel that went
/// silent (or an announcement lost with a connection) is noticed within this.
const REPOLL_EVERY: Duration = Duration::from_secs(2);
/// What a Sentinel lookup may take beyond a connection's own timeout: the redis crate asks
/// the sentinels at once but takes their answers in the configured order, each sentinel
/// bounded by its fixed 1 s connection timeout, so a black-holed first sentinel costs a second.
const LOOKUP_SLACK: Duration = Duration::from_millis(1500);
/// The port a sentinel listens on when its URL gives none.
const SENTINEL_PORT: u16 = 26379;

/// The URL scheme of a Sentinel-resolved voter.
const SENTINEL_SCHEME: &str = "redis+sentinel://";
/// The URL scheme of a Redis Cluster voter.
const CLUSTER_SCHEME: &str = "redis+cluster://";
/// The port a cluster seed listens on when its URL gives none.
const REDIS_PORT: u16 = 6379;

/// Anything that names one voter: a URL (`redis://host:port/db`, `rediss://…` with TLS
/// compiled in, `unix:///path`, `redis+sentinel://host:port,host:port/master` for a master
/// found through Redis Sentinel, or `redis+cluster://host:port,host:port` for a Redis Cluster),
/// a [`redis::ConnectionInfo`], an existing [`redis::Client`], a [`SentinelVoter`], a
/// [`ClusterVoter`], or a [`NodeSource`].
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
///     redquorum::SentinelVoter::new("orders", ["redis://127.0.0.1:26379"])?.into_node()?,
///     "redis://127.0.0.1:7003".into_node()?,
/// ])?;
/// # Ok(()) }
/// ```
pub trait IntoNode {
    /// Turns `self` into the source of one voter.
    ///
    /// # Errors
    /// The redis crate's error when a URL cannot be parsed or names an unsupported scheme,
    /// or a Sentinel URL names no sentinel or no master.
    fn into_node(self) -> Result<NodeSource, RedisError>;
}

/// One voter, as given to [`RedLock::new`](crate::RedLock::new): a standalone master, the
/// master a Sentinel group names ([`SentinelVoter`]), or a Redis Cluster ([`ClusterVoter`]).
/// Opaque; made by [`IntoNode`].
#[derive(Clone)]
pub struct NodeSource {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    /// Boxed: a client is large, and a voter is made once.
    Master(Box<Client>),
    Sentinel(Arc<Resolver>),
    Cluster(Arc<Seeds>),
}

/// A Cluster voter's seeds, and which one the next pub/sub listener tries.
struct Seeds {
    voter: ClusterVoter,
    next: AtomicUsize,
}

/// The lookup of one Sentinel-resolved voter's master.
struct Resolver {
    voter: SentinelVoter,
    /// The redis crate's client, which keeps a connection to the sentinel that answered
    /// last; one lookup at a time (the voter's connection and its pub/sub listener share it).
    client: tokio::sync::Mutex<SentinelClient>,
}

/// What the duplicate check compares: two entries with the same place name one voter.
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
    /// A client for the server this voter speaks for now: the fixed master, or the master
    /// the sentinels name (checked to say it is a master). For a Cluster voter, one seed after
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
                let count = seeds.voter.seeds.len().max(1);
                let seed = seeds.voter.seeds.get(turn % count).cloned();
                Client::open(seed.ok_or_else(|| invalid("a Cluster voter needs a seed"))?)
            }
        }
    }

    /// A Cluster voter's seeds; `None` for any other voter.
    pub(crate) fn cluster_seeds(&self) -> Option<&[redis::ConnectionInfo]> {
        match &self.kind {
            Kind::Cluster(seeds) => Some(&seeds.voter.seeds),
            Kind::Master(_) | Kind::Sentinel(_) => None,
        }
    }

    /// The standalone master at `host:port` of this Cluster voter, reached with the seeds'
    /// settings (credentials, TLS); `None` for another voter kind.
    pub(crate) fn shard(&self, host: &str, port: u16) -> Option<NodeSource> {
        let client = Client::open(self.shard_info(host, port)?).ok()?;
        Some(NodeSource {
            kind: Kind::Master(Box::new(client)),
        })
    }

    /// How to reach the server at `host:port` of this Cluster voter: the first seed's settings
    /// at that address; `None` for another voter kind.
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

    /// Resolves when a sentinel names another master than `current` (`host:port`, as the
    /// lookup gave it) for this voter: when one announces a switch (`+switch-master` naming
    /// this master), when the watched sentinel names another address at the start (with
    /// `compare`), or when its answer changes (asked every [`REPOLL_EVERY`]). A demoted master keeps accepting writes until
    /// the sentinels reconfigure it, which can take seconds; a voter that follows the
    /// sentinels moves its vote to the new master as soon as they switch. The sentinels are
    /// watched one at a time, in turn: one that does not connect, subscribe or answer within
    /// [`SENTINEL_TIMEOUT`] is left for the next. Never resolves for a standalone master.
    ///
    /// `compare` is off right after a reconnect that found the same master again: sentinels
    /// that disagree for a moment (one still naming a dead master) must not make the voter
    /// reconnect in a loop; announcements and the periodic asking still count.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it only stops watching (its connections close with it).
    pub(crate) async fn switched_from(&self, current: &str, compare: bool) {
        let Kind::Sentinel(resolver) = &self.kind else {
            return std::future::pending().await;
        };
        let voter = &resolver.voter;
        for sentinel in voter.sentinels.iter().cycle() {
            match watch_for_switch(sentinel, &voter.master, current, compare).await {
                Ok(()) => return,
                Err(err) => {
                    tracing::debug!(master = %voter.master, sentinel = %sentinel.addr(), error = %err, "cannot watch this sentinel; trying the next");
                    tokio::time::sleep(REWATCH_DELAY).await;
                }
            }
        }
    }

    /// How long finding and connecting to this voter's server may take, given a connection's
    /// own `timeout`: a Sentinel lookup gets [`LOOKUP_SLACK`] more.
    pub(crate) fn lookup_budget(&self, timeout: Duration) -> Duration {
        match self.kind {
            Kind::Master(_) | Kind::Cluster(_) => timeout,
            Kind::Sentinel(_) => timeout.saturating_add(LOOKUP_SLACK),
        }
    }

    /// Whether the server behind this voter can change (a failover): a `READONLY` answer
    /// then means "look the master up again", not "misconfigured".
    pub(crate) fn follows_failovers(&self) -> bool {
        matches!(self.kind, Kind::Sentinel(_))
    }

    /// Where this voter is, for the duplicate check.
    pub(crate) fn place(&self) -> Place<'_> {
        match &self.kind {
            Kind::Master(client) => Place::Address(client.get_connection_info().addr()),
            Kind::Sentinel(resolver) => Place::Sentinel(
                &resolver.voter.master,
                resolver
                    .voter
                    .sentinels
                    .iter()
                    .map(redis::ConnectionInfo::addr)
                    .collect(),
            ),
            Kind::Cluster(seeds) => Place::Cluster(
                seeds
                    .voter
                    .seeds
                    .iter()
                    .map(redis::ConnectionInfo::addr)
                    .collect(),
            ),
        }
    }

    /// Whether this voter connects to its servers with TLS (a Sentinel-resolved master never
    /// does yet).
    #[cfg(any(feature = "tls", feature = "tls-aws-lc-rs"))]
    pub(crate) fn uses_tls(&self) -> bool {
        let tls = |addr: &ConnectionAddr| matches!(addr, ConnectionAddr::TcpTls { .. });
        match &self.kind {
            Kind::Master(client) => tls(client.get_connection_info().addr()),
            Kind::Sentinel(_) => false,
            Kind::Cluster(seeds) => seeds.voter.seeds.iter().any(|seed| tls(seed.addr())),
        }
    }

    /// How reports name a voter of several servers: `sentinel <master>@<sentinel>,…` or
    /// `cluster <seed>,…`; `None` for a standalone master.
    pub(crate) fn group_name(&self) -> Option<String> {
        match &self.kind {
            Kind::Master(_) => None,
            Kind::Sentinel(resolver) => Some(resolver.voter.to_string()),
            Kind::Cluster(seeds) => Some(seeds.voter.to_string()),
        }
    }
}

/// Watches one sentinel: subscribes to its `+switch-master` announcements, then asks which
/// master it names (a switch just before the subscription is not missed: with `compare`, an
/// answer other than `current` returns at once), and asks again every [`REPOLL_EVERY`].
/// Returns when an announcement names `master` or the sentinel's answer changes; fails when
/// the sentinel does not connect, subscribe or answer within [`SENTINEL_TIMEOUT`], or closes
/// the connection.
async fn watch_for_switch(
    sentinel: &redis::ConnectionInfo,
    master: &str,
    current: &str,
    compare: bool,
) -> Result<(), RedisError> {
    let client = Client::open(sentinel.clone())?;
    let timed_out = |what: &'static str| {
        RedisError::from((
            redis::ErrorKind::Io,
            "the sentinel timed out",
            what.to_owned(),
        ))
    };
    let mut pubsub = tokio::time::timeout(SENTINEL_TIMEOUT, async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe("+switch-master").await?;
        Ok::<_, RedisError>(pubsub)
    })
    .await
    .map_err(|_| timed_out("subscribing"))??;
    let mut conn =
        tokio::time::timeout(SENTINEL_TIMEOUT, client.get_multiplexed_async_connection())
            .await
            .map_err(|_| timed_out("connecting"))??;
    let mut named = async || {
        tokio::time::timeout(SENTINEL_TIMEOUT, async {
            let (host, port): (String, u16) = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(master)
                .query_async(&mut conn)
                .await?;
            Ok::<_, RedisError>(format!("{host}:{port}"))
        })
        .await
        .map_err(|_| timed_out("asking"))?
    };
    let first = named().await?;
    if compare && first != current {
        return Ok(());
    }
    let mut announcements = pubsub.on_message();
    loop {
        tokio::select! {
            message = announcements.next() => {
                let Some(message) = message else {
                    return Err(RedisError::from((
                        redis::ErrorKind::Io,
                        "the sentinel closed the announcements",
                    )));
                };
                // `<master name> <old ip> <old port> <new ip> <new port>`
                let payload: String = message.get_payload()?;
                if payload.split(' ').next() == Some(master) {
                    return Ok(());
                }
            }
            // A change of this sentinel's answer, not a disagreement with the lookup (another
            // sentinel may still name a dead master for a while).
            () = tokio::time::sleep(REPOLL_EVERY) => {
                if named().await? != first {
                    return Ok(());
                }
            }
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
                .field(&resolver.voter.to_string())
                .finish(),
            Kind::Cluster(seeds) => f
                .debug_tuple("Cluster")
                .field(&seeds.voter.to_string())
                .finish(),
        }
    }
}

/// A voter whose master is found through Redis Sentinel: the master named `master` by the
/// given sentinels, looked up again after every failover.
///
/// Each Sentinel group is **one vote**, however many servers it has: a failover inside it can
/// lose that voter's key (replication is asynchronous), which costs that one vote, as a
/// master restarting empty does; the quorum of voters tolerates up to ⌊(N−1)/2⌋ voters
/// failing over (or restarting empty) within one ttl. A `restart_grace` treats a failover as
/// the restart it may be: the new master does not vote until the grace has passed.
///
/// The URL form is `redis+sentinel://[user:password@]host:port[,host:port…]/master[/db]`: the
/// credentials and database are the master's; the sentinels are asked without credentials
/// (give them in each sentinel's URL with [`SentinelVoter::new`] if they need some). TLS to a
/// Sentinel-resolved master is not supported yet.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let orders = redquorum::SentinelVoter::new(
///     "orders",
///     ["redis://10.0.0.7:26379", "redis://10.0.0.8:26379", "redis://10.0.0.9:26379"],
/// )?
/// .master_password(Some("locker"), "s3cret");
/// let same = redquorum::SentinelVoter::parse(
///     "redis+sentinel://locker:s3cret@10.0.0.7:26379,10.0.0.8:26379,10.0.0.9:26379/orders",
/// )?;
/// assert_eq!(orders.to_string(), same.to_string());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SentinelVoter {
    master: String,
    sentinels: Vec<redis::ConnectionInfo>,
    master_settings: redis::RedisConnectionInfo,
}

impl SentinelVoter {
    /// The master named `master` by the sentinels at `sentinels` (URLs such as
    /// `redis://host:26379`, or connection infos).
    ///
    /// # Errors
    /// An empty master name, no sentinel, or a sentinel address the redis crate cannot parse.
    pub fn new<I>(master: impl Into<String>, sentinels: I) -> Result<Self, RedisError>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        let master = master.into();
        if master.is_empty() {
            return Err(invalid("a Sentinel voter needs a master name"));
        }
        let sentinels = sentinels
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<Result<Vec<_>, _>>()?;
        if sentinels.is_empty() {
            return Err(invalid("a Sentinel voter needs at least one sentinel"));
        }
        Ok(Self {
            master,
            sentinels,
            master_settings: redis::RedisConnectionInfo::default(),
        })
    }

    /// Parses `redis+sentinel://[user:password@]host:port[,host:port…]/master[/db]`.
    ///
    /// # Errors
    /// Another scheme, no sentinel, no master name, or a part the redis crate cannot parse.
    pub fn parse(url: &str) -> Result<Self, RedisError> {
        let rest = url
            .strip_prefix(SENTINEL_SCHEME)
            .ok_or_else(|| invalid("a Sentinel voter's URL starts with redis+sentinel://"))?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        // The credentials end at the last `@` of the authority (a password may contain `@`
        // percent-encoded only, but be lenient).
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (authority.get(..at), authority.get(at + 1..).unwrap_or("")),
            None => (None, authority),
        };
        let mut path = path.splitn(2, '/');
        let master = path.next().unwrap_or("");
        let db = path.next().unwrap_or("");
        if master.contains(['%', '?', '#']) {
            return Err(invalid(
                "a Sentinel voter's master name cannot be percent-encoded or carry a query",
            ));
        }
        let mut voter = Self::new(master, redis_urls(hosts, "", SENTINEL_PORT))?;
        // The master's credentials and database, decoded by the redis crate's own URL parser
        // (percent-encoding included) from a URL that carries only them.
        let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let settings = Client::open(format!("redis://{userinfo}sentinel-master/{db}"))?;
        voter.master_settings = settings.get_connection_info().redis_settings().clone();
        Ok(voter)
    }

    /// The credentials of the master (not of the sentinels): an ACL user, or `None` for the
    /// default user with `requirepass`.
    pub fn master_password(mut self, username: Option<&str>, password: &str) -> Self {
        let mut settings = self.master_settings.set_password(password);
        if let Some(username) = username {
            settings = settings.set_username(username);
        }
        self.master_settings = settings;
        self
    }

    /// The master's database number.
    pub fn master_db(mut self, db: i64) -> Self {
        self.master_settings = self.master_settings.set_db(db);
        self
    }
}

impl fmt::Display for SentinelVoter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sentinel {}@", self.master)?;
        write_addresses(f, &self.sentinels)
    }
}

/// `host:port,host:port…`, an IPv6 host in brackets.
fn write_addresses(f: &mut fmt::Formatter<'_>, servers: &[redis::ConnectionInfo]) -> fmt::Result {
    for (i, server) in servers.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        match server.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. }
                if host.contains(':') && !host.starts_with('[') =>
            {
                write!(f, "[{host}]:{port}")?;
            }
            other => write!(f, "{other}")?,
        }
    }
    Ok(())
}

impl fmt::Debug for SentinelVoter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Addresses only, never credentials.
        f.debug_tuple("SentinelVoter")
            .field(&self.to_string())
            .finish()
    }
}

/// `redis://` URLs for a comma-separated list of `host[:port]` (`[v6][:port]`), each with
/// `userinfo` (`user:password@`, or empty) and `default_port` where it names none.
fn redis_urls(hosts: &str, userinfo: &str, default_port: u16) -> Vec<String> {
    hosts
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| {
            let has_port = match host.strip_prefix('[') {
                Some(v6) => v6.contains("]:"),
                None => host.contains(':'),
            };
            if has_port {
                format!("redis://{userinfo}{host}")
            } else {
                format!("redis://{userinfo}{host}:{default_port}")
            }
        })
        .collect()
}

fn invalid(what: &'static str) -> RedisError {
    RedisError::from((redis::ErrorKind::InvalidClientConfig, what))
}

impl IntoNode for SentinelVoter {
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
                voter: self,
                client: tokio::sync::Mutex::new(client),
            })),
        })
    }
}

/// A Redis Cluster as one voter: its seeds (any of its nodes) tell its masters, and each
/// request goes to the master of its key's hash slot (every key redquorum keeps for one
/// resource shares that slot).
///
/// A cluster is **one vote**, however many shards it has: distinct resources spread over its
/// shards, which is how lock throughput grows past one server per voter (see the deploy
/// guide's "Which topology", `deploy/README.md`). Each shard master is a server of its own for the identity check and the
/// restart grace: a shard that restarted (or a replica the cluster promoted) does not vote on
/// the slots it serves until the grace has passed. A failover inside the cluster can lose a key
/// (replication is asynchronous), which costs this voter's vote for that resource, as a
/// restarted master does.
///
/// The URL form is `redis+cluster://[user:password@]host:port[,host:port…]`; the credentials
/// are every shard's. With TLS compiled in, give `rediss://` seeds to [`ClusterVoter::new`]:
/// every shard is then reached with the first seed's TLS settings (not tested yet: the
/// tests run no TLS cluster). A client whose voters
/// include a cluster refuses a multi-resource lock whose resources do not share one hash slot
/// ([`ConfigError::CrossSlot`](crate::ConfigError::CrossSlot)).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let orders = redquorum::ClusterVoter::new(["redis://10.0.0.7:7000", "redis://10.0.0.8:7000"])?;
/// let same = redquorum::ClusterVoter::parse("redis+cluster://10.0.0.7:7000,10.0.0.8:7000")?;
/// assert_eq!(orders.to_string(), same.to_string());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ClusterVoter {
    seeds: Vec<redis::ConnectionInfo>,
}

impl ClusterVoter {
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
            return Err(invalid("a Cluster voter needs at least one seed"));
        }
        for seed in &seeds {
            if !matches!(
                seed.addr(),
                ConnectionAddr::Tcp(..) | ConnectionAddr::TcpTls { .. }
            ) {
                return Err(invalid("a Cluster voter's seeds are host:port addresses"));
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
            .ok_or_else(|| invalid("a Cluster voter's URL starts with redis+cluster://"))?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(invalid(
                "a Cluster voter's URL names seeds only: no database, path or query",
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

impl fmt::Display for ClusterVoter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cluster ")?;
        write_addresses(f, &self.seeds)
    }
}

impl fmt::Debug for ClusterVoter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Addresses only, never credentials.
        f.debug_tuple("ClusterVoter")
            .field(&self.to_string())
            .finish()
    }
}

impl IntoNode for ClusterVoter {
    fn into_node(self) -> Result<NodeSource, RedisError> {
        Ok(NodeSource {
            kind: Kind::Cluster(Arc::new(Seeds {
                voter: self,
                next: AtomicUsize::new(0),
            })),
        })
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
            SentinelVoter::parse(self)?.into_node()
        } else if self.starts_with(CLUSTER_SCHEME) {
            ClusterVoter::parse(self)?.into_node()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_its_sentinels_master_and_credentials() {
        let voter = SentinelVoter::parse(
            "redis+sentinel://lock%40er:p%40ss@127.0.0.1:26379,[::1]:26380/orders/3",
        )
        .expect("valid");
        assert_eq!(
            voter.to_string(),
            "sentinel orders@127.0.0.1:26379,[::1]:26380"
        );
        let default_port =
            SentinelVoter::parse("redis+sentinel://10.0.0.7,[::1]/orders").expect("valid");
        assert_eq!(
            default_port.to_string(),
            "sentinel orders@10.0.0.7:26379,[::1]:26379"
        );
        assert_eq!(voter.master_settings.username(), Some("lock@er"));
        assert_eq!(voter.master_settings.password(), Some("p@ss"));
        assert_eq!(voter.master_settings.db(), 3);
        assert!(
            !format!("{voter:?}").contains("p@ss"),
            "credentials never shown"
        );
        let plain = SentinelVoter::parse("redis+sentinel://127.0.0.1:26379/orders").expect("ok");
        assert_eq!(plain.master_settings.password(), None);
        assert_eq!(plain.master_settings.db(), 0);
    }

    #[test]
    fn a_cluster_url_names_its_seeds_and_their_credentials() {
        let voter = ClusterVoter::parse("redis+cluster://lock%40er:p%40ss@127.0.0.1:7000,[::1],h/")
            .expect("valid");
        assert_eq!(
            voter.to_string(),
            "cluster 127.0.0.1:7000,[::1]:6379,h:6379"
        );
        for seed in &voter.seeds {
            assert_eq!(seed.redis_settings().username(), Some("lock@er"));
            assert_eq!(seed.redis_settings().password(), Some("p@ss"));
        }
        assert!(
            !format!("{voter:?}").contains("p@ss"),
            "credentials never shown"
        );
        let source = voter.into_node().expect("a voter");
        let shard = source.shard("10.0.0.1", 7005).expect("a shard");
        assert_eq!(format!("{shard:?}"), "Master(\"10.0.0.1:7005\")");
        for url in [
            "redis+cluster://",
            "redis+cluster://127.0.0.1:7000/1",
            "redis+cluster://127.0.0.1:7000?x=1",
            "redis://127.0.0.1:7000",
        ] {
            assert!(ClusterVoter::parse(url).is_err(), "{url}");
        }
        assert!(ClusterVoter::new(["redis://127.0.0.1:7000/2"]).is_err());
        assert!(ClusterVoter::new(["unix:///tmp/redis.sock"]).is_err());
    }

    #[test]
    fn a_sentinel_url_without_master_or_sentinel_is_an_error() {
        for url in [
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel:///orders",
            "redis+sentinel://127.0.0.1:26379/ord%65rs",
            "redis+sentinel://127.0.0.1:26379/orders?x=1",
            "redis://127.0.0.1:6379",
        ] {
            assert!(SentinelVoter::parse(url).is_err(), "{url}");
        }
    }
}
