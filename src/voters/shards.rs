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
//! `ASK` followed by the caller ([`crate::engine::voter`]) with `ASKING` in the same write.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, Value};

use crate::core::node_id::NodeId;
use crate::errors::node_error::NodeError;
use crate::voters::server_identity::ServerIdentities;
use crate::voters::server_link::{Connected, ServerLink, ServerRole};
use crate::voters::slot_map::{ShardAddress, SlotMap, host_and_port};
use crate::voters::source::NodeSource;

/// The least time between two background refreshes of the slot map, so a shard that stays
/// down does not have every request re-read the map.
const REFRESH_MIN_INTERVAL: Duration = Duration::from_millis(100);
/// How often the slot map is read while the voter is in use, whatever happens: a failover
/// and a failback of one master, both unseen by this client (it sent nothing there), are
/// seen as that master leaving and joining the masters unless both fall within one period.
const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// How long the map waits for one candidate before it asks the next as well.
const CANDIDATE_STAGGER: Duration = Duration::from_millis(100);
/// How long a master that answered `MOVED` has to say its role again.
const ROLE_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

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
    /// The periodic reading of the map ([`REFRESH_EVERY`]) has started.
    reading: AtomicBool,
    /// When the last refresh ended, either way.
    last_refresh: Mutex<Option<Instant>>,
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
            reading: AtomicBool::new(false),
            last_refresh: Mutex::new(None),
            links: Mutex::new(HashMap::new()),
        }
    }

    /// The connection to the master of `slot`, when the map names one and its link is
    /// connected now: what [`connection`](Self::connection) answers at once, without waiting.
    pub(crate) fn ready_now(self: &Arc<Self>, slot: u16) -> Option<Connected> {
        self.keep_reading();
        self.link_of(slot)?.ready_now()
    }

    /// A connection to the master of `slot`, reading the map first if none is known.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped refresh leaves the old map.
    pub(crate) async fn connection(self: &Arc<Self>, slot: u16) -> Result<Connected, NodeError> {
        self.keep_reading();
        let owner = match self.owner(slot) {
            Some(owner) => owner,
            None => {
                // Read the map for a slot it leaves unserved, but not for every request while
                // the cluster leaves it so.
                if !self.refreshed_within(REFRESH_MIN_INTERVAL) {
                    self.refresh().await?;
                } else if self
                    .map
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_empty()
                {
                    return Err(NodeError::Unreachable(RedisError::from((
                        redis::ErrorKind::Io,
                        "no node of the cluster said its slot map yet",
                    ))));
                }
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
    pub(crate) async fn connection_to(
        self: &Arc<Self>,
        address: &str,
    ) -> Result<Connected, NodeError> {
        let result = self.link(address)?.connection().await;
        if matches!(result, Err(NodeError::Unreachable(_))) {
            self.refresh_soon();
        }
        result
    }

    /// A `MOVED` answer from the master at `from`: `slot` is served by `address` now. The slot
    /// is routed there at once, and the whole map is read again in the background (a
    /// resharding moves many slots). The master that answered is asked its role again before
    /// its next vote: it may have been demoted by a failover, and be promoted again later
    /// with fewer keys (a failback).
    pub(crate) fn moved(self: &Arc<Self>, slot: u16, address: &str, from: Option<&Connected>) {
        self.update_map(|map| map.moved(slot, address));
        let link = from.and_then(|ready| Some((self.existing_link(&ready.server()?)?, ready)));
        if let (Some((link, ready)), Ok(runtime)) = (link, tokio::runtime::Handle::try_current()) {
            let ready = ready.clone();
            crate::core::telemetry::task_spawned();
            runtime.spawn(async move {
                // Bounded: a master that does not answer is soon reported broken anyway.
                let check = tokio::time::timeout(ROLE_CHECK_TIMEOUT, link.verify_role(&ready));
                if check.await.is_err() {
                    link.recheck();
                }
            });
        }
        self.refresh_soon();
    }

    /// Installs `map`.
    fn replace_map(&self, map: SlotMap) {
        self.update_map(|current| *current = map);
    }

    /// Changes the map with `change`, under one lock. A server that joins or leaves the
    /// masters (a failover, a failback, a master added or removed) is asked its role again
    /// before its next vote, so a promotion starts its restart grace and opens a new fence
    /// term.
    fn update_map(&self, change: impl FnOnce(&mut SlotMap)) {
        let changed: Vec<ShardAddress> = {
            let mut current = self.map.lock().unwrap_or_else(|e| e.into_inner());
            let before = current.masters();
            change(Arc::make_mut(&mut current));
            let after = current.masters();
            before
                .iter()
                .filter(|m| !after.contains(m))
                .chain(after.iter().filter(|m| !before.contains(m)))
                .cloned()
                .collect()
        };
        self.version.fetch_add(1, Ordering::AcqRel);
        for address in changed {
            if let Some(link) = self.existing_link(&address) {
                tracing::debug!(voter = self.voter, master = %address, "a master joined or left the slot map: its role is read again");
                link.recheck();
            }
        }
    }

    /// Records that a refresh ended now.
    fn note_refreshed(&self) {
        *self.last_refresh.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// Whether a refresh ended less than `interval` ago.
    fn refreshed_within(&self, interval: Duration) -> bool {
        self.last_refresh
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < interval)
    }

    fn existing_link(&self, address: &str) -> Option<Arc<ServerLink>> {
        self.links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(address)
            .cloned()
    }

    /// The link to the master the map names for `slot`, if one was made.
    pub(crate) fn link_of(&self, slot: u16) -> Option<Arc<ServerLink>> {
        self.existing_link(&self.owner(slot)?)
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
            ServerRole::Shard,
        ));
        links.insert(address, link.clone());
        Ok(link)
    }

    /// Reads the map again: from the masters known, then the seeds, each asked
    /// [`CANDIDATE_STAGGER`] after the one before unless a map came first; one refresh at a
    /// time (a caller that waited for another's refresh takes its result).
    async fn refresh(&self) -> Result<(), NodeError> {
        let seen = self.version.load(Ordering::Acquire);
        let _only = self.refreshing.lock().await;
        if self.version.load(Ordering::Acquire) != seen {
            return Ok(());
        }
        let known = self.map.lock().unwrap_or_else(|e| e.into_inner()).masters();
        // A master we are connected to is asked on that connection: the periodic reading
        // opens no connection while the cluster is healthy.
        let live = known.iter().find_map(|master| {
            let ready = self.existing_link(master)?.ready_now()?;
            let (host, _) = host_and_port(master)?;
            Some((ready.conn.clone(), host.to_owned()))
        });
        if let Some((mut conn, host)) = live {
            let read = tokio::time::timeout(self.connect_timeout, read_map_on(&mut conn, &host));
            if let Ok(Ok(map)) = read.await
                && !map.is_empty()
            {
                self.note_refreshed();
                self.replace_map(map);
                return Ok(());
            }
        }
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
        let mut seen = Vec::new();
        candidates.retain(|c| {
            let new = !seen.contains(c.addr());
            seen.push(c.addr().clone());
            new
        });
        // One after the other, each `CANDIDATE_STAGGER` after the one before unless a map came
        // back first: a down or black-holed node costs that much, not its whole timeout, and a
        // healthy cluster is asked once.
        let timeout = self.connect_timeout.saturating_mul(2);
        let reads = candidates.iter().enumerate().map(|(i, candidate)| {
            Box::pin(async move {
                let turn = u32::try_from(i).unwrap_or(u32::MAX);
                tokio::time::sleep(CANDIDATE_STAGGER.saturating_mul(turn)).await;
                match tokio::time::timeout(timeout, read_map(candidate, self.connect_timeout)).await
                {
                    Ok(Ok(map)) if !map.is_empty() => Ok(map),
                    Ok(Ok(_)) => Err(RedisError::from((
                        redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
                        "the cluster serves no slot",
                    ))),
                    Ok(Err(err)) => Err(err),
                    Err(_) => Err(RedisError::from((
                        redis::ErrorKind::Io,
                        "CLUSTER SLOTS timed out",
                    ))),
                }
            })
        });
        if candidates.is_empty() {
            return Err(NodeError::Unreachable(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no seed",
            ))));
        }
        let outcome = futures::future::select_ok(reads).await;
        self.note_refreshed();
        match outcome {
            Ok((map, _)) => {
                self.replace_map(map);
                Ok(())
            }
            Err(err) => Err(NodeError::connecting(err)),
        }
    }

    /// Starts reading the map every [`REFRESH_EVERY`], once: the task holds the shards weakly
    /// and ends with them (or with its runtime; the next use starts another).
    fn keep_reading(self: &Arc<Self>) {
        if self.reading.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.reading.store(false, Ordering::Release);
            return;
        };
        let guard = ReadingGuard(Arc::downgrade(self));
        crate::core::telemetry::task_spawned();
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(REFRESH_EVERY).await;
                let Some(shards) = guard.0.upgrade() else {
                    return;
                };
                if !shards.refreshed_within(REFRESH_EVERY / 2)
                    && let Err(err) = shards.refresh().await
                {
                    tracing::debug!(voter = shards.voter, error = %err, "slot map not read");
                }
            }
        });
    }

    /// Schedules a refresh in the background, unless one is scheduled already; it starts
    /// [`REFRESH_MIN_INTERVAL`] from now. Also for callers that find the map may be stale (a
    /// request timed out: a master may be hung and the cluster fail it over; or the map named
    /// a replica).
    pub(crate) fn refresh_soon(self: &Arc<Self>) {
        if self.refresh_scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.refresh_scheduled.store(false, Ordering::Release);
            return;
        };
        // Clears the flag however the task ends: run, or dropped unrun with its runtime.
        let scheduled = Scheduled(self.clone());
        crate::core::telemetry::task_spawned();
        runtime.spawn(async move {
            tokio::time::sleep(REFRESH_MIN_INTERVAL).await;
            let shards = scheduled.0.clone();
            drop(scheduled);
            if let Err(err) = shards.refresh().await {
                tracing::debug!(voter = shards.voter, error = %err, "slot map not refreshed");
            }
        });
    }
}

/// The periodic reading: clears [`Shards::reading`] when it ends, however it ends.
struct ReadingGuard(std::sync::Weak<Shards>);

impl Drop for ReadingGuard {
    fn drop(&mut self) {
        if let Some(shards) = self.0.upgrade() {
            shards.reading.store(false, Ordering::Release);
        }
    }
}

/// A scheduled refresh: clears [`Shards::refresh_scheduled`] when dropped.
struct Scheduled(Arc<Shards>);

impl Drop for Scheduled {
    fn drop(&mut self) {
        self.0.refresh_scheduled.store(false, Ordering::Release);
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
    read_map_on(&mut conn, &host).await
}

/// `CLUSTER SLOTS` on `conn`, to the node at `host`.
async fn read_map_on(conn: &mut MultiplexedConnection, host: &str) -> Result<SlotMap, RedisError> {
    let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
    SlotMap::parse(&reply, host).map_err(|err| {
        RedisError::from((
            redis::ErrorKind::Parse,
            "unexpected CLUSTER SLOTS reply",
            err.to_string(),
        ))
    })
}
