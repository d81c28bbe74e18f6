//! Leases: a lock kept alive by a background task, with a dependable "you lost it" signal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::Result;
use crate::deadline::Deadline;
use crate::error::{Error, LostReason};
use crate::lock::Lock;
use crate::report::Report;

/// How a [`Lease`] renews its lock.
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | [`renew_every`](Self::renew_every) | a third of the lock's ttl |
/// | [`max_extensions`](Self::max_extensions) | no limit |
/// | [`max_hold`](Self::max_hold) | no limit |
///
/// ```
/// use std::time::Duration;
/// # fn main() -> Result<(), redquorum::ConfigError> {
/// let options = redquorum::LeaseOptions::default()
///     .renew_every(Duration::from_secs(2))?
///     .max_hold(Some(Duration::from_secs(3600)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseOptions {
    renew_every: Option<Duration>,
    max_extensions: Option<u32>,
    max_hold: Option<Duration>,
}

impl LeaseOptions {
    /// Renew this often (it must be shorter than the ttl to be of use: a lease whose renewal
    /// would come after its deadline is lost at the deadline).
    ///
    /// # Errors
    /// [`ConfigError::ZeroTimeout`](crate::ConfigError::ZeroTimeout) for zero,
    /// [`ConfigError::TooLong`](crate::ConfigError::TooLong) above
    /// [`MAX_TTL`](crate::MAX_TTL).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # fn main() -> Result<(), redquorum::ConfigError> {
    /// let o = redquorum::LeaseOptions::default().renew_every(Duration::from_millis(500))?;
    /// assert!(redquorum::LeaseOptions::default().renew_every(Duration::MAX).is_err());
    /// # Ok(()) }
    /// ```
    pub fn renew_every(mut self, interval: Duration) -> Result<Self, crate::ConfigError> {
        if interval.is_zero() {
            return Err(crate::ConfigError::ZeroTimeout("renewal interval"));
        }
        if interval > crate::MAX_TTL {
            return Err(crate::ConfigError::TooLong {
                what: "renewal interval",
                value: interval,
                max: crate::MAX_TTL,
            });
        }
        self.renew_every = Some(interval);
        Ok(self)
    }

    /// Stop renewing after this many extensions; the lease is then lost at its deadline.
    pub fn max_extensions(mut self, max: Option<u32>) -> Self {
        self.max_extensions = max;
        self
    }

    /// Stop renewing once the lease has been held this long; it is then lost at its deadline.
    pub fn max_hold(mut self, max: Option<Duration>) -> Self {
        self.max_hold = max;
        self
    }
}

/// What the keep-alive task and the lease's holders share.
#[derive(Debug)]
struct Shared {
    valid_until: watch::Sender<Deadline>,
    lost: watch::Sender<Option<LostReason>>,
}

/// A cheap, cloneable view of a lease: its deadline and its loss signal. Give it to the code
/// that does the protected work.
///
/// ```
/// # async fn demo(signal: redquorum::LeaseSignal) {
/// tokio::select! {
///     reason = signal.lost() => eprintln!("lost: {reason}"),
///     _ = do_work() => {}
/// }
/// # }
/// # async fn do_work() {}
/// ```
#[derive(Debug, Clone)]
pub struct LeaseSignal {
    valid_until: watch::Receiver<Deadline>,
    lost: watch::Receiver<Option<LostReason>>,
}

