//! Extend: renewing a held lock's ttl on every node.

use crate::core::config::Timing;
use crate::core::report::{NodeOutcome, Report};
use crate::core::token::Token;
use crate::core::verdict::Rejection;
use crate::engine::request::{Command, Native, Request};
use crate::engine::round::{Round, Stragglers, Wait};
use crate::errors::error::Operation;
use crate::errors::node_error::NodeError;
use crate::protocol::shared::Shared;
use crate::scripts;

/// Renews `keys` (the lock's key and the keys that live as long as it: an election's leader
/// info, or the rest of a multi-resource lock's set, all of which must hold the token) to
/// `timing.ttl` on every node that still holds `token`. `granted` is the report of the acquire
/// or extend that last granted the lock: nodes that never took our key then get it re-added
/// (while the lock is valid, which the caller checked; never a set's); a node that did and
/// lost it is evidence for the verdict, never re-added.
///
/// On a node where a request of an earlier round of this lock is still running (`after`),
/// the renewal is sent once that request is ordered on the node's connection, so the
/// renewal's own stragglers, which the lock's release is then ordered behind, come after it:
/// a re-add can never land behind the release's delete.
///
/// Returns the round whatever the verdict: its stragglers outlive a rejection too.
///
/// # Cancel safety
/// Dropping the future stops waiting: a renewal that still lands only keeps our own key
/// longer, which the lock's release deletes.
pub(crate) async fn extend(
    shared: &Shared,
    keys: Renewal<'_>,
    granted: &Report,
    timing: &Timing,
    after: Option<&Stragglers>,
) -> (Round, Result<(), Rejection>) {
    let Renewal {
        key,
        token,
        companions,
        set,
        permits,
        read_share_in,
        natively,
    } = keys;
    let readd_on: Vec<bool> = granted
        .iter()
        .map(|r| !set && never_took_our_key(r.outcome()))
        .collect();
    // While our key is not on every node, wait for every answer (each bounded by the per-node
    // timeout): a node re-added after an early decision would stay out of the report, and so
    // out of the nodes that count for the next renewal.
    let wait = if readd_on.contains(&true) {
        Wait::ForAll
    } else {
        Wait::UntilDecided
    };
    let mut companions = companions;
    let script = match (set, permits, read_share_in) {
        (_, _, Some(readers)) => {
            companions = vec![readers.to_vec()];
            &scripts::EXTEND_READ
        }
        (true, _, None) => &scripts::EXTEND_MANY,
        (false, Some(_), None) => &scripts::EXTEND_PERMIT,
        (false, None, None) => &scripts::EXTEND,
    };
    // The lock key alone: the server's own compare-and-renew does the whole job where it has
    // one (a missing key, another owner's or a marked one fails it, and the script follows).
    let native = natively && companions.is_empty() && !set && permits.is_none();
    let request = Request::new(
        Operation::Extend,
        Command::Script(script),
        key,
        token,
        NodeOutcome::Extended,
    );
    let request = if native {
        request.natively(Native::Renew)
    } else {
        request
    };
    let request = request
        .with_extra_keys(companions)
        .with_number(timing.ttl_ms)
        .with_payload(
            permits
                .map(|p| p.to_string().into_bytes())
                .into_iter()
                .collect(),
        )
        .readding_on(readd_on);
    let round = shared
        .fanout()
        .run_behind(request, timing.per_node_timeout, wait, after, || {})
        .await;
    let verdict = round.renewed(timing, &granted.votes());
    (round, verdict)
}

/// What an extend renews: the lock's key and token, and the keys renewed with it.
pub(crate) struct Renewal<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) token: &'a Token,
    /// Keys renewed with the lock's: an election's leader info (`set: false`), or the other
    /// keys of a multi-resource lock (`set: true`).
    pub(crate) companions: Vec<Vec<u8>>,
    /// The companions are the rest of a multi-resource lock's set: every key must hold the
    /// token (`scripts::EXTEND_MANY`), and nothing is re-added.
    pub(crate) set: bool,
    /// A semaphore's permit, of this many permits: the one companion is the semaphore's
    /// record of that number, kept beside the key (`scripts::EXTEND_PERMIT`).
    pub(crate) permits: Option<u32>,
    /// A read lock's share, in this readers' set (`scripts::EXTEND_READ`).
    pub(crate) read_share_in: Option<&'a [u8]>,
    /// The server's own compare-and-renew may be tried first (the client uses native
    /// commands, and nobody is known to wait for the lock: a marked value would miss it).
    pub(crate) natively: bool,
}

/// Whether a node's last answer says for certain that our key never got there: another
/// owner's key or no key, or a request that was refused or never sent. Only there does a
/// renewal re-add the key: a node that timed out or did not answer before the decision may
/// have set it, and if it lost it since, that loss is evidence, not a gap to fill.
fn never_took_our_key(outcome: &NodeOutcome) -> bool {
    match outcome {
        NodeOutcome::HeldByOther { .. }
        | NodeOutcome::Missing
        | NodeOutcome::OtherPermit(_)
        | NodeOutcome::PermitCountDiffers(_) => true,
        NodeOutcome::Failed(
            NodeError::Unreachable(_)
            | NodeError::RecentlyRestarted { .. }
            | NodeError::AuthenticationFailed(_)
            | NodeError::NotRedis(_),
        ) => true,
        NodeOutcome::Failed(NodeError::Redis(err)) => {
            !crate::voters::server_link::breaks_connection(err)
        }
        _ => false,
    }
}
