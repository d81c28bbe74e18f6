//! An in-memory lock service for unit tests of code that takes locks (feature `testing`).
//!
//! [`MemoryLocks`] implements [`LockService`] as the real client does, over
//! one map in memory instead of N Redis masters, so code written against the traits is tested
//! without servers and meets realistic behaviour:
//!
//! - **conflict**: a lock held by another owner refuses with [`Error::Conflict`], after the
//!   same retry policy (waiters wake when that resource is released or expires;
//!   [`with_retry_seed`](MemoryLocks::with_retry_seed) replays the same delays);
//! - **expiry**: a lock is valid for `ttl − drift` on tokio's clock (so `tokio::time::pause`
//!   and `advance` move it); its key lives `ttl`, after which another owner may take it;
//!   extend and release of an expired lock fail with [`Error::Expired`];
//! - **loss**: [`MemoryLocks::forget`] drops a key as a majority of restarted masters would,
//!   so the holder's next extend or release is [`Error::Expired`] and its lease's `lost()`
//!   fires; [`MemoryLocks::set_outage`] makes every call fail with [`Error::NoQuorum`] (an
//!   outage, which is never reported as an expiry);
//! - the same typed errors for bad input, [`Error::HeldByCaller`] for an acquire from within
//!   `with_lock` of the same resource, fencing tokens that strictly increase per resource
//!   when asked for, and leases and `with_lock` that are the real ones;
//! - **read locks** ([`LockService::try_read`] and the rest): many readers at once, the lock
//!   of the name (its write lock) refused beside them and they beside it, each share expiring
//!   by its own ttl; a reader's fencing token is the last write's.
//!
//! What it is not: a simulation of the protocol. It has one "node" (reports name it
//! `memory`), no clock drift, no network and no partial failures; safety under those is what
//! the real client's own tests are for. Nor does it queue waiters: the real client hands a
//! released lock to the first waiter queued for it (so the releaser's own immediate
//! re-acquire is refused while someone waits), where the double's woken waiters and the
//! releaser race for it. Code that relies on that order is not tested by the double. A
//! waiting writer does keep new readers out, as with the real client, from its first refused
//! attempt until its acquire ends.
//!
//! Time is tokio's: under `#[tokio::test(start_paused = true)]` (tokio's `test-util` feature)
//! expiries and lease renewals happen as virtual time advances. Read a deadline through
//! [`HeldLock::valid_until`], [`remaining`](HeldLock::remaining) or
//! [`is_expired`](HeldLock::is_expired) (tokio's clock), not `std::time::Instant::now()`.
//!
//! ```
//! use std::time::Duration;
//! use redquorum::{HeldLock, LockService};
//! use redquorum::testing::MemoryLocks;
//!
//! async fn try_report(locks: &impl LockService) -> redquorum::Result<bool> {
//!     match locks.try_acquire("nightly-report", Duration::from_secs(60)).await {
//!         Ok(lock) => { lock.release().await?; Ok(true) }
//!         Err(e) if e.is_conflict() => Ok(false),
//!         Err(e) => Err(e),
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> redquorum::Result<()> {
//! let locks = MemoryLocks::new();
//! let other = locks.another_client();
//! let held = other.try_acquire("nightly-report", Duration::from_secs(60)).await?;
//! assert!(!try_report(&locks).await?, "busy while another instance holds it");
//! held.release().await?;
//! assert!(try_report(&locks).await?);
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::Result;
use crate::api::keep_alive::Renewable;
use crate::api::lease::{self, Lease, LeaseDeadline, LeaseOptions, LeaseSignal, Leased};
use crate::api::lock_service::{HeldLock, LockService};
use crate::core::config::{Config, Timing};
use crate::core::held_locks;
use crate::core::node_id::NodeId;
use crate::core::report::{NodeOutcome, NodeReport, Report};
use crate::core::resource;
use crate::core::retry::{Jitter, RetryPolicy};
use crate::core::verdict::Rejection;
use crate::errors::config_error::ConfigError;
use crate::errors::error::{Error, Failure, Operation};
use crate::errors::node_error::NodeError;
use crate::protocol::shared::ensure_runtime;

/// The name of the one node of the double's reports.
const NODE: &str = "memory";

/// An in-memory [`LockService`] for unit tests: one map of keys with expiries on tokio's
/// clock, shared by every client made from it with [`another_client`](Self::another_client).
///
/// Clones are the same client (as clones of a [`RedLock`](crate::RedLock) are); two services
/// competing for a lock are two clients.
///
/// ```
/// # use std::time::Duration;
/// use redquorum::testing::MemoryLocks;
/// use redquorum::LockService;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let a = MemoryLocks::new();
/// let b = a.another_client();
/// let lock = a.try_acquire("orders:42", Duration::from_secs(10)).await.expect("free");
/// let busy = b.try_acquire("orders:42", Duration::from_secs(10)).await.expect_err("held");
/// assert!(busy.is_conflict());
/// # drop(lock);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryLocks {
    store: Arc<Store>,
    /// The client's identity (for `HeldByCaller`): its address, kept when settings change.
    id: Arc<ClientId>,
    client: Arc<Client>,
}

