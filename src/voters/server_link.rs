//! One connection to one Redis server that repairs itself in the background.
//!
//! A standalone or Sentinel-resolved voter has one such link; a Redis Cluster voter has one per
//! shard (`crate::voters::shards`). Each link owns one multiplexed connection, shared by every request
//! to that server. A supervisor task (started on first use) connects, and reconnects with
//! backoff when a request reports the connection broken. While the server is known to be down,
//! requests fail at once with [`NodeError::Unreachable`] instead of waiting for a reconnect: a
//! down server costs a caller nothing, and a hung one at most the per-node timeout the caller
//! puts on every request.
//!
//! Every connection learns who the server is (`run_id`, the restart grace's start) before it
//! carries a request: one server, one vote, and a restarted server is quarantined, per server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};
use tokio::sync::{Notify, watch};

use crate::core::node_id::NodeId;
use crate::errors::node_error::NodeError;
use crate::voters::node_source::NodeSource;
use crate::voters::server_identity::ServerIdentities;

/// The first reconnect delay after a failed connection attempt; it doubles up to
/// [`RECONNECT_MAX_DELAY`].
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(10);
/// The longest wait between two reconnect attempts, so a restarted master is back in service
/// soon after it listens again.
const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(250);

/// Where a server's connection stands, as published by its supervisor.
#[derive(Clone)]
enum Link {
    /// The first connection attempt, or a reconnect after a broken connection, is under way.
    Connecting,
    /// Connected.
    Connected(Connected),
    /// The last attempt failed (the server could not be reached, or it is one another node
    /// already speaks for); the supervisor retries after a backoff.
    Down(NodeError),
}

/// A usable connection to a server.
#[derive(Clone)]
pub(crate) struct Connected {
    pub(crate) conn: MultiplexedConnection,
    /// Counts connections, so a report about an old one is ignored.
    pub(crate) generation: u64,
    /// When the server process started (from its `uptime_in_seconds`, rounded so that the
    /// start is never placed too early); known only when a restart grace is configured.
    up_since: Option<Instant>,
    /// The server's `run_id` when this connection was made: new at every start of the server
    /// process, and a connection never outlives the process it was made to, so it names the
    /// server this connection talks to for the connection's whole life. The fenced scripts
    /// take it and read the server's replication id themselves, which together make the fence
    /// term (`scripts::fence_term!`): a restarted, promoted or failed-back server is each
    /// re-seeded (`crate::protocol::reseed`). `None` when the server would not say (an ACL without
    /// `+info`).
    pub(crate) run_id: Option<Arc<str>>,
    /// The server's address, for a voter whose server can change (Sentinel, a cluster's
    /// shard), for reports.
    server: Option<Arc<str>>,
    /// The supervisor's signal, for [`Connected::report_broken`].
    signal: Arc<BrokenSignal>,
    /// A cluster's master that said it was a replica when this connection was made: its
    /// restart grace was not computed for a term as master, so it must not vote on this
    /// connection ([`Connected::check_settled`]).
    replica: bool,
    /// The server's `master_replid` when this connection was made.
    replid: Option<Arc<str>>,
}

/// The caller's side of a running supervisor.
struct LinkHandle {
    link: watch::Receiver<Link>,
    broken: Arc<BrokenSignal>,
}

/// How callers talk to the supervisor: a connection broke, or a down node is wanted now.
#[derive(Default)]
struct BrokenSignal {
    generation: AtomicU64,
    /// The newest generation retired on purpose ([`ServerLink::recheck`]): its reconnect is
    /// no lost connection, and is not logged as one.
    retired: AtomicU64,
    notify: Notify,
    /// Traffic to a down node: retry the connection without waiting out the whole backoff.
    wanted: Notify,
}

/// What a link's server is to its voter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerRole {
    /// A standalone master: the voter's only server.
    Fixed,
    /// Whatever master the sentinels name: the server can change, so reports name it.
    Sentinel,
    /// One master of a Redis Cluster: reports name it, and a link whose server went away
    /// (the cluster dropped it from its slot map) retries only when a request wants it.
    Shard,
}

