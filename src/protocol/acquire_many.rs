//! Taking several resources as one lock: all or nothing on each master, one majority for the
//! whole set.
//!
//! Each master runs `scripts::ACQUIRE_MANY`: it sets every key of the set, or none when any
//! is taken. So a client never holds part of a set on a master, and two clients asking for
//! overlapping sets in different orders cannot deadlock: neither holds anything the other
//! waits for between rounds (a failed round gives back what it got on the other masters
//! before it waits). The verdict is a lock's: a majority of masters granted the whole set,
//! with validity left. The lock is then one [`Lock`](crate::Lock) whose keys are renewed and
//! released together (`scripts::EXTEND_MANY` renews them where every key is still ours,
//! `scripts::RELEASE_MANY` deletes them all and wakes the waiters of each).
//!
//! Waiting is by timed retries (never sleeping past the earliest expiry the masters reported):
//! a set does not queue on the masters as one lock's waiters do, and is not woken by releases.

use std::sync::Arc;
use std::time::Instant;

use crate::core::config::Timing;
use crate::core::report::{NodeOutcome, Report};
use crate::core::retry::RetryPolicy;
use crate::core::token::Token;
use crate::core::verdict::Rejection;
use crate::engine::request::{Command, Request};
use crate::engine::round::{Round, Wait};
use crate::errors::error::{Error, Operation};
use crate::protocol::acquire::Acquired;
use crate::protocol::between_rounds::give_up_or_wait;
use crate::protocol::cleanup::Cleanup;
use crate::protocol::release::Delete;
use crate::protocol::shared::Shared;
use crate::scripts;

/// The most resources one lock may hold: every key travels to every master on every acquire,
/// extend and release of the set.
pub const MAX_RESOURCES_PER_LOCK: usize = 64;

/// Takes every key of `keys` (the set's lock keys, validated, distinct, at least one) for
/// `timing`, retrying as `policy` says. `display` names the set in errors.
///
/// # Errors
/// As a lock's acquire: [`Error::Conflict`] (some resource of the set is held on too many
/// masters), [`Error::NoQuorum`], [`Error::ValidityExhausted`], with the last round's report.
///
/// # Cancel safety
/// Dropping the future mid-round gives back what the round got, in the background (tracked
/// for `RedLock::settle`); between rounds it leaves nothing behind.
pub(crate) async fn acquire_many(
    shared: &Arc<Shared>,
    keys: &[Vec<u8>],
    display: &[u8],
    timing: &Timing,
    policy: &RetryPolicy,
) -> Result<Acquired, Error> {
    let started = Instant::now();
    let deadline = policy.wait_limit().and_then(|w| started.checked_add(w));
    let mut attempts = 0u32;
    loop {
        attempts = attempts.saturating_add(1);
        let (rejection, report) = match round_for_all(shared, keys, timing).await {
            Ok((round, token)) => {
                return Ok(Acquired {
                    deadline: round.valid_until(timing),
                    key: keys.first().cloned().unwrap_or_default(),
                    token,
                    timing: *timing,
                    round,
                    attempts,
                    fencing_token: None,
                    waiter: None,
                });
            }
            Err(failed) => failed,
        };
        let delay = give_up_or_wait(
            shared,
            policy,
            (started, deadline),
            attempts,
            display,
            rejection,
            report,
        )?;
        tracing::debug!(attempts, ?delay, "multi-resource round failed, retrying");
        tokio::time::sleep(delay).await;
    }
}

/// One round: every master sets the whole set or none of it; won at a majority with validity
/// left, else everything it set is given back before it returns.
async fn round_for_all(
    shared: &Arc<Shared>,
    keys: &[Vec<u8>],
    timing: &Timing,
) -> Result<(Round, Token), (Rejection, Report)> {
    let token = Token::generate_about(shared.config.holder_info.as_deref());
    let (first, others) = keys
        .split_first()
        .ok_or((Rejection::Busy, Report::default()))?;
    let mut cleanup = Cleanup::arm(
        shared.clone(),
        first.clone(),
        token.clone(),
        timing.per_node_timeout,
        Delete::GiveBack {
            others: others.to_vec(),
            record: None,
        },
    );
    let request = Request::new(
        Operation::Acquire,
        Command::Script(&scripts::ACQUIRE_MANY),
        first,
        &token,
        NodeOutcome::Granted,
    )
    .with_extra_keys(others.to_vec())
    .with_number(timing.ttl_ms)
    .settled_nodes_only();
    let round = shared
        .fanout()
        .run(request, timing.per_node_timeout, Wait::UntilDecided)
        .await;
    cleanup.after(round.stragglers.clone());
    match round.won(timing) {
        Ok(_) => {
            cleanup.disarm();
            Ok((round, token))
        }
        Err(rejection) => {
            let _undone = cleanup.run().await;
            Err((rejection, round.report))
        }
    }
}
