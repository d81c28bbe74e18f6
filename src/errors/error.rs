//! Errors, named by outcome: what happened to the lock, not which socket failed.

use std::fmt;
use std::time::Duration;

use std::sync::Arc;

use crate::core::report::Report;
use crate::errors::config_error::ConfigError;

/// Why a [`RedLock`](crate::RedLock) call did not give the caller what it asked for.
///
/// Contention and outage never look alike: [`Conflict`](Self::Conflict) means enough nodes
/// answered but the lock belongs to someone else, [`NoQuorum`](Self::NoQuorum) means too many
/// nodes failed to answer for a majority to be possible. Every variant that talked to the
/// servers carries a [`Failure`] with the per-node [`Report`]; the first failed node's error is
/// the [`source`](std::error::Error::source).
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
/// match rl.try_acquire("orders:42", Duration::from_secs(10)).await {
///     Ok(lock) => { lock.release().await?; }
///     Err(e) if e.is_conflict() => println!("busy: {e}"),
///     Err(e) if e.is_no_quorum() => eprintln!("redis is down: {e}"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The configuration or the arguments are invalid; nothing was sent to any node.
    Config(ConfigError),
    /// The lock is held by another owner: enough nodes answered, but not enough granted.
    Conflict(Box<Failure>),
    /// Too many nodes failed (down, hung, erroring) for a majority to be possible.
    NoQuorum(Box<Failure>),
    /// A majority granted, but the round took so long that no validity was left.
    ValidityExhausted(Box<Failure>),
    /// Extend or release: the lock had already expired, so the critical section may have
    /// overlapped with another holder's.
    Expired(Box<Failure>),
    /// No tokio runtime is running; redquorum's connections need one.
    NoRuntime,
    /// An election has no leader agreed by a majority ([`Election::leader`](crate::Election::leader)).
    NoLeader {
        /// The election's resource, with non-printable bytes escaped.
        resource: String,
    },
    /// The caller already holds this lock: the acquire was made from within the work of
    /// [`RedLock::with_lock`](crate::RedLock::with_lock) (or `with_lock_using`) on the same
    /// resource and client, which would otherwise wait for itself until its own lock expired.
    /// Nothing was sent. Pass the work's [`LeaseSignal`](crate::LeaseSignal) (or the lock) down
    /// instead of taking the lock again.
    ///
    /// There is no nested guard with a hold count, as Redisson's per-thread reentrant `RLock`
    /// has:
    /// - in async Rust the [`Lock`](crate::Lock) value is the ownership, so code that needs the
    ///   lock takes `&mut Lock` or the work's `LeaseSignal` from its caller; a second guard
    ///   would let one of two owners release the lock under the other;
    /// - a task is not an owner the way Redisson's thread is: one task runs many futures
    ///   (`join!`, `select!`), and two of them asking for one lock are two waiters.
    ///
    /// So the scope is the work's future: a task it spawns, or a future beside it, is another
    /// owner and waits its turn (a work that awaits such a task deadlocks, as two threads
    /// would). A plain `Lock` held in straight-line code has no such scope: pass it on.
    HeldByCaller {
        /// The resource, with non-printable bytes escaped.
        resource: String,
    },
    /// A semaphore is in use with another number of permits than this client gave: masters
    /// hold its record of `in_use_with` permits (set by a holder's grant, gone with the last
    /// permit). The permits are numbered keys, so clients that count different numbers
    /// would admit more holders than one of them expects; nothing was taken. Every client of
    /// one semaphore must give the same number ([`RedLock::semaphore`](crate::RedLock::semaphore)).
    PermitCountDiffers {
        /// This client's number of permits.
        permits: u32,
        /// The number the masters' record names (the largest, if they disagree).
        in_use_with: u32,
        /// The round: which masters said so (their lines say
        /// [`NodeOutcome::PermitCountDiffers`](crate::NodeOutcome::PermitCountDiffers)).
        failure: Box<Failure>,
    },
    /// The lease was lost while the work ran under it
    /// ([`RedLock::with_lock`](crate::RedLock::with_lock)); the work was cancelled.
    LeaseLost {
        /// The resource, with non-printable bytes escaped.
        resource: String,
        /// Why the lease was lost.
        reason: LostReason,
    },
}