mod memory_lock;
mod service;
mod store;

pub use memory_lock::MemoryLock;
use store::{Client, ClientId, Key, READERS, Store};

impl MemoryLocks {
    /// A new double with the real client's default settings (retry policy, drift factor), no
    /// key held, no outage.
    pub fn new() -> Self {
        Self::default()
    }

    /// Another client over the same keys, with the same settings: it competes with this one
    /// for locks, as another process would.
    pub fn another_client(&self) -> Self {
        Self {
            store: self.store.clone(),
            id: Arc::default(),
            client: self.client.clone(),
        }
    }

    /// Retries as `policy` says ([`Builder::retry`](crate::Builder::retry)).
    ///
    /// # Errors
    /// [`ConfigError::NoAttempts`] when `policy` allows no attempt.
    pub fn with_retry(mut self, policy: RetryPolicy) -> Result<Self, ConfigError> {
        if !policy.allows_any_attempt() {
            return Err(ConfigError::NoAttempts);
        }
        self.settings().retry = policy;
        Ok(self)
    }

    /// Hands out fencing tokens ([`Builder::fencing`](crate::Builder::fencing)): per resource,
    /// each lock's token is greater than every earlier one's.
    pub fn with_fencing(mut self) -> Self {
        self.settings().fencing = true;
        self
    }

    /// Draws the retry delays from a generator seeded with `seed`, so a test replays the same
    /// waits ([`Builder::retry_seed`](crate::Builder::retry_seed)).
    pub fn with_retry_seed(mut self, seed: u64) -> Self {
        Arc::make_mut(&mut self.client).jitter = Arc::new(Jitter::new(Some(seed)));
        self
    }

    /// The settings to change: settings shared with clones are copied first, so those of a
    /// clone in use never change under it. The copy stays the same client (its identity is
    /// kept).
    fn settings(&mut self) -> &mut Config {
        &mut Arc::make_mut(&mut self.client).config
    }

    /// Drops `resource`'s key, as a majority of masters restarted without persistence (or
    /// evicting keys) would: its holder does not know yet; its next extend or release fails
    /// with [`Error::Expired`], its lease is lost, and another client can take the lock
    /// meanwhile. True if a key was there.
    pub fn forget(&self, resource: impl AsRef<[u8]>) -> bool {
        let resource = resource.as_ref();
        let mut state = self.store.state();
        let forgotten = state.keys.remove(resource).is_some();
        state.shares.remove(resource);
        state.wake(resource);
        forgotten
    }

    /// While `down`, every acquire, extend and release fails with [`Error::NoQuorum`] (its
    /// report: the node timed out), as when a majority of masters is unreachable; keys keep
    /// their expiries. A held lock is not lost by an outage until its deadline passes.
    pub fn set_outage(&self, down: bool) {
        let mut state = self.store.state();
        state.outage = down;
        if !down {
            for waiters in state.waiters.values() {
                waiters.notify_waiters();
            }
        }
    }

    /// Whether a live key of `resource` exists, whoever holds it: "nothing left behind"
    /// checks in tests.
    pub fn is_held(&self, resource: impl AsRef<[u8]>) -> bool {
        self.store
            .state()
            .live(resource.as_ref(), Instant::now())
            .is_some()
    }

    fn client_address(&self) -> usize {
        Arc::as_ptr(&self.id).addr()
    }

