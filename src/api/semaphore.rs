//! Counting semaphores over the same masters: at most P holders at once, each with a permit
//! that is a lock of its own (see `permit.rs` for why, and for the rounds). A semaphore never
//! has more than P keys on a master, and needs nothing newer than Redis 7.0 (plain
//! `SET NX PX`, no hash-field expiry).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::lease::{Lease, LeaseOptions};
use crate::api::lock::Lock;
use crate::api::redlock::RedLock;
use crate::core::permit_keys::PermitKeys;
use crate::core::report::Report;
use crate::core::retry::RetryPolicy;
use crate::core::token::Token;
use crate::errors::config_error::ConfigError;
use crate::errors::error::{Error, Operation};
use crate::protocol::permit::{MAX_PERMITS, acquire_permit};
use crate::protocol::shared::ensure_runtime;
use crate::{Result, core::resource, core::telemetry};

impl RedLock {
    /// A counting semaphore named `name` with `permits` permits: at most `permits` holders
    /// hold a valid [`Permit`] at once, under the same assumptions as a lock.
    ///
    /// A semaphore and a lock of the same name are unrelated (different keys). Every client
    /// of one semaphore must use the same number of permits: the permits are numbered keys,
    /// and a client that counted more would take permits the others do not know. The masters
    /// record the number in use while a permit is held, and refuse another
    /// ([`Error::PermitCountDiffers`] from the acquire); once the last permit is released, the
    /// name takes any number.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid name (as a resource), zero permits
    /// ([`ConfigError::NoPermits`]) or more than [`MAX_PERMITS`]
    /// ([`ConfigError::TooManyPermits`]). No I/O.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let exports = rl.semaphore("exports", 3)?; // at most three exports at a time
    /// let permit = exports.acquire(Duration::from_secs(30)).await?;
    /// println!("running as permit {} of {}", permit.index(), exports.permits());
    /// // … the work, finished before permit.valid_until() …
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Result<Semaphore> {
        let name = name.as_ref();
        resource::validate(name)?;
        self.shared().config.needs_tagged_keys("semaphores")?;
        if permits == 0 {
            return Err(ConfigError::NoPermits.into());
        }
        if permits > MAX_PERMITS {
            return Err(ConfigError::TooManyPermits {
                permits,
                max: MAX_PERMITS,
            }
            .into());
        }
        Ok(Semaphore {
            redlock: self.clone(),
            name: name.to_vec(),
            permits,
            keys: Arc::new(PermitKeys::new(
                &self.shared().config.key_prefix,
                name,
                permits,
            )),
        })
    }
}

/// A counting semaphore over the client's masters. Create it with [`RedLock::semaphore`].
///
/// Each acquire takes one [`Permit`] for a ttl, granted only when a majority of the masters
/// granted that same permit with validity left; a permit is renewed, leased and released like
/// a [`Lock`] (it is one, on the permit's key). A holder that dies leaks nothing: its permit
/// expires with its ttl. Waiters queue for their turn, one queue per semaphore: a released
/// permit is reserved for the first waiter still waiting and its client alone is woken, so
/// under contention permits go in arrival order, and a releaser asking again at once does not
/// take its permit back. Waiters otherwise retry on the client's retry delays, never
/// sleeping past the earliest expiry the masters reported (`DESIGN.md` §7a).
#[derive(Debug, Clone)]
pub struct Semaphore {
    redlock: RedLock,
    name: Vec<u8>,
    permits: u32,
    /// The permits' keys and release channel, made once here rather than on every acquire.
    keys: Arc<PermitKeys>,
}

impl Semaphore {
    /// How many holders the semaphore admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The semaphore's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The client the semaphore was made by.
    pub(crate) fn redlock(&self) -> &RedLock {
        &self.redlock
    }

    /// The keys of its permits and of its record of their number.
    pub(crate) fn keys(&self) -> &PermitKeys {
        &self.keys
    }

    /// One round: takes a permit for `ttl` if one is free now.
    ///
    /// # Errors
    /// [`Error::Conflict`] when every permit is held (the report says, per master, for how
    /// much longer the first to expire is held), or when the masters kept granting different
    /// permits (contention: a round of grants that split is given back and tried again at
    /// once, three times); as [`RedLock::try_acquire`] otherwise.
    ///
    /// # Cancel safety
    /// Dropping the future mid-round gives back what the round was granted, in the
    /// background ([`RedLock::settle`] waits for it).
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Permit> {
        self.acquire_with(ttl, &RetryPolicy::default().max_attempts(Some(1)))
            .await
    }

