//! Acquire: the Redlock algorithm, top to bottom.
//!
//! 1. [`acquire`] tries rounds until one wins, the policy's attempts run out or its wait
//!    passes. Between rounds it sleeps a random delay, never past the holder's expiry as the
//!    nodes reported it, and wakes early when the lock is released (pub/sub, or directly when
//!    the releaser is a handle of the same client).
//! 2. [`round`] is one attempt: a fresh random token, `SET key token NX PX ttl` on every node
//!    at once (the fenced variant is a script that also bumps the fence counter), decided the
//!    moment a majority has answered either way.
//! 3. The one verdict (`crate::core::verdict`) says won, too late, busy or outage. A won round with
//!    fencing is confirmed by a second round (`crate::protocol::confirm`) before the token is usable.
//! 4. A round that did not produce a lock deletes its key from *every* node
//!    (compare-and-delete) before the next round or the error; the [`Cleanup`] guard does it
//!    even when the caller's future is dropped mid-round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::quorum::Deadline;
use crate::core::report::{NodeOutcome, Report};
use crate::core::resource::{self, KeyLayout};
use crate::core::retry::RetryPolicy;
use crate::core::settings::Timing;
use crate::core::token::Token;
use crate::core::verdict::{Rejection, RoundKind};
use crate::engine::request::{Command, InParts, Request};
use crate::engine::round::{self, Round, Stragglers, Wait};
use crate::errors::error::{Error, Failure, Operation};
use crate::errors::node_error::NodeError;
use crate::protocol::confirm::confirm_fence;
use crate::protocol::release::{Delete, hand_over_arguments, release_everywhere};
use crate::protocol::reseed;
use crate::protocol::shared::Shared;
use crate::scripts;
use crate::voters::waiting::Subscription;

/// A won acquire: what the caller's lock is made of.
#[derive(Debug)]
pub(crate) struct Acquired {
    pub(crate) key: Vec<u8>,
    pub(crate) token: Token,
    pub(crate) timing: Timing,
    /// `ttl − drift` after the winning round's first send.
    pub(crate) deadline: Deadline,
    /// The winning round: its report is each node's grant, its stragglers the requests still
    /// running at the decision.
    pub(crate) round: Round,
    /// Rounds tried, the winning one included.
    pub(crate) attempts: u32,
    /// With fencing: the confirmed token.
    pub(crate) fencing_token: Option<u64>,
}

/// How many times in one call a round that failed only for want of re-seeded fence counters
/// (or was fenced off by another client's re-seed) is tried again at once, without counting
/// as an attempt or waiting.
const RESEED_RETRIES: u8 = 3;