    /// An acquire of the lock `resource`, or (`read`) of a read lock of it.
    async fn acquire_checked(
        &self,
        resource: &[u8],
        ttl: Duration,
        policy: &RetryPolicy,
        read: bool,
    ) -> Result<MemoryLock> {
        resource::validate(resource)?;
        let timing = self.client.config.timing(ttl)?;
        if !policy.allows_any_attempt() {
            return Err(ConfigError::NoAttempts.into());
        }
        ensure_runtime()?;
        if held_locks::held_here(self.client_address(), resource) {
            return Err(Error::HeldByCaller {
                resource: resource::display(resource),
            });
        }
        let started = Instant::now();
        let give_up_at = policy
            .wait_limit()
            .and_then(|wait| started.checked_add(wait));
        let waiters = self.store.waiters(resource);
        // A write that waits for its turn keeps new readers out until it ends, however it
        // ends (taken, given up, or dropped).
        let mut waiting_writer: Option<WaitingWriter> = None;
        let mut attempts = 0u32;
        loop {
            attempts = attempts.saturating_add(1);
            // Listening before trying: a release between the try and the wait is not missed.
            let released = waiters.notified();
            let (rejection, report, holder_left) = match self.attempt(resource, &timing, read) {
                Ok(lock) => return Ok(lock),
                Err(refused) => refused,
            };
            let now = Instant::now();
            let out_of_attempts = policy.attempts_limit().is_some_and(|max| attempts >= max);
            if out_of_attempts || give_up_at.is_some_and(|at| now >= at) {
                let elapsed = now.saturating_duration_since(started);
                let failure = Failure::new(Operation::Acquire, resource, attempts, elapsed, report);
                return Err(rejection.error(failure));
            }
            if !read && waiting_writer.is_none() {
                waiting_writer = Some(WaitingWriter::new(&self.store, resource));
            }
            let wait_left = give_up_at.map(|at| at.saturating_duration_since(now));
            let delay = policy.delay_before_next(&self.client.jitter, holder_left, wait_left);
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = released => {}
            }
        }
    }

    /// One acquire round on the map: a write (the lock) only where no key is live (a key held
    /// for readers included), a read (`read`) only where none or the readers' is.
    fn attempt(
        &self,
        resource: &[u8],
        timing: &Timing,
        read: bool,
    ) -> Result<MemoryLock, (Rejection, Report, Option<Duration>)> {
        let now = Instant::now();
        let mut state = self.store.state();
        if state.outage {
            return Err((Rejection::Outage, timed_out(timing), None));
        }
        if let Some(key) = state
            .live(resource, now)
            .filter(|key| !(read && key.owner == READERS))
        {
            let left = key.expires.saturating_duration_since(now);
            let held = NodeOutcome::HeldByOther {
                expires_in: Some(left),
            };
            return Err((Rejection::Busy, one_line(held), Some(left)));
        }
        if read && state.writers_waiting.contains_key(resource) {
            // A writer waits for its turn: readers wait behind it.
            let held = NodeOutcome::HeldByOther { expires_in: None };
            return Err((Rejection::Busy, one_line(held), None));
        }
        state.owners = state.owners.wrapping_add(1).max(READERS + 1);
        let owner = state.owners;
        let fencing_token = if read {
            state
                .shares
                .entry(resource.to_vec())
                .or_default()
                .insert(owner, now + timing.ttl);
            state.hold_for_readers(resource, now);
            // The last write's token: every later write's is higher.
            self.client
                .config
                .fencing
                .then(|| state.fences.get(resource).copied().unwrap_or(0))
        } else {
            state.keys.insert(
                resource.to_vec(),
                Key {
                    owner,
                    expires: now + timing.ttl,
                },
            );
            self.client.config.fencing.then(|| {
                let fence = state.fences.entry(resource.to_vec()).or_insert(0);
                *fence = fence.saturating_add(1);
                *fence
            })
        };
        Ok(MemoryLock {
            store: self.store.clone(),
            client: self.client.clone(),
            resource: resource.to_vec(),
            owner,
            ttl: timing.ttl,
            deadline: now + timing.validity_span(),
            fencing_token,
            released: false,
            read,
        })
    }
}

/// A write acquire waiting for its turn: counted in the store while it lives; its end wakes
/// the readers it kept out.
struct WaitingWriter {
    store: Arc<Store>,
    resource: Vec<u8>,
}