/// One server's supervised connection.
pub(crate) struct ServerLink {
    id: NodeId,
    source: NodeSource,
    /// Which link speaks for which server, shared by all links of one client.
    servers: Arc<ServerIdentities>,
    connect_timeout: Duration,
    restart_grace: Option<Duration>,
    serves: ServerRole,
    handle: Mutex<Option<LinkHandle>>,
    /// Connections older than this generation must not be used: the server's role may have
    /// changed under them ([`ServerLink::recheck`]).
    min_generation: AtomicU64,
}

impl ServerLink {
    /// A link to the server `source` names, speaking as `id`; nothing connects before the
    /// first use.
    pub(crate) fn new(
        id: NodeId,
        source: NodeSource,
        connect_timeout: Duration,
        restart_grace: Option<Duration>,
        servers: Arc<ServerIdentities>,
        serves: ServerRole,
    ) -> Self {
        Self {
            id,
            source,
            servers,
            connect_timeout,
            restart_grace,
            serves,
            handle: Mutex::new(None),
            min_generation: AtomicU64::new(0),
        }
    }

    /// The server may have changed role under the current connection (a cluster master that
    /// answered `MOVED`, or left or joined the masters in the slot map: a failover, or a
    /// failback to it): the next request waits for a new connection, which reads the
    /// server's `INFO` again, so a promotion starts the restart grace.
    pub(crate) fn recheck(&self) {
        if let Some(ready) = self.ready_now() {
            self.retire(&ready);
        }
    }

    /// Retires the connection `ready` (not a newer one): requests wait for the next.
    fn retire(&self, ready: &Connected) {
        self.min_generation
            .fetch_max(ready.generation + 1, Ordering::AcqRel);
        ready
            .signal
            .retired
            .fetch_max(ready.generation, Ordering::AcqRel);
        ready.report_broken();
    }

    /// The server answered on `ready` that it no longer serves a slot (`MOVED`): a resharding,
    /// or a failover that demoted it. Its role and replication id are read again on that
    /// connection, and only if either changed is the connection retired ([`recheck`]): a
    /// resharding, which moves slots between masters that stay masters, costs no reconnect.
    ///
    /// [`recheck`]: ServerLink::recheck
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped check changes nothing.
    pub(crate) async fn verify_role(&self, ready: &Connected) {
        let mut conn = ready.conn.clone();
        let info: Result<String, RedisError> = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await;
        let now = info.map(|info| ServerAge::parse(&info));
        let same = now
            .as_ref()
            .is_ok_and(|age| !age.replica && age.replid.as_deref() == ready.replid.as_deref());
        if !same {
            tracing::debug!(node = %self.id, "the server's role or replication id changed: reconnecting");
            self.retire(ready);
        }
    }

    /// A connection to send one request on (report a broken one with [`Connected::report_broken`]).
    ///
    /// Fails at once while the server is known to be down; waits while a connection attempt
    /// is under way (the caller bounds that wait with its per-node timeout). Must run inside a
    /// tokio runtime: the supervisor is spawned on first use.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits for the supervisor's news.
    pub(crate) async fn connection(&self) -> Result<Connected, NodeError> {
        if let Some(ready) = self.ready_now() {
            return Ok(ready);
        }
        let (mut link, mut broken) = self.link();
        loop {
            // Cloned, so no lock is held while the watch is borrowed.
            let state = link.borrow_and_update().clone();
            match state {
                Link::Connected(ready) if self.current(&ready) => return Ok(ready),
                // Superseded, and the reconnect is under way.
                Link::Connected(_) => {}
                Link::Down(err) => {
                    // Fail fast, but let the supervisor know the server is wanted, so it comes
                    // back into service soon after it returns rather than after a long backoff.
                    broken.wanted.notify_one();
                    return Err(err);
                }
                Link::Connecting => {}
            }
            if link.changed().await.is_err() {
                // The supervisor is gone with the runtime it ran on; `link()` starts a new one.
                (link, broken) = self.link();
            }
        }
    }