/// Takes `resource` (already validated; `key` its lock key) for `timing`, retrying as
/// `policy` says.
///
/// # Errors
/// The last round's rejection ([`Error::Conflict`], [`Error::NoQuorum`],
/// [`Error::ValidityExhausted`]) with its report and the number of attempts.
///
/// # Cancel safety
/// Dropping the future mid-round spawns that round's compare-and-delete (tracked by the
/// client, see `RedLock::settle`); dropping it between rounds leaves nothing behind.
pub(crate) async fn acquire(
    shared: &Arc<Shared>,
    resource: &[u8],
    key: Vec<u8>,
    timing: &Timing,
    policy: &RetryPolicy,
    fencing: bool,
) -> Result<Acquired, Error> {
    let started = Instant::now();
    if fencing {
        // Every slot seeded on every master, ahead of need (`crate::protocol::fence_sweep`).
        shared.start_fence_sweep();
    }
    let deadline = policy.wait_limit().and_then(|w| started.checked_add(w));
    let mut attempts = 0u32;
    let mut subscription: Option<Subscription> = None;
    let mut reseed_retries_left = RESEED_RETRIES;
    let channel = resource::release_channel(&key);
    let waits = shared.config.wait_for_release && policy.attempts_limit() != Some(1);
    // A waiting acquire queues on the nodes for its turn (`Queue`); a fenced one does not
    // (its round is the fenced script) and races for the lock when it is released. The queue
    // is made only once needed: an acquire that wins its first round (the common case) never
    // pays for it.
    let queues = waits && !fencing && shared.config.key_layout == KeyLayout::Tagged;
    let mut queue: Option<Queue> = None;
    if waits && shared.releases.has_waiters(&channel) {
        // Others of this client already wait for this resource: wait behind them, without a
        // round, until a release wakes this one (the client's first in the queue) or its
        // timer fires. Its first refused round then queues it on the nodes, in its place: no
        // round at all while this client's waiters take the lock from each other.
        let watch = if queues {
            queue
                .get_or_insert_with(|| Queue::new(shared, &key, timing, policy))
                .listen(shared, &channel)
                .await
        } else {
            subscription.insert(
                shared
                    .releases
                    .subscribe(channel.clone(), "", u64::MAX)
                    .await,
            )
        };
        let delay = retry_delay(shared, policy, deadline, Instant::now(), None);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = watch.woken() => tracing::debug!("woken by a release, first in line"),
        }
    }
    loop {
        attempts = attempts.saturating_add(1);
        // A last attempt does not join the queue: it would only have to leave it again.
        let will_retry = policy.attempts_limit().is_none_or(|max| attempts < max)
            && deadline.is_none_or(|d| Instant::now() < d);
        let failed = match round(
            shared,
            resource,
            &key,
            timing,
            fencing,
            queues.then_some((&mut queue, policy)),
            will_retry,
        )
        .await
        {
            Ok((round, token, fencing_token)) => {
                tracing::debug!(attempts, elapsed = ?round.elapsed(), fencing_token, "acquired");
                if let Some(queue) = queue.take() {
                    queue.leave_after(&round);
                }
                return Ok(Acquired {
                    deadline: round.valid_until(timing),
                    key,
                    token,
                    timing: *timing,
                    round,
                    attempts,
                    fencing_token,
                });
            }
            Err(failed) => failed,
        };
        if failed.retry_now && reseed_retries_left > 0 {
            // The same try again, now that the masters it lacked are seeded (or after a
            // re-seed fenced off its confirmation): a restart or a new deployment costs a
            // round or two, never an attempt or a wait.
            tracing::debug!("fence counters re-seeded, trying again at once");
            reseed_retries_left -= 1;
            attempts -= 1;
            continue;
        }
        let out_of_attempts = policy.attempts_limit().is_some_and(|max| attempts >= max);
        let now = Instant::now();
        let past_deadline = deadline.is_some_and(|d| now >= d);
        if out_of_attempts || past_deadline {
            if let Some(queue) = queue.take() {
                queue.leave().await;
            }
            let failure = Failure::new(
                Operation::Acquire,
                resource,
                attempts,
                started.elapsed(),
                failed.report,
            );
            return Err(failed.rejection.error(failure));
        }
        let delay = retry_delay(
            shared,
            policy,
            deadline,
            now,
            holder_expires_in(&failed.report),
        );
        let held = failed
            .report
            .iter()
            .any(|r| matches!(r.outcome(), NodeOutcome::HeldByOther { .. }));
        if held && subscription.is_none() && !queues && shared.config.wait_for_release {
            subscription = Some(
                shared
                    .releases
                    .subscribe(channel.clone(), "", u64::MAX)
                    .await,
            );
        }
        tracing::debug!(attempts, ?delay, "acquire round failed, retrying");
        // A wake-up given while the round ran is kept for the first to wait (`Notify`).
        let watch = queue
            .as_ref()
            .and_then(|q| q.subscription.as_ref())
            .or(subscription.as_ref());
        let woken = async {
            match watch {
                Some(watch) => watch.woken().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = woken => tracing::debug!("woken by a release"),
        }
    }
}