impl WaitingWriter {
    fn new(store: &Arc<Store>, resource: &[u8]) -> Self {
        store.state().writer_waits(resource);
        Self {
            store: store.clone(),
            resource: resource.to_vec(),
        }
    }
}

impl Drop for WaitingWriter {
    fn drop(&mut self) {
        let mut state = self.store.state();
        state.writer_done(&self.resource);
        state.wake(&self.resource);
    }
}

impl fmt::Debug for MemoryLocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.store.state();
        f.debug_struct("MemoryLocks")
            .field("keys", &state.keys.len())
            .field("outage", &state.outage)
            .finish_non_exhaustive()
    }
}

/// A report of the one node.
fn one_line(outcome: NodeOutcome) -> Report {
    Report::new(vec![NodeReport::new(
        NodeId::new(0, Arc::from(NODE)),
        outcome,
        Duration::ZERO,
    )])
}

/// The report of an outage: the node timed out.
fn timed_out(timing: &Timing) -> Report {
    one_line(NodeOutcome::Failed(NodeError::TimedOut(
        timing.per_node_timeout,
    )))
}

/// The double's outcomes, in virtual time (`start_paused`: timers run as time is advanced or
/// as every task waits). Each test names the mutation of this file that makes it fail (run,
/// and recorded in `tests/MUTATIONS.md`).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::LostReason;

    const TTL: Duration = Duration::from_secs(10);
    /// `ttl × 1 % + 2 ms`, the default drift.
    const DRIFT: Duration = Duration::from_millis(102);

    /// A writer that waits for a reader keeps new readers out (so readers cannot starve it),
    /// takes the lock when the reader releases, and readers come back after it, as with the
    /// real client (`integration::rwlock::a_waiting_writer_blocks_new_readers_and_is_woken_by_the_last_release`).
    ///
    /// Mutations: `attempt` without its waiting-writer check: the second reader is granted
    /// while the writer waits; a waiting writer never counted out (`WaitingWriter::drop`
    /// without `writer_done`): readers are refused after the writer is done.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_writer_keeps_new_readers_out() {
        let readers = MemoryLocks::new();
        let first = readers.try_read("catalog", TTL).await.expect("a reader");
        let writer = {
            let writer = readers.another_client();
            tokio::spawn(async move {
                writer
                    .acquire_within("catalog", TTL, Duration::from_secs(60))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(1)).await;
        let refused = readers.try_read("catalog", TTL).await;
        assert!(
            refused.as_ref().is_err_and(Error::is_conflict),
            "a reader while a writer waits: {refused:?}"
        );
        first.release().await.expect("release");
        let lock = writer
            .await
            .expect("the writer's task")
            .expect("the writer's turn");
        let refused = readers.try_read("catalog", TTL).await;
        assert!(
            refused.as_ref().is_err_and(Error::is_conflict),
            "a reader beside the writer: {refused:?}"
        );
        lock.release().await.expect("release");
        let again = readers
            .try_read("catalog", TTL)
            .await
            .expect("readers again");
        // A writer that gives up waiting lets readers in again.
        let impatient = readers
            .another_client()
            .acquire_within("catalog", TTL, Duration::from_secs(1))
            .await;
        assert!(impatient.is_err_and(|e| e.is_conflict()));
        let beside = readers
            .try_read("catalog", TTL)
            .await
            .expect("a reader once the writer gave up");
        again.release().await.expect("release");
        beside.release().await.expect("release");
        assert!(!readers.is_held("catalog"));
    }

    /// Mutation: a lock valid for the whole ttl (no drift taken off) is not expired yet at
    /// `ttl − drift`. Mutation: a key freed at its expiry (`<=`), 1 ms before Redis frees it.
    #[tokio::test(start_paused = true)]
    async fn a_lock_expires_at_ttl_minus_drift_and_its_key_at_ttl() {
        let a = MemoryLocks::new();
        let b = a.another_client();
        let mut lock = a.try_acquire("r", TTL).await.expect("free");
        assert_eq!(HeldLock::remaining(&lock), TTL - DRIFT);
        tokio::time::advance(TTL - DRIFT).await;
        assert!(HeldLock::is_expired(&lock), "expired at ttl − drift");
        let late = lock.extend(TTL).await.expect_err("expired");
        assert!(late.is_expired(), "{late}");
        let busy = b
            .try_acquire("r", TTL)
            .await
            .expect_err("the key lives to ttl");
        assert!(busy.is_conflict(), "{busy}");
        tokio::time::advance(DRIFT).await;
        let busy = b
            .try_acquire("r", TTL)
            .await
            .expect_err("alive at its expiry");
        assert!(busy.is_conflict(), "{busy}");
        tokio::time::advance(Duration::from_millis(1)).await;
        let taken = b.try_acquire("r", TTL).await.expect("the key expired");
        let overlapped = lock
            .release()
            .await
            .expect_err("released after its deadline");
        assert!(overlapped.is_expired(), "{overlapped}");
        assert!(
            a.is_held("r"),
            "an expired release never deletes the new holder's key"
        );
        taken.release().await.expect("released");
        assert!(!a.is_held("r"), "nothing left behind");
    }

    /// Mutation: a waiter that does not listen for releases waits out its retry delay
    /// (50–200 ms) instead of taking the lock the moment it is released.
    #[tokio::test(start_paused = true)]
    async fn a_waiter_takes_the_lock_when_it_is_released() {
        let a = MemoryLocks::new();
        let b = a.another_client();
        let lock = a.try_acquire("r", TTL).await.expect("free");
        let started = Instant::now();
        let waiter = tokio::spawn(async move {
            let lock = b.acquire("r", TTL).await;
            (lock, started.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        lock.release().await.expect("released");
        let (taken, waited) = waiter.await.expect("waiter");
        let taken = taken.expect("woken by the release");
        assert_eq!(waited, Duration::from_millis(10), "virtual time");
        taken.release().await.expect("released");
    }

    /// Mutation: a `forget` that leaves the key in place: the lease is never lost.
    #[tokio::test(start_paused = true)]
    async fn a_forgotten_key_loses_the_lease_at_its_next_renewal() {
        let locks = MemoryLocks::new();
        let lease = locks
            .try_acquire("r", TTL)
            .await
            .expect("free")
            .into_lease(LeaseOptions::default());
        let started = Instant::now();
        assert!(locks.forget("r"));
        let lost = tokio::time::timeout(TTL, lease.lost()).await;
        match lost.expect("lost before the ttl") {
            LostReason::Gone(e) => assert!(e.is_expired(), "{e}"),
            other => panic!("lost for another reason: {other}"),
        }
        let at = started.elapsed();
        assert!(
            at >= TTL / 3 && at <= TTL / 3 + Duration::from_millis(1),
            "at the first renewal (tokio's timers round to 1 ms): {at:?}"
        );
        let after = lease.release().await.expect_err("gone");
        assert!(after.is_expired(), "{after}");
    }

    /// Mutation: an outage reported as an expiry (`Rejection::Gone`) loses the lease at its
    /// first renewal instead of at its deadline, and calls the extend's error an expiry.
    #[tokio::test(start_paused = true)]
    async fn an_outage_is_no_quorum_and_a_lease_survives_it_until_its_deadline() {
        let locks = MemoryLocks::new();
        let mut lock = locks.try_acquire("r", TTL).await.expect("free");
        locks.set_outage(true);
        let down = lock.extend(TTL).await.expect_err("outage");
        assert!(down.is_no_quorum(), "{down}");
        let refused = locks.try_acquire("s", TTL).await.expect_err("outage");
        assert!(refused.is_no_quorum(), "{refused}");
        let report = refused.report().expect("a report");
        assert!(
            report.to_string().contains("memory") && report.failures().count() == 1,
            "{report}"
        );
        let started = Instant::now();
        let lease = lock.into_lease(LeaseOptions::default());
        let reason = lease.lost().await;
        assert!(
            matches!(reason, LostReason::DeadlinePassed),
            "lost at the deadline: {reason}"
        );
        assert_eq!(started.elapsed(), TTL - DRIFT);
        locks.set_outage(false);
        drop(lease);
        // The renewal task is aborted; it drops the lock when the runtime next runs it.
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            !locks.is_held("r"),
            "a dropped lease's lock deletes its key"
        );
    }

    /// A lease over a reachable key renews it and is never lost.
    #[tokio::test(start_paused = true)]
    async fn a_lease_renews_its_key() {
        let a = MemoryLocks::new();
        let b = a.another_client();
        let lease = a
            .try_acquire("r", TTL)
            .await
            .expect("free")
            .into_lease(LeaseOptions::default());
        tokio::time::sleep(TTL * 5).await;
        assert!(!lease.is_lost());
        let busy = b.try_acquire("r", TTL).await.expect_err("still held");
        assert!(busy.is_conflict(), "{busy}");
        lease.release().await.expect("released");
        assert!(!a.is_held("r"));
    }

    /// Mutation: an acquire that does not check the caller's scope (`held_here`) refuses the
    /// work's own acquire as busy, not `HeldByCaller`. Mutation: a `forget` that leaves the key
    /// in place never loses the lease, and the work runs on for ever.
    #[tokio::test(start_paused = true)]
    async fn with_lock_refuses_the_caller_and_cancels_work_on_a_loss() {
        let locks = MemoryLocks::new();
        let inner = locks
            .with_lock("r", TTL, async |_signal| {
                locks.try_acquire("r", TTL).await.map(drop)
            })
            .await
            .expect("the outer lock");
        let inner = inner.expect_err("held by the caller");
        assert!(inner.is_held_by_caller(), "{inner}");

        let lost = locks.with_lock("r", TTL, async |_signal| {
            locks.forget("r");
            std::future::pending::<()>().await;
        });
        let lost = tokio::time::timeout(TTL, lost)
            .await
            .expect("the work is cancelled before the ttl")
            .expect_err("lost");
        assert!(lost.is_lease_lost(), "{lost}");
    }

    /// Mutation: a fence counter that is not raised (set to 1 at every grant) hands a later
    /// holder a token no greater than an earlier one's.
    #[tokio::test(start_paused = true)]
    async fn fencing_tokens_increase_per_resource_across_clients() {
        let a = MemoryLocks::new().with_fencing();
        let b = a.another_client();
        let mut seen = Vec::new();
        for client in [&a, &b, &a, &b] {
            let lock = client.try_acquire("r", TTL).await.expect("free");
            seen.push(lock.fencing_token().expect("fenced"));
            lock.release().await.expect("released");
        }
        assert_eq!(seen, [1, 2, 3, 4]);
        let other = a.try_acquire("s", TTL).await.expect("free");
        assert_eq!(other.fencing_token(), Some(1));
        assert_eq!(
            MemoryLocks::new()
                .try_acquire("r", TTL)
                .await
                .expect("free")
                .fencing_token(),
            None
        );
        drop(other);
    }

    /// Bad input is the real client's typed error, and leaves nothing behind.
    #[tokio::test(start_paused = true)]
    async fn bad_input_is_typed_and_leaves_nothing() {
        let locks = MemoryLocks::new();
        for (resource, ttl) in [
            (&b""[..], TTL),
            (&b"r"[..], Duration::ZERO),
            (&b"r"[..], Duration::from_millis(5)),
            (&b"r"[..], crate::MAX_TTL + Duration::from_secs(1)),
        ] {
            let e = locks.try_acquire(resource, ttl).await.expect_err("invalid");
            assert!(e.is_config(), "{e}");
        }
        let none = RetryPolicy::default().max_attempts(Some(0));
        let e = locks
            .acquire_with("r", TTL, &none)
            .await
            .expect_err("no attempt");
        assert!(e.is_config(), "{e}");
        assert!(MemoryLocks::new().with_retry(none).is_err());
        let mut lock = locks.try_acquire("r", TTL).await.expect("free");
        let e = lock.extend(Duration::ZERO).await.expect_err("invalid");
        assert!(e.is_config(), "{e}");
        assert!(!HeldLock::is_expired(&lock), "the lock keeps its deadline");
        drop(lock);
        assert!(
            !locks.is_held("r"),
            "a dropped lock deletes its key at once"
        );
    }

    /// The retry policy is the real client's: a busy lock is given up after its attempts.
    #[tokio::test(start_paused = true)]
    async fn a_busy_lock_is_given_up_after_the_policys_attempts() {
        let a = MemoryLocks::new();
        let b = a
            .another_client()
            .with_retry(RetryPolicy::default().max_attempts(Some(3)))
            .expect("valid");
        let lock = a.try_acquire("r", TTL).await.expect("free");
        let busy = b.acquire("r", TTL).await.expect_err("held");
        assert!(busy.is_conflict());
        assert_eq!(busy.failure().map(Failure::attempts), Some(3));
        let within = b
            .acquire_within("r", TTL, Duration::from_secs(1))
            .await
            .expect_err("held");
        let waited = within.failure().map(Failure::elapsed).expect("failure");
        // The last round is at the end of the wait (tokio's timers round up to 1 ms).
        assert!(
            waited >= Duration::from_secs(1) && waited <= Duration::from_millis(1001),
            "{waited:?}"
        );
        lock.release().await.expect("released");
    }

    /// Mutation: a release that began after the deadline reported as an outage when no node
    /// answers (the outage checked first): the real client says `Expired` whatever the
    /// answers. Mutation: a drop that deletes the key during an outage frees the lock for
    /// another client, which the real client's unreachable masters never do.
    #[tokio::test(start_paused = true)]
    async fn an_outage_neither_hides_an_expiry_nor_frees_a_dropped_lock() {
        let a = MemoryLocks::new();
        let b = a.another_client();
        let late = a.try_acquire("late", TTL).await.expect("free");
        let dropped = a.try_acquire("dropped", TTL).await.expect("free");
        a.set_outage(true);
        tokio::time::advance(TTL - DRIFT).await;
        let e = late.release().await.expect_err("after its deadline");
        assert!(e.is_expired(), "{e}");
        drop(dropped);
        a.set_outage(false);
        let busy = b.try_acquire("dropped", TTL).await.expect_err("still held");
        assert!(busy.is_conflict(), "{busy}");
    }

    /// Mutation: a release that wakes every resource's waiters (`State::wake` notifying them
    /// all): a waiter for `r` is woken by each release of `s`, spends an attempt each time,
    /// and gives up long before its policy's wait.
    #[tokio::test(start_paused = true)]
    async fn only_a_release_of_its_resource_wakes_a_waiter() {
        let a = MemoryLocks::new();
        let b = a
            .another_client()
            .with_retry(RetryPolicy::default().max_attempts(Some(3)))
            .expect("valid");
        let held = a.try_acquire("r", TTL).await.expect("free");
        let waiter = tokio::spawn(async move { b.acquire("r", TTL).await.map(drop) });
        for _ in 0..10 {
            tokio::task::yield_now().await;
            let other = a.try_acquire("s", TTL).await.expect("free");
            other.release().await.expect("released");
        }
        let e = waiter.await.expect("waiter").expect_err("r stays held");
        let failure = e.failure().expect("failure");
        assert_eq!(failure.attempts(), 3);
        assert!(
            failure.elapsed() >= RetryPolicy::DEFAULT_DELAY * 2,
            "two retry delays, not woken by the releases of s: {:?}",
            failure.elapsed()
        );
        held.release().await.expect("released");
    }

    /// Mutation: a settings change that makes a new identity (`self.id = Arc::default()` in
    /// `settings`, or `Arc::make_mut` of the identity): the
    /// configured clone is another client, whose acquire inside `with_lock` is a conflict
    /// instead of `HeldByCaller`. Mutation: a retry seed that is not used draws other delays
    /// on the replay.
    #[tokio::test(start_paused = true)]
    async fn settings_keep_the_client_and_a_seed_replays_the_delays() {
        let locks = MemoryLocks::new();
        let same = locks
            .clone()
            .with_retry(RetryPolicy::default().max_attempts(Some(2)))
            .expect("valid");
        let inner = locks
            .with_lock("r", TTL, async |_signal| {
                same.try_acquire("r", TTL).await.map(drop)
            })
            .await
            .expect("outer lock");
        assert!(inner.expect_err("refused").is_held_by_caller());

        let waited = async |seed| {
            let a = MemoryLocks::new();
            let b = a.another_client().with_retry_seed(seed);
            let _held = a.try_acquire("r", TTL).await.expect("free");
            let e = b.acquire("r", TTL).await.expect_err("held");
            e.failure().map(Failure::elapsed).expect("failure")
        };
        let first = waited(7).await;
        assert_eq!(waited(7).await, first);
        assert_ne!(waited(8).await, first, "another seed, other delays");
    }
}
