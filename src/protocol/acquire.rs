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

use crate::core::clock::Deadline;
use crate::core::config::Timing;
use crate::core::quorum::Tally;
use crate::core::report::{NodeOutcome, NodeReport, Report};
use crate::core::resource::{self, KeyLayout};
use crate::core::retry::RetryPolicy;
use crate::core::token::Token;
use crate::core::verdict::Rejection;
use crate::engine::request::{Command, Request};
use crate::engine::round::{Round, Wait};
use crate::errors::error::{Error, Failure, Operation};
use crate::protocol::between_rounds::Waiting;
use crate::protocol::cleanup::Cleanup;
use crate::protocol::fencing;
use crate::protocol::queue::Queue;
use crate::protocol::release::Delete;
use crate::protocol::shared::Shared;
use crate::scripts;

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
    /// The waiter id of an acquire that came through the queue (its winning round was a
    /// queued acquire, or releases handed it the lock): the lock was contended, its value is
    /// marked as waited for or handed, the servers' own compare commands would only miss, and
    /// its release takes that waiter out of the queue on every node.
    pub(crate) waiter: Option<String>,
}

/// What an acquire takes: the lock (which is also the write lock of the read-write lock of
/// the same name), or a read lock, its share in `readers` (`resource::readers_key`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Taking<'a> {
    Lock,
    Read { readers: &'a [u8] },
}

