//! The client handle: N nodes and the acquire loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use tokio_util::task::TaskTracker;

use crate::cleanup::Cleanup;
use crate::config::{Builder, Config, Timing};
use crate::deadline::Deadline;
use crate::error::{Error, Failure, NodeError, Operation};
use crate::lock::Lock;
use crate::node::{IntoNode, Node};
use crate::quorum;
use crate::report::{NodeId, NodeOutcome, NodeReport, Report};
use crate::reseed;
use crate::resource::FenceKeys;
use crate::retry::{Jitter, RetryPolicy};
use crate::round::{self, Command, Request, Round, Stragglers, Wait};
use crate::scripts;
use crate::telemetry;
use crate::token::Token;
use crate::verdict::{self, RoundKind};
use crate::waiting::{ReleaseWatch, Subscription};
use crate::{Result, resource};

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
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    nodes: Box<[Node]>,
    config: Config,
    jitter: Jitter,
    releases: ReleaseWatch,
    /// Clean-ups running in the background (a cancelled acquire's compare-and-delete, a
    /// dropped lock's release), for [`RedLock::settle`].
    background: TaskTracker,
}

impl Inner {
    pub(crate) fn new(
        nodes: Box<[Node]>,
        config: Config,
        jitter: Jitter,
        releases: ReleaseWatch,
    ) -> Self {
        Self {
            nodes,
            config,
            jitter,
            releases,
            background: {
                // Closed from the start: spawning still works, and `wait` then means "until
                // nothing is running", with no close/reopen race between `settle` callers.
                let tracker = TaskTracker::new();
                tracker.close();
                tracker
            },
        }
    }
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
    /// # let _ = rl; Ok(()) }
    /// ```
    pub fn builder<I>(nodes: I) -> Builder
    where
        I: IntoIterator,
        I::Item: IntoNode,
    {
        Builder::new(nodes)
    }