    /// The hot path of [`ServerLink::connection`]: the current connection, when the
    /// supervisor is alive and connected, without cloning the watch receiver.
    pub(crate) fn ready_now(&self) -> Option<Connected> {
        let state = {
            let guard = self.handle.lock().unwrap_or_else(|e| e.into_inner());
            let handle = guard.as_ref()?;
            if handle.link.has_changed().is_err() {
                return None;
            }
            // Cloned, and the lock given up, before anything else is locked (edition 2024: the
            // borrow, a temporary of the block's tail, ends before the guard).
            match &*handle.link.borrow() {
                Link::Connected(ready) => Some(ready.clone()),
                Link::Connecting | Link::Down(_) => None,
            }
        };
        state.filter(|ready| self.current(ready))
    }

    /// Whether `ready` may carry requests: not superseded by [`ServerLink::recheck`].
    fn current(&self, ready: &Connected) -> bool {
        ready.generation >= self.min_generation.load(Ordering::Acquire)
    }

    fn link(&self) -> (watch::Receiver<Link>, Arc<BrokenSignal>) {
        let mut guard = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        match &*guard {
            Some(h) if h.link.has_changed().is_ok() => (h.link.clone(), h.broken.clone()),
            _ => {
                // A new supervisor counts its connections from the start again.
                self.min_generation.store(0, Ordering::Release);
                let h = self.spawn_supervisor();
                let out = (h.link.clone(), h.broken.clone());
                *guard = Some(h);
                out
            }
        }
    }

    fn spawn_supervisor(&self) -> LinkHandle {
        let (tx, rx) = watch::channel(Link::Connecting);
        let broken = Arc::new(BrokenSignal::default());
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            // Every request carries our own, much shorter, per-node timeout.
            .set_response_timeout(None);
        tokio::spawn(supervise(
            Supervised {
                source: self.source.clone(),
                config,
                connect_timeout: self.connect_timeout,
                ask_uptime: self.restart_grace.is_some(),
                serves: self.serves,
                servers: self.servers.clone(),
                id: self.id.clone(),
            },
            tx,
            broken.clone(),
        ));
        LinkHandle { link: rx, broken }
    }
}

impl Connected {
    /// Tells the supervisor that this connection failed, so it reconnects (once, however many
    /// requests on it report it).
    pub(crate) fn report_broken(&self) {
        self.signal
            .generation
            .fetch_max(self.generation, Ordering::AcqRel);
        self.signal.notify.notify_one();
    }

    /// With a restart grace configured: fails when the server has been up for less than the
    /// grace, so it may have restarted empty while someone else's lock was still valid. A
    /// cluster's master met as a replica fails too, and reconnects: once promoted (a failback
    /// to it), the new connection reads its new term and starts its grace.
    pub(crate) fn check_settled(&self, restart_grace: Option<Duration>) -> Result<(), NodeError> {
        if self.replica {
            self.report_broken();
            return Err(NodeError::NotMaster);
        }
        let (Some(grace), Some(up_since)) = (restart_grace, self.up_since) else {
            return Ok(());
        };
        let up_for = up_since.elapsed();
        if up_for < grace {
            return Err(NodeError::RecentlyRestarted { up_for, grace });
        }
        Ok(())
    }

    /// The server's address, for a link that names it (a Sentinel-resolved master, a shard).
    pub(crate) fn server(&self) -> Option<Arc<str>> {
        self.server.clone()
    }
}

/// What a supervisor needs to know, fixed for its life.
struct Supervised {
    source: NodeSource,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
    ask_uptime: bool,
    serves: ServerRole,
    servers: Arc<ServerIdentities>,
    id: NodeId,
}

/// Keeps one server connected until every caller's handle is gone:
/// - connects (looking a Sentinel-resolved master up first), asks the server its identity and
///   age, claims its `run_id` (one server, one vote) and loads our scripts;
/// - publishes the link, and waits until a caller reports it broken or the sentinels switch
///   the master;
/// - on a failed attempt, waits (doubling, from `RECONNECT_MIN_DELAY` to `RECONNECT_MAX_DELAY`)
///   or until a caller wants it.
async fn supervise(fixed: Supervised, tx: watch::Sender<Link>, broken: Arc<BrokenSignal>) {
    let mut supervisor = Supervisor {
        fixed,
        broken,
        delay: RECONNECT_MIN_DELAY,
        generation: 0,
        run_id: None,
        started: None,
        server: None,
        switched_away: None,
    };
    loop {
        let result = tokio::select! {
            _ = tx.closed() => return,
            result = supervisor.connect() => result,
        };
        let serving = match result {
            Ok((conn, age, address)) => {
                tx.send_replace(Link::Connected(supervisor.ready(conn, age, &address)));
                supervisor.serve(&tx, address).await
            }
            Err(err) => supervisor.back_off(&tx, err).await,
        };
        if serving.is_none() {
            return;
        }
    }
}

