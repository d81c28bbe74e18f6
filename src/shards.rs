//! The shards of a Redis Cluster voter: one supervised link per master, and the slot map that
//! routes each request to the master of its key's slot.
//!
//! Why not the redis crate's `ClusterConnection`: it reconnects to a shard and retries
//! requests on its own, out of our sight. A shard that restarted empty (or a replica the
//! cluster promoted) would then vote at once, with no restart grace, no `run_id` for the
//! identity check or the fence marker, and a request we gave up on could be sent again after a
//! later one (our release relies on one send, in order). So each shard master here is a
//! [`ServerLink`] like a standalone voter's: its own `run_id` claim (one server, one vote,
//! across every voter of the client), its own restart grace, its own scripts loaded before use.
//! What is written here is only the routing: `CLUSTER SLOTS` read from any reachable node,
//! corrected by `MOVED` answers (one slot at once, then the whole map in the background), and
//! `ASK` followed by the caller ([`crate::voter`]) with `ASKING` in the same write.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use redis::{AsyncConnectionConfig, Client, RedisError, Value};

use crate::node_error::NodeError;
use crate::node_id::NodeId;
use crate::node_source::NodeSource;
use crate::server_identity::ServerIdentities;
use crate::server_link::{Ready, ServerLink};
use crate::slot_map::{ShardAddress, SlotMap, host_and_port};

/// The least time between two background refreshes of the slot map, so a shard that stays
/// down does not have every request re-read the map.
const REFRESH_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// One Cluster voter's masters.
pub(crate) struct Shards {
    /// The voter's position, for each shard's [`NodeId`].
    voter: usize,
    source: NodeSource,
    connect_timeout: Duration,
    restart_grace: Option<Duration>,
    servers: Arc<ServerIdentities>,
    map: Mutex<Arc<SlotMap>>,
    /// Counts changes of `map`, so a refresh that waited for another one does not repeat it.
    version: AtomicU64,
    /// One refresh at a time.
    refreshing: tokio::sync::Mutex<()>,
    /// A background refresh is scheduled.
    refresh_scheduled: AtomicBool,
    /// Links are made on first use and kept: a master that leaves the map keeps its idle link
    /// (and its `run_id` claim) until the client is dropped.
    links: Mutex<HashMap<ShardAddress, Arc<ServerLink>>>,
}

impl Shards {
    /// The shards of the Cluster voter `source`, at position `voter`; nothing connects before
    /// the first use.
    pub(crate) fn new(
        voter: usize,
        source: NodeSource,
        connect_timeout: Duration,
        restart_grace: Option<Duration>,
        servers: Arc<ServerIdentities>,
    ) -> Self {
        Self {
            voter,
            source,
            connect_timeout,
            restart_grace,
            servers,
            map: Mutex::new(Arc::new(SlotMap::default())),
            version: AtomicU64::new(0),
            refreshing: tokio::sync::Mutex::new(()),
            refresh_scheduled: AtomicBool::new(false),
            links: Mutex::new(HashMap::new()),
        }
    }

    /// A connection to the master of `slot`, reading the map first if none is known.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped refresh leaves the old map.
    pub(crate) async fn connection(self: &Arc<Self>, slot: u16) -> Result<Ready, NodeError> {
        let owner = match self.owner(slot) {
            Some(owner) => owner,
            None => {
                self.refresh().await?;
                self.owner(slot).ok_or(NodeError::SlotUnserved { slot })?
            }
        };
        self.connection_to(&owner).await
    }

