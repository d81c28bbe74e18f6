//! Read-write locks over the client's masters: many readers or one writer
//! ([`RedLock::rw_lock`]).

use std::future::Future;
use std::time::Duration;

use crate::Result;
use crate::api::lock::Lock;
use crate::api::redlock::RedLock;
use crate::core::resource;
use crate::core::retry::RetryPolicy;

impl RedLock {
    /// The read-write lock `name`: many readers at once, or one writer, never both, on every
    /// master that granted (`DESIGN.md` §7c). No I/O.
    ///
    /// A reader or a writer holds when a majority of the masters granted it with validity
    /// left, exactly as a [`Lock`] does, and each is a [`Lock`]: extend it, lease it, release
    /// it, and check [`valid_until`](Lock::valid_until) before acting. A reader's share
    /// expires by its own ttl, so a crashed reader frees its share without anyone's help.
    ///
    /// The write lock *is* the lock `name` ([`RedLock::acquire`] and its variants): a write
    /// is any acquire of that lock, and while readers hold, every acquire of it is refused
    /// (including other Redlock clients' plain `SET NX` on the same key). So code that takes
    /// the lock needs no change to exclude new readers, and `redquorum run` without
    /// `--shared` is a writer.
    ///
    /// Readers and writers that wait take their turns in the order they began to wait: a
    /// release hands the lock to the next writer, or to the next run of readers together
    /// (every reader that began to wait before the next writer), and wakes them. A writer
    /// waiting for readers to go blocks new readers, so a stream of overlapping readers
    /// cannot starve it, and a reader that waits is not passed by writers that came after
    /// it, so a stream of writers cannot starve readers. With fencing on
    /// ([`Builder::fencing`](crate::Builder::fencing)), every write lock gets a token from the
    /// same counters as a lock's, and every read lock the token of the last write it may
    /// observe: at least every earlier write's and below every later write's, so a store that
    /// refuses a read whose token is below the last write it accepted refuses a reader that may
    /// act on data a later write replaced.
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) for an empty or oversized name, or under the shared key layout
    /// ([`ConfigError::NeedsTaggedKeys`](crate::ConfigError::NeedsTaggedKeys): other
    /// libraries have no read-write format to share).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let catalog = rl.rw_lock("catalog")?;
    /// let read = catalog.read(Duration::from_secs(10)).await?;   // others may read too
    /// // … read, finished before read.valid_until() …
    /// read.release().await?;
    /// let write = catalog.write(Duration::from_secs(10)).await?; // alone
    /// // … write …
    /// write.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, name: impl AsRef<[u8]>) -> Result<RwLock> {
        let name = name.as_ref();
        resource::validate(name)?;
        self.shared().config.needs_tagged_keys("read-write locks")?;
        Ok(RwLock {
            redlock: self.clone(),
            name: name.to_vec(),
        })
    }
}

/// A read-write lock over the client's masters. Create it with [`RedLock::rw_lock`].
#[derive(Debug, Clone)]
pub struct RwLock {
    redlock: RedLock,
    name: Vec<u8>,
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Takes a read lock for `ttl`: one round, no waiting.
    ///
    /// # Errors
    /// As [`RedLock::try_acquire`]: [`Error::Conflict`](crate::Error::Conflict) while a writer holds or waits.
    ///
    /// # Cancel safety
    /// As [`RedLock::try_acquire`]: a dropped round's share is removed in the background.
    pub async fn try_read(&self, ttl: Duration) -> Result<Lock> {
        self.read_with(ttl, &RetryPolicy::once()).await
    }

    /// Takes a read lock for `ttl`, retrying as the client's retry policy says.
    ///
    /// # Errors
    /// As [`try_read`](Self::try_read), for the last round.
    ///
    /// # Cancel safety
    /// As [`try_read`](Self::try_read).
    pub async fn read(&self, ttl: Duration) -> Result<Lock> {
        let policy = self.redlock.shared().config.retry.clone();
        self.read_with(ttl, &policy).await
    }

    /// Takes a read lock for `ttl`, waiting at most `max_wait`.
    ///
    /// # Errors
    /// As [`try_read`](Self::try_read), for the last round.
    ///
    /// # Cancel safety
    /// As [`try_read`](Self::try_read).
    pub async fn read_within(&self, ttl: Duration, max_wait: Duration) -> Result<Lock> {
        let policy = self.redlock.shared().config.retry.within(max_wait);
        self.read_with(ttl, &policy).await
    }