impl LeaseSignal {
    /// Resolves when the lease is lost (at once if it already is).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it only stops waiting; call again to wait again.
    ///
    /// ```
    /// # async fn demo(signal: redquorum::LeaseSignal) { let _reason = signal.lost().await; }
    /// ```
    pub async fn lost(&self) -> LostReason {
        let mut lost = self.lost.clone();
        match lost.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or(LostReason::DeadlinePassed),
            // The keep-alive task is gone without saying why: treat it as lost.
            Err(_) => LostReason::DeadlinePassed,
        }
    }

    /// True once the lease is lost.
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some() || self.valid_until.borrow().passed()
    }

    /// The current local deadline (moves forward with every successful extension, and
    /// earlier by any suspend of the host, see [`Lock::valid_until`]).
    pub fn valid_until(&self) -> Instant {
        self.valid_until.borrow().instant()
    }

    /// Waits for the next successful extension and returns the deadline it set; `None` once
    /// the lease has ended (released or dropped) and no extension can come. A lost lease is
    /// never renewed: wait on [`lost`](Self::lost) beside this. For event streams and
    /// metrics ("renewed, valid for another 9.8 s").
    ///
    /// # Cancel safety
    /// Cancel safe: an extension that happened while nobody waited is returned by the next
    /// call (only the latest one, if there were several).
    ///
    /// ```
    /// # async fn demo(mut signal: redquorum::LeaseSignal) {
    /// while let Some(deadline) = signal.renewed().await {
    ///     println!("renewed for {:?}", deadline - std::time::Instant::now());
    /// }
    /// # }
    /// ```
    pub async fn renewed(&mut self) -> Option<Instant> {
        self.valid_until.changed().await.ok()?;
        Some(self.valid_until.borrow_and_update().instant())
    }
}

/// A lock that renews itself until it is released, dropped, or lost.
///
/// A background task extends the lock every [`renew_every`](LeaseOptions::renew_every)
/// (a third of the ttl by default). [`lost`](Self::lost) fires **by the local deadline**
/// (`start + ttl − drift` of the last successful acquire or extend) when no extension has
/// succeeded by then, even if an extension is still hanging, and at once when an extension
/// finds the lock gone. Under the documented assumptions that is before any other client can
/// acquire the lock: work done under a lease should `select!` on `lost()`.
///
/// The task never outlives the lease: dropping a `Lease` stops the renewals (and the lock's
/// own `Drop` schedules a best-effort release); [`release`](Self::release) stops them, then
/// releases.
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
/// let lease = rl.acquire("leader", Duration::from_secs(10)).await?.into_lease(Default::default());
/// tokio::select! {
///     reason = lease.lost() => eprintln!("lost the lock: {reason}"),
///     _ = tokio::time::sleep(Duration::from_secs(60)) => {}
/// }
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "a lease should be released with `release().await`; dropping it stops renewals"]
#[derive(Debug)]
pub struct Lease {
    signal: LeaseSignal,
    resource: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Lock>>,
}

impl Lock {
    /// Turns the lock into a [`Lease`] that renews itself in the background.
    ///
    /// Must be called inside a tokio runtime (the renewals run as a task on it).
    ///
    /// # Panics
    /// Outside a tokio runtime (`tokio::spawn` panics there). A `Lock` comes from an async
    /// acquire, so this only happens when a lock is moved to a thread without a runtime.
    ///
    /// ```no_run
    /// # async fn demo(lock: redquorum::Lock) {
    /// let lease = lock.into_lease(redquorum::LeaseOptions::default());
    /// # }
    /// ```
    pub fn into_lease(self, options: LeaseOptions) -> Lease {
        let (valid_until, valid_rx) = watch::channel(self.deadline());
        let (lost, lost_rx) = watch::channel(None);
        let shared = Arc::new(Shared { valid_until, lost });
        let resource = self.resource_display();
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(keep_alive(self, options, shared, stop_rx));
        Lease {
            signal: LeaseSignal {
                valid_until: valid_rx,
                lost: lost_rx,
            },
            resource,
            stop: Some(stop),
            task: Some(task),
        }
    }
}

impl Lease {
    /// Resolves when the lease is lost (at once if it already is).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it only stops waiting.
    ///
    /// ```no_run
    /// # async fn demo(lease: redquorum::Lease) { let reason = lease.lost().await; }
    /// ```
    pub async fn lost(&self) -> LostReason {
        self.signal.lost().await
    }