    /// A connection to the master at `address` (from the map, or from an `ASK` answer).
    /// A master that cannot be reached makes the map be read again soon: the cluster may have
    /// promoted a replica in its place.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn connection_to(self: &Arc<Self>, address: &str) -> Result<Ready, NodeError> {
        let result = self.link(address)?.connection().await;
        if matches!(result, Err(NodeError::Unreachable(_))) {
            self.refresh_soon();
        }
        result
    }

    /// A `MOVED` answer: `slot` is served by `address` now. The slot is routed there at once,
    /// and the whole map is read again in the background (a resharding moves many slots).
    pub(crate) fn moved(self: &Arc<Self>, slot: u16, address: &str) {
        {
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            Arc::make_mut(&mut map).moved(slot, address);
        }
        self.version.fetch_add(1, Ordering::AcqRel);
        self.refresh_soon();
    }

    /// The master the map names for `slot`, for reports.
    pub(crate) fn owner(&self, slot: u16) -> Option<ShardAddress> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .owner(slot)
            .cloned()
    }

    /// Reads the map and connects to every master; the first failure, if any.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn connect_all(self: &Arc<Self>) -> Result<(), NodeError> {
        self.refresh().await?;
        let masters = self.map.lock().unwrap_or_else(|e| e.into_inner()).masters();
        let results = join_all(masters.iter().map(|master| self.connection_to(master))).await;
        results.into_iter().try_for_each(|result| result.map(drop))
    }

    fn link(&self, address: &str) -> Result<Arc<ServerLink>, NodeError> {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(link) = links.get(address) {
            return Ok(link.clone());
        }
        let source = host_and_port(address)
            .and_then(|(host, port)| self.source.shard(host, port))
            .ok_or_else(|| {
                NodeError::Unreachable(RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "the cluster named a master that is not host:port",
                    address.to_owned(),
                )))
            })?;
        let address: ShardAddress = Arc::from(address);
        let link = Arc::new(ServerLink::new(
            NodeId::new(self.voter, address.clone()),
            source,
            self.connect_timeout,
            self.restart_grace,
            self.servers.clone(),
            true,
        ));
        links.insert(address, link.clone());
        Ok(link)
    }

    /// Reads the map again, from the masters known first, then the seeds; one refresh at a
    /// time (a caller that waited for another's refresh takes its result).
    async fn refresh(&self) -> Result<(), NodeError> {
        let seen = self.version.load(Ordering::Acquire);
        let _only = self.refreshing.lock().await;
        if self.version.load(Ordering::Acquire) != seen {
            return Ok(());
        }
        let known = self.map.lock().unwrap_or_else(|e| e.into_inner()).masters();
        let seeds = self.source.cluster_seeds().unwrap_or_default();
        let mut candidates: Vec<redis::ConnectionInfo> = Vec::new();
        for master in &known {
            if let Some(info) =
                host_and_port(master).and_then(|(host, port)| self.source.shard_info(host, port))
            {
                candidates.push(info);
            }
        }
        candidates.extend(seeds.iter().cloned());
        let mut last_error = None;
        for candidate in candidates {
            match tokio::time::timeout(
                self.connect_timeout * 2,
                read_map(&candidate, self.connect_timeout),
            )
            .await
            {
                Ok(Ok(map)) if !map.is_empty() => {
                    *self.map.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(map);
                    self.version.fetch_add(1, Ordering::AcqRel);
                    return Ok(());
                }
                Ok(Ok(_)) => {
                    last_error = Some(RedisError::from((
                        redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
                        "the cluster serves no slot",
                    )));
                }
                Ok(Err(err)) => last_error = Some(err),
                Err(_) => {
                    last_error = Some(RedisError::from((
                        redis::ErrorKind::Io,
                        "CLUSTER SLOTS timed out",
                    )));
                }
            }
        }
        Err(NodeError::Unreachable(last_error.unwrap_or_else(|| {
            RedisError::from((redis::ErrorKind::InvalidClientConfig, "no seed"))
        })))
    }

    /// Schedules a refresh in the background, unless one is scheduled already; it starts
    /// [`REFRESH_MIN_INTERVAL`] from now.
    fn refresh_soon(self: &Arc<Self>) {
        if self.refresh_scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.refresh_scheduled.store(false, Ordering::Release);
            return;
        };
        let shards = self.clone();
        runtime.spawn(async move {
            tokio::time::sleep(REFRESH_MIN_INTERVAL).await;
            shards.refresh_scheduled.store(false, Ordering::Release);
            if let Err(err) = shards.refresh().await {
                tracing::debug!(voter = shards.voter, error = %err, "slot map not refreshed");
            }
        });
    }
}

/// `CLUSTER SLOTS` from the node `info` names, on a connection of its own.
async fn read_map(info: &redis::ConnectionInfo, timeout: Duration) -> Result<SlotMap, RedisError> {
    let host = match info.addr() {
        redis::ConnectionAddr::Tcp(host, _) | redis::ConnectionAddr::TcpTls { host, .. } => {
            host.clone()
        }
        other => other.to_string(),
    };
    let client = Client::open(info.clone())?;
    let config = AsyncConnectionConfig::new().set_connection_timeout(Some(timeout));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await?;
    SlotMap::parse(&reply, &host).map_err(|err| {
        RedisError::from((
            redis::ErrorKind::Parse,
            "unexpected CLUSTER SLOTS reply",
            err.to_string(),
        ))
    })
}
