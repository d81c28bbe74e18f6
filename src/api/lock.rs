//! An acquired lock: its deadline, extend and release.

use std::fmt;
use std::time::{Duration, Instant};

use tracing::Instrument;

use std::sync::Arc;

use crate::Result;
use crate::core::clock::Deadline;
use crate::core::config::Timing;
use crate::core::permit_keys::PermitKeys;
use crate::core::report::Report;
use crate::core::resource;
use crate::core::telemetry;
use crate::core::token::Token;
use crate::core::verdict::Rejection;
use crate::engine::round::Stragglers;
use crate::errors::error::{Error, Failure, Operation};
use crate::protocol::acquire::Acquired;
use crate::protocol::cleanup::Cleanup;
use crate::protocol::extend::{Renewal, extend};
use crate::protocol::release::{Delete, Judged, release};
use crate::protocol::shared::{Shared, ensure_runtime};

/// A lock held on a majority of the nodes, until [`valid_until`](Self::valid_until).
///
/// The contract is explicit: finish the critical section before `valid_until()`, then
/// [`release`](Self::release) the lock and check the result. A release error means the lock had
/// expired first, so another holder may have overlapped with this one.
///
/// Dropping a `Lock` without releasing it is a safety net, not a promise: when a tokio runtime
/// is running, `Drop` spawns a best-effort release; otherwise the keys expire with their ttl.
/// `Drop` never blocks.
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
/// let mut lock = rl.acquire("orders:42", Duration::from_secs(10)).await?;
/// println!("{} held until {:?} with token {}", lock.resource_display(), lock.valid_until(), lock.token());
/// lock.extend(Duration::from_secs(10)).await?;   // need more time
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "a lock should be released with `release().await`; dropping it only schedules a best-effort release"]
pub struct Lock {
    shared: Arc<Shared>,
    resource: Vec<u8>,
    key: Vec<u8>,
    token: Token,
    timing: Timing,
    deadline: Deadline,
    report: Report,
    attempts: u32,
    /// Requests of the lock's last round (the acquire, or the last extend) still running when
    /// it was decided; the next extend and the release are ordered behind them per node.
    stragglers: Option<Stragglers>,
    released: bool,
    /// Still counted in the `redquorum_locks_held` gauge.
    counted: bool,
    fencing_token: Option<u64>,
    /// A key renewed with the lock's (see [`Lock::set_companion`]).
    companion: Option<Vec<u8>>,
    /// The semaphore whose permit this lock is (see [`Lock::set_permit_of`]).
    permit_of: Option<Arc<PermitKeys>>,
    /// A multi-resource lock's other resources and keys, renewed and released with the first
    /// (see [`Lock::set_others`]); empty for a lock on one resource.
    others: Vec<(Vec<u8>, Vec<u8>)>,
    /// Someone waits (or waited) for this lock: it came through the queue, or a server's own
    /// compare command missed it. Its renewals and release then go to the scripts directly,
    /// which accept a marked value and hand the lock over, without first trying a command
    /// that would miss (`DESIGN.md` §3).
    waited_for: bool,
    /// The waiter id it came through the queue as: its release takes that waiter out of the
    /// queue on every node (`scripts::RELEASE`).
    waiter: Option<String>,
    /// A read lock's share is in this readers' set (see [`Lock::set_read_share`]); its key is
    /// then the lock key it keeps the readers' mark in.
    read_share_in: Option<Vec<u8>>,
}

impl Lock {
    pub(crate) fn new(shared: Arc<Shared>, resource: &[u8], acquired: Acquired) -> Self {
        telemetry::locks_held(1.0);
        Self {
            shared,
            resource: resource.to_vec(),
            key: acquired.key,
            token: acquired.token,
            timing: acquired.timing,
            deadline: acquired.deadline,
            report: acquired.round.report,
            attempts: acquired.attempts,
            stragglers: acquired.round.stragglers,
            released: false,
            counted: true,
            fencing_token: acquired.fencing_token,
            companion: None,
            permit_of: None,
            others: Vec::new(),
            waited_for: acquired.waiter.is_some(),
            waiter: acquired.waiter,
            read_share_in: None,
        }
    }