impl<'a> Taking<'a> {
    /// A reader's readers: where its share goes.
    fn reader_of(self) -> Option<&'a [u8]> {
        match self {
            Taking::Read { readers } => Some(readers),
            Taking::Lock => None,
        }
    }
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
    (fencing, taking): (bool, Taking<'_>),
) -> Result<Acquired, Error> {
    let started = Instant::now();
    if fencing {
        // Every slot seeded on every master, ahead of need (`crate::protocol::fence_sweep`).
        shared.start_fence_sweep();
    }
    let mut waiting = Waiting::new(shared, (&key, timing), policy, started);
    // Readers queue as readers (`DESIGN.md` §7c): a release hands the lock to the run of
    // readers at the head of the queue, and wakes them all at once.
    waiting.reader = taking.reader_of().is_some();
    waiting.behind_this_clients_waiters().await;
    let mut attempts = 0u32;
    let mut reseed_retries_left = RESEED_RETRIES;
    loop {
        attempts = attempts.saturating_add(1);
        // A last attempt does not join the queue: it would only have to leave it again.
        let will_retry = policy.attempts_limit().is_none_or(|max| attempts < max)
            && waiting.deadline.is_none_or(|d| Instant::now() < d);
        let queue = waiting.queues.then_some((&mut waiting.queue, policy));
        let tried = round(
            shared,
            (resource, &key),
            timing,
            (fencing, taking),
            queue,
            will_retry,
        );
        let failed = match tried.await {
            Ok(won) => {
                tracing::debug!(attempts, elapsed = ?won.round.elapsed(), fencing_token = won.fencing_token, "acquired");
                let mut waiter = None;
                if let Some(queue) = waiting.queue.take() {
                    waiter = won.through_queue.then(|| queue.waiter_id().to_owned());
                    queue.leave_after(&won.round, &won.token);
                }
                return Ok(Acquired {
                    deadline: won.deadline,
                    key,
                    token: won.token,
                    timing: *timing,
                    round: won.round,
                    attempts,
                    fencing_token: won.fencing_token,
                    waiter,
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
        // A fenced hand-off whose confirmation another client's re-seed fenced off is worth
        // a round at once, as a won round's is: no fault of the masters (`DESIGN.md` §7).
        let mut hurry = false;
        match handed_over(shared, &mut waiting, (resource, &key), fencing, attempts).await {
            HandOff::Held(acquired) => return Ok(acquired),
            HandOff::FencedOff if reseed_retries_left > 0 => {
                reseed_retries_left -= 1;
                hurry = true;
            }
            HandOff::FencedOff | HandOff::NotYet => {}
        }
        let out_of_attempts = policy.attempts_limit().is_some_and(|max| attempts >= max);
        let now = Instant::now();
        if out_of_attempts || waiting.deadline.is_some_and(|d| now >= d) {
            if let Some(queue) = waiting.queue.take() {
                queue.leave().await;
            }
            let elapsed = started.elapsed();
            let failure = Failure::new(
                Operation::Acquire,
                resource,
                attempts,
                elapsed,
                failed.report,
            );
            return Err(failed.rejection.error(failure));
        }
        if hurry {
            tracing::debug!("a fenced hand-off was fenced off by a re-seed, trying again at once");
            continue;
        }
        waiting
            .until_next_round(&failed.report, attempts, now)
            .await;
        // Anything but a lock goes on to the next round, which comes at once.
        if let HandOff::Held(acquired) =
            handed_over(shared, &mut waiting, (resource, &key), fencing, attempts).await
        {
            return Ok(acquired);
        }
    }
}

/// What [`handed_over`] found.
// `Held` is by far the largest, but it is returned once per acquire at most, and moved out
// at once: boxing it would cost every hand-off an allocation for nothing.
#[allow(clippy::large_enum_variant)]
enum HandOff {
    /// The lock, handed over (and, fenced, confirmed).
    Held(Acquired),
    /// No majority of hand-offs yet (or no queue).
    NotYet,
    /// A majority was handed over, but the fenced confirm failed because a re-seed by another
    /// acquire of the slot fenced it off (`SeededSinceGrant`): the next round may go at once.
    /// Any other failed confirm is [`NotYet`](Self::NotYet): the round waits as after a loss.
    FencedOff,
}

/// The lock a majority of the nodes' releases handed to this waiter with its own token
/// (`Queue::handed_lock`), as a won acquire: no round of its own. Its report says `granted`
/// for the nodes whose hand-off counted and `no reply` for the others, which may hand it
/// over later (the lock's key there too) or leave it to another holder's ttl. It stays queued
/// on those others (and where a release only reserved the lock for it) until its release,
/// which takes it out of the queue on every node, goes behind the waiter's requests still
/// running there, as a won round's release does (a leaving round now would cost a round per
/// hand-off, as most are decided before the last message comes). Only masters whose vote a round would count are counted
/// (`Queue::handed_lock`).
///
/// A fenced waiter's lock is then confirmed as a won round's is (`fencing::confirm`): its
/// token is the largest counter the counted hand-offs raised, and only their confirmations
/// count. Should the confirm fail, the waiter forgets the registration (its next round, with
/// a new one, takes the keys handed to it as its own grants) and waits on, still queued;
/// when a re-seed fenced the confirm off ([`HandOff::FencedOff`]), that round may go at
/// once.
///
/// # Cancel safety
/// Dropped during a fenced waiter's confirm round, the queue is dropped with it and leaves
/// in the background, behind its requests still running, passing on the keys handed to it
/// (`Queue`'s `Drop`; a review found the stragglers taken out of the queue before the
/// confirm, which let the leaving round overtake a held-back cleanup that queued it again).
async fn handed_over(
    shared: &Shared,
    waiting: &mut Waiting<'_>,
    (resource, key): (&[u8], &[u8]),
    fencing: bool,
    attempts: u32,
) -> HandOff {
    let timing = *waiting.timing();
    let Some(handed) = waiting.queue.as_ref().and_then(|q| q.handed_lock(&timing)) else {
        return HandOff::NotYet;
    };
    let Some(mut queue) = waiting.queue.take() else {
        return HandOff::NotYet;
    };
    let mut tally = Tally::new(shared.nodes.len());
    let report = shared
        .nodes
        .iter()
        .zip(&handed.counted)
        .map(|(node, &counted)| {
            let outcome = if counted {
                NodeOutcome::Granted
            } else {
                NodeOutcome::NoReply
            };
            tally.record(outcome.vote());
            NodeReport::new(node.id().clone(), outcome, Duration::ZERO)
                .with_server(node.server(key))
        })
        .collect();
    let (fence, grants) = match handed.fence {
        Some((token, grants)) => (Some(token), grants),
        None => (None, Vec::new()),
    };
    let round = Round {
        start: handed.since.instant(),
        awake: handed.since,
        decided: Instant::now(),
        tally,
        report: Report::new(report),
        stragglers: queue.still_running(),
        fence,
        grants,
        native_missed: false,
    };
    let mut fencing_token = None;
    if fencing {
        let keys = resource::fence_keys(&shared.config.key_prefix, resource);
        let holder = (key, &handed.token, None);
        match fencing::confirm(shared, holder, &keys, &round, &timing).await {
            Ok(token) => fencing_token = Some(token),
            Err((rejection, report)) => {
                tracing::debug!(?rejection, "a fenced hand-off was not confirmed");
                queue.unregister();
                waiting.queue = Some(queue);
                let fenced_off =
                    fencing::retry_now(shared, None, &report, timing.per_node_timeout).await;
                return if fenced_off {
                    HandOff::FencedOff
                } else {
                    HandOff::NotYet
                };
            }
        }
    }
    tracing::debug!(attempts, elapsed = ?round.elapsed(), fencing_token, "acquired by hand-off");
    let deadline = round.valid_until(&timing);
    let waiter = queue.waiter_id().to_owned();
    queue.hold();
    HandOff::Held(Acquired {
        key: key.to_vec(),
        token: handed.token,
        timing,
        deadline,
        round,
        attempts,
        fencing_token,
        waiter: Some(waiter),
    })
}

/// A round that did not produce a lock.
struct LostRound {
    rejection: Rejection,
    /// The round's report, with the holder's remaining ttl learnt from the cleanup.
    report: Report,
    /// Masters that had not been re-seeded since they started kept the round from a majority,
    /// and now a majority is seeded: try again at once.
    retry_now: bool,
}

/// One attempt: the round, its verdict, the fencing confirm, and the cleanup when it failed.
/// With `queue` (an acquire that may queue: its queue, made when first needed, and its
/// policy), the round is the queued acquire once the waiter has joined, and a failed round's
/// cleanup joins (or keeps its place) unless this was the last attempt.
///
/// # Cancel safety
/// Dropped mid-round, its `Cleanup` deletes the key in the background.
async fn round(
    shared: &Arc<Shared>,
    (resource, key): (&[u8], &[u8]),
    timing: &Timing,
    (fencing, taking): (bool, Taking<'_>),
    mut queue: Option<(&mut Option<Queue>, &RetryPolicy)>,
    will_retry: bool,
) -> Result<Won, LostRound> {
    // A single lock's token lets waiters mark it, so its release can be the server's own
    // compare-and-delete while nobody waits (`DESIGN.md` §3). Not with the shared layout:
    // other libraries' values and scripts share those keys.
    let about = shared.config.holder_info.as_deref();
    let token = if shared.config.native_commands && shared.config.key_layout == KeyLayout::Tagged {
        Token::generate_markable(about)
    } else {
        Token::generate_about(about)
    };
    let silent = match taking.reader_of() {
        Some(readers) => Delete::ReleaseRead {
            readers: readers.to_vec(),
            silent: true,
            queue: None,
        },
        None => Delete::Silent,
    };
    let mut cleanup = Cleanup::arm(
        shared.clone(),
        key.to_vec(),
        token.clone(),
        timing.per_node_timeout,
        silent,
    );
    let fence_keys = fencing.then(|| resource::fence_keys(&shared.config.key_prefix, resource));
    // A waiter's round goes, on each node, behind its last cleanup still running there
    // (`Queue::prepare_round`).
    let mut behind = None;
    if let Some((Some(queue), _)) = queue.as_mut() {
        behind = queue.prepare_round(shared);
        if queue.is_joined() {
            queue.register(&token, fencing);
        }
    }
    let joined = queue
        .as_ref()
        .and_then(|(slot, _)| slot.as_ref())
        .filter(|q| q.is_joined());
    let through_queue = joined.is_some();
    let request = match (&fence_keys, joined, taking.reader_of()) {
        (keys, joined, Some(readers)) => read_request(key, &token, readers, keys.as_ref(), joined),
        (Some(keys), Some(queue), None) => {
            fencing::queued_acquire_request(key, &token, keys, queue)
        }
        (Some(keys), None, None) => fencing::acquire_request(key, &token, keys),
        (None, Some(queue), None) => queued_request(key, &token, queue),
        (None, None, None) => Request::new(
            Operation::Acquire,
            Command::SetIfAbsent,
            key,
            &token,
            NodeOutcome::Granted,
        ),
    }
    .with_number(timing.ttl_ms)
    .settled_nodes_only();
    let round = shared
        .fanout()
        .run_behind(
            request,
            timing.per_node_timeout,
            Wait::UntilDecided,
            behind.as_ref(),
            || {},
        )
        .await;
    cleanup.after(round.stragglers.clone());
    let unseeded = fencing && fencing::found_unseeded(shared, &round);
    let (rejection, mut report) = match round.won(timing) {
        Err(rejection) => (rejection, round.report),
        Ok(deadline) => {
            let confirmed = match &fence_keys {
                None => Ok(None),
                Some(keys) => {
                    let holder = (key, &token, taking.reader_of());
                    fencing::confirm(shared, holder, keys, &round, timing)
                        .await
                        .map(Some)
                }
            };
            match confirmed {
                Ok(fencing_token) => {
                    cleanup.disarm();
                    if let Some(keys) = fence_keys {
                        let timeout = timing.per_node_timeout;
                        fencing::reseed_after_win(shared, keys, unseeded, &round, timeout);
                    }
                    return Ok(Won {
                        round,
                        token,
                        deadline,
                        fencing_token,
                        through_queue,
                    });
                }
                Err(lost) => lost,
            }
        }
    };
    // A last attempt does not queue, unless this client has waiters for the lock: others
    // behind it never met the holder themselves, and the queue's mark is what makes its
    // release wake them (`DESIGN.md` §3). (This acquire counts too once it queued: then it
    // keeps its place and marks again, as its earlier rounds did.) The acquire then leaves
    // the queue as it gives up.
    let others_wait = || shared.releases.has_waiters(&resource::release_channel(key));
    let (undone, still_running) = match queue.as_mut() {
        Some((slot, policy)) if will_retry || others_wait() => {
            let reader = taking.reader_of().is_some();
            let queue =
                slot.get_or_insert_with(|| Queue::new(shared, key, timing, policy).reading(reader));
            queue.join(shared, &resource::release_channel(key)).await;
            queue.register(&token, fencing);
            cleanup.queue_as(queue);
            cleanup.run().await
        }
        Some((slot, _)) => {
            // The silent delete takes a lock handed to this round's registration too: its
            // hand-offs must not count (the acquire gives up after this round anyway). Not
            // reached by a waiter that joined while its own subscription counts among the
            // client's waiters (`others_wait`); kept so that no change there makes it count.
            if let Some(queue) = slot.as_mut() {
                queue.unregister();
            }
            cleanup.run().await
        }
        None => cleanup.run().await,
    };
    // A waiter that may have joined leaves behind these requests too.
    if let (Some(queue), Some(stragglers)) =
        (queue.and_then(|(slot, _)| slot.as_mut()), still_running)
    {
        queue.leave_behind(stragglers);
    }
    report.learn_expiries(&undone);
    // Only a fenced acquire can be worth another round at once.
    let unseeded_keys = fence_keys.as_ref().filter(|_| unseeded);
    let retry_now = fencing
        && fencing::retry_now(shared, unseeded_keys, &report, timing.per_node_timeout).await;
    Err(LostRound {
        rejection,
        report,
        retry_now,
    })
}

/// A won round: the lock's round, token, deadline and confirmed fencing token.
struct Won {
    round: Round,
    token: Token,
    deadline: Deadline,
    fencing_token: Option<u64>,
    through_queue: bool,
}

/// The acquire of a waiter that joined the lock's queue (`scripts::QUEUED_ACQUIRE`).
fn queued_request(key: &[u8], token: &Token, queue: &Queue) -> Request {
    let (keys, mut arguments) = queue.arguments();
    arguments.extend(queue.nonce_argument());
    Request::new(
        Operation::Acquire,
        Command::Script(&scripts::QUEUED_ACQUIRE),
        key,
        token,
        NodeOutcome::Granted,
    )
    .with_extra_keys(keys)
    .with_payload(arguments)
}

/// A reader's acquire (`scripts::ACQUIRE_READ`): its share in `readers`, refused by the
/// lock's holder or a live writer in the lock's queue (one queued before it, once it joined
/// the queue: `joined`, whose id, liveness and place it carries, with what a hand-over needs).
/// With fencing (`scripts::ACQUIRE_READ_FENCED`), the fence keys too: each grant names the
/// counter.
fn read_request(
    key: &[u8],
    token: &Token,
    readers: &[u8],
    fence_keys: Option<&resource::FenceKeys>,
    joined: Option<&Queue>,
) -> Request {
    let [queue, waiters] = resource::queue_keys(key);
    let mut keys = vec![readers.to_vec(), queue, waiters];
    let script = match fence_keys {
        Some(fence) => {
            keys.extend([fence.counter.clone(), fence.marker.clone()]);
            keys.extend(fence.legacy.clone());
            &scripts::ACQUIRE_READ_FENCED
        }
        None => &scripts::ACQUIRE_READ,
    };
    let arguments = match joined {
        Some(queue) => {
            let (_, mut arguments) = queue.arguments();
            arguments.extend(queue.hand_over_arguments());
            arguments
        }
        None => Vec::new(),
    };
    Request::new(
        Operation::Acquire,
        Command::Script(script),
        key,
        token,
        NodeOutcome::Granted,
    )
    .with_extra_keys(keys)
    .with_payload(arguments)
}