    pub(crate) fn from_inner(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    /// How many nodes this client uses.
    ///
    /// ```
    /// # fn demo(rl: redquorum::RedLock) { assert!(rl.node_count() >= 1); }
    /// ```
    pub fn node_count(&self) -> usize {
        self.inner.nodes.len()
    }

    /// How many nodes must agree: `node_count() / 2 + 1`.
    ///
    /// ```
    /// # fn demo(rl: redquorum::RedLock) { assert!(2 * rl.quorum() > rl.node_count()); }
    /// ```
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.node_count())
    }

    /// Waits (at most `within`) for the clean-ups this client left to the runtime: the
    /// compare-and-delete of an acquire cancelled mid-round, the release of a lock dropped
    /// without [`Lock::release`]. Call it before a process exits after cancelling an acquire
    /// (on a signal, say), or those keys stay until their ttl. True when none is left.
    ///
    /// Limits: each clean-up gives up on a node after the per-node timeout; a delete still
    /// queued for a hung master is delivered in the background only while the process lives
    /// (the key there expires with its ttl otherwise). A dropped [`Lease`](crate::Lease)
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
        tokio::time::timeout(within, self.inner.background.wait())
            .await
            .is_ok()
    }

    /// Runs a clean-up on `runtime`, tracked for [`settle`](Self::settle).
    pub(crate) fn spawn_cleanup<F>(&self, runtime: &tokio::runtime::Handle, cleanup: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.inner.background.spawn_on(cleanup, runtime);
    }

    /// Connects to every node now instead of on first use, waiting at most the connect
    /// timeout. Useful at start-up, so the first acquire does not pay for connection set-up.
    ///
    /// Nodes that fail keep reconnecting in the background.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when fewer than a majority connected, with each node's error;
    /// [`Error::NoRuntime`] outside a tokio runtime.
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
        ensure_runtime()?;
        let start = Instant::now();
        let timeout = self.inner.config.connect_timeout;
        let reports = join_all(self.inner.nodes.iter().map(|node| async move {
            let outcome = match tokio::time::timeout(timeout, node.wait_connected()).await {
                Ok(Ok(())) => NodeOutcome::Connected,
                Ok(Err(err)) => NodeOutcome::Failed(err),
                Err(_) => NodeOutcome::Failed(crate::NodeError::TimedOut(timeout)),
            };
            NodeReport::new(node.id().clone(), outcome, start.elapsed())
        }))
        .await;
        let report = Report::new(reports);
        let result = if report.successes() >= self.quorum() {
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
        let policy = self.inner.config.retry.clone();
        self.acquire_with(resource, ttl, &policy).await
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
        let policy = self
            .inner
            .config
            .retry
            .clone()
            .max_attempts(None)
            .max_wait(Some(max_wait));
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
        self.acquire_checked(resource.as_ref(), ttl, policy, self.inner.config.fencing)
            .await
    }

    /// Acquire with fencing on, whatever the configuration (elections: the term is the token).
    pub(crate) async fn acquire_fenced(
        &self,
        resource: &[u8],
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<Lock> {
        self.acquire_checked(resource, ttl, policy, true).await
    }

    /// Every acquire ends here: one place records the call's outcome and duration.
    async fn acquire_checked(
        &self,
        resource: &[u8],
        ttl: Duration,
        policy: &RetryPolicy,
        fencing: bool,
    ) -> Result<Lock> {
        let started = Instant::now();
        let result = self.acquire_validated(resource, ttl, policy, fencing).await;
        telemetry::operation_finished(
            Operation::Acquire,
            result.as_ref().map(drop),
            started.elapsed(),
        );
        result
    }

    async fn acquire_validated(
        &self,
        resource: &[u8],
        ttl: Duration,
        policy: &RetryPolicy,
        fencing: bool,
    ) -> Result<Lock> {
        resource::validate(resource)?;
        let timing = self.inner.config.timing(ttl)?;
        if !policy.allows_any_attempt() {
            return Err(crate::ConfigError::NoAttempts.into());
        }
        ensure_runtime()?;
        let key = resource::lock_key(&self.inner.config.key_prefix, resource);
        let span = tracing::debug_span!(
            "redquorum.acquire",
            resource = %resource::display(resource),
            ttl_ms = timing.ttl_ms,
            nodes = self.node_count(),
        );
        self.acquire_loop(resource, &key, &timing, policy, fencing)
            .instrument(span)
            .await
    }

    async fn acquire_loop(
        &self,
        resource: &[u8],
        key: &[u8],
        timing: &Timing,
        policy: &RetryPolicy,
        fencing: bool,
    ) -> Result<Lock> {
        let started = Instant::now();
        let deadline = policy.wait_limit().and_then(|w| started.checked_add(w));
        let mut attempts = 0u32;
        let mut subscription: Option<Subscription> = None;
        let mut reseed_retries_left = 3u8;
        let channel = release_channel(key);
        if self.inner.config.wait_for_release
            && policy.attempts_limit() != Some(1)
            && self.inner.releases.has_waiters(&channel)
        {
            // Others of this `RedLock` already wait for this resource: queue behind them (each
            // release wakes the longest waiter) rather than race them for it.
            let watch = self.inner.releases.subscribe(channel.clone()).await;
            let delay = self.retry_delay(policy, deadline, Instant::now(), None);
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = watch.notify().notified() => tracing::debug!("woken by a release, first in line"),
            }
            subscription = Some(watch);
        }
        loop {
            attempts = attempts.saturating_add(1);
            // Armed before the attempt, so a release published while it runs is not missed.
            let notify = subscription.as_ref().map(|s| s.notify().clone());
            let mut released = notify.as_ref().map(|n| Box::pin(n.notified()));
            if let Some(r) = released.as_mut() {
                r.as_mut().enable();
            }
            let kind = match self
                .acquire_round(resource, key, timing, attempts, fencing)
                .await
            {
                Ok(lock) => return Ok(lock),
                Err(failed) => failed,
            };
            if kind.retry_now && reseed_retries_left > 0 {
                // The same try again, now that the masters it lacked are seeded (or after a
                // re-seed fenced off its confirmation): a restart or a new deployment costs a
                // round or two, never an attempt or a wait.
                tracing::debug!("fence counters re-seeded, trying again at once");
                reseed_retries_left -= 1;
                attempts -= 1;
                continue;
            }
            let out_of_attempts = policy.attempts_limit().is_some_and(|max| attempts >= max);
            let now = Instant::now();
            let past_deadline = deadline.is_some_and(|d| now >= d);
            if out_of_attempts || past_deadline {
                let failure = Failure::new(
                    Operation::Acquire,
                    resource,
                    attempts,
                    started.elapsed(),
                    kind.report,
                );
                return Err((kind.make)(Box::new(failure)));
            }
            let delay = self.retry_delay(policy, deadline, now, holder_expires_in(&kind.report));
            let held = kind
                .report
                .iter()
                .any(|r| matches!(r.outcome(), NodeOutcome::HeldByOther { .. }));
            let mut late: Option<std::sync::Arc<tokio::sync::Notify>> = None;
            if held && subscription.is_none() && self.inner.config.wait_for_release {
                let watch = self.inner.releases.subscribe(channel.clone()).await;
                late = Some(watch.notify().clone());
                subscription = Some(watch);
            }
            tracing::debug!(attempts, ?delay, "acquire round failed, retrying");
            let woken = async {
                match (released, &late) {
                    (Some(r), _) => r.await,
                    (None, Some(n)) => n.notified().await,
                    (None, None) => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = woken => tracing::debug!("woken by a release"),
            }
        }
    }

    /// The policy's next delay, never past the holder's expiry as the nodes reported it
    /// (`holder_left`), nor past the wait's `deadline`.
    fn retry_delay(
        &self,
        policy: &RetryPolicy,
        deadline: Option<Instant>,
        now: Instant,
        holder_left: Option<Duration>,
    ) -> Duration {
        let mut delay = policy.next_delay(&self.inner.jitter);
        if let Some(left) = holder_left {
            delay = delay.min(left + Duration::from_millis(1));
        }
        if let Some(d) = deadline {
            delay = delay.min(d.saturating_duration_since(now));
        }
        delay
    }

    /// Runs `work` while holding `resource` as a [`Lease`](crate::Lease): acquires (retrying as
    /// the configured policy says), renews the lock while `work` runs, and releases it on every
    /// exit path. If the lease is lost, `work` is cancelled (its future dropped) at once.
    ///
    /// `work` gets a [`LeaseSignal`](crate::LeaseSignal) to watch the deadline itself, e.g. to
    /// stop before a long write.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire) before the work starts; [`Error::LeaseLost`] if the lease
    /// was lost while it ran; and as [`Lock::release`] after it finished (an
    /// [`Error::Expired`] then means the work may have overlapped another holder's).
    ///
    /// # Cancel safety
    /// Dropping the future cancels `work` and drops the lease, which stops the renewals and
    /// schedules a best-effort release.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let rows = rl
    ///     .with_lock("nightly-report", Duration::from_secs(30), async |_signal| {
    ///         42 // … the work …
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(crate::LeaseSignal) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let lease = self
            .acquire(resource, ttl)
            .await?
            .into_lease(crate::LeaseOptions::default());
        let outcome = tokio::select! {
            reason = lease.lost() => Err(reason),
            value = work(lease.signal()) => Ok(value),
        };
        match outcome {
            Ok(value) => lease.release().await.map(|_| value),
            Err(reason) => {
                let resource = lease.resource_display().to_owned();
                let _ = lease.release().await;
                Err(Error::LeaseLost { resource, reason })
            }
        }
    }

    async fn acquire_round(
        &self,
        resource: &[u8],
        key: &[u8],
        timing: &Timing,
        attempt: u32,
        fencing: bool,
    ) -> std::result::Result<Lock, FailedRound> {
        let token = Token::generate();
        let mut cleanup = Cleanup::arm(
            self.clone(),
            key.to_vec(),
            token.clone(),
            timing.per_node_timeout,
            false,
        );
        let config = &self.inner.config;
        let seed_keys = fencing.then(|| resource::fence_keys(&config.key_prefix, resource));
        let (command, extra_keys) = match &seed_keys {
            Some(keys) => {
                let mut extra = vec![keys.counter.clone(), keys.marker.clone()];
                extra.extend(keys.legacy.clone());
                (Command::Script(&scripts::ACQUIRE_FENCED), extra)
            }
            None => (Command::SetIfAbsent, Vec::new()),
        };
        let request = Request {
            command,
            key: key.to_vec(),
            extra_keys,
            token: token.expose().to_owned(),
            number: Some(timing.ttl_ms),
            payload: Vec::new(),
            done: NodeOutcome::Granted,
            settled_nodes_only: true,
            counted: None,
            readd_on: None,
            epochs: None,
            operation: Operation::Acquire,
        };
        let round = round::run(
            self,
            request,
            timing.per_node_timeout,
            Wait::UntilDecided,
            None,
        )
        .await;
        cleanup.after(round.stragglers.clone());
        // Masters that started since their counter was seeded gave no vote: re-seed them, in
        // the background when the round is won anyway, before the next try when it is not.
        let unseeded = round
            .report
            .iter()
            .any(|r| matches!(r.outcome(), NodeOutcome::Failed(NodeError::Unseeded)));
        let verdict = verdict::judge(
            RoundKind::Acquire,
            &round.tally,
            timing.validity_after(round.elapsed()).is_some(),
            None,
            &round.report.votes(),
        );
        let (make, report) = match verdict.error() {
            Some(make) => (make, round.report),
            None => {
                let confirmed = match (&seed_keys, round.fence) {
                    (None, _) => Ok(None),
                    (Some(keys), Some(fence)) => self
                        .confirm_fence(key, keys, &token, fence, &round, timing)
                        .await
                        .map(|()| Some(fence)),
                    // A fenced round won without any counter: impossible with our script.
                    (Some(_), None) => Err((
                        Error::NoQuorum as fn(Box<Failure>) -> Error,
                        Report::default(),
                    )),
                };
                match confirmed {
                    Ok(fencing_token) => {
                        cleanup.disarm();
                        // Re-seed in the background what answered "unseeded", before the
                        // decision or (a restarted master is often the slow one) after it.
                        let late = round.stragglers.clone().filter(|_| fencing);
                        if let Some(keys) = seed_keys.filter(|_| unseeded || late.is_some()) {
                            let redlock = self.clone();
                            let timeout = timing.per_node_timeout;
                            tokio::spawn(async move {
                                let late_unseeded = match late {
                                    Some(stragglers) => stragglers.unseeded().await,
                                    None => false,
                                };
                                if unseeded || late_unseeded {
                                    reseed::reseed(redlock.nodes(), &keys, timeout).await;
                                }
                            });
                        }
                        let valid_until = valid_until(&round, timing);
                        tracing::debug!(attempt, elapsed = ?round.elapsed(), fencing_token, "acquired");
                        let mut lock = Lock::new(
                            self.clone(),
                            resource,
                            key.to_vec(),
                            token,
                            *timing,
                            valid_until,
                            round,
                            attempt,
                        );
                        lock.set_fencing_token(fencing_token);
                        return Ok(lock);
                    }
                    Err(failed) => failed,
                }
            }
        };
        let mut report = report;
        report.learn_expiries(&cleanup.run().await);
        // A re-seed by another acquire of this slot fenced off our confirmation: no fault of
        // the masters, so worth another round at once.
        let fenced_off = report.iter().any(|r| {
            matches!(
                r.outcome(),
                NodeOutcome::Failed(NodeError::SeededSinceGrant)
            )
        });
        let retry_now = match seed_keys.filter(|_| unseeded) {
            Some(keys) => {
                let reseeded = reseed::reseed(self.nodes(), &keys, timing.per_node_timeout).await;
                reseeded.value.is_some() && reseeded.marked >= self.quorum()
            }
            None => fenced_off,
        };
        Err(FailedRound {
            make,
            report,
            retry_now,
        })
    }

    /// The second round of a fenced acquire: on every node that still holds our key, raise the
    /// fence counter to at least `fence`; the token is usable only once a majority *of the
    /// masters that granted before the decision* confirmed it, and only with validity left,
    /// counted from the start of the first round.
    ///
    /// A node whose grant landed after the decision holds our key too, but its counter never
    /// entered the token: its confirmation does not count (`NodeOutcome::LateGrant`). Counting
    /// it let two holders share a token (design §4, "Correction"; checked by `crate::model`).
    async fn confirm_fence(
        &self,
        key: &[u8],
        keys: &FenceKeys,
        token: &Token,
        fence: u64,
        acquired: &Round,
        timing: &Timing,
    ) -> std::result::Result<(), (fn(Box<Failure>) -> Error, Report)> {
        let granted = acquired.report.votes();
        let request = Request {
            command: Command::Script(&scripts::CONFIRM_FENCE),
            key: key.to_vec(),
            extra_keys: vec![keys.counter.clone(), keys.marker.clone()],
            token: token.expose().to_owned(),
            number: Some(fence),
            payload: Vec::new(),
            done: NodeOutcome::FenceConfirmed,
            settled_nodes_only: false,
            // Only the masters that granted before the decision: their counters are in T.
            counted: Some(
                granted
                    .iter()
                    .map(|v| *v == crate::quorum::Vote::Yes)
                    .collect(),
            ),
            readd_on: None,
            epochs: Some(acquired.epochs.clone()),
            operation: Operation::Acquire,
        };
        let confirm = round::run(
            self,
            request,
            timing.per_node_timeout,
            Wait::UntilDecided,
            None,
        )
        .await;
        let elapsed = confirm.decided.saturating_duration_since(acquired.start);
        let verdict = verdict::judge(
            RoundKind::Renew,
            &confirm.tally,
            timing.validity_after(elapsed).is_some(),
            Some(&granted),
            &confirm.report.votes(),
        );
        match verdict.error() {
            None => Ok(()),
            Some(make) => Err((make, confirm.report)),
        }
    }

    pub(crate) fn nodes(&self) -> &[Node] {
        &self.inner.nodes
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Sends `pipeline` to every node at once and waits for every answer, each node bounded by
    /// `timeout` (waiting for its connection included). Answers are in node order, each with
    /// the time since the start. For reads outside the round machinery (no vote, no tally).
    pub(crate) async fn query_everywhere<T: redis::FromRedisValue>(
        &self,
        pipeline: &redis::Pipeline,
        timeout: Duration,
    ) -> Vec<(NodeId, std::result::Result<T, NodeError>, Duration)> {
        let start = Instant::now();
        join_all(self.inner.nodes.iter().map(|node| async move {
            let read = async {
                let mut conn = node.connection().await?.conn;
                pipeline
                    .query_async(&mut conn)
                    .await
                    .map_err(NodeError::Redis)
            };
            let answer = match tokio::time::timeout(timeout, read).await {
                Ok(answer) => answer,
                Err(_) => Err(NodeError::TimedOut(timeout)),
            };
            (node.id().clone(), answer, start.elapsed())
        }))
        .await
    }

    /// Compare-and-delete of `key` on every node, waiting for every answer or timeout; on a
    /// node where an earlier request is still running (`after`), only once it has finished.
    /// With `wake_waiters`, each delete publishes on the release channel (a real release);
    /// without, it is silent (the cleanup of a failed acquire).
    pub(crate) async fn release_everywhere(
        &self,
        key: &[u8],
        token: &Token,
        per_node_timeout: Duration,
        after: Option<&Stragglers>,
        wake_waiters: bool,
    ) -> Round {
        // The channel and the release id, or two empty arguments: publish nothing.
        let (channel, release_id) = if wake_waiters {
            (release_channel(key), token.release_id().into_bytes())
        } else {
            (Vec::new(), Vec::new())
        };
        let request = Request {
            command: Command::Script(&scripts::RELEASE),
            key: key.to_vec(),
            token: token.expose().to_owned(),
            extra_keys: Vec::new(),
            number: None,
            payload: vec![channel.clone(), release_id.clone()],
            done: NodeOutcome::Released,
            settled_nodes_only: false,
            counted: None,
            readd_on: None,
            epochs: None,
            operation: Operation::Release,
        };
        // Our own waiters need not wait for the message to come back from a node, nor even for
        // the deletes to be done: their SETs share our connections, so each node runs our
        // delete first.
        round::run_then(self, request, per_node_timeout, Wait::ForAll, after, || {
            if wake_waiters {
                self.inner.releases.released(&channel, &release_id);
            }
        })
        .await
    }
}

