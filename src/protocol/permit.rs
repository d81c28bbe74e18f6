//! Taking one permit of a counting semaphore: P permits, each a lock of its own.
//!
//! Why not one count per master (a sorted set of holders, capped at P on each master, a
//! permit granted by a majority of masters)? Because majorities of different holders need
//! not meet on one master: with five masters and two permits, holders A {1,2,3}, B {1,2,4} and
//! C {3,4,5} each have a majority, and no master ever had more than two holders — three
//! holders of two permits. Capped counts over majority quorums are safe only when
//! (P + 1) × quorum > N × P, which for N = 5 already fails at P = 2.
//!
//! So permit `i` is the lock `prefix{name}:permit:<i>`, and a holder of permit `i` is trusted
//! only when a majority of masters granted it *that* key, with validity left, by the same
//! rules as any lock: at most one valid holder per permit, so at most P holders. One round
//! asks every master for the first free permit in an order of the client's
//! (`scripts::ACQUIRE_PERMIT`), starting at a random permit so that concurrent acquires
//! spread over the free permits instead of colliding on the first. Masters that agree on who
//! holds what grant the same permit; when they disagree (a grant landed on some masters
//! only), the permit a majority granted wins, the other grants are given back, and with no
//! such permit the round fails and gives everything back (`scripts::GIVE_BACK_PERMITS`).
//! Grants of different permits are never added up: that is the mistake above.
//!
//! A permit, once taken, is a [`Lock`](crate::Lock) on its key: extend, lease and release
//! are the lock's. Waiters queue as a lock's do, in one queue per semaphore
//! (`crate::protocol::queue`): a release hands its permit to the first live waiter, whose next
//! round takes it (`scripts::QUEUED_ACQUIRE_PERMIT`); with nobody waiting it publishes on one
//! channel per semaphore (`resource::release_channel`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rand::RngExt;

use crate::core::config::Timing;
use crate::core::permit_keys::PermitKeys;
use crate::core::quorum::Tally;
use crate::core::report::{NodeOutcome, NodeReport, Report};
use crate::core::retry::RetryPolicy;
use crate::core::token::Token;
use crate::core::verdict::Rejection;
use crate::engine::classify::Grant;
use crate::engine::request::{Command, Request};
use crate::engine::round::{Round, Wait};
use crate::errors::error::{Error, Failure, Operation};
use crate::protocol::acquire::Acquired;
use crate::protocol::between_rounds::give_up_or_wait;
use crate::protocol::cleanup::Cleanup;
use crate::protocol::queue::Queue;
use crate::protocol::release::{Delete, hand_over_arguments_on};
use crate::protocol::shared::Shared;
use crate::scripts;

/// The most permits a semaphore may have: every acquire tries each permit on every master
/// (one `SET NX` each, in one script), so the cost of a full semaphore grows with it.
pub const MAX_PERMITS: u32 = 256;

/// A permit taken: the lock on its key, and its number.
pub(crate) struct TakenPermit {
    pub(crate) acquired: Acquired,
    pub(crate) index: u32,
}

