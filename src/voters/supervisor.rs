//! A server link's supervisor: the task that connects, reconnects with backoff, learns who
//! the server is and how long it has been up, and publishes the link ([`Link`]) and its
//! connection ([`Connected`]) for callers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};
use tokio::sync::{Notify, watch};

use crate::core::native::NativeCommands;
use crate::core::node_id::NodeId;
use crate::core::server_clock::ServerClock;
use crate::errors::node_error::{NodeError, is_refused_credentials};
use crate::voters::restart_grace::{KeptStart, ServerAge, grace_start, server_age};
use crate::voters::server_identity::ServerIdentities;
use crate::voters::source::NodeSource;

/// The first reconnect delay after a failed connection attempt; it doubles up to
/// [`RECONNECT_MAX_DELAY`].
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(10);
/// The longest wait between two reconnect attempts, so a restarted master is back in service
/// soon after it listens again.
const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(250);

/// Where a server's connection stands, as published by its supervisor.
#[derive(Clone)]
pub(super) enum Link {
    /// The first connection attempt, or a reconnect after a broken connection, is under way.
    Connecting,
    /// Connected.
    Connected(Connected),
    /// The last attempt failed (the server could not be reached, or it is one another node
    /// already speaks for); the supervisor retries after a backoff.
    Down(NodeError),
}

/// A usable connection to a server, shared: every request on it takes a clone, one atomic
/// count rather than a copy of each field's handle (a request's future keeps it, and a round
/// allocates one such future per node).
#[derive(Clone)]
pub(crate) struct Connected(Arc<ServerConnection>);

impl std::ops::Deref for Connected {
    type Target = ServerConnection;

    fn deref(&self) -> &ServerConnection {
        &self.0
    }
}

/// What [`Connected`] shares: the connection, and what it learnt of its server.
pub(crate) struct ServerConnection {
    pub(crate) conn: MultiplexedConnection,
    /// Counts connections, so a report about an old one is ignored.
    pub(crate) generation: u64,
    /// When the server process started (from its `uptime_in_seconds`, rounded so that the
    /// start is never placed too early); known only when a restart grace is configured.
    pub(super) up_since: Option<Instant>,
    /// The server's `run_id` when this connection was made: new at every start of the server
    /// process, and a connection never outlives the process it was made to, so it names the
    /// server this connection talks to for the connection's whole life. The fenced scripts
    /// take it and read the server's replication id themselves, which together make the fence
    /// term (`scripts/lua/fence_term.lua`): a restarted, promoted or failed-back server is each
    /// re-seeded (`crate::protocol::reseed`). `None` when the server would not say (an ACL without
    /// `+info`).
    pub(crate) run_id: Option<Arc<str>>,
    /// The server's address, for a voter whose server can change (Sentinel, a cluster's
    /// shard), for reports.
    pub(super) server: Option<Arc<str>>,
    /// The supervisor's signal, for [`Connected::report_broken`].
    pub(super) signal: Arc<BrokenSignal>,
    /// A cluster's master that said it was a replica when this connection was made: its
    /// restart grace was not computed for a term as master, so it must not vote on this
    /// connection ([`Connected::check_settled`]).
    pub(super) replica: bool,
    /// The server's `master_replid` when this connection was made.
    pub(super) replid: Option<Arc<str>>,
    /// What the server said it runs when this connection was made (`valkey 9.1.2`, `redis
    /// 7.0.15`), read again at every connection: a failover or a restart can put another
    /// server behind the same address.
    pub(crate) software: Option<Arc<str>>,
    /// What the server does natively (read from `software`, so again at every connection), and
    /// whether it refused one of those commands on this connection (an ACL without it, a
    /// command renamed away): then scripts do every job until the next connection.
    pub(crate) native: NativeLink,
    /// The server's wall clock as read when this connection was made, followed on this host's
    /// clocks: where waiters' places come from (`core::server_clock`).
    pub(crate) clock: Option<ServerClock>,
}

/// What a connection's server does natively (see [`Connected::native`]).
#[derive(Clone)]
pub(crate) struct NativeLink {
    offered: NativeCommands,
    refused: Arc<AtomicBool>,
}

impl NativeLink {
    /// A connection's, for a server that says it runs `software` (a client told to use
    /// scripts only never asks for a native command: `Builder::native_commands`).
    pub(crate) fn new(software: Option<&str>) -> Self {
        let offered = software.map_or(NativeCommands::NONE, NativeCommands::of);
        Self {
            offered,
            refused: Arc::new(AtomicBool::new(false)),
        }
    }

    /// What may be sent natively on this connection now.
    pub(crate) fn offered(&self) -> NativeCommands {
        if self.refused.load(Ordering::Relaxed) {
            NativeCommands::NONE
        } else {
            self.offered
        }
    }