/// A waiting acquire's place in the lock's queue on the nodes (`scripts::QUEUED_ACQUIRE`): a
/// release hands the lock to the first live waiter, so waiters are served in turn and a
/// releaser's next acquire cannot take the lock from them. It joins with the cleanup of its
/// first refused round (`scripts::UNDO_AND_QUEUE`) and leaves when dropped: on success, on
/// giving up, or cancelled, a tracked background round (`RedLock::settle` waits for it)
/// removes it from every node.
#[derive(Debug)]
struct Queue {
    shared: Arc<Shared>,
    key: Vec<u8>,
    /// `<client>.<random>`, drawn when it first listens. Not secret: release messages name it.
    waiter: String,
    /// How long a registration stays live without another round.
    live_ms: u64,
    /// Its place in the queue: when it first listened (its first refusal, or its arrival
    /// behind this client's waiters), in µs of this host's wall clock. Sent to
    /// every node, so every node orders the waiters alike (the server's clocks would differ
    /// by a millisecond here and there, splitting the hand-off between two waiters); clocks
    /// that differ between hosts only shift whose turn comes first, never exclusion.
    place: u64,
    per_node_timeout: Duration,
    /// Whether any round may have queued it on a node (then dropping it must leave).
    joined: bool,
    /// Its release messages, subscribed before it first joins: a hand-off to it is never
    /// published before it listens.
    subscription: Option<Subscription>,
    /// Its requests of the last round still running on some node (a suspect one the
    /// cleanup did not wait for): the leaving round goes behind them.
    after: Option<Stragglers>,
}

impl Queue {
    fn new(shared: &Arc<Shared>, key: &[u8], timing: &Timing, policy: &RetryPolicy) -> Self {
        // Live across the longest sleep between two rounds, twice, and their rounds.
        let live = policy
            .longest_delay()
            .saturating_add(timing.per_node_timeout)
            .saturating_mul(2)
            .max(Duration::from_millis(100));
        Self {
            shared: shared.clone(),
            key: key.to_vec(),
            // Both drawn when it first listens: an acquire that wins its first round (the
            // common case) never pays for them.
            waiter: String::new(),
            live_ms: u64::try_from(live.as_millis()).unwrap_or(u64::MAX),
            place: 0,
            per_node_timeout: timing.per_node_timeout,
            joined: false,
            subscription: None,
            after: None,
        }
    }

    /// Listens for the hand-offs to this waiter (and, as its client's waiter with this
    /// place, for the releases that name nobody).
    ///
    /// # Cancel safety
    /// Dropped part-way, it has joined nowhere.
    async fn listen(&mut self, shared: &Shared, channel: &[u8]) -> &Subscription {
        if self.waiter.is_empty() {
            self.waiter = shared.releases.new_waiter_id();
            self.place = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        }
        let watch = match self.subscription.take() {
            Some(watch) => watch,
            None => {
                shared
                    .releases
                    .subscribe(channel.to_vec(), &self.waiter, self.place)
                    .await
            }
        };
        self.subscription.insert(watch)
    }

    /// Listens, then counts as joined: the cleanup under way (`UNDO_AND_QUEUE`) queues it,
    /// and its next rounds are `QUEUED_ACQUIRE`.
    ///
    /// # Cancel safety
    /// Dropped part-way, it has joined nowhere yet.
    async fn join(&mut self, shared: &Shared, channel: &[u8]) {
        self.listen(shared, channel).await;
        self.joined = true;
    }

    /// The queue's keys, and the waiter's id and liveness, as a queued script's arguments.
    fn arguments(&self) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        (
            resource::queue_keys(&self.key).into(),
            vec![
                self.waiter.clone().into_bytes(),
                self.live_ms.to_string().into_bytes(),
                self.place.to_string().into_bytes(),
            ],
        )
    }
}

impl Queue {
    /// The round that takes this waiter out of the queue on every node, passing on a lock
    /// already reserved for it (`scripts::DEQUEUE`).
    fn leave_request(&self) -> Request {
        let (keys, _) = self.arguments();
        Request::for_waiter(
            Operation::Release,
            &scripts::DEQUEUE,
            &self.key,
            &self.waiter,
            NodeOutcome::Released,
        )
        .with_extra_keys(keys)
        .in_parts(InParts::LeaveQueue)
        .with_payload(hand_over_arguments(
            &self.key,
            &Token::generate().release_id(),
            self.per_node_timeout,
        ))
    }

