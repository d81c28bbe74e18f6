//! The fencing steps of an acquire, between its round and its verdict:
//!
//! 1. the round is the fenced script (`ACQUIRE_FENCED`), which also raises the slot's fence
//!    counter and answers with it;
//! 2. a won round is confirmed (`crate::protocol::confirm`) before its token is usable;
//! 3. masters that answered "not seeded since they started" are re-seeded
//!    (`crate::protocol::reseed`): in the background after a win, at once after a loss, which
//!    is then tried again without counting as an attempt.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::core::config::Timing;
use crate::core::report::{NodeOutcome, Report};
use crate::core::resource::FenceKeys;
use crate::core::token::Token;
use crate::core::verdict::Rejection;
use crate::engine::request::{Command, Request};
use crate::engine::round::Round;
use crate::errors::error::Operation;
use crate::errors::node_error::NodeError;
use crate::protocol::confirm::confirm_fence;
use crate::protocol::queue::Queue;
use crate::protocol::reseed::{self, Reseeded};
use crate::protocol::shared::Shared;
use crate::scripts;

/// The fenced acquire of `key` under `token`: the lock key, then the slot's counter and
/// marker (and the per-resource counter).
pub(crate) fn acquire_request(key: &[u8], token: &Token, keys: &FenceKeys) -> Request {
    Request::new(
        Operation::Acquire,
        Command::Script(&scripts::ACQUIRE_FENCED),
        key,
        token,
        NodeOutcome::Granted,
    )
    .with_extra_keys(taking_keys(keys).collect())
}

/// What a fenced acquire names besides the lock (and the queue): the slot's counter, its
/// marker, and the per-resource counter it folds in.
fn taking_keys(keys: &FenceKeys) -> impl Iterator<Item = Vec<u8>> + '_ {
    [keys.counter.clone(), keys.marker.clone()]
        .into_iter()
        .chain(keys.legacy.clone())
}

/// The fenced acquire of a waiter that joined the lock's queue
/// (`scripts::QUEUED_ACQUIRE_FENCED`): the queue's keys, then the fence keys; the waiter's
/// arguments, then its registration's nonce (empty when it has none).
pub(crate) fn queued_acquire_request(
    key: &[u8],
    token: &Token,
    keys: &FenceKeys,
    queue: &Queue,
) -> Request {
    let (mut extra, mut arguments) = queue.arguments();
    arguments.push(queue.nonce_argument().unwrap_or_default());
    extra.extend(taking_keys(keys));
    Request::new(
        Operation::Acquire,
        Command::Script(&scripts::QUEUED_ACQUIRE_FENCED),
        key,
        token,
        NodeOutcome::Granted,
    )
    .with_extra_keys(extra)
    .with_payload(arguments)
}

/// Whether a master answered that its counter was not seeded since it started. Then the
/// sweeper looks at every master's record too: a master that restarted or failed over is
/// re-seeded on every slot, not only this one. (The scripts read each server's term
/// themselves: no reconnect is needed first.)
pub(crate) fn found_unseeded(shared: &Shared, round: &Round) -> bool {
    let unseeded = round
        .report
        .iter()
        .any(|r| matches!(r.outcome(), NodeOutcome::Failed(NodeError::Unseeded)));
    if unseeded {
        shared.fence_sweep.wake();
    }
    unseeded
}

/// Confirms the fence of a won round: its token.
///
/// # Errors
/// The confirm's rejection and report; an outage when the round carried no counter, which
/// the fenced script never does.
///
/// # Cancel safety
/// As `confirm_fence`.
pub(crate) async fn confirm(
    shared: &Shared,
    (key, token, reader_of): (&[u8], &Token, Option<&[u8]>),
    keys: &FenceKeys,
    won: &Round,
    timing: &Timing,
) -> Result<u64, (Rejection, Report)> {
    let Some(fence) = won.fence else {
        return Err((Rejection::Outage, Report::default()));
    };
    confirm_fence(shared, (key, reader_of), keys, token, fence, won, timing).await?;
    Ok(fence)
}

/// After a win: re-seeds in the background what answered "unseeded", before the decision
/// (`unseeded`) or after it (a restarted master is often the slow one).
pub(crate) fn reseed_after_win(
    shared: &Arc<Shared>,
    keys: FenceKeys,
    unseeded: bool,
    won: &Round,
    timeout: Duration,
) {
    let late = won.stragglers.clone();
    if !unseeded && late.is_none() {
        return;
    }
    let shared = shared.clone();
    crate::core::telemetry::task_spawned();
    tokio::spawn(async move {
        let late_unseeded = match late {
            Some(stragglers) => stragglers.unseeded().await,
            None => false,
        };
        if unseeded || late_unseeded {
            reseeding(&shared, &keys, timeout).await;
        }
    });
}

/// After a loss: whether to try again at once, without counting an attempt or waiting.
/// - With masters `unseeded` (`keys` given): re-seeds them now; yes once a majority is
///   seeded (by this re-seed or another client's).
/// - Otherwise: yes when a re-seed by another acquire of this slot fenced off our
///   confirmation, no fault of the masters.
///
/// # Cancel safety
/// Dropped part-way, a re-seed stops between its rounds; the next one starts over.
pub(crate) async fn retry_now(
    shared: &Shared,
    unseeded: Option<&FenceKeys>,
    report: &Report,
    timeout: Duration,
) -> bool {
    match unseeded {
        Some(keys) => reseeding(shared, keys, timeout).await.marked() >= shared.quorum(),
        None => report.iter().any(|r| {
            matches!(
                r.outcome(),
                NodeOutcome::Failed(NodeError::SeededSinceGrant)
            )
        }),
    }
}

/// The re-seed of `keys`' slot, type-erased. An acquire's future holds it, and it reaches deep
/// into the voters (connections, a cluster's slot map): left in the acquire's type, an
/// application that spawns an acquire (`tokio::spawn` checks `Send` through every nested
/// future) exceeds the compiler's default recursion limit. Boxed once, on this rare path, so
/// the common path stays unboxed.
fn reseeding<'a>(
    shared: &'a Shared,
    keys: &'a FenceKeys,
    timeout: Duration,
) -> Pin<Box<dyn Future<Output = Reseeded> + Send + 'a>> {
    Box::pin(reseed::reseed(&shared.nodes, keys, timeout))
}