/// A supervisor's state across its connections.
struct Supervisor {
    fixed: Supervised,
    broken: Arc<BrokenSignal>,
    /// The wait before the next attempt after a failed one.
    delay: Duration,
    /// How many connections were made; a caller's report of a broken link names one.
    generation: u64,
    /// The `run_id` of the server last connected to.
    run_id: Option<String>,
    /// The grace start of the server last connected to: kept while its `run_id` and
    /// replication id stay.
    started: Option<KeptStart>,
    /// The master the sentinels named last (a Sentinel-resolved voter).
    server: Option<String>,
    /// The master a switch of the sentinels took this voter away from: when the reconnect
    /// finds it again, the sentinels disagree for now, and comparing at once would loop.
    switched_away: Option<String>,
}

impl Supervisor {
    /// One connection attempt: the connection, the server's age (when it answered), and its
    /// address.
    ///
    /// # Cancel safety
    /// Dropped part-way, the connection being made is dropped with it.
    async fn connect(
        &mut self,
    ) -> Result<(MultiplexedConnection, Option<ServerAge>, String), NodeError> {
        let Supervised {
            source,
            config,
            connect_timeout,
            ask_uptime,
            servers,
            id,
            ..
        } = &self.fixed;
        // A Sentinel-resolved voter looks its master up at every connection; the lookup
        // (which also asks the named master its role) is bounded like a connection.
        let budget = source.lookup_budget(*connect_timeout);
        let client = tokio::time::timeout(budget, source.client())
            .await
            .map_err(|_| NodeError::TimedOut(budget))?
            .map_err(NodeError::Unreachable)?;
        let address = client.get_connection_info().addr().to_string();
        if source.follows_failovers() && self.server.as_deref() != Some(address.as_str()) {
            tracing::info!(node = %id, master = %address, "the sentinels name this voter's master");
            self.server = Some(address.clone());
        }
        let mut conn = client
            .get_multiplexed_async_connection_with_config(config)
            .await
            .map_err(NodeError::Unreachable)?;
        // Always asked: the fenced acquire needs the server's run_id, and one server must not
        // vote under two names. Only with a restart grace is an answer required; without one,
        // a server that refuses INFO still serves plain locks (its fenced acquires report
        // `NodeError::Unidentified`), and only the builder's address check guards it.
        let age = match server_age(&mut conn).await {
            Ok(age) => Some(age),
            Err(err) if *ask_uptime || breaks_connection(&err) => {
                return Err(NodeError::Unreachable(err));
            }
            Err(err) => {
                tracing::warn!(node = %id, error = %err, "INFO server refused: cannot check that this node is not another node's server under a second name");
                None
            }
        };
        // Before the connection carries any request: one server, one vote.
        if let Some(run_id) = age.as_ref().and_then(|age| age.run_id.as_deref()) {
            servers
                .claim(id, run_id)
                .map_err(|other| NodeError::SameServer {
                    other,
                    run_id: run_id.to_owned(),
                })?;
        }
        load_scripts(&mut conn, id)
            .await
            .map_err(NodeError::Unreachable)?;
        Ok((conn, age, address))
    }

