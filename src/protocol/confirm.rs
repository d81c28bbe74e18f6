//! The fencing confirm: the second round of a fenced acquire.

use crate::core::config::Timing;
use crate::core::quorum::Vote;
use crate::core::report::{NodeOutcome, Report};
use crate::core::resource::FenceKeys;
use crate::core::token::Token;
use crate::core::verdict::{Rejection, RoundKind};
use crate::engine::request::{Command, Request};
use crate::engine::round::{Round, Wait};
use crate::errors::error::Operation;
use crate::protocol::shared::Shared;
use crate::scripts;

/// On every node that still holds our key (a reader's, `reader_of`: our share in the readers'
/// set), raises the fence counter to at least `fence`; the
/// token is usable only once a majority *of the masters that granted before the decision*
/// confirmed it, and only with validity left, counted from the start of the first round.
///
/// A node whose grant landed after the decision holds our key too, but its counter never
/// entered the token: its confirmation does not count (`NodeOutcome::LateGrant`). Counting it
/// would let two holders share a token (`DESIGN.md` §5; checked by `crate::model`).
///
/// # Cancel safety
/// Dropping the future stops waiting; the acquire's `Cleanup` (held by the caller) deletes the
/// keys the first round set.
pub(crate) async fn confirm_fence(
    shared: &Shared,
    (key, reader_of): (&[u8], Option<&[u8]>),
    keys: &FenceKeys,
    token: &Token,
    fence: u64,
    acquired: &Round,
    timing: &Timing,
) -> Result<(), (Rejection, Report)> {
    let granted = acquired.report.votes();
    // A reader's confirmation looks for its share in the readers' set, not the writer key.
    let (script, key) = match reader_of {
        Some(readers) => (&scripts::CONFIRM_FENCE_READ, readers),
        None => (&scripts::CONFIRM_FENCE, key),
    };
    let request = Request::new(
        Operation::Acquire,
        Command::Script(script),
        key,
        token,
        NodeOutcome::FenceConfirmed,
    )
    .with_extra_keys(vec![keys.counter.clone(), keys.marker.clone()])
    .with_number(fence)
    // Only the masters that granted before the decision: their counters are in the token.
    .counting_only(granted.iter().map(|v| *v == Vote::Yes).collect())
    .with_epochs(
        acquired
            .grants
            .iter()
            .map(|grant| grant.map(|g| g.epoch))
            .collect(),
    );
    let confirm = shared
        .fanout()
        .run(request, timing.per_node_timeout, Wait::UntilDecided)
        .await;
    let elapsed = confirm.decided.saturating_duration_since(acquired.start);
    confirm
        .judge(
            RoundKind::Renew,
            timing.validity_after(elapsed).is_some(),
            Some(&granted),
        )
        .map_err(|rejection| (rejection, confirm.report))
}