    /// The server refused one of its own commands on this connection: scripts from now on.
    pub(crate) fn refuse(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }
}

/// How callers talk to the supervisor: a connection broke, or a down node is wanted now.
#[derive(Default)]
pub(super) struct BrokenSignal {
    pub(super) generation: AtomicU64,
    /// The newest generation retired on purpose ([`ServerLink::recheck`]): its reconnect is
    /// no lost connection, and is not logged as one.
    pub(super) retired: AtomicU64,
    pub(super) notify: Notify,
    /// Traffic to a down node: retry the connection without waiting out the whole backoff.
    pub(super) wanted: Notify,
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

impl ServerConnection {
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

/// Whether an error means the connection itself is unusable (as opposed to the server
/// refusing one command), so the supervisor must replace it.
pub(crate) fn breaks_connection(err: &RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
}

/// What a supervisor needs to know, fixed for its life.
pub(super) struct Supervised {
    pub(super) source: NodeSource,
    pub(super) config: AsyncConnectionConfig,
    pub(super) connect_timeout: Duration,
    pub(super) ask_uptime: bool,
    pub(super) serves: ServerRole,
    pub(super) servers: Arc<ServerIdentities>,
    pub(super) id: NodeId,
}

/// Keeps one server connected until every caller's handle is gone:
/// - connects (looking a Sentinel-resolved master up first), asks the server its identity and
///   age, claims its `run_id` (one server, one vote) and loads our scripts;
/// - publishes the link, and waits until a caller reports it broken or the sentinels switch
///   the master;
/// - on a failed attempt, waits (doubling, from `RECONNECT_MIN_DELAY` to `RECONNECT_MAX_DELAY`)
///   or until a caller wants it.
pub(super) async fn supervise(
    fixed: Supervised,
    tx: watch::Sender<Link>,
    broken: Arc<BrokenSignal>,
) {
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
pub(super) struct Supervisor {
    pub(super) fixed: Supervised,
    pub(super) broken: Arc<BrokenSignal>,
    /// The wait before the next attempt after a failed one.
    pub(super) delay: Duration,
    /// How many connections were made; a caller's report of a broken link names one.
    pub(super) generation: u64,
    /// The `run_id` of the server last connected to.
    pub(super) run_id: Option<String>,
    /// The grace start of the server last connected to: kept while its `run_id` and
    /// replication id stay.
    pub(super) started: Option<KeptStart>,
    /// The master the sentinels named last (a Sentinel-resolved voter).
    pub(super) server: Option<String>,
    /// The master a switch of the sentinels took this voter away from: when the reconnect
    /// finds it again, the sentinels disagree for now, and comparing at once would loop.
    pub(super) switched_away: Option<String>,
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
            .map_err(NodeError::connecting)?;
        let address = client.get_connection_info().addr().to_string();
        if source.follows_failovers() && self.server.as_deref() != Some(address.as_str()) {
            tracing::info!(node = %id, master = %address, "the sentinels name this voter's master");
            self.server = Some(address.clone());
        }
        let mut conn = client
            .get_multiplexed_async_connection_with_config(config)
            .await
            .map_err(NodeError::connecting)?;
        // Always asked: the fenced acquire needs the server's run_id, and one server must not
        // vote under two names. Only with a restart grace is an answer required; without one,
        // a server that refuses INFO still serves plain locks (its fenced acquires report
        // `NodeError::Unidentified`), and only the builder's address check guards it.
        // A server that refuses our credentials (or our lack of them) serves nothing: said so
        // now, before the scripts are loaded (a server closes an unauthenticated connection
        // that sends an argument over 16 KB, which our largest scripts are, and the error
        // would read as a broken pipe).
        let age = match server_age(&mut conn).await {
            Ok(age) => Some(age),
            Err(err) if *ask_uptime || breaks_connection(&err) || is_refused_credentials(&err) => {
                return Err(NodeError::connecting(err));
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
            .map_err(NodeError::connecting)?;
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
        let software = age
            .as_ref()
            .and_then(|age| age.software.as_deref().map(Arc::from));
        let replid = age
            .as_ref()
            .and_then(|age| age.replid.as_deref().map(Arc::from));
        let clock = age.as_ref().and_then(|age| age.clock);
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
        Connected(Arc::new(ServerConnection {
            conn,
            generation: self.generation,
            up_since,
            run_id,
            server: (serves != ServerRole::Fixed).then(|| Arc::from(address)),
            signal: self.broken.clone(),
            replica: serves == ServerRole::Shard && replica,
            replid,
            native: NativeLink::new(software.as_deref()),
            software,
            clock,
        }))
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
pub(super) async fn load_scripts(
    conn: &mut MultiplexedConnection,
    id: &NodeId,
) -> Result<(), RedisError> {
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
