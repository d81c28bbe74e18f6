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
use std::time::Duration;

use redis::{AsyncConnectionConfig, RedisError};
use tokio::sync::watch;

use crate::core::node_id::NodeId;
use crate::errors::node_error::NodeError;
use crate::voters::restart_grace::ServerAge;
use crate::voters::server_identity::ServerIdentities;
use crate::voters::source::NodeSource;
use crate::voters::supervisor::{BrokenSignal, Link, Supervised, supervise};
pub(crate) use crate::voters::supervisor::{Connected, ServerRole, breaks_connection};

/// The caller's side of a running supervisor.
struct LinkHandle {
    link: watch::Receiver<Link>,
    broken: Arc<BrokenSignal>,
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
        crate::core::telemetry::task_spawned();
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
