//! The seam for users' own tests: what code that takes locks needs of a lock service
//! ([`LockService`]) and of a lock it holds ([`HeldLock`]), implemented by the real client
//! ([`RedLock`], [`Lock`]) and, behind the `testing` feature, by the in-memory double
//! (`redquorum::testing`).
//!
//! Code written against the traits runs on five Redis masters in production and on the
//! double in a unit test, and meets the same outcomes in both: [`Error::Conflict`] when
//! someone else holds the lock, [`Error::Expired`] from an extend or release once it is gone,
//! [`Error::NoQuorum`] for an outage (never reported as an expiry), and a lease's loss signal.
//! The methods are the client's own, with the same names, arguments, errors and cancel
//! safety: the traits only forward to them, so their docs are the reference.
//!
//! [`Error::Conflict`]: crate::Error::Conflict
//! [`Error::Expired`]: crate::Error::Expired
//! [`Error::NoQuorum`]: crate::Error::NoQuorum

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::Result;
use crate::api::lease::{Lease, LeaseOptions, LeaseSignal};
use crate::api::lock::Lock;
use crate::api::redlock::RedLock;
use crate::core::report::Report;
use crate::core::retry::RetryPolicy;

/// What code that takes locks needs of a lock service: the acquires and `with_lock` of
/// [`RedLock`], as a trait, so the code can be generic over it and be unit-tested on the
/// in-memory double of the `testing` feature.
///
/// Every method behaves as the [`RedLock`] method of the same name (see there for the errors
/// and cancel safety), with one more bound: the futures are `Send` (so generic code can be
/// spawned), which asks `with_lock`'s work, its future and its value to be `Send` too. The
/// trait is not object safe (its methods are generic and return `impl Future`): take it as a
/// type parameter (`impl LockService`, `S: LockService`), not as `dyn LockService`.
///
/// ```no_run
/// use std::time::Duration;
/// use redquorum::{HeldLock, LockService};
///
/// /// Runs the nightly report unless another instance is running it.
/// async fn nightly_report(locks: &impl LockService) -> redquorum::Result<bool> {
///     match locks.try_acquire("nightly-report", Duration::from_secs(60)).await {
///         Ok(lock) => {
///             // … the report …
///             lock.release().await?;
///             Ok(true)
///         }
///         Err(e) if e.is_conflict() => Ok(false),
///         Err(e) => Err(e),
///     }
/// }
/// ```
pub trait LockService: Send + Sync {
    /// The lock this service hands out.
    type Lock: HeldLock;

    /// Takes `resource` for `ttl` in one round, without retrying
    /// ([`RedLock::try_acquire`]).
    fn try_acquire(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
    ) -> impl Future<Output = Result<Self::Lock>> + Send;

    /// Takes `resource` for `ttl`, retrying as the service's policy says
    /// ([`RedLock::acquire`]).
    fn acquire(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
    ) -> impl Future<Output = Result<Self::Lock>> + Send;