    /// True once the lease is lost or its deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.signal.is_lost()
    }

    /// The current local deadline.
    pub fn valid_until(&self) -> Instant {
        self.signal.valid_until()
    }

    /// A cloneable view (deadline and loss signal) to hand to the protected work.
    pub fn signal(&self) -> LeaseSignal {
        self.signal.clone()
    }

    /// Stops the renewals, then releases the lock on every node.
    ///
    /// # Errors
    /// As [`Lock::release`]: [`Error::Expired`] if the lease had been lost or its deadline had
    /// passed, [`Error::NoQuorum`] if too many nodes failed to confirm.
    ///
    /// # Cancel safety
    /// If dropped part-way, the lock's `Drop` schedules a best-effort release.
    ///
    /// ```no_run
    /// # async fn demo(lease: redquorum::Lease) -> Result<(), redquorum::Error> {
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<Report> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(task) = self.task.take() else {
            return Err(Error::NoRuntime);
        };
        match task.await {
            Ok(lock) => lock.release().await,
            // The task panicked or was cancelled with its runtime: its lock was dropped, which
            // scheduled a release if a runtime was left.
            Err(_) => Err(Error::NoRuntime),
        }
    }

    /// The resource, for messages.
    pub fn resource_display(&self) -> &str {
        &self.resource
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Abort, not just signal: a renewal must never outlive its holder. The aborted task
        // drops its lock, whose own Drop schedules a best-effort release.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Renews `lock` until told to stop, lost, or past a limit; returns the lock.
async fn keep_alive(
    mut lock: Lock,
    options: LeaseOptions,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) -> Lock {
    let ttl = lock.ttl();
    let interval = options
        .renew_every
        .unwrap_or(ttl / 3)
        .max(Duration::from_millis(1));
    let held_since = Instant::now();
    let mut extensions = 0u32;
    // Checked: an interval past the deadline only means the lease is lost there.
    let after = |interval: Duration| Instant::now().checked_add(interval);
    let mut next_renewal = after(interval).unwrap_or_else(|| lock.valid_until());
    let lose = |reason: LostReason| {
        tracing::warn!(%reason, "lease lost");
        shared.lost.send_replace(Some(reason));
    };
    loop {
        let deadline = lock.valid_until();
        let limit_reached = options.max_extensions.is_some_and(|max| extensions >= max)
            || options
                .max_hold
                .is_some_and(|max| held_since.elapsed() >= max);
        let wake = if limit_reached {
            deadline
        } else {
            next_renewal.min(deadline)
        };
        tokio::select! {
            _ = &mut stop => return lock,
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
        // Checked anew rather than against `deadline`: a suspend of the host since brings
        // the deadline forward, and the timers above did not run while it slept.
        if lock.is_expired() {
            lose(if limit_reached {
                LostReason::LimitReached
            } else {
                LostReason::DeadlinePassed
            });
            return wait_for_stop(lock, stop).await;
        }
        // The extension may hang; the deadline does not wait for it.
        let extended = tokio::select! {
            _ = &mut stop => return lock,
            result = tokio::time::timeout_at(deadline.into(), lock.extend(ttl)) => result,
        };
        match extended {
            Ok(Ok(())) => {
                extensions = extensions.saturating_add(1);
                shared.valid_until.send_replace(lock.deadline());
                next_renewal = after(interval).unwrap_or_else(|| lock.valid_until());
            }
            Ok(Err(e)) if e.is_expired() => {
                lose(LostReason::Gone(Arc::new(e)));
                return wait_for_stop(lock, stop).await;
            }
            Ok(Err(e)) => {
                // Nodes failed or answered too late: try again soon, until the deadline.
                tracing::debug!(error = %e, "lease extension failed, retrying");
                next_renewal = after((interval / 4).max(Duration::from_millis(1)))
                    .unwrap_or_else(|| lock.valid_until());
            }
            Err(_) => {
                lose(LostReason::DeadlinePassed);
                return wait_for_stop(lock, stop).await;
            }
        }
    }
}

/// After a loss: keep the lock (so `release` can report on it) until the lease is released or
/// dropped; no more renewals.
async fn wait_for_stop(lock: Lock, stop: oneshot::Receiver<()>) -> Lock {
    let _ = stop.await;
    lock
}