    /// Takes a permit for `ttl`, retrying as the client's retry policy says.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire), for the last round.
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn acquire(&self, ttl: Duration) -> Result<Permit> {
        let policy = self.redlock.shared().config.retry.clone();
        self.acquire_with(ttl, &policy).await
    }

    /// Takes a permit for `ttl`, waiting at most `max_wait` for one.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire), for the last round.
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn acquire_within(&self, ttl: Duration, max_wait: Duration) -> Result<Permit> {
        let policy = self.redlock.shared().config.retry.within(max_wait);
        self.acquire_with(ttl, &policy).await
    }

    /// Takes a permit for `ttl`, retrying as `policy` says.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire), for the last round; [`Error::Config`] for an
    /// invalid ttl or a policy that allows no attempt (no I/O).
    ///
    /// # Cancel safety
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn acquire_with(&self, ttl: Duration, policy: &RetryPolicy) -> Result<Permit> {
        let shared = self.redlock.shared();
        telemetry::recorded(Operation::Acquire, async {
            let timing = shared.config.timing(ttl)?;
            if !policy.allows_any_attempt() {
                return Err(ConfigError::NoAttempts.into());
            }
            ensure_runtime()?;
            let taken = acquire_permit(shared, &self.name, &self.keys, &timing, policy).await?;
            let mut lock = Lock::new(shared.clone(), &self.name, taken.acquired);
            lock.set_permit_of(self.keys.clone());
            Ok(Permit {
                lock,
                index: taken.index,
            })
        })
        .await
    }
}

/// One permit of a [`Semaphore`], held until [`valid_until`](Self::valid_until): the same
/// contract as a [`Lock`] (finish before the deadline, release and check the result; a dropped
/// permit is released in the background).
#[derive(Debug)]
#[must_use = "a permit should be released with `release().await`; dropping it only schedules a best-effort release"]
pub struct Permit {
    lock: Lock,
    index: u32,
}

impl Permit {
    /// Which permit this is, from 0 to `permits − 1`: a stable id while it is held (two
    /// holders at once never have the same), e.g. to pick a shard or a worker slot.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The local deadline, as [`Lock::valid_until`].
    pub fn valid_until(&self) -> Instant {
        self.lock.valid_until()
    }

    /// Validity left now, as [`Lock::remaining`].
    pub fn remaining(&self) -> Duration {
        self.lock.remaining()
    }

    /// The random token in the permit's keys.
    pub fn token(&self) -> &Token {
        self.lock.token()
    }

    /// Every master's answer in the round that granted or last extended the permit (a master
    /// that granted another permit shows as [`NodeOutcome::OtherPermit`](crate::NodeOutcome)).
    pub fn report(&self) -> &Report {
        self.lock.report()
    }

    /// The lock on the permit's key, for everything else a lock offers. (A permit carries no
    /// fencing token, even on a client built with fencing: its `fencing_token()` is `None`;
    /// [`index`](Self::index) is what a holder hands on.)
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// The lock on the permit's key, to keep instead of the permit (its release gives the
    /// permit back and wakes the semaphore's waiters all the same).
    pub fn into_lock(self) -> Lock {
        self.lock
    }

    /// Renews the permit for `ttl`, as [`Lock::extend`].
    ///
    /// # Errors
    /// As [`Lock::extend`].
    ///
    /// # Cancel safety
    /// As [`Lock::extend`].
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        self.lock.extend(ttl).await
    }

    /// Renews the permit in the background, as [`Lock::into_lease`]; the lease's `lost()`
    /// fires by the permit's deadline when it could not be renewed.
    pub fn into_lease(self, options: LeaseOptions) -> Lease {
        self.lock.into_lease(options)
    }

    /// Gives the permit back and wakes the semaphore's waiters, as [`Lock::release`].
    ///
    /// # Errors
    /// As [`Lock::release`]: [`Error::Expired`] means the permit lapsed first, so another
    /// holder may have had it meanwhile.
    ///
    /// # Cancel safety
    /// As [`Lock::release`].
    pub async fn release(self) -> std::result::Result<Report, Error> {
        self.lock.release().await
    }
}