    /// The link a new connection makes, its restart grace counted from when its server
    /// started (or kept, for the same server: `grace_start`).
    fn ready(
        &mut self,
        conn: MultiplexedConnection,
        age: Option<ServerAge>,
        address: &str,
    ) -> Connected {
        let id = &self.fixed.id;
        let run_id = age
            .as_ref()
            .and_then(|age| age.run_id.as_deref().map(Arc::from));
        let replica = age.as_ref().is_some_and(|age| age.replica);
        let replid = age
            .as_ref()
            .and_then(|age| age.replid.as_deref().map(Arc::from));
        let up_since = age.filter(|_| self.fixed.ask_uptime).map(|age| {
            let now = Instant::now();
            let since = grace_start(self.started.as_ref(), now, self.run_id.as_deref(), &age);
            if age.uptime.is_none() {
                tracing::warn!(node = %id, "INFO server has no usable uptime_in_seconds: the restart grace starts now");
            }
            self.started = age.run_id.clone().map(|run_id| KeptStart {
                run_id,
                replid: age.replid.clone(),
                since,
            });
            self.run_id = age.run_id.or(self.run_id.take());
            since
        });
        self.generation += 1;
        self.delay = RECONNECT_MIN_DELAY;
        tracing::debug!(node = %id, generation = self.generation, up_for = ?up_since.map(|t| t.elapsed()), "connected");
        let serves = self.fixed.serves;
        Connected {
            conn,
            generation: self.generation,
            up_since,
            run_id,
            server: (serves != ServerRole::Fixed).then(|| Arc::from(address)),
            signal: self.broken.clone(),
            replica: serves == ServerRole::Shard && replica,
            replid,
        }
    }

    /// Waits while the link serves: until a caller reports this connection broken, or the
    /// sentinels switch this voter's master (rather than voting on the demoted server until
    /// it refuses writes). `None` once every caller is gone.
    async fn serve(&mut self, tx: &watch::Sender<Link>, address: String) -> Option<()> {
        let id = &self.fixed.id;
        let compare = self.switched_away.take().as_deref() != Some(address.as_str());
        let switched = self.fixed.source.switched_from(&address, compare);
        tokio::pin!(switched);
        loop {
            tokio::select! {
                _ = tx.closed() => return None,
                _ = self.broken.notify.notified() => {}
                () = &mut switched => {
                    tracing::info!(node = %id, "the sentinels switched this voter's master");
                    self.switched_away = Some(address.clone());
                    break;
                }
            }
            if self.broken.generation.load(Ordering::Acquire) >= self.generation {
                break;
            }
        }
        if self.broken.retired.load(Ordering::Acquire) >= self.generation {
            tracing::debug!(node = %id, "reconnecting to read the server's role again");
        } else if self.switched_away.is_none() {
            tracing::warn!(node = %id, "connection lost, reconnecting");
        }
        tx.send_replace(Link::Connecting);
        Some(())
    }