impl Error {
    /// The lock is held by another owner.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict(_))
    }

    /// Too many nodes failed for a majority.
    pub fn is_no_quorum(&self) -> bool {
        matches!(self, Self::NoQuorum(_))
    }

    /// A majority granted too late to leave any validity.
    pub fn is_validity_exhausted(&self) -> bool {
        matches!(self, Self::ValidityExhausted(_))
    }

    /// The lock had expired before it was extended or released.
    pub fn is_expired(&self) -> bool {
        matches!(self, Self::Expired(_))
    }

    /// An election has no leader.
    pub fn is_no_leader(&self) -> bool {
        matches!(self, Self::NoLeader { .. })
    }

    /// A lease was lost while work ran under it.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Self::LeaseLost { .. })
    }

    /// The caller already holds this lock (an acquire from within its own `with_lock`).
    pub fn is_held_by_caller(&self) -> bool {
        matches!(self, Self::HeldByCaller { .. })
    }

    /// A semaphore is in use with another number of permits.
    pub fn is_permit_count_differs(&self) -> bool {
        matches!(self, Self::PermitCountDiffers { .. })
    }

    /// The configuration or the arguments are invalid.
    pub fn is_config(&self) -> bool {
        matches!(self, Self::Config(_))
    }

    /// The details of a failed round, for every variant that talked to the servers.
    ///
    /// ```
    /// # fn demo(e: redquorum::Error) {
    /// if let Some(f) = e.failure() { println!("after {} attempt(s): {}", f.attempts(), f.report()); }
    /// # }
    /// ```
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Self::Conflict(f)
            | Self::NoQuorum(f)
            | Self::ValidityExhausted(f)
            | Self::Expired(f)
            | Self::PermitCountDiffers { failure: f, .. } => Some(f),
            Self::Config(_)
            | Self::NoRuntime
            | Self::LeaseLost { .. }
            | Self::NoLeader { .. }
            | Self::HeldByCaller { .. } => None,
        }
    }

    /// The per-node report of the last round, if any node was asked.
    ///
    /// ```
    /// # fn demo(e: redquorum::Error) {
    /// for node in e.report().into_iter().flatten() { println!("{}: {}", node.node(), node.outcome()); }
    /// # }
    /// ```
    pub fn report(&self) -> Option<&Report> {
        self.failure().map(Failure::report)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "invalid configuration: {e}"),
            Self::Conflict(x) => write!(
                f,
                "{} {} is held by another owner: {}",
                x.operation.noun(),
                x.resource,
                x.summary()
            ),
            Self::NoQuorum(x) => write!(
                f,
                "{} {}: no quorum, too many nodes failed: {}",
                x.operation.noun(),
                x.resource,
                x.summary()
            ),
            Self::ValidityExhausted(x) => write!(
                f,
                "{} {}: a majority answered too late to leave any validity: {}",
                x.operation.noun(),
                x.resource,
                x.summary()
            ),
            Self::Expired(x) => write!(
                f,
                "{} {}: the lock had already expired, the critical section may have overlapped another holder: {}",
                x.operation.noun(),
                x.resource,
                x.summary()
            ),
            Self::PermitCountDiffers {
                permits,
                in_use_with,
                failure,
            } => write!(
                f,
                "semaphore {} is in use with {in_use_with} permits, not {permits}: every client of one semaphore must give the same number",
                failure.resource
            ),
            Self::NoRuntime => f.write_str("no tokio runtime is running"),
            Self::NoLeader { resource } => write!(f, "the election on {resource} has no leader"),
            Self::HeldByCaller { resource } => write!(
                f,
                "the lock on {resource} is already held by the caller (an acquire from within its own with_lock): pass the lock down instead of taking it again"
            ),
            Self::LeaseLost { resource, reason } => {
                write!(
                    f,
                    "the lease on {resource} was lost and the work under it cancelled: {reason}"
                )
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            Self::LeaseLost {
                reason: LostReason::Gone(e),
                ..
            } => Some(e.as_ref()),
            other => other
                .report()
                .and_then(|r| r.failures().next())
                .map(|(_, e)| e as &(dyn std::error::Error + 'static)),
        }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

/// Which operation a [`Failure`] belongs to.
///
/// ```
/// # fn demo(f: &redquorum::Failure) {
/// if f.operation() == redquorum::Operation::Release { println!("release failed"); }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Taking the lock.
    Acquire,
    /// Renewing the lock's ttl.
    Extend,
    /// Giving the lock up.
    Release,
    /// Connecting to the nodes ahead of use ([`RedLock::connect`](crate::RedLock::connect)).
    Connect,
}

impl Operation {
    fn noun(self) -> &'static str {
        match self {
            Self::Acquire => "acquire of",
            Self::Extend => "extend of",
            Self::Release => "release of",
            Self::Connect => "connect for",
        }
    }
}

/// What a failed round looked like: the operation, the resource, how many rounds were tried,
/// how long the call took, and the per-node report of the last round.
///
/// ```
/// # fn demo(e: redquorum::Error) {
/// if let Some(f) = e.failure() {
///     println!("{:?} of {} failed after {:?}", f.operation(), f.resource(), f.elapsed());
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Failure {
    operation: Operation,
    resource: String,
    attempts: u32,
    elapsed: Duration,
    report: Report,
}

impl Failure {
    pub(crate) fn new(
        operation: Operation,
        resource: &[u8],
        attempts: u32,
        elapsed: Duration,
        report: Report,
    ) -> Self {
        Self {
            operation,
            resource: crate::core::resource::display(resource),
            attempts,
            elapsed,
            report,
        }
    }

    fn summary(&self) -> String {
        if self.report.is_empty() {
            format!("nothing was sent (after {:?})", self.elapsed)
        } else if self.attempts > 1 {
            format!("{} (last of {} attempts)", self.report, self.attempts)
        } else {
            self.report.to_string()
        }
    }

    /// The operation that failed.
    pub fn operation(&self) -> Operation {
        self.operation
    }

    /// The resource, with bytes that are not printable ASCII escaped.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// How many rounds were tried (1 without retries).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time from the start of the call to the failure (all rounds and retry delays).
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Every node's answer in the last round.
    pub fn report(&self) -> &Report {
        &self.report
    }
}

/// Why a lease was lost.
///
/// ```
/// # async fn demo(lease: redquorum::Lease) {
/// let reason = lease.lost().await;
/// eprintln!("stop writing: {reason}");
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LostReason {
    /// The local deadline passed without a successful extension (masters unreachable, hung,
    /// or the extension too slow). Fired at the deadline, even while an extension still hangs.
    DeadlinePassed,
    /// An extension found the lock gone or owned by someone else on too many masters.
    Gone(Arc<Error>),
    /// The configured [`max_extensions`](crate::LeaseOptions::max_extensions) or
    /// [`max_hold`](crate::LeaseOptions::max_hold) was reached; fired at the last deadline.
    LimitReached,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DeadlinePassed => {
                f.write_str("the lease deadline passed without a successful extension")
            }
            Self::Gone(e) => write!(f, "the lock is gone: {e}"),
            Self::LimitReached => f.write_str("the lease reached its configured limit"),
        }
    }
}
