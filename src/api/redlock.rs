//! The client handle: the composition root of the API. It validates a call's arguments, runs
//! the protocol (`crate::protocol::acquire`) and wraps what it returns in the API's types.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Result;
use crate::api::builder::Builder;
use crate::api::last_handle::LastHandle;
use crate::api::lock::Lock;
use crate::core::held_locks;
use crate::core::quorum::{self, Decision, Tally};
use crate::core::report::{NodeOutcome, NodeReport, Report};
use crate::core::resource;
use crate::core::retry::RetryPolicy;
use crate::core::telemetry;
use crate::engine::gather::gather;
use crate::errors::config_error::ConfigError;
use crate::errors::error::{Error, Failure, Operation};
use crate::errors::node_error::NodeError;
use crate::protocol::acquire::{Taking, acquire};
use crate::protocol::shared::{Shared, ensure_runtime};
use crate::voters::source::IntoNode;

use tracing::Instrument;

/// A Redlock client over N independent Redis masters.
///
/// A lock is granted only when a majority (N/2+1) of the masters set its key within the round
/// and enough of the ttl is left once the round's duration and the clock-drift allowance are
/// subtracted. The handle is cheap to clone (an `Arc`), `Send` and `Sync`; clones share the
/// nodes' connections. It is bound to the tokio runtime it is first used in.
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn demo() -> Result<(), redquorum::Error> {
/// let rl = redquorum::RedLock::new([
///     "redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003",
///     "redis://127.0.0.1:7004", "redis://127.0.0.1:7005",
/// ])?;
/// let lock = rl.acquire("orders:42", Duration::from_secs(10)).await?;
/// // … the critical section, finished before lock.valid_until() …
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedLock {
    pub(super) shared: Arc<Shared>,
    /// Held only for its drop, with the last clone: it waits for the clean-ups still running.
    _last: Arc<LastHandle>,
}

impl RedLock {
    /// A client over `nodes` with the default configuration (see [`Builder`]).
    ///
    /// No I/O happens here; nodes connect in the background on first use.
    ///
    /// # Errors
    /// [`Error::Config`] when the list is empty, a node is malformed, or two entries name the
    /// same server (`localhost` and `127.0.0.1` count as the same host).
    ///
    /// ```
    /// # fn main() -> Result<(), redquorum::Error> {
    /// let rl = redquorum::RedLock::new(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])?;
    /// assert_eq!(rl.quorum(), 2);
    /// # Ok(()) }
    /// ```
    pub fn new<I>(nodes: I) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: IntoNode,
    {
        Self::builder(nodes).build()
    }

    /// A [`Builder`] over `nodes`, to change the defaults before [`Builder::build`].
    ///
    /// ```
    /// # fn main() -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let rl = redquorum::RedLock::builder(["redis://127.0.0.1:7001"])
    ///     .per_node_timeout(Duration::from_millis(20))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder<I>(nodes: I) -> Builder
    where
        I: IntoIterator,
        I::Item: IntoNode,
    {
        Builder::new(nodes)
    }

    /// A client handle over `shared`, the first of its clones.
    pub(crate) fn from_shared(shared: Shared) -> Self {
        let shared = Arc::new(shared);
        Self {
            _last: Arc::new(LastHandle(shared.clone())),
            shared,
        }
    }

    /// What this client's handles and locks share, for the layers below the API.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// How many nodes this client uses.
    pub fn node_count(&self) -> usize {
        self.shared.nodes.len()
    }

    /// How many nodes must agree: `node_count() / 2 + 1`.
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.node_count())
    }

    /// Waits (at most `within`) for the clean-ups this client left to the runtime: the
    /// compare-and-delete of an acquire cancelled mid-round, the release of a lock dropped
    /// without [`Lock::release`], and the deletes of a release that returned at the majority.
    /// True when none is left.
    ///
    /// Dropping the client's last handle at the end of `#[tokio::main]` (the root of a
    /// multi-thread runtime's `block_on`) waits for them too, up to 1 s
    /// ([`Builder::settle_on_drop`]), so a program that releases its locks and returns from
    /// `main` leaves nothing behind. Call `settle` elsewhere: in a task, on a current-thread
    /// runtime (`#[tokio::test]`'s, where waiting in a drop would stop the clean-ups
    /// themselves), to wait longer, or to know whether they finished; without it, their keys
    /// stay until their ttl. Keep the client until its locks are released or dropped: a lock
    /// dropped after the last handle is not waited for.
    ///
    /// It also waits for what rounds left running: requests to slow nodes (each bounded by the
    /// per-node timeout) and deletes queued for a master that stopped answering, which are
    /// delivered when it wakes, so `false` can also mean "a master is hung": its keys then
    /// expire with their ttl if the process exits first. A dropped [`Lease`](crate::Lease)
    /// releases from its keep-alive task, which notices the drop a moment later: call
    /// [`Lease::release`](crate::Lease::release) instead when the process is about to exit.
    ///
    /// # Cancel safety
    /// Cancel safe: the clean-ups go on without it.
    ///
    /// ```no_run
    /// # async fn demo(rl: redquorum::RedLock, shutdown: impl std::future::Future<Output = ()>) {
    /// use std::time::Duration;
    /// tokio::select! {
    ///     lock = rl.acquire("job", Duration::from_secs(30)) => { /* … */ }
    ///     () = shutdown => {
    ///         // The cancelled acquire's clean-up runs in the background: let it finish.
    ///         rl.settle(Duration::from_secs(1)).await;
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn settle(&self, within: Duration) -> bool {
        self.shared.settle(within).await
    }

    /// Connects to every node now instead of on first use. Useful at start-up, so the first
    /// acquire does not pay for connection set-up.
    ///
    /// How long it waits:
    /// - until a majority of the nodes has connected, or too many failed for one to;
    /// - then, for the others, as long again as that took, and at least the per-node timeout
    ///   (the derived one's ceiling, 50 ms, when none is set); a node still connecting then
    ///   is reported as [`NodeOutcome::NoReply`];
    /// - each node at most the connect timeout.
    ///
    /// So a hung server (stopped, or its host gone without a reset) costs the grace, not the
    /// connect timeout. [`connect_all`](Self::connect_all) waits for every node.
    ///
    /// Nodes that fail or are not waited for keep connecting in the background.
    ///
    /// It is also the check that every node is a server of its own: each connection reads the
    /// server's `run_id`, and a node that reaches a server another node already speaks for
    /// (`127.1` beside `127.0.0.1`, a second bind address, a Unix socket, a port forward, two
    /// DNS names of one host) does not vote. Here that is an error; on the lock path the node
    /// counts as failed, with [`NodeError::SameServer`](crate::NodeError::SameServer) in the
    /// report, until it reaches a server of its own. Two names of one healthy server connect
    /// within moments of each other, so the grace finds them; [`connect_all`](Self::connect_all)
    /// finds them whatever the timing. A name can move to another voter's server later: the
    /// check runs again at each reconnect. It needs the ACL's `+info`; without it only the
    /// builder's address check guards you, and a warning says so. Why it matters even though
    /// `SET NX` grants a key once per server: an extension is a compare-and-set, and would count
    /// one server once per name (`DESIGN.md` §6).
    ///
    /// # Errors
    /// - [`Error::Config`] with [`ConfigError::DuplicateNode`](crate::ConfigError::DuplicateNode)
    ///   naming both nodes, when two of them reached the same server;
    /// - [`Error::NoQuorum`] when fewer than a majority connected, with each node's error;
    /// - [`Error::NoRuntime`] outside a tokio runtime.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future only stops waiting; connections keep being made.
    ///
    /// ```no_run
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let report = rl.connect().await?;
    /// println!("connected: {report}");
    /// # Ok(()) }
    /// ```
    pub async fn connect(&self) -> Result<Report> {
        self.connect_until(true).await
    }

    /// As [`connect`](Self::connect), but waits for every node, each at most the connect
    /// timeout: the report then says of every node whether it connected. A hung server costs
    /// the whole connect timeout.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future only stops waiting; connections keep being made.
    pub async fn connect_all(&self) -> Result<Report> {
        self.connect_until(false).await
    }

    /// # Cancel safety
    /// Cancel safe: it only waits for connections the nodes make in the background.
    async fn connect_until(&self, decided_is_enough: bool) -> Result<Report> {
        ensure_runtime()?;
        let start = Instant::now();
        let config = &self.shared.config;
        let timeout = config.connect_timeout;
        let nodes = &self.shared.nodes;
        let asks = nodes.iter().map(|node| async move {
            let outcome = match tokio::time::timeout(timeout, node.wait_connected()).await {
                Ok(Ok(())) => NodeOutcome::Connected,
                Ok(Err(err)) => NodeOutcome::Failed(err),
                Err(_) => NodeOutcome::Failed(NodeError::TimedOut(timeout)),
            };
            (outcome, start.elapsed())
        });
        // Decided as a round is: a majority connected, or too many failed for one to.
        let decided = |answers: &[Option<(NodeOutcome, Duration)>]| {
            let mut tally = Tally::new(answers.len());
            for (outcome, _) in answers.iter().flatten() {
                tally.record(outcome.vote());
            }
            decided_is_enough && tally.decision() != Decision::Open
        };
        let grace_floor = config.node_timeout_without_ttl();
        let answers = gather(asks, decided, grace_floor).await;
        let lines = nodes.iter().zip(answers).map(|(node, answer)| {
            let (outcome, latency) = answer.unwrap_or((NodeOutcome::NoReply, start.elapsed()));
            NodeReport::new(node.id().clone(), outcome, latency)
        });
        let report = Report::new(lines.collect());
        let same_server = report.iter().find_map(|line| match line.outcome() {
            NodeOutcome::Failed(NodeError::SameServer { other, .. }) => {
                Some((other.clone(), line.node().clone()))
            }
            _ => None,
        });
        let result = if let Some((a, b)) = same_server {
            let (first, second) = if a.index() < b.index() {
                (a, b)
            } else {
                (b, a)
            };
            Err(Error::Config(ConfigError::DuplicateNode { first, second }))
        } else if report.successes() >= self.quorum() {
            Ok(report)
        } else {
            let failure = Failure::new(Operation::Connect, b"", 1, start.elapsed(), report);
            Err(Error::NoQuorum(Box::new(failure)))
        };
        telemetry::operation_finished(
            Operation::Connect,
            result.as_ref().map(drop),
            start.elapsed(),
        );
        result
    }

    /// One round: tries to take `resource` for `ttl` once, without retrying.
    ///
    /// `resource` is any bytes (not empty, at most [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN)).
    /// The servers are told `ttl` in whole milliseconds; the returned lock is valid until
    /// `start + ttl − drift`, measured on the monotonic clock from before the first request.
    ///
    /// # Errors
    /// - [`Error::Conflict`]: another owner holds it on too many nodes;
    /// - [`Error::NoQuorum`]: too many nodes failed (the report says which and why);
    /// - [`Error::ValidityExhausted`]: a majority granted, but too late;
    /// - [`Error::Config`]: a bad resource or ttl, found before any I/O;
    /// - [`Error::NoRuntime`]: called outside a tokio runtime.
    ///
    /// After a failed round our key is deleted (compare-and-delete) from every node, including
    /// the ones that did not answer, before the error is returned.
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense that a dropped call may have set keys; it cleans up after
    /// itself: dropping the future mid-round spawns a compare-and-delete on every node, so
    /// nothing of ours outlives the cleanup (at worst, with no runtime left to run it, the keys
    /// expire after `ttl`). No lock is lost or leaked to the caller.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// match rl.try_acquire("nightly-report", Duration::from_secs(60)).await {
    ///     Ok(lock) => { /* run the report */ lock.release().await?; }
    ///     Err(e) if e.is_conflict() => println!("another instance is running it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Lock> {
        self.acquire_with(resource, ttl, &RetryPolicy::once()).await
    }

    /// Takes `resource` for `ttl`, retrying failed rounds as the configured [`RetryPolicy`]
    /// says (by default up to 10 rounds, 50–200 ms apart).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire), for the last round; [`Failure::attempts`] says how
    /// many rounds were tried. Invalid arguments fail at once, without I/O.
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire): dropping the future during a round spawns that
    /// round's cleanup; dropping it between rounds leaves nothing behind.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let lock = rl.acquire("orders:42", Duration::from_secs(10)).await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Lock> {
        let config = &self.shared.config;
        self.acquire_checked(resource.as_ref(), ttl, &config.retry, config.fencing, false)
            .await
    }

    /// Takes `resource` for `ttl`, retrying for up to `max_wait` (no limit on the number of
    /// rounds; the configured delays between them).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let lock = rl.acquire_within("orders:42", Duration::from_secs(10), Duration::from_secs(30)).await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_within(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock> {
        let policy = self.shared.config.retry.within(max_wait);
        self.acquire_with(resource, ttl, &policy).await
    }

    /// Takes `resource` for `ttl`, retrying as `policy` says.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); [`Error::Config`] if `policy` allows no attempt.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let policy = redquorum::RetryPolicy::default().max_attempts(Some(3));
    /// let lock = rl.acquire_with("orders:42", Duration::from_secs(10), &policy).await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_with(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<Lock> {
        self.acquire_checked(
            resource.as_ref(),
            ttl,
            policy,
            self.shared.config.fencing,
            false,
        )
        .await
    }

    /// Acquire with fencing on, whatever the configuration (elections: the term is the token).
    pub(crate) async fn acquire_fenced(
        &self,
        resource: &[u8],
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<Lock> {
        self.acquire_checked(resource, ttl, policy, true, false)
            .await
    }

    /// This client's identity for [`held_locks`]: the address of what all its handles share,
    /// which stays put while any of them (or a lock of theirs) lives.
    pub(crate) fn client_address(&self) -> usize {
        Arc::as_ptr(&self.shared).addr()
    }

    pub(super) fn lock_key(&self, resource: &[u8]) -> Vec<u8> {
        self.shared.config.lock_key(resource)
    }

    /// Every acquire ends here: the arguments are checked before any I/O, the protocol runs,
    /// and one place records the call's outcome and duration. With `read`, a read lock of the
    /// read-write lock on `resource` (`crate::RwLock`), whose write lock is the lock itself.
    pub(crate) async fn acquire_checked(
        &self,
        resource: &[u8],
        ttl: Duration,
        policy: &RetryPolicy,
        fencing: bool,
        read: bool,
    ) -> Result<Lock> {
        telemetry::recorded(Operation::Acquire, async {
            resource::validate(resource)?;
            let timing = self.shared.config.timing(ttl)?;
            if !policy.allows_any_attempt() {
                return Err(ConfigError::NoAttempts.into());
            }
            ensure_runtime()?;
            let readers =
                read.then(|| resource::readers_key(&self.shared.config.key_prefix, resource));
            let key = self.lock_key(resource);
            if held_locks::held_here(self.client_address(), &key) {
                return Err(Error::HeldByCaller {
                    resource: resource::display(resource),
                });
            }
            let span = tracing::debug_span!(
                "redquorum.acquire",
                resource = %resource::display(resource),
                ttl_ms = timing.ttl_ms,
                nodes = self.node_count(),
            );
            let taking = match &readers {
                Some(readers) => Taking::Read { readers },
                None => Taking::Lock,
            };
            let acquired = acquire(
                &self.shared,
                resource,
                key,
                &timing,
                policy,
                (fencing, taking),
            )
            .instrument(span)
            .await?;
            let mut lock = Lock::new(self.shared.clone(), resource, acquired);
            if let Some(readers) = readers {
                lock.set_read_share(readers);
            }
            Ok(lock)
        })
        .await
    }
}

impl Builder {
    /// Validates the configuration and creates the handle. No I/O happens here: each node is
    /// connected in the background on first use (or by [`RedLock::connect`]).
    ///
    /// One node, and an even number of nodes, are accepted but logged as weaker: 4 nodes
    /// tolerate one failure, like 3.
    ///
    /// # Errors
    /// [`Error::Config`] for no nodes, a malformed node, the same server listed twice
    /// (`localhost`, `127.0.0.1`, `::1` and `::ffff:127.0.0.1` count as one host), a drift
    /// factor outside `[0, 1)`, a zero timeout, or a retry policy with no attempt. Each call
    /// checks its own arguments too: an empty resource or one over
    /// [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN) bytes, a ttl over
    /// [`MAX_TTL`](crate::MAX_TTL), or one that leaves no validity after the drift and the
    /// per-node timeout.
    pub fn build(self) -> Result<RedLock> {
        Ok(RedLock::from_shared(self.into_shared()?))
    }
}