    /// Takes a read lock for `ttl`, retrying as `policy` says.
    ///
    /// # Errors
    /// As [`try_read`](Self::try_read), for the last round; [`Error::Config`](crate::Error::Config) for an invalid
    /// ttl or a policy that allows no attempt (no I/O).
    ///
    /// # Cancel safety
    /// As [`try_read`](Self::try_read).
    pub async fn read_with(&self, ttl: Duration, policy: &RetryPolicy) -> Result<Lock> {
        self.side(true, ttl, policy).await
    }

    /// Takes the write lock for `ttl`: one round, no waiting. The same as
    /// [`RedLock::try_acquire`] of the name.
    ///
    /// # Errors
    /// As [`RedLock::try_acquire`]: [`Error::Conflict`](crate::Error::Conflict) while a reader or a writer holds.
    ///
    /// # Cancel safety
    /// As [`RedLock::try_acquire`].
    pub async fn try_write(&self, ttl: Duration) -> Result<Lock> {
        self.write_with(ttl, &RetryPolicy::once()).await
    }

    /// Takes the write lock for `ttl`, retrying as the client's retry policy says. While it
    /// waits, new readers are refused.
    ///
    /// # Errors
    /// As [`try_write`](Self::try_write), for the last round.
    ///
    /// # Cancel safety
    /// As [`try_write`](Self::try_write); a waiter that is dropped leaves the queue in the
    /// background.
    pub async fn write(&self, ttl: Duration) -> Result<Lock> {
        let policy = self.redlock.shared().config.retry.clone();
        self.write_with(ttl, &policy).await
    }

    /// Takes the write lock for `ttl`, waiting at most `max_wait`.
    ///
    /// # Errors
    /// As [`try_write`](Self::try_write), for the last round.
    ///
    /// # Cancel safety
    /// As [`write`](Self::write).
    pub async fn write_within(&self, ttl: Duration, max_wait: Duration) -> Result<Lock> {
        let policy = self.redlock.shared().config.retry.within(max_wait);
        self.write_with(ttl, &policy).await
    }

    /// Takes the write lock for `ttl`, retrying as `policy` says.
    ///
    /// # Errors
    /// As [`try_write`](Self::try_write), for the last round; [`Error::Config`](crate::Error::Config) for an
    /// invalid ttl or a policy that allows no attempt (no I/O).
    ///
    /// # Cancel safety
    /// As [`write`](Self::write).
    pub async fn write_with(&self, ttl: Duration, policy: &RetryPolicy) -> Result<Lock> {
        self.side(false, ttl, policy).await
    }

    /// Runs `work` under a read lock held as a [`Lease`](crate::Lease), as
    /// [`RedLock::with_lock`] does under a lock: acquired with the client's retry policy,
    /// renewed while `work` runs, `work` cancelled if the lease is lost, released on every
    /// exit path.
    ///
    /// # Errors
    /// As [`RedLock::with_lock`].
    ///
    /// # Cancel safety
    /// As [`RedLock::with_lock`].
    pub async fn with_read_lock<F, Fut, T>(&self, ttl: Duration, work: F) -> Result<T>
    where
        F: FnOnce(crate::LeaseSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let lock = self.read(ttl).await?;
        self.work_under(lock, work).await
    }

    /// Runs `work` under the write lock, as [`with_read_lock`](Self::with_read_lock) does
    /// under a read lock.
    ///
    /// # Errors
    /// As [`RedLock::with_lock`].
    ///
    /// # Cancel safety
    /// As [`RedLock::with_lock`].
    pub async fn with_write_lock<F, Fut, T>(&self, ttl: Duration, work: F) -> Result<T>
    where
        F: FnOnce(crate::LeaseSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let lock = self.write(ttl).await?;
        self.work_under(lock, work).await
    }

    /// `work` under `lock`, leased with the default options. Taking either side of this lock
    /// from within the work is refused at once ([`Error::HeldByCaller`](crate::Error::HeldByCaller)): a writer would wait
    /// for its own read, a reader for its own write.
    async fn work_under<F, Fut, T>(&self, lock: Lock, work: F) -> Result<T>
    where
        F: FnOnce(crate::LeaseSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let lease = lock.into_lease(crate::LeaseOptions::default());
        let key = self.redlock.lock_key(&self.name);
        crate::api::lease::work_under(lease, self.redlock.client_address(), key, work).await
    }

    /// A read lock (`read`), or the write lock, which is the lock on the name.
    async fn side(&self, read: bool, ttl: Duration, policy: &RetryPolicy) -> Result<Lock> {
        let fencing = self.redlock.shared().config.fencing;
        self.redlock
            .acquire_checked(&self.name, ttl, policy, fencing, read)
            .await
    }
}