    /// After a failed attempt: publishes the error and waits before the next. `None` once
    /// every caller is gone.
    async fn back_off(&mut self, tx: &watch::Sender<Link>, err: NodeError) -> Option<()> {
        let id = &self.fixed.id;
        let newly_same = matches!(err, NodeError::SameServer { .. })
            && !matches!(&*tx.borrow(), Link::Down(NodeError::SameServer { .. }));
        if newly_same {
            // A misconfiguration (or a name that moved): loud once, quiet on retries.
            tracing::error!(node = %id, error = %err, "node does not vote");
        } else {
            tracing::debug!(node = %id, error = %err, retry_in = ?self.delay, "connection attempt failed");
        }
        tx.send_replace(Link::Down(err));
        let earliest = tokio::time::Instant::now() + RECONNECT_MIN_DELAY;
        // A cluster's master that is down may have left the cluster for good: its link tries
        // again only when a request wants it, not on a timer forever.
        let (serves, delay) = (self.fixed.serves, self.delay);
        let timer = async {
            if serves == ServerRole::Shard {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(delay).await;
        };
        tokio::select! {
            _ = tx.closed() => return None,
            () = timer => {}
            // Wanted by a caller: retry early, but never more often than the minimum.
            _ = async {
                self.broken.wanted.notified().await;
                tokio::time::sleep_until(earliest).await;
            } => {}
        }
        self.delay = (self.delay * 2).min(RECONNECT_MAX_DELAY);
        Some(())
    }
}

/// Loads every script of ours on a new connection, before it carries any request.
///
/// A request that times out is not retried, so one that met `NOSCRIPT` would be lost: a
/// compare-and-delete queued behind a plain `SET` on a paused node would leave the key behind
/// when the node resumes. Loading first means `NOSCRIPT` only follows a `SCRIPT FLUSH`, which
/// the per-request fallback still covers. A server that refuses `SCRIPT LOAD` (an ACL without
/// `+script|load`, a node busy in someone's long script) still serves: its scripts load on
/// first use, if at all.
async fn load_scripts(conn: &mut MultiplexedConnection, id: &NodeId) -> Result<(), RedisError> {
    let mut pipeline = redis::pipe();
    for lua in crate::scripts::all() {
        pipeline.cmd("SCRIPT").arg("LOAD").arg(lua.code());
    }
    match pipeline.query_async::<Vec<String>>(conn).await {
        Ok(_) => Ok(()),
        Err(err) if !breaks_connection(&err) => {
            tracing::debug!(node = %id, error = %err, "scripts not preloaded");
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// What `INFO server` says about the server's identity and age.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ServerAge {
    run_id: Option<String>,
    /// `uptime_in_seconds`, when it is a number of seconds at all (Redis computes it from the
    /// wall clock: a stepped clock can make it negative or absurd).
    uptime: Option<u64>,
    /// A master promoted from replica since it started.
    promoted: bool,
    /// The server says it is a replica (`role:slave`).
    replica: bool,
    /// `master_replid`: changes when the server is promoted or resyncs as a replica, so the
    /// same `run_id` with another replication id is another term as this voter's master.
    replid: Option<String>,
}

/// The grace start a supervisor keeps for the server it last connected to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeptStart {
    run_id: String,
    replid: Option<String>,
    since: Instant,
}

/// The grace start for a connection to the server `age` describes: the kept one when it is
/// the same server in the same term (same `run_id` and replication id: a reconnect must not
/// recompute it from an uptime that predates a promotion), else [`grace_starts`].
fn grace_start(
    kept: Option<&KeptStart>,
    now: Instant,
    previous_run_id: Option<&str>,
    age: &ServerAge,
) -> Instant {
    match kept {
        Some(kept)
            if age.run_id.as_deref() == Some(kept.run_id.as_str()) && age.replid == kept.replid =>
        {
            kept.since
        }
        _ => grace_starts(now, previous_run_id, age),
    }
}

impl ServerAge {
    fn parse(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        Self {
            run_id: field("run_id:").filter(|id| !id.is_empty()),
            uptime: field("uptime_in_seconds:").and_then(|v| v.parse::<u64>().ok()),
            // A master whose replication history has a second id was a replica once and was
            // promoted since it started (`second_repl_offset` is -1 otherwise).
            replica: field("role:").as_deref() == Some("slave"),
            promoted: field("role:").as_deref() == Some("master")
                && field("second_repl_offset:")
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|offset| offset >= 0),
            replid: field("master_replid:").filter(|id| !id.is_empty()),
        }
    }
}

/// When the restart grace of a node counts from, on our monotonic clock.
///
/// - A `run_id` different from the one this client saw before: the server restarted under
///   our eyes; the grace starts now, whatever its uptime says (a wall-clock reading).
/// - No usable uptime (negative, unparsable, missing): the grace starts now, so the node is
///   quarantined for one grace and then votes, instead of never connecting.
/// - A master promoted from replica since it started (a failover, as inside a
///   Sentinel-resolved voter), seen by this client for the first time: its uptime says
///   nothing of when it became this voter's master, so the grace starts now (once: the
///   supervisor keeps the start while the `run_id` and the replication id stay the same,
///   see [`grace_start`]).
/// - Otherwise the uptime is a hint for a server this client never saw before: the start is
///   placed `uptime` ago (truncated to whole seconds, so at or after the real start, and a
///   grace measured from it never ends early).
fn grace_starts(now: Instant, previous_run_id: Option<&str>, age: &ServerAge) -> Instant {
    let restarted = previous_run_id.is_some() && previous_run_id != age.run_id.as_deref();
    match age.uptime {
        Some(uptime) if !restarted && !age.promoted => {
            now.checked_sub(Duration::from_secs(uptime)).unwrap_or(now)
        }
        _ => now,
    }
}

/// `INFO server` and `INFO replication` (asked apart: a server before Redis 7 takes one
/// section per `INFO`).
async fn server_age(conn: &mut MultiplexedConnection) -> Result<ServerAge, RedisError> {
    let mut info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    let more: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await?;
    info.push_str(&more);
    Ok(ServerAge::parse(&info))
}

/// Whether an error means the connection itself is unusable (as opposed to the server
/// refusing one command), so the supervisor must replace it.
pub(crate) fn breaks_connection(err: &RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
}

#[cfg(test)]
mod restart_grace_tests {
    use super::*;

