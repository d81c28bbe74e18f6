//! Work under a lock: [`RedLock::with_lock`] and its variants, which acquire, keep the lock
//! alive as a lease while the work runs, cancel the work if the lease is lost, and release.

use std::time::Duration;

use crate::Result;
use crate::api::redlock::RedLock;
use crate::core::retry::RetryPolicy;
use crate::errors::error::Error;

impl RedLock {
    /// Runs `work` while holding `resource` as a [`Lease`](crate::Lease): acquires (retrying as
    /// the configured policy says), renews the lock while `work` runs, and releases it on every
    /// exit path. If the lease is lost, `work` is cancelled (its future dropped) at once.
    ///
    /// `work` gets a [`LeaseSignal`](crate::LeaseSignal) to watch the deadline itself, e.g. to
    /// stop before a long write.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire) before the work starts; [`Error::LeaseLost`] if the lease
    /// was lost while it ran; and as [`Lock::release`](crate::Lock::release) after it finished (an
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
        let policy = &self.shared.config.retry;
        self.with_lock_using(resource, ttl, policy, crate::LeaseOptions::default(), work)
            .await
    }

    /// [`with_lock`](Self::with_lock) for fallible work: the work's error and the lock's share
    /// one type, `E`, which converts from [`Error`] (as `anyhow::Error`, `Box<dyn Error>` and
    /// most application errors do), so the result is not nested.
    ///
    /// # Errors
    /// The work's own error, or the lock's as [`with_lock`](Self::with_lock)'s, converted.
    ///
    /// # Cancel safety
    /// As [`with_lock`](Self::with_lock).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let rows: u64 = rl
    ///     .try_with_lock("nightly-report", Duration::from_secs(30), async |_signal| {
    ///         let rows: u64 = "42".parse()?; // … work that can fail …
    ///         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(rows)
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_with_lock<F, Fut, T, E>(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        work: F,
    ) -> std::result::Result<T, E>
    where
        F: FnOnce(crate::LeaseSignal) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        self.with_lock(resource, ttl, work).await?
    }

    /// As [`with_lock`](Self::with_lock), waiting for the lock as `policy` says (as
    /// [`acquire_with`](Self::acquire_with)) and renewing it as `lease` says (as
    /// [`Lock::into_lease`](crate::Lock::into_lease)): a lease limit that passes while `work` runs is a loss like any
    /// other ([`Error::LeaseLost`] with [`LostReason::LimitReached`](crate::LostReason)).
    ///
    /// # Errors
    /// As [`with_lock`](Self::with_lock).
    ///
    /// # Cancel safety
    /// As [`with_lock`](Self::with_lock).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let patient = redquorum::RetryPolicy::default()
    ///     .max_attempts(None)
    ///     .max_wait(Some(Duration::from_secs(60)));
    /// let at_most_an_hour = redquorum::LeaseOptions::default().max_hold(Some(Duration::from_secs(3600)));
    /// rl.with_lock_using("nightly-report", Duration::from_secs(30), &patient, at_most_an_hour, async |_signal| {
    ///     // … the work …
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock_using<F, Fut, T>(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        policy: &RetryPolicy,
        lease: crate::LeaseOptions,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(crate::LeaseSignal) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let resource = resource.as_ref();
        let lease = self
            .acquire_with(resource, ttl, policy)
            .await?
            .into_lease(lease);
        // An acquire of this lock from within the work is refused at once (`HeldByCaller`).
        crate::api::lease::work_under(lease, self.client_address(), self.lock_key(resource), work)
            .await
    }
}