    /// Takes `resource` for `ttl`, waiting up to `max_wait` ([`RedLock::acquire_within`]).
    fn acquire_within(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Self::Lock>> + Send;

    /// Takes `resource` for `ttl`, retrying as `policy` says ([`RedLock::acquire_with`]).
    fn acquire_with(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> impl Future<Output = Result<Self::Lock>> + Send;

    /// Runs `work` while holding `resource` as a lease, cancelling it at once if the lease is
    /// lost ([`RedLock::with_lock`]).
    fn with_lock<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        work: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(LeaseSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send;

    /// [`with_lock`](Self::with_lock) for fallible work, with one error type
    /// ([`RedLock::try_with_lock`]).
    fn try_with_lock<F, Fut, T, E>(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        work: F,
    ) -> impl Future<Output = std::result::Result<T, E>> + Send
    where
        F: FnOnce(LeaseSignal) -> Fut + Send,
        Fut: Future<Output = std::result::Result<T, E>> + Send,
        T: Send,
        E: From<crate::Error> + Send,
    {
        async move { self.with_lock(resource, ttl, work).await? }
    }

    /// As [`with_lock`](Self::with_lock), waiting as `policy` says and renewing as `lease`
    /// says ([`RedLock::with_lock_using`]).
    fn with_lock_using<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        policy: &RetryPolicy,
        lease: LeaseOptions,
        work: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(LeaseSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send;

    /// Takes a read lock of `resource` for `ttl` in one round, without retrying
    /// ([`RwLock::try_read`](crate::RwLock::try_read)): many readers at once, none beside the
    /// lock `resource` itself, which is its write lock ([`try_acquire`](Self::try_acquire)).
    fn try_read(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
    ) -> impl Future<Output = Result<Self::Lock>> + Send;

    /// Takes a read lock of `resource`, retrying as the service's policy says
    /// ([`RwLock::read`](crate::RwLock::read)).
    fn read(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
    ) -> impl Future<Output = Result<Self::Lock>> + Send;

    /// Takes a read lock of `resource`, waiting up to `max_wait`
    /// ([`RwLock::read_within`](crate::RwLock::read_within)).
    fn read_within(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Self::Lock>> + Send;

    /// Takes a read lock of `resource`, retrying as `policy` says
    /// ([`RwLock::read_with`](crate::RwLock::read_with)).
    fn read_with(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> impl Future<Output = Result<Self::Lock>> + Send;

    /// Runs `work` under a read lock of `resource` held as a lease
    /// ([`RwLock::with_read_lock`](crate::RwLock::with_read_lock)).
    fn with_read_lock<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        work: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(LeaseSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send;
}

/// What code needs of a lock it holds: the deadline, extend, release and the lease of
/// [`Lock`], as a trait (see [`LockService`]).
///
/// Every method behaves as the [`Lock`] method of the same name, but for the clock of
/// [`valid_until`](Self::valid_until).
pub trait HeldLock: Send + Sync + fmt::Debug + 'static {
    /// The resource, as given to the acquire ([`Lock::resource`]).
    fn resource(&self) -> &[u8];

    /// The resource, with non-printable bytes escaped ([`Lock::resource_display`]).
    fn resource_display(&self) -> String;

    /// The ttl of the last successful acquire or extend ([`Lock::ttl`]).
    fn ttl(&self) -> Duration;

    /// The local deadline ([`Lock::valid_until`]) on **tokio's clock**: the same instant as
    /// the real lock's `std` one outside paused tests, and the one that moves with
    /// `tokio::time::pause`/`advance` in them. Compare it with `tokio::time::Instant::now()`
    /// (or use [`remaining`](Self::remaining) and [`is_expired`](Self::is_expired)), so
    /// the code under test reads the deadline right in virtual time too.
    fn valid_until(&self) -> Instant;

    /// Validity left now ([`Lock::remaining`]).
    fn remaining(&self) -> Duration;

    /// True once the deadline has passed ([`Lock::is_expired`]).
    fn is_expired(&self) -> bool;

    /// The fencing token, on a client configured for fencing ([`Lock::fencing_token`]).
    fn fencing_token(&self) -> Option<u64>;

    /// Renews the lock for `ttl` from now ([`Lock::extend`]).
    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<()>> + Send;

    /// Releases the lock ([`Lock::release`]).
    fn release(self) -> impl Future<Output = Result<Report>> + Send;

    /// Turns the lock into a lease that renews itself ([`Lock::into_lease`]).
    ///
    /// # Panics
    /// Outside a tokio runtime, as [`Lock::into_lease`].
    fn into_lease(self, options: LeaseOptions) -> Lease;
}

impl LockService for RedLock {
    type Lock = Lock;

    fn try_acquire(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
    ) -> impl Future<Output = Result<Lock>> + Send {
        RedLock::try_acquire(self, resource, ttl)
    }

    fn acquire(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
    ) -> impl Future<Output = Result<Lock>> + Send {
        RedLock::acquire(self, resource, ttl)
    }

    fn acquire_within(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Lock>> + Send {
        RedLock::acquire_within(self, resource, ttl, max_wait)
    }

    fn acquire_with(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> impl Future<Output = Result<Lock>> + Send {
        RedLock::acquire_with(self, resource, ttl, policy)
    }

    fn with_lock<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        work: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(LeaseSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        RedLock::with_lock(self, resource, ttl, work)
    }

    fn with_lock_using<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        policy: &RetryPolicy,
        lease: LeaseOptions,
        work: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(LeaseSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        RedLock::with_lock_using(self, resource, ttl, policy, lease, work)
    }

    async fn try_read(&self, resource: impl AsRef<[u8]> + Send, ttl: Duration) -> Result<Lock> {
        self.rw_lock(resource)?.try_read(ttl).await
    }

    async fn read(&self, resource: impl AsRef<[u8]> + Send, ttl: Duration) -> Result<Lock> {
        self.rw_lock(resource)?.read(ttl).await
    }

    async fn read_within(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock> {
        self.rw_lock(resource)?.read_within(ttl, max_wait).await
    }

    async fn read_with(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<Lock> {
        self.rw_lock(resource)?.read_with(ttl, policy).await
    }

    async fn with_read_lock<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]> + Send,
        ttl: Duration,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LeaseSignal) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        self.rw_lock(resource)?.with_read_lock(ttl, work).await
    }
}

impl HeldLock for Lock {
    fn resource(&self) -> &[u8] {
        Lock::resource(self)
    }

    fn resource_display(&self) -> String {
        Lock::resource_display(self)
    }

    fn ttl(&self) -> Duration {
        Lock::ttl(self)
    }

    fn valid_until(&self) -> Instant {
        Lock::valid_until(self).into()
    }

    fn remaining(&self) -> Duration {
        Lock::remaining(self)
    }

    fn is_expired(&self) -> bool {
        Lock::is_expired(self)
    }

    fn fencing_token(&self) -> Option<u64> {
        Lock::fencing_token(self)
    }

    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<()>> + Send {
        Lock::extend(self, ttl)
    }

    fn release(self) -> impl Future<Output = Result<Report>> + Send {
        Lock::release(self)
    }

    fn into_lease(self, options: LeaseOptions) -> Lease {
        Lock::into_lease(self, options)
    }
}