/// A failed acquire round: which error it makes, and its report.
struct FailedRound {
    make: fn(Box<Failure>) -> Error,
    report: Report,
    /// Masters that had not been re-seeded since they started kept the round from a majority,
    /// and now a majority is seeded: try again at once.
    retry_now: bool,
}

/// The channel releases of the lock `key` are published on: `key:released`.
fn release_channel(key: &[u8]) -> Vec<u8> {
    let mut channel = key.to_vec();
    channel.extend_from_slice(b":released");
    channel
}

/// The earliest expiry of another owner's key, as the nodes reported it in a round.
fn holder_expires_in(report: &Report) -> Option<Duration> {
    report
        .iter()
        .filter_map(|r| match r.outcome() {
            NodeOutcome::HeldByOther { expires_in } => *expires_in,
            _ => None,
        })
        .min()
}

/// `start + ttl − drift`, saturating at the far future rather than overflowing.
/// The local deadline of a lock whose round was `round`: `ttl − drift` after the round's first
/// send, brought forward by any suspend of the host since then (`crate::deadline`).
pub(crate) fn valid_until(round: &Round, timing: &Timing) -> Deadline {
    Deadline::after(round.awake, timing.validity_span())
        .unwrap_or_else(|| Deadline::at(round.awake))
}

pub(crate) fn ensure_runtime() -> Result<()> {
    tokio::runtime::Handle::try_current()
        .map(drop)
        .map_err(|_| Error::NoRuntime)
}
