//! Release: compare-and-delete of one lock's key on every node.

use std::time::Duration;

use crate::error::Operation;
use crate::report::{NodeOutcome, Report};
use crate::request::{Command, Request};
use crate::resource;
use crate::round::{self, Round, Stragglers, Wait};
use crate::scripts;
use crate::shared::Shared;
use crate::token::Token;
use crate::verdict::{Rejection, RoundKind};

/// Releases a held lock: [`release_everywhere`] with the waiters woken, judged against
/// `granted`, the report of the acquire or extend that last granted it. `expired_before`: the
/// lock's local deadline had passed when the release began (then it is gone, whatever the
/// answers).
///
/// # Cancel safety
/// As [`release_everywhere`]; the lock's `Drop` releases again in the background.
pub(crate) async fn release(
    shared: &Shared,
    key: &[u8],
    token: &Token,
    per_node_timeout: Duration,
    after: Option<&Stragglers>,
    granted: &Report,
    expired_before: bool,
) -> Result<Report, (Rejection, Report)> {
    let granted = granted.votes();
    // Decided as soon as the remaining answers cannot change the verdict: usually at the
    // majority, so one slow or hung master costs a release nothing. A release that began
    // after the deadline is `Expired` whatever the answers: it waits for them all (but a
    // suspect node's), so its report shows who holds the lock now.
    let wait = if expired_before {
        Wait::ForAll
    } else {
        Wait::UntilSettled {
            kind: RoundKind::Release,
            validity_left: true,
            granted: Some(granted.clone()),
        }
    };
    let round = delete_everywhere(shared, key, token, per_node_timeout, after, true, wait).await;
    match round.judge(RoundKind::Release, !expired_before, Some(&granted)) {
        Ok(()) => Ok(round.report),
        Err(rejection) => Err((rejection, round.report)),
    }
}

/// Compare-and-delete of `key` on every node, waiting for every answer or timeout (but a
/// suspect node's); on a node where an earlier request is still running (`after`), only once
/// it is ordered on its connection. With `wake_waiters`, each delete publishes on the release
/// channel (a real release); without, it is silent (the cleanup of a failed acquire).
///
/// # Cancel safety
/// A delete whose caller stopped waiting is still delivered in the background (see the
/// engine's `deliver_anyway`); dropping this future before the requests are sent sends nothing,
/// so callers that must not leave a key behind hold a `Cleanup` instead.
pub(crate) async fn release_everywhere(
    shared: &Shared,
    key: &[u8],
    token: &Token,
    per_node_timeout: Duration,
    after: Option<&Stragglers>,
    wake_waiters: bool,
) -> Round {
    let wait = Wait::ForAll;
    delete_everywhere(
        shared,
        key,
        token,
        per_node_timeout,
        after,
        wake_waiters,
        wait,
    )
    .await
}

/// The compare-and-delete round, waiting as `wait` says; the deletes not waited for go on in
/// the background until their connections take them.
async fn delete_everywhere(
    shared: &Shared,
    key: &[u8],
    token: &Token,
    per_node_timeout: Duration,
    after: Option<&Stragglers>,
    wake_waiters: bool,
    wait: Wait,
) -> Round {
    // The channel and the release id, or two empty arguments: publish nothing.
    let (channel, release_id) = if wake_waiters {
        (
            resource::release_channel(key),
            token.release_id().into_bytes(),
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let request = Request::new(
        Operation::Release,
        Command::Script(&scripts::RELEASE),
        key,
        token,
        NodeOutcome::Released,
    )
    .with_payload(vec![channel.clone(), release_id.clone()]);
    // Our own waiters need not wait for the message to come back from a node, nor even for
    // the deletes to be done: their SETs share our connections, so each node runs our delete
    // first.
    round::run_then(
        &shared.nodes,
        &shared.background,
        request,
        per_node_timeout,
        wait,
        after,
        || {
            if wake_waiters {
                shared.releases.released(&channel, &release_id);
            }
        },
    )
    .await
}