    /// The leaving round, on each node behind this waiter's requests still running there
    /// (`after`): a queued round or cleanup that landed after it would queue the waiter again.
    fn leave_round(&self, after: Option<Stragglers>) -> impl Future<Output = ()> + Send + 'static {
        let request = self.leave_request();
        let shared = self.shared.clone();
        let timeout = self.per_node_timeout;
        async move {
            round::run_then(
                &shared.nodes,
                &shared.background,
                request,
                timeout,
                Wait::ForAll,
                after.as_ref(),
                || {},
            )
            .await;
        }
    }

    /// Leaves the queue after `won`, the round that took the lock, in the background (not to
    /// delay the holder): each node that granted it has already dropped this waiter
    /// (`QUEUED_ACQUIRE`), so only when a node did not, or a straggler of the round does not,
    /// is a round needed to leave.
    fn leave_after(mut self, won: &Round) {
        if !std::mem::take(&mut self.joined) {
            return;
        }
        let answered_all_granted = won
            .report
            .iter()
            .all(|r| matches!(r.outcome(), NodeOutcome::Granted | NodeOutcome::NoReply));
        let stragglers = won.stragglers.clone();
        if answered_all_granted && stragglers.is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let leave = self.leave_round(stragglers.clone());
        self.shared.spawn_cleanup(&runtime, async move {
            if answered_all_granted
                && let Some(stragglers) = stragglers
                && stragglers.all_done().await
            {
                return;
            }
            leave.await;
        });
    }

    /// Leaves the queue now, waiting for every node but a suspect one (each bounded by the
    /// per-node timeout): an acquire that gives up returns only once no release can hand it
    /// the lock any more.
    ///
    /// # Cancel safety
    /// Dropped part-way, `Drop` sends the leaving round again in the background.
    async fn leave(mut self) {
        if self.joined {
            let after = self.after.take();
            self.leave_round(after).await;
            self.joined = false;
        }
    }
}

