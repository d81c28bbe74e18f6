//! Leases: a lock kept alive by a background task, with a dependable "you lost it" signal.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Result;
pub(crate) use crate::api::keep_alive::LeaseDeadline;
pub use crate::api::keep_alive::LeaseOptions;
use crate::api::keep_alive::{Renewable, keep_alive};
use crate::api::lock::Lock;
use crate::core::report::Report;
use crate::errors::error::{Error, LostReason};

/// What the keep-alive task and the lease's holders share.
#[derive(Debug)]
struct LeaseState {
    valid_until: watch::Sender<LeaseDeadline>,
    lost: watch::Sender<Option<LostReason>>,
}

/// The lock a lease keeps alive (a real one, or the in-memory double's), as the lease needs it
/// once its renewals stop: to be released. A trait object, so this module knows nothing of the
/// double's.
pub(crate) trait Leased: Send + fmt::Debug + 'static {
    /// Releases the lock as its own `release` does.
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<Report>>;

    /// The tracker of its client's clean-ups, which its `Drop` schedules a release on and
    /// `settle` waits for; `None` when its drop leaves nothing running.
    fn clean_ups(&self) -> Option<TaskTracker> {
        None
    }
}

impl Leased for Lock {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<Report>> {
        Box::pin(Lock::release(*self))
    }

    fn clean_ups(&self) -> Option<TaskTracker> {
        Some(self.clean_up_tracker().clone())
    }
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
    valid_until: watch::Receiver<LeaseDeadline>,
    lost: watch::Receiver<Option<LostReason>>,
    /// Cancelled when the lease is lost or ends (released or dropped).
    ended: CancellationToken,
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

    /// A [`CancellationToken`] cancelled when the protected work must stop: when the lease
    /// is lost (at the same moment as [`lost`](Self::lost)), released or dropped. For
    /// services that wire their shutdown through tokio-util's tokens; node-redlock hands out
    /// an `AbortSignal` for the same purpose.
    ///
    /// Each call returns a child token: cancelling it stops only what waits on it, never the
    /// lease.
    ///
    /// ```
    /// # async fn demo(signal: redquorum::LeaseSignal) {
    /// let stop = signal.cancellation_token();
    /// tokio::select! {
    ///     () = stop.cancelled() => eprintln!("lost the lock: stopping"),
    ///     () = do_work() => {}
    /// }
    /// # }
    /// # async fn do_work() {}
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.ended.child_token()
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
    task: Option<JoinHandle<Box<dyn Leased>>>,
    /// The lock's [`Leased::clean_ups`], for [`Drop`].
    clean_ups: Option<TaskTracker>,
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
        let resource = self.resource_display();
        lease(self, resource, options)
    }
}

/// Starts the keep-alive task of `lock` (`resource` for messages), which hands the lock back
/// when it ends.
///
/// # Panics
/// Outside a tokio runtime, as [`Lock::into_lease`].
pub(crate) fn lease<L: Renewable + Leased>(
    lock: L,
    resource: String,
    options: LeaseOptions,
) -> Lease {
    let (valid_until, valid_rx) = watch::channel(lock.lease_deadline());
    let (lost, lost_rx) = watch::channel(None);
    let shared = Arc::new(LeaseState { valid_until, lost });
    let (stop, stop_rx) = oneshot::channel();
    let clean_ups = lock.clean_ups();
    let renewed = {
        let shared = shared.clone();
        move |lock: &L| {
            shared.valid_until.send_replace(lock.lease_deadline());
        }
    };
    let ended = CancellationToken::new();
    let lose = {
        let ended = ended.clone();
        move |reason: LostReason| {
            tracing::warn!(%reason, "lease lost");
            // The token first: whoever `lost()` wakes finds it cancelled.
            ended.cancel();
            shared.lost.send_replace(Some(reason));
        }
    };
    crate::core::telemetry::task_spawned();
    let task = tokio::spawn(async move {
        let lock: Box<dyn Leased> =
            Box::new(keep_alive(lock, options, renewed, lose, stop_rx).await);
        lock
    });
    Lease {
        signal: LeaseSignal {
            valid_until: valid_rx,
            lost: lost_rx,
            ended,
        },
        resource,
        stop: Some(stop),
        task: Some(task),
        clean_ups,
    }
}

/// Runs `work` under `lease` as the holder of `key` of `client` (so an acquire of that lock
/// from within it is refused, see [`held_locks`](crate::core::held_locks)): the work is cancelled
/// (dropped) at once when the lease is lost, and the lease is released on every exit path.
/// `with_lock` of the real client and of the in-memory double both end here.
///
/// # Errors
/// [`Error::LeaseLost`] if the lease was lost while the work ran; as the lock's release after
/// it finished.
///
/// # Cancel safety
/// Dropping it drops the work and the lease (renewals stop, a best-effort release follows).
pub(crate) async fn work_under<F, Fut, T>(
    lease: Lease,
    client: usize,
    key: Vec<u8>,
    work: F,
) -> Result<T>
where
    F: FnOnce(LeaseSignal) -> Fut,
    Fut: Future<Output = T>,
{
    let outcome = tokio::select! {
        reason = lease.lost() => Err(reason),
        value = crate::core::held_locks::holding(client, key, work(lease.signal())) => Ok(value),
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

    /// A token cancelled when the lease is lost, released or dropped
    /// ([`LeaseSignal::cancellation_token`]).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.signal.cancellation_token()
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
        self.signal.ended.cancel();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(task) = self.task.take() else {
            return Err(Error::NoRuntime);
        };
        match task.await {
            Ok(leased) => leased.release().await,
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
        self.signal.ended.cancel();
        // Abort, not just signal: a renewal must never outlive its holder. The aborted task
        // drops its lock, whose own Drop schedules a best-effort release.
        let Some(task) = self.task.take() else {
            return;
        };
        task.abort();
        // The runtime drops the aborted task later, and the release is scheduled only then:
        // a `settle` in between would find nothing to wait for. A tracked wait for the task
        // to end covers that gap (the release is tracked before the task counts as ended).
        if let Some(clean_ups) = &self.clean_ups
            && tokio::runtime::Handle::try_current().is_ok()
        {
            crate::core::telemetry::task_spawned();
            clean_ups.spawn(async move {
                let _ = task.await;
            });
        }
    }
}
