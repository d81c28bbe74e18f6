//! What an acquire does between its rounds: how long it waits, what wakes it early, and when
//! it gives up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::config::Timing;
use crate::core::report::{NodeOutcome, Report};
use crate::core::resource::{self, KeyLayout};
use crate::core::retry::RetryPolicy;
use crate::core::verdict::Rejection;
use crate::errors::error::{Error, Failure, Operation};
use crate::protocol::queue::Queue;
use crate::protocol::shared::Shared;
use crate::voters::release_watch::Subscription;

/// How an acquire waits between its rounds: a random delay, never past the holder's expiry
/// as the nodes reported it nor past the call's wait, cut short by a release of the lock
/// (pub/sub, or directly when the releaser is a handle of the same client).
pub(crate) struct Waiting<'a> {
    shared: &'a Arc<Shared>,
    policy: &'a RetryPolicy,
    key: &'a [u8],
    timing: &'a Timing,
    /// The lock's release channel.
    channel: Vec<u8>,
    /// When the call's wait ends.
    pub(crate) deadline: Option<Instant>,
    /// Whether a release wakes it at all (a single attempt never waits).
    waits: bool,
    /// Whether it queues on the nodes for its turn (`Queue`): every acquire that waits for
    /// releases, fenced or not, under the tagged layout (the shared layout's keys are other
    /// libraries' too: there it races for the lock when it is released).
    pub(crate) queues: bool,
    /// Its place in the lock's queue, made only once needed (by a round, or to wait behind
    /// this client's waiters): an acquire that wins its first round (the common case) never
    /// pays for it.
    pub(crate) queue: Option<Queue>,
    /// Release messages, for an acquire that does not queue.
    subscription: Option<Subscription>,
    /// A reader of a read-write lock: it queues as a reader, and a release that names nobody
    /// wakes every waiting reader of this client at once, not one at a time.
    pub(crate) reader: bool,
}

impl<'a> Waiting<'a> {
    /// The lock's timing.
    pub(crate) fn timing(&self) -> &Timing {
        self.timing
    }

    pub(crate) fn new(
        shared: &'a Arc<Shared>,
        (key, timing): (&'a [u8], &'a Timing),
        policy: &'a RetryPolicy,
        started: Instant,
    ) -> Self {
        let waits = shared.config.wait_for_release && policy.attempts_limit() != Some(1);
        Self {
            shared,
            policy,
            key,
            timing,
            channel: resource::release_channel(key),
            deadline: policy.wait_limit().and_then(|w| started.checked_add(w)),
            waits,
            queues: waits && shared.config.key_layout == KeyLayout::Tagged,
            queue: None,
            subscription: None,
            reader: false,
        }
    }

    /// When others of this client already wait for this resource: waits behind them, without
    /// a round, until a release wakes this one (the client's first in the queue) or its timer
    /// fires. Its first refused round then queues it on the nodes, in its place: no round at
    /// all while this client's waiters take the lock from each other.
    ///
    /// # Cancel safety
    /// Dropped part-way, it has joined no queue on the nodes.
    pub(crate) async fn behind_this_clients_waiters(&mut self) {
        if !self.waits || !self.shared.releases.has_waiters(&self.channel) {
            return;
        }
        let watch = if self.queues {
            let (shared, key, timing, policy) = (self.shared, self.key, self.timing, self.policy);
            let reader = self.reader;
            self.queue
                .get_or_insert_with(|| Queue::new(shared, key, timing, policy).reading(reader))
                .listen(shared, &self.channel)
                .await
        } else {
            let subscribed = self.subscribe_unqueued().await;
            self.subscription.insert(subscribed)
        };
        let delay = retry_delay(
            self.shared,
            self.policy,
            self.deadline,
            Instant::now(),
            None,
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = watch.woken() => tracing::debug!("woken by a release, first in line"),
        }
    }

    /// The release messages of an acquire that does not queue (under the shared layout:
    /// nobody queues there, and read-write locks are refused).
    ///
    /// # Cancel safety
    /// Dropped part-way, it has subscribed nowhere (or unsubscribes as it is dropped).
    async fn subscribe_unqueued(&self) -> Subscription {
        let channel = self.channel.clone();
        self.shared.releases.subscribe(channel, "", u64::MAX).await
    }

    /// Sleeps until the next round after one that failed with `report`, counting from `now`
    /// (the reading that found the wait not over).
    ///
    /// # Cancel safety
    /// Dropped part-way, nothing is left to undo (a queue leaves when dropped).
    pub(crate) async fn until_next_round(&mut self, report: &Report, attempts: u32, now: Instant) {
        let holder_left = holder_expires_in(report);
        let delay = retry_delay(self.shared, self.policy, self.deadline, now, holder_left);
        let held = report
            .iter()
            .any(|r| matches!(r.outcome(), NodeOutcome::HeldByOther { .. }));
        if held
            && self.subscription.is_none()
            && !self.queues
            && self.shared.config.wait_for_release
        {
            let subscribed = self.subscribe_unqueued().await;
            self.subscription = Some(subscribed);
        }
        tracing::debug!(attempts, ?delay, "acquire round failed, retrying");
        // A wake-up given while the round ran is kept for the first to wait (`Notify`).
        let watch = self
            .queue
            .as_ref()
            .and_then(Queue::subscription)
            .or(self.subscription.as_ref());
        let woken = async {
            match watch {
                Some(watch) => watch.woken().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(delay) => return,
            () = woken => tracing::debug!("woken by a release"),
        }
        // Handed over by some nodes but not yet by a majority: the others' messages usually
        // follow within a round trip, and with a majority the waiter holds without a round.
        // Waits for them at most a per-node timeout (then its round takes the handed keys).
        let Some(queue) = self.queue.as_ref() else {
            return;
        };
        let more = async {
            while queue.hand_offs() > 0 && queue.handed_lock(self.timing).is_none() {
                match queue.subscription() {
                    Some(watch) => watch.woken().await,
                    None => return,
                }
            }
        };
        let _ = tokio::time::timeout(self.timing.per_node_timeout, more).await;
    }
}

/// The policy's next delay, never past the holder's expiry as the nodes reported it
/// (`holder_left`), nor past the wait's `deadline`.
fn retry_delay(
    shared: &Shared,
    policy: &RetryPolicy,
    deadline: Option<Instant>,
    now: Instant,
    holder_left: Option<Duration>,
) -> Duration {
    let wait_left = deadline.map(|d| d.saturating_duration_since(now));
    policy.delay_before_next(&shared.jitter, holder_left, wait_left)
}

/// After a failed round of an acquire that does not queue (a permit, a set of resources): the
/// caller's error when the policy allows no further round (out of attempts, or past its
/// wait), else how long to wait before the next (never past the earliest expiry the report
/// shows, nor past the wait).
///
/// # Errors
/// The round's rejection as the caller's error, carrying `report`.
pub(crate) fn give_up_or_wait(
    shared: &Shared,
    policy: &RetryPolicy,
    (started, deadline): (Instant, Option<Instant>),
    attempts: u32,
    resource: &[u8],
    rejection: Rejection,
    report: Report,
) -> Result<Duration, Error> {
    let now = Instant::now();
    let out_of_attempts = policy.attempts_limit().is_some_and(|max| attempts >= max);
    if out_of_attempts || deadline.is_some_and(|d| now >= d) {
        let failure = Failure::new(
            Operation::Acquire,
            resource,
            attempts,
            started.elapsed(),
            report,
        );
        return Err(rejection.error(failure));
    }
    Ok(retry_delay(
        shared,
        policy,
        deadline,
        now,
        holder_expires_in(&report),
    ))
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