impl Drop for Queue {
    /// Leaves the queue in the background: when the acquire was cancelled (or its `leave`
    /// was).
    fn drop(&mut self) {
        if !self.joined {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let after = self.after.take();
        let leave = self.leave_round(after);
        self.shared.spawn_cleanup(&runtime, leave);
    }
}

/// A round that did not produce a lock.
struct FailedRound {
    rejection: Rejection,
    /// The round's report, with the holder's remaining ttl learnt from the cleanup.
    report: Report,
    /// Masters that had not been re-seeded since they started kept the round from a majority,
    /// and now a majority is seeded: try again at once.
    retry_now: bool,
}

/// One attempt: the round, its verdict, the fencing confirm, and the cleanup when it failed.
/// A won round gives the round, its token and the confirmed fencing token. With `queue` (an
/// acquire that may queue: its queue, made when first needed, and its policy), the round is
/// the queued acquire once the waiter has joined, and a failed round's cleanup joins (or keeps
/// its place) unless this was the last attempt.
async fn round(
    shared: &Arc<Shared>,
    resource: &[u8],
    key: &[u8],
    timing: &Timing,
    fencing: bool,
    mut queue: Option<(&mut Option<Queue>, &RetryPolicy)>,
    will_retry: bool,
) -> Result<(Round, Token, Option<u64>), FailedRound> {
    let token = Token::generate();
    let mut cleanup = Cleanup::arm(
        shared.clone(),
        key.to_vec(),
        token.clone(),
        timing.per_node_timeout,
        Delete::Silent,
    );
    let seed_keys = fencing.then(|| resource::fence_keys(&shared.config.key_prefix, resource));
    let request = match &seed_keys {
        Some(keys) => {
            let mut extra = vec![keys.counter.clone(), keys.marker.clone()];
            extra.extend(keys.legacy.clone());
            let command = Command::Script(&scripts::ACQUIRE_FENCED);
            Request::new(
                Operation::Acquire,
                command,
                key,
                &token,
                NodeOutcome::Granted,
            )
            .with_extra_keys(extra)
        }
        None => match queue
            .as_ref()
            .and_then(|(slot, _)| slot.as_ref())
            .filter(|q| q.joined)
        {
            Some(queue) => {
                let (keys, arguments) = queue.arguments();
                Request::new(
                    Operation::Acquire,
                    Command::Script(&scripts::QUEUED_ACQUIRE),
                    key,
                    &token,
                    NodeOutcome::Granted,
                )
                .with_extra_keys(keys)
                .with_payload(arguments)
            }
            None => Request::new(
                Operation::Acquire,
                Command::SetIfAbsent,
                key,
                &token,
                NodeOutcome::Granted,
            ),
        },
    }
    .with_number(timing.ttl_ms)
    .settled_nodes_only();
    let round = round::run(
        &shared.nodes,
        &shared.background,
        request,
        timing.per_node_timeout,
        Wait::UntilDecided,
    )
    .await;
    cleanup.after(round.stragglers.clone());
    // Masters that started since their counter was seeded gave no vote: re-seed them, in the
    // background when the round is won anyway, before the next try when it is not.
    // (The scripts read each server's term themselves: no reconnect is needed first.) The
    // sweeper looks at the masters' records too: a master that restarted or failed over is
    // re-seeded on every slot, not only this one.
    let unseeded = round
        .report
        .iter()
        .any(|r| matches!(r.outcome(), NodeOutcome::Failed(NodeError::Unseeded)));
    if unseeded {
        shared.fence_sweep.wake();
    }
    let verdict = round.judge(
        RoundKind::Acquire,
        timing.validity_after(round.elapsed()).is_some(),
        None,
    );
    let (rejection, mut report) = match verdict {
        Err(rejection) => (rejection, round.report),
        Ok(()) => {
            let confirmed = match (&seed_keys, round.fence) {
                (None, _) => Ok(None),
                (Some(keys), Some(fence)) => {
                    confirm_fence(shared, key, keys, &token, fence, &round, timing)
                        .await
                        .map(|()| Some(fence))
                }
                // A fenced round won without any counter: impossible with our script.
                (Some(_), None) => Err((Rejection::Outage, Report::default())),
            };
            match confirmed {
                Ok(fencing_token) => {
                    cleanup.disarm();
                    // Re-seed in the background what answered "unseeded", before the decision
                    // or (a restarted master is often the slow one) after it.
                    let late = round.stragglers.clone().filter(|_| fencing);
                    if let Some(keys) = seed_keys.filter(|_| unseeded || late.is_some()) {
                        let shared = shared.clone();
                        let timeout = timing.per_node_timeout;
                        tokio::spawn(async move {
                            let late_unseeded = match late {
                                Some(stragglers) => stragglers.unseeded().await,
                                None => false,
                            };
                            if unseeded || late_unseeded {
                                reseed::reseed(&shared.nodes, &keys, timeout).await;
                            }
                        });
                    }
                    return Ok((round, token, fencing_token));
                }
                Err(failed) => failed,
            }
        }
    };
    let (undone, still_running) = match queue.as_mut() {
        Some((slot, policy)) if will_retry => {
            let queue = slot.get_or_insert_with(|| Queue::new(shared, key, timing, policy));
            queue.join(shared, &resource::release_channel(key)).await;
            cleanup.queue_as(queue);
            cleanup.run().await
        }
        _ => cleanup.run().await,
    };
    // A waiter that may have joined leaves behind these requests too.
    if let Some(queue) = queue.and_then(|(slot, _)| slot.as_mut())
        && still_running.is_some()
    {
        queue.after = still_running;
    }
    report.learn_expiries(&undone);
    // A re-seed by another acquire of this slot fenced off our confirmation: no fault of the
    // masters, so worth another round at once.
    let fenced_off = report.iter().any(|r| {
        matches!(
            r.outcome(),
            NodeOutcome::Failed(NodeError::SeededSinceGrant)
        )
    });
    let retry_now = match seed_keys.filter(|_| unseeded) {
        Some(keys) => {
            let reseeded = reseed::reseed(&shared.nodes, &keys, timing.per_node_timeout).await;
            // Enough masters seeded now (by this re-seed or another client's): try again.
            reseeded.marked() >= shared.quorum()
        }
        None => fenced_off,
    };
    Err(FailedRound {
        rejection,
        report,
        retry_now,
    })
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

// Step 4: undoing a round that did not produce a lock, even when its caller goes away.

/// While armed, owns the duty to delete one round's key from every node.
///
/// [`Cleanup::run`] does it inline; if the guard is dropped while armed (the acquire future was
/// cancelled mid-round), it spawns the same compare-and-delete on the current tokio runtime.
/// Compare-and-delete only removes a key that still holds this round's token, so running it
/// twice, or after the key expired, is harmless.
#[derive(Debug)]
pub(crate) struct Cleanup {
    armed: Option<Arc<Shared>>,
    key: Vec<u8>,
    token: Token,
    per_node_timeout: Duration,
    after: Option<Stragglers>,
    /// What the delete does besides: [`Delete::Silent`] for a failed round (or
    /// [`Delete::SilentAndQueue`] once [`queue_as`](Self::queue_as) says so),
    /// [`Delete::Release`] for a dropped lock.
    delete: Delete,
}

impl Cleanup {
    pub(crate) fn arm(
        shared: Arc<Shared>,
        key: Vec<u8>,
        token: Token,
        per_node_timeout: Duration,
        delete: Delete,
    ) -> Self {
        Self {
            armed: Some(shared),
            key,
            token,
            per_node_timeout,
            after: None,
            delete,
        }
    }

    /// [`run`](Self::run) also joins `queue` (the spawned cleanup of a dropped future does
    /// not: the queue's own `Drop` leaves it).
    fn queue_as(&mut self, queue: &Queue) {
        let (keys, arguments) = queue.arguments();
        self.delete = Delete::SilentAndQueue { keys, arguments };
    }

    /// Requests of the round still running in the background: on their nodes, the delete is
    /// sent only after them.
    pub(crate) fn after(&mut self, stragglers: Option<Stragglers>) {
        self.after = stragglers;
    }

    /// The keys now belong to a lock that will release them itself.
    pub(crate) fn disarm(mut self) {
        self.armed = None;
    }

    /// Deletes the keys now, waiting for every node (each bounded by the per-node timeout),
    /// and returns the compare-and-delete's report (on nodes where another owner holds the
    /// key, it says for how much longer) and its requests still running on suspect nodes. If this future is dropped part-way, `Drop` spawns the
    /// cleanup again.
    pub(crate) async fn run(mut self) -> (Report, Option<Stragglers>) {
        let Some(shared) = &self.armed else {
            return (Report::default(), None);
        };
        let round = release_everywhere(
            shared,
            &self.key,
            &self.token,
            self.per_node_timeout,
            self.after.as_ref(),
            &self.delete,
        )
        .await;
        tracing::debug!(report = %round.report, "cleaned up after a failed round");
        self.armed = None;
        (round.report, round.stragglers)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(shared) = self.armed.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "acquire cancelled with no tokio runtime left; its keys expire with their ttl"
            );
            return;
        };
        let key = std::mem::take(&mut self.key);
        let token = self.token.clone();
        let timeout = self.per_node_timeout;
        let after = self.after.take();
        // Silent even if the round would have queued: the acquire is gone.
        let delete = match &self.delete {
            Delete::SilentAndQueue { .. } => Delete::Silent,
            other => other.clone(),
        };
        let tracker = shared.clone();
        tracker.spawn_cleanup(&runtime, async move {
            release_everywhere(&shared, &key, &token, timeout, after.as_ref(), &delete).await;
        });
    }
}