    fn age(run_id: &str, uptime: Option<u64>) -> ServerAge {
        ServerAge {
            run_id: Some(run_id.to_owned()),
            uptime,
            promoted: false,
            replica: false,
            replid: None,
        }
    }

    #[test]
    fn info_parses_run_id_and_only_a_sane_uptime() {
        let info = "# Server\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
        assert_eq!(ServerAge::parse(info), age("abc123", Some(42)));
        let stepped = "run_id:abc123\r\nuptime_in_seconds:-17\r\n";
        assert_eq!(ServerAge::parse(stepped).uptime, None);
        assert_eq!(ServerAge::parse("uptime_in_seconds:soon").uptime, None);
        assert_eq!(
            ServerAge::parse(""),
            ServerAge {
                run_id: None,
                uptime: None,
                promoted: false,
                replica: false,
                replid: None,
            }
        );
    }

    /// Mutation: `promoted` ignored in `grace_starts`: a promoted master first seen votes at
    /// once, on the strength of an uptime from before it was this voter's master.
    #[test]
    fn a_master_promoted_since_it_started_starts_the_grace_now() {
        let promoted =
            "run_id:b\r\nuptime_in_seconds:3600\r\nrole:master\r\nsecond_repl_offset:1234\r\n";
        assert!(ServerAge::parse(promoted).promoted);
        let never = "role:master\r\nsecond_repl_offset:-1\r\n";
        assert!(!ServerAge::parse(never).promoted);
        let replica = "role:slave\r\nsecond_repl_offset:99\r\n";
        assert!(!ServerAge::parse(replica).promoted);
        let now = Instant::now();
        assert_eq!(grace_starts(now, None, &ServerAge::parse(promoted)), now);
    }

    /// A failback: this client saw X as master, missed Y's term, and meets X again, promoted
    /// anew (same `run_id`, another replication id). Mutation: the kept start reused on the
    /// `run_id` alone (the first version) lets X vote at once, though it may lack keys Y
    /// granted.
    #[test]
    fn a_failback_to_a_known_server_starts_the_grace_again() {
        let now = Instant::now();
        let earlier = now
            .checked_sub(Duration::from_secs(600))
            .expect("ten minutes");
        let kept = KeptStart {
            run_id: "x".to_owned(),
            replid: Some("r1".to_owned()),
            since: earlier,
        };
        let term = |replid: &str| {
            ServerAge::parse(&format!(
                "run_id:x\r\nuptime_in_seconds:3600\r\nrole:master\r\nsecond_repl_offset:7\r\nmaster_replid:{replid}\r\n"
            ))
        };
        assert_eq!(
            grace_start(Some(&kept), now, Some("x"), &term("r1")),
            earlier
        );
        assert_eq!(grace_start(Some(&kept), now, Some("x"), &term("r2")), now);
    }

    #[test]
    fn a_new_run_id_starts_the_grace_now_whatever_the_uptime() {
        let now = Instant::now();
        let five_ago = now.checked_sub(Duration::from_secs(5)).expect("up for 5 s");
        // First sight: the uptime is the hint.
        assert_eq!(grace_starts(now, None, &age("a", Some(5))), five_ago);
        // Same server again: still the hint.
        assert_eq!(grace_starts(now, Some("a"), &age("a", Some(5))), five_ago);
        // Restarted (new run_id), even claiming a long uptime (a stepped clock): now.
        assert_eq!(grace_starts(now, Some("a"), &age("b", Some(3600))), now);
    }

    #[test]
    fn no_usable_uptime_starts_the_grace_now_instead_of_never() {
        let now = Instant::now();
        assert_eq!(grace_starts(now, None, &age("a", None)), now);
    }
}