    /// The resource this lock holds, as given to `acquire` (for a multi-resource lock, the
    /// first of [`resources`](Self::resources)).
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// The resource for messages, with non-printable bytes escaped.
    pub fn resource_display(&self) -> String {
        crate::core::resource::display(&crate::core::resource::joined(self.resources()))
    }

    /// The local deadline: `start + ttl − drift` of the last successful acquire or extend, on
    /// the monotonic clock, brought forward by any time the host spent suspended since (Linux:
    /// `CLOCK_BOOTTIME` against `CLOCK_MONOTONIC`; the monotonic clock alone stops during a
    /// suspend while the servers' keys expire). Before it, no other client can hold the lock
    /// (under the documented assumptions); after it, act as if the lock were gone.
    ///
    /// ```
    /// # fn demo(lock: &redquorum::Lock) {
    /// if std::time::Instant::now() >= lock.valid_until() { println!("too late to write"); }
    /// # }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.deadline.instant()
    }

    /// The client's tracker of background clean-ups, which `RedLock::settle` waits for.
    pub(crate) fn clean_up_tracker(&self) -> &tokio_util::task::TaskTracker {
        &self.shared.background
    }

    /// The deadline itself, for the lease (which re-reads it as the host sleeps and wakes).
    pub(crate) fn deadline(&self) -> Deadline {
        self.deadline
    }

    /// Validity left now (zero once [`valid_until`](Self::valid_until) has passed).
    pub fn remaining(&self) -> Duration {
        self.deadline.remaining()
    }

    /// True once [`valid_until`](Self::valid_until) has passed.
    pub fn is_expired(&self) -> bool {
        self.deadline.passed()
    }

    /// The ttl of the last successful acquire or extend, in whole milliseconds.
    pub fn ttl(&self) -> Duration {
        self.timing.ttl
    }

    /// The random token stored in this lock's keys (shown abbreviated by `Display`).
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// Every node's answer in the round that acquired or last extended the lock.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The fencing token, when the client was built with
    /// [`fencing(true)`](crate::Builder::fencing): a number that strictly increases from one
    /// holder of this resource to the next and is never shared by two holders. Pass it to the
    /// protected resource, and have it reject any write with a token lower than the highest
    /// it has seen: a holder paused past its lease can then do no harm.
    ///
    /// ```
    /// # fn demo(lock: &redquorum::Lock) {
    /// if let Some(token) = lock.fencing_token() { println!("write with fencing token {token}"); }
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// A key that lives as long as the lock (an election's leader info): every extend renews
    /// it too.
    pub(crate) fn set_companion(&mut self, key: Vec<u8>) {
        self.companion = Some(key);
    }

    /// Makes this lock a permit of the semaphore with these keys: every extend renews the
    /// semaphore's record of its number of permits too (never shortening it), and the release
    /// deletes the record once no permit is held.
    pub(crate) fn set_permit_of(&mut self, permits: Arc<PermitKeys>) {
        self.companion = Some(permits.record.clone());
        self.permit_of = Some(permits);
    }

    /// Makes it a read lock whose share is in `readers`: it renews and releases as a share
    /// (`scripts::EXTEND_READ`, `scripts::RELEASE_READ`). A write lock is a lock as it is.
    pub(crate) fn set_read_share(&mut self, readers: Vec<u8>) {
        self.read_share_in = Some(readers);
    }

    /// The other resources and keys of a multi-resource lock, taken with the first.
    pub(crate) fn set_others(&mut self, others: Vec<(Vec<u8>, Vec<u8>)>) {
        self.others = others;
    }

    /// Every resource this lock holds: the one it was acquired for, or each of a
    /// multi-resource lock's ([`RedLock::acquire_many`](crate::RedLock::acquire_many)), in the
    /// order of their keys.
    pub fn resources(&self) -> Vec<&[u8]> {
        std::iter::once(self.resource.as_slice())
            .chain(self.others.iter().map(|(resource, _)| resource.as_slice()))
            .collect()
    }

    /// How a release deletes this lock's keys.
    fn delete(&self) -> Delete {
        if let Some(readers) = &self.read_share_in {
            Delete::ReleaseRead {
                readers: readers.clone(),
                silent: false,
                queue: None,
            }
        } else if let Some(permits) = &self.permit_of {
            Delete::ReleasePermit(permits.clone())
        } else if self.others.is_empty() {
            Delete::Release {
                natively: !self.waited_for,
                waiter: self.waiter.clone(),
                // A fenced lock's release hands a fenced waiter its own lock, fenced.
                fence: self
                    .fencing_token
                    .map(|_| resource::fence_keys(&self.shared.config.key_prefix, &self.resource)),
            }
        } else {
            Delete::ReleaseMany {
                others: self.others.iter().map(|(_, key)| key.clone()).collect(),
            }
        }
    }

    /// How many acquire rounds it took to get the lock.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Renews the lock for `ttl` from now, on every node that still holds our token.
    ///
    /// The majority is counted over all N nodes, not only the ones that granted the lock, and
    /// the new deadline is `start + ttl − drift` from this extend's own start. A lock whose
    /// deadline has already passed is not extended: that would paper over a window in which
    /// another client may have held it.
    ///
    /// Where our key is missing on a node that did not hold it at the last acquire or extend
    /// (it was down, or another owner's key was there), the key is set again: a lock granted by
    /// a bare majority spreads to the other nodes as they come back, and survives losing one
    /// of the first ones. A node that did hold it and lost it is not re-added: that is evidence
    /// the lock could have been lost, and with enough of it the extend fails with
    /// [`Error::Expired`] even if a majority answers for us now.
    ///
    /// # Errors
    /// - [`Error::Expired`]: the deadline had passed, or the answers prove the lock could have
    ///   been lost: nodes that held our key at the last acquire or extend now say it is gone or
    ///   someone else's, enough of them that, with the nodes that never held it, another client
    ///   could have had a majority. Their keys are left untouched;
    /// - [`Error::NoQuorum`]: too few nodes renewed it and nothing proves it lost (nodes timed
    ///   out or failed): an outage, not an expiry. The lock keeps its deadline; a lease
    ///   retries until then;
    /// - [`Error::ValidityExhausted`]: a majority renewed it, but too late to leave validity;
    /// - [`Error::Config`]: `ttl` is invalid (nothing was sent).
    ///
    /// On any error the lock keeps its previous deadline; nothing is deleted.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped, some nodes may have renewed the key (it lives
    /// longer there, which never weakens exclusion) and the lock keeps its previous deadline.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(mut lock: redquorum::Lock) -> Result<(), redquorum::Error> {
    /// lock.extend(Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        telemetry::recorded(Operation::Extend, self.extend_checked(ttl)).await
    }

    async fn extend_checked(&mut self, ttl: Duration) -> Result<()> {
        let timing = self.shared.config.timing(ttl)?;
        ensure_runtime()?;
        let started = Instant::now();
        if self.deadline.passed() {
            return Err(self.failure(
                Rejection::Gone,
                Operation::Extend,
                started,
                Report::default(),
            ));
        }
        let (mut round, verdict) = extend(
            &self.shared,
            Renewal {
                key: &self.key,
                token: &self.token,
                companions: self
                    .companion
                    .iter()
                    .cloned()
                    .chain(self.others.iter().map(|(_, key)| key.clone()))
                    .collect(),
                set: !self.others.is_empty(),
                permits: self.permit_of.as_ref().map(|keys| keys.permits()),
                read_share_in: self.read_share_in.as_deref(),
                natively: self.shared.config.native_commands && !self.waited_for,
            },
            &self.report,
            &timing,
            self.stragglers.as_ref(),
        )
        .instrument(tracing::debug_span!(
            "redquorum.extend",
            resource = %self.resource_display(),
            ttl_ms = timing.ttl_ms,
        ))
        .await;
        // The release (or the next renewal) is ordered behind this round's requests still
        // out, as they are behind the earlier rounds' (`extend` waited for those): with none
        // left, every earlier one is ordered too.
        self.stragglers = round.stragglers.take();
        self.waited_for |= round.native_missed;
        match verdict {
            Ok(()) => {
                self.deadline = round.valid_until(&timing);
                self.timing = timing;
                self.report = round.report;
                Ok(())
            }
            Err(rejection) => {
                Err(self.failure(rejection, Operation::Extend, started, round.report))
            }
        }
    }

    /// Releases the lock on every node (compare-and-delete: only keys holding our token are
    /// deleted). Like an acquire, it is decided as soon as the answers still out cannot change
    /// the verdict: usually at the majority; when the first answers are not a clean majority,
    /// it waits (each node bounded by the per-node timeout) for the ones that decide between
    /// [`Error::Expired`] and [`Error::NoQuorum`]. The other deletes are already queued on
    /// their connections and finish in the background (a hung master's when it wakes); their
    /// lines in the report say "not waited for". Call [`RedLock::settle`](crate::RedLock::settle)
    /// before the process exits, or keys left on those nodes wait for their ttl. On a node
    /// where the lock's last acquire or extend was still running, the delete is queued behind
    /// it on the same connection, never waiting for other nodes. A release that began after the deadline is
    /// `Expired` whatever the answers, and waits for every node but a suspect one (a request
    /// to it timed out and it has not answered since), so its report shows who holds the lock.
    ///
    /// Returns the per-node report.
    ///
    /// # Errors
    /// - [`Error::Expired`]: the deadline had passed before the release began, or the answers
    ///   prove the lock could have been lost (nodes that held our key at the last acquire or
    ///   extend now say it is gone or someone else's, enough of them that another client could
    ///   have had a majority): the critical section may have overlapped another holder's. Keys
    ///   of other owners are never touched;
    /// - [`Error::NoQuorum`]: fewer than a majority confirmed the release and nothing proves
    ///   the lock was lost (nodes timed out or failed): an outage, not an expiry. Keys left on
    ///   the nodes that did not answer expire with the ttl.
    ///
    /// # Cancel safety
    /// Dropping the future part-way leaves the release to `Drop`, which spawns it again (the
    /// compare-and-delete is idempotent); the outcome is then not reported.
    ///
    /// ```no_run
    /// # async fn demo(lock: redquorum::Lock) {
    /// if let Err(e) = lock.release().await {
    ///     eprintln!("the protected work may have overlapped another holder: {e}");
    /// }
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<Report> {
        telemetry::recorded(Operation::Release, self.release_checked()).await
    }

    async fn release_checked(&mut self) -> Result<Report> {
        ensure_runtime()?;
        self.stop_counting();
        let started = Instant::now();
        let expired_before = self.deadline.passed();
        let released = release(
            &self.shared,
            &self.key,
            &self.token,
            self.timing.per_node_timeout,
            self.stragglers.as_ref(),
            Judged {
                granted: &self.report,
                expired_before,
            },
            &self.delete(),
        )
        .instrument(tracing::debug_span!(
            "redquorum.release",
            resource = %self.resource_display(),
            expired_before,
        ))
        .await;
        self.released = true;
        released.map_err(|(rejection, report)| {
            self.failure(rejection, Operation::Release, started, report)
        })
    }

    fn stop_counting(&mut self) {
        if std::mem::replace(&mut self.counted, false) {
            telemetry::locks_held(-1.0);
        }
    }

    fn failure(
        &self,
        rejection: Rejection,
        operation: Operation,
        started: Instant,
        report: Report,
    ) -> Error {
        rejection.error(Failure::new(
            operation,
            &crate::core::resource::joined(self.resources()),
            1,
            started.elapsed(),
            report,
        ))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        self.stop_counting();
        if self.released {
            return;
        }
        tracing::debug!(resource = %self.resource_display(), "lock dropped without release; releasing in the background");
        // The cleanup guard's drop does exactly the spawn we need.
        let delete = self.delete();
        let mut cleanup = Cleanup::arm(
            self.shared.clone(),
            std::mem::take(&mut self.key),
            self.token.clone(),
            self.timing.per_node_timeout,
            delete,
        );
        cleanup.after(self.stragglers.take());
        drop(cleanup);
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("resource", &self.resource_display())
            .field("token", &self.token)
            .field("ttl", &self.timing.ttl)
            .field("fencing_token", &self.fencing_token)
            .field("remaining", &self.remaining())
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}