/// Takes one of the permits (`permits`) of the semaphore `name` (already validated) for
/// `timing`, retrying as `policy` says and waking early when a permit is released.
///
/// # Errors
/// As a lock's acquire: [`Error::Conflict`] (every permit held), [`Error::NoQuorum`],
/// [`Error::ValidityExhausted`], with the last round's report.
///
/// # Cancel safety
/// Dropping the future mid-round gives back whatever the round was granted, in the background
/// (tracked for `RedLock::settle`); between rounds it leaves nothing behind.
pub(crate) async fn acquire_permit(
    shared: &Arc<Shared>,
    name: &[u8],
    permits: &Arc<PermitKeys>,
    timing: &Timing,
    policy: &RetryPolicy,
) -> Result<TakenPermit, Error> {
    let PermitKeys { keys, channel, .. } = &**permits;
    let started = Instant::now();
    let deadline = policy.wait_limit().and_then(|w| started.checked_add(w));
    let mut attempts = 0u32;
    let mut subscription = None;
    let mut split_retries_left = SPLIT_RETRIES;
    // Waiters queue for their turn as a lock's do (not an acquire that never waits; a
    // semaphore exists only under the tagged layout, whose keys are all ours).
    let queues = shared.config.wait_for_release && policy.attempts_limit() != Some(1);
    let mut queue: Option<Queue> = None;
    loop {
        attempts = attempts.saturating_add(1);
        // A last attempt does not join the queue: it would only have to leave it again.
        let will_retry = policy.attempts_limit().is_none_or(|max| attempts < max)
            && deadline.is_none_or(|d| Instant::now() < d);
        let queueing = queues.then_some((&mut queue, policy));
        let failed = match permit_round(shared, permits, timing, queueing, will_retry).await {
            Ok((round, token, index)) => {
                if let Some(queue) = queue.take() {
                    queue.leave_after(&round, &token);
                }
                let key = keys.get(index as usize).cloned().unwrap_or_default();
                let acquired = Acquired {
                    deadline: round.valid_until(timing),
                    key,
                    token,
                    timing: *timing,
                    round,
                    attempts,
                    fencing_token: None,
                    waiter: None,
                };
                return Ok(TakenPermit { acquired, index });
            }
            Err(failed) => failed,
        };
        if let Some(in_use_with) = failed.count_differs {
            if let Some(queue) = queue.take() {
                queue.leave().await;
            }
            let failure = Failure::new(
                Operation::Acquire,
                name,
                attempts,
                started.elapsed(),
                failed.report,
            );
            return Err(Error::PermitCountDiffers {
                permits: permits.permits(),
                in_use_with,
                failure: Box::new(failure),
            });
        }
        if failed.split && split_retries_left > 0 {
            tracing::debug!("masters granted different permits, trying again at once");
            split_retries_left -= 1;
            attempts -= 1;
            continue;
        }
        let delay = match give_up_or_wait(
            shared,
            policy,
            (started, deadline),
            attempts,
            name,
            failed.rejection,
            failed.report,
        ) {
            Ok(delay) => delay,
            Err(error) => {
                if let Some(queue) = queue.take() {
                    queue.leave().await;
                }
                return Err(error);
            }
        };
        if queue.is_none() && subscription.is_none() && shared.config.wait_for_release {
            subscription = Some(
                shared
                    .releases
                    .subscribe(channel.clone(), "", u64::MAX)
                    .await,
            );
        }
        let watch = queue
            .as_ref()
            .and_then(Queue::subscription)
            .or(subscription.as_ref());
        let woken = async {
            match watch {
                Some(watch) => watch.woken().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = woken => tracing::debug!("woken by a permit's release"),
        }
    }
}

/// A permit round that did not produce a permit.
struct LostPermitRound {
    rejection: Rejection,
    report: Report,
    /// Masters granted different permits (they disagreed about which were free): worth
    /// another round at once, everything having been given back.
    split: bool,
    /// Masters said the semaphore is in use with this many permits, not ours (the largest
    /// number named): no round can succeed.
    count_differs: Option<u32>,
}

/// How many times in one call a split round is tried again at once, without counting as an
/// attempt or waiting: a split means permits were free, so a new round (in a new random
/// order) usually wins; repeated splits are contention, and wait like it.
const SPLIT_RETRIES: u8 = 3;

/// One round: every master grants the first free permit in this round's order; the permit a
/// majority granted, with validity left, is ours, and every other grant is given back. With
/// `queue` (an acquire that may queue: its queue, made when first needed, and its policy), the
/// round is the queued acquire once the waiter has joined (it may also take a permit reserved
/// for it), and a failed round's give-back joins the queue (or keeps its place) unless this
/// was the last attempt (`will_retry`).
///
/// # Cancel safety
/// Dropped mid-round, its `Cleanup` gives back the grants in the background.
async fn permit_round(
    shared: &Arc<Shared>,
    permits: &Arc<PermitKeys>,
    timing: &Timing,
    mut queue: Option<(&mut Option<Queue>, &RetryPolicy)>,
    will_retry: bool,
) -> Result<(Round, Token, u32), LostPermitRound> {
    let keys = &permits.keys;
    let token = Token::generate_about(shared.config.holder_info.as_deref());
    let count = keys.len();
    let first = rand::rng().random_range(0..count);
    let order: Vec<usize> = (0..count).map(|i| (first + i) % count).collect();
    let ordered = |skip: Option<usize>| -> Vec<Vec<u8>> {
        order
            .iter()
            .filter(|i| Some(**i) != skip)
            .filter_map(|i| keys.get(*i).cloned())
            .collect()
    };
    let mut in_order = ordered(None);
    let head = in_order.remove(0);
    // A failed round gives back every permit, and with them the record of their number once
    // none is held.
    let mut cleanup = Cleanup::arm(
        shared.clone(),
        head.clone(),
        token.clone(),
        timing.per_node_timeout,
        Delete::GiveBack {
            others: in_order.clone(),
            record: Some(permits.record.clone()),
        },
    );
    let mut keys_and_record = in_order;
    keys_and_record.push(permits.record.clone());
    let numbers = order.iter().map(|i| i.to_string().into_bytes());
    // Behind the waiter's last give-back still running on a node (`Queue::prepare_round`).
    let behind = match queue.as_mut() {
        Some((Some(queue), _)) => queue.prepare_round(shared),
        _ => None,
    };
    let joined = queue
        .as_ref()
        .and_then(|(slot, _)| slot.as_ref())
        .filter(|q| q.is_joined());
    let (script, payload) = match joined {
        Some(queue) => {
            let (queue_keys, waiter) = queue.arguments();
            keys_and_record.extend(queue_keys);
            // A release id of its own: the token's would show part of a holder's token.
            let hand_over = hand_over_arguments_on(
                permits.channel.clone(),
                &Token::generate().release_id(),
                timing.per_node_timeout,
            );
            let payload = numbers.chain(waiter).chain(hand_over).collect();
            (&scripts::QUEUED_ACQUIRE_PERMIT, payload)
        }
        None => (&scripts::ACQUIRE_PERMIT, numbers.collect()),
    };
    let request = Request::new(
        Operation::Acquire,
        Command::Script(script),
        &head,
        &token,
        NodeOutcome::Granted,
    )
    .with_extra_keys(keys_and_record)
    .with_number(timing.ttl_ms)
    .with_payload(payload)
    .settled_nodes_only();
    // Decided on the permits' own counts: the engine's tally counts a grant of any permit,
    // and stopping at two grants of different permits would fail a round whose next answer
    // makes one of them a majority (a suspect master's only until a majority answered: then
    // a round only it could win is lost at once, `engine::heard`).
    let mut round = shared
        .fanout()
        .run_behind(
            request,
            timing.per_node_timeout,
            Wait::UntilPermitDecided,
            behind.as_ref(),
            || {},
        )
        .await;
    cleanup.after(round.stragglers.clone());
    let chosen = most_granted(&round, count);
    let (verdict, count_differs) = judge_for_permit(&mut round, chosen, timing);
    match (verdict, chosen) {
        (Ok(()), Some(index)) => {
            cleanup.disarm();
            let index = usize::try_from(index).unwrap_or(usize::MAX);
            give_back_other_grants(shared, &round, ordered(Some(index)), &token, timing);
            Ok((round, token, u32::try_from(index).unwrap_or(u32::MAX)))
        }
        (verdict, _) => {
            let rejection = verdict.err().unwrap_or(Rejection::Busy);
            // A waiter that will try again (not one whose semaphore counts other permits: it
            // gives up) joins the queue, or keeps its place, as it gives its grants back
            // silently. Whichever cleanup ran, a waiter that may have joined leaves behind it.
            if let Some((slot, policy)) = queue.as_mut()
                && will_retry
                && count_differs.is_none()
            {
                let queue =
                    slot.get_or_insert_with(|| Queue::for_permits(shared, permits, timing, policy));
                queue.join(shared, &permits.channel).await;
                cleanup.queue_as(queue);
            }
            let (_undone, still_running) = cleanup.run().await;
            if let (Some(queue), Some(stragglers)) =
                (queue.and_then(|(slot, _)| slot.as_mut()), still_running)
            {
                queue.leave_behind(stragglers);
            }
            let split = round
                .report
                .iter()
                .any(|line| matches!(line.outcome(), NodeOutcome::OtherPermit(_)));
            Err(LostPermitRound {
                rejection,
                report: round.report,
                split,
                count_differs,
            })
        }
    }
}

/// Makes `round` the round of the permit `chosen` (its report, its tally, no fence) and judges
/// it: won, or why not; and the largest number of permits a master's record named, when it
/// differs from ours (then the round is lost as busy).
fn judge_for_permit(
    round: &mut Round,
    chosen: Option<u32>,
    timing: &Timing,
) -> (Result<(), Rejection>, Option<u32>) {
    round.report = for_permit(round, chosen);
    let votes = round.report.votes();
    let mut tally = Tally::new(votes.len());
    for vote in &votes {
        tally.record(*vote);
    }
    // The round that becomes the permit's lock carries this permit's tally, never the
    // engine's sum over permits, and no fence (the grants' numbers are permits, not counters).
    round.tally = tally;
    round.fence = None;
    let count_differs = round
        .report
        .iter()
        .filter_map(|line| match line.outcome() {
            NodeOutcome::PermitCountDiffers(n) => Some(*n),
            _ => None,
        })
        .max();
    let verdict = match count_differs {
        Some(_) => Err(Rejection::Busy),
        None => round.won(timing).map(drop),
    };
    (verdict, count_differs)
}

/// Gives back, in the background, the grants of the permits `others` (the won permit left
/// out) that `round` made or may make yet: a request that timed out or is still running may
/// grant when its paused master wakes, so the give-back goes behind it on its connection.
/// Only where every master answered with our permit or a full semaphore is there nothing to
/// undo.
fn give_back_other_grants(
    shared: &Arc<Shared>,
    round: &Round,
    mut others: Vec<Vec<u8>>,
    token: &Token,
    timing: &Timing,
) {
    let unsure = round.report.iter().any(|line| {
        !matches!(
            line.outcome(),
            NodeOutcome::Granted | NodeOutcome::HeldByOther { .. }
        )
    });
    if !(unsure || round.stragglers.is_some()) || others.is_empty() {
        return;
    }
    let head = others.remove(0);
    let mut give_back = Cleanup::arm(
        shared.clone(),
        head,
        token.clone(),
        timing.per_node_timeout,
        Delete::GiveBack {
            others,
            record: None,
        },
    );
    give_back.after(round.stragglers.clone());
}

/// The permit most masters granted in `round` among the `permits` there are (the lowest
/// number among equals), if any.
fn most_granted(round: &Round, permits: usize) -> Option<u32> {
    let mut counts: HashMap<u64, usize> = HashMap::new();
    // A number no permit has (a server answering nonsense) is never chosen.
    let real = |grant: &&Grant| usize::try_from(grant.counter).is_ok_and(|n| n < permits);
    for grant in round.grants.iter().flatten().filter(real) {
        *counts.entry(grant.counter).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|(a, n), (b, m)| n.cmp(m).then(b.cmp(a)))
        .and_then(|(permit, _)| u32::try_from(permit).ok())
}

/// The round's report as seen by the lock on permit `chosen`: a master that granted another
/// permit did not grant this one ([`NodeOutcome::OtherPermit`], a refusal).
fn for_permit(round: &Round, chosen: Option<u32>) -> Report {
    let lines = round
        .report
        .iter()
        .zip(&round.grants)
        .map(|(line, grant)| match grant {
            Some(grant) if Some(grant.counter) != chosen.map(u64::from) => NodeReport::new(
                line.node().clone(),
                NodeOutcome::OtherPermit(u32::try_from(grant.counter).unwrap_or(u32::MAX)),
                line.latency(),
            ),
            _ => line.clone(),
        })
        .collect();
    Report::new(lines)
}
