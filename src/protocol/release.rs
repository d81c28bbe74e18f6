//! Release: compare-and-delete of one lock's key on every node.

use std::sync::Arc;
use std::time::Duration;

use crate::core::permit_keys::PermitKeys;
use crate::core::report::{NodeOutcome, Report};
use crate::core::resource::{self, FenceKeys, KeyLayout};
use crate::core::token::Token;
use crate::core::verdict::{Rejection, RoundKind};
use crate::engine::request::{Command, InParts, Native, Request};
use crate::engine::round::{Round, Stragglers, Wait};
use crate::errors::error::Operation;
use crate::protocol::shared::Shared;
use crate::scripts;

/// What a release is judged against.
pub(crate) struct Judged<'a> {
    /// The report of the acquire or extend that last granted the lock.
    pub(crate) granted: &'a Report,
    /// The lock's local deadline had passed when the release began (then it is gone,
    /// whatever the answers).
    pub(crate) expired_before: bool,
}

/// Releases a held lock (`delete`: [`Delete::Release`], or [`Delete::ReleaseMany`] for a
/// multi-resource lock): [`release_everywhere`] with the waiters woken, judged as `judged`
/// says.
///
/// # Cancel safety
/// As [`release_everywhere`]; the lock's `Drop` releases again in the background.
pub(crate) async fn release(
    shared: &Shared,
    key: &[u8],
    token: &Token,
    per_node_timeout: Duration,
    after: Option<&Stragglers>,
    judged: Judged<'_>,
    delete: &Delete,
) -> Result<Report, (Rejection, Report)> {
    let Judged {
        granted,
        expired_before,
    } = judged;
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
    let round = delete_everywhere(shared, key, token, per_node_timeout, after, delete, wait).await;
    match round.judge(RoundKind::Release, !expired_before, Some(&granted)) {
        Ok(()) => Ok(round.report),
        Err(rejection) => Err((rejection, round.report)),
    }
}

/// What a compare-and-delete does besides deleting.
#[derive(Debug, Clone)]
pub(crate) enum Delete {
    /// A release: hands the lock to the first live waiter queued on the node (else deletes
    /// it) and publishes on the release channel (`scripts::RELEASE`). With `natively`, the
    /// server's own compare-and-delete first where it has one, for a markable token that
    /// nobody is known to wait for (`DESIGN.md` §3). With `waiter` (a lock that came through
    /// the queue), that waiter also leaves the queue on every node. With `fence` (a fenced
    /// lock's), a fenced waiter is handed its own lock, fenced, instead of a reservation.
    Release {
        natively: bool,
        waiter: Option<String>,
        fence: Option<FenceKeys>,
    },
    /// The cleanup of a failed round: deletes silently.
    Silent,
    /// The cleanup of a failed round whose acquire waits on: deletes silently and joins the
    /// lock's queue (`scripts::UNDO_AND_QUEUE`), with the queue's keys and the waiter's id
    /// and liveness, and its registration for a hand-off: ttl (`f<ttl>`, a fenced waiter's)
    /// and nonce.
    SilentAndQueue {
        keys: Vec<Vec<u8>>,
        arguments: Vec<Vec<u8>>,
        registration: Vec<Vec<u8>>,
    },
    /// A reader's release of its share (`scripts::RELEASE_READ`): the last share's hands the
    /// lock over as a release does; or, `silent`, the cleanup of a failed read round, which
    /// leaves a bare readers' mark to queued readers (passing it on to a writer at the head),
    /// and with `queue` (the reader's id, liveness and place: its acquire waits on) joins the
    /// lock's queue as a reader and hands over a lock it finds free.
    ReleaseRead {
        readers: Vec<u8>,
        silent: bool,
        queue: Option<Vec<Vec<u8>>>,
    },
    /// The release of a multi-resource lock: every key of the set (the delete's key and
    /// these), compare-and-delete on the first, publishing on each key's channel
    /// (`scripts::RELEASE_MANY`).
    ReleaseMany { others: Vec<Vec<u8>> },
    /// A failed round over several keys (a permit round, a multi-resource acquire): deletes
    /// whichever of the keys (the delete's key and these) holds the token, and publishes on
    /// the first key's channel when it deleted any (`scripts::GIVE_BACK_PERMITS`). With
    /// `record` (a semaphore's record of its number of permits, when the keys are all of its
    /// permits), deletes the record too once none of them is held.
    GiveBack {
        others: Vec<Vec<u8>>,
        record: Option<Vec<u8>>,
    },
    /// The release of a semaphore's permit: compare-and-delete, the semaphore's record of its
    /// number of permits deleted once none is held, handed to the first live waiter of the
    /// semaphore's queue (or published on the semaphore's channel when none is)
    /// (`scripts::RELEASE_PERMIT`).
    ReleasePermit(Arc<PermitKeys>),
    /// The cleanup of a failed permit round whose acquire waits on (`scripts::GIVE_BACK_AND_QUEUE`):
    /// joins the semaphore's queue, with the queue's keys and the waiter's id, liveness and
    /// place, and silently deletes each permit the round was granted (the delete's key and
    /// `others`); the record goes once no permit is held.
    GiveBackAndQueue {
        others: Vec<Vec<u8>>,
        record: Vec<u8>,
        keys: Vec<Vec<u8>>,
        arguments: Vec<Vec<u8>>,
    },
}

/// Compare-and-delete of `key` on every node (a failed acquire's cleanup), waiting for every
/// answer or timeout but a suspect node's, whose delete goes on in the background
/// (`Wait::ForAllButSuspects`); on a node where an earlier request is still running (`after`), only once
/// it is ordered on its connection.
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
    delete: &Delete,
) -> Round {
    delete_everywhere(
        shared,
        key,
        token,
        per_node_timeout,
        after,
        delete,
        Wait::ForAllButSuspects,
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
    delete: &Delete,
    wait: Wait,
) -> Round {
    let release_id = token.release_id();
    // The lock's release channel, made once: the scripts publish on it, and this client's own
    // waiters are woken on it. (A silent delete uses none.)
    let channel = match delete {
        Delete::Silent | Delete::ReleaseRead { silent: true, .. } => Vec::new(),
        _ => resource::release_channel(key),
    };
    let compare_and_delete = |script: &'static scripts::LuaScript| {
        Request::new(
            Operation::Release,
            Command::Script(script),
            key,
            token,
            NodeOutcome::Released,
        )
    };
    let request = match delete {
        // Hand the lock to the first live waiter queued on each node, else delete it; either
        // way publish.
        // With the shared layout nobody queues, and the keys beside the lock's are not ours
        // to touch (they could be another client's): no queue keys, so nothing is handed over.
        // A markable token nobody marked: nobody waits for this release on the node, so the
        // server's own compare-and-delete does the whole job where it has one (`DESIGN.md`
        // §3); a marked one fails it and the script follows.
        Delete::Release {
            natively,
            waiter,
            fence,
        } => {
            let mut arguments =
                hand_over_arguments_on(channel.clone(), &release_id, per_node_timeout);
            arguments.extend(waiter.as_ref().map(|id| id.clone().into_bytes()));
            let request = compare_and_delete(&scripts::RELEASE)
                .with_extra_keys(match shared.config.key_layout {
                    KeyLayout::Tagged => {
                        let mut keys: Vec<Vec<u8>> = resource::queue_keys(key).into();
                        if let Some(fence) = fence {
                            keys.extend([fence.counter.clone(), fence.marker.clone()]);
                            keys.extend(fence.legacy.clone());
                        }
                        keys
                    }
                    KeyLayout::Shared => Vec::new(),
                })
                .in_parts(InParts::LockKeyAlone)
                .with_payload(arguments);
            // A waiter of this client marked the lock: the script, at once, so the waiter's
            // round, sent when this release is queued, finds it handed over on each node.
            let waited_on_here = shared.releases.has_waiters(&channel);
            if *natively && token.is_markable() && !waited_on_here {
                request.natively(Native::Release)
            } else {
                request
            }
        }
        // Two empty arguments and no queue: publish nothing, hand nothing over.
        Delete::Silent => {
            compare_and_delete(&scripts::RELEASE).with_payload(vec![Vec::new(), Vec::new()])
        }
        // The waiter's id, liveness and place, then what a hand-over needs where the key is
        // already gone, then the waiter's registration for a hand-off.
        Delete::SilentAndQueue {
            keys,
            arguments,
            registration,
        } => compare_and_delete(&scripts::UNDO_AND_QUEUE)
            .with_extra_keys(keys.clone())
            .in_parts(InParts::LockKeyAlone)
            .with_payload(
                arguments
                    .iter()
                    .cloned()
                    .chain(hand_over_arguments_on(
                        channel.clone(),
                        &release_id,
                        per_node_timeout,
                    ))
                    .chain(registration.iter().cloned())
                    .collect(),
            ),
        // The release id, then one channel per key.
        Delete::ReleaseMany { others } => compare_and_delete(&scripts::RELEASE_MANY)
            .with_extra_keys(others.clone())
            .in_parts(InParts::EachKey {
                per_key_payload: Some(1),
            })
            .with_payload(
                std::iter::once(release_id.as_bytes().to_vec())
                    .chain(
                        std::iter::once(key)
                            .chain(others.iter().map(Vec::as_slice))
                            .map(resource::release_channel),
                    )
                    .collect(),
            ),
        Delete::GiveBack { others, record } => compare_and_delete(&scripts::GIVE_BACK_PERMITS)
            .with_extra_keys(others.iter().chain(record).cloned().collect())
            .in_parts(InParts::EachKey {
                per_key_payload: None,
            })
            .with_payload(
                [channel.clone(), release_id.as_bytes().to_vec()]
                    .into_iter()
                    .chain(record.as_ref().map(|_| b"1".to_vec()))
                    .collect(),
            ),
        // The readers' set and the lock's queue; the channel (empty: a cleanup's), release id
        // and reservation; the channel a cleanup's hand-over publishes on; a waiting reader's
        // id, liveness and place.
        Delete::ReleaseRead {
            readers,
            queue: joining,
            ..
        } => {
            let [queue, waiters] = resource::queue_keys(key);
            let mut arguments =
                hand_over_arguments_on(channel.clone(), &release_id, per_node_timeout);
            arguments.push(resource::release_channel(key));
            arguments.extend(joining.iter().flatten().cloned());
            compare_and_delete(&scripts::RELEASE_READ)
                .with_extra_keys(vec![readers.clone(), queue, waiters])
                .with_payload(arguments)
        }
        // The record, every permit, then the semaphore's queue (a semaphore exists only under
        // the tagged layout), and what a hand-over needs.
        Delete::ReleasePermit(permits) => compare_and_delete(&scripts::RELEASE_PERMIT)
            .with_extra_keys(
                std::iter::once(&permits.record)
                    .chain(&permits.keys)
                    .cloned()
                    .chain(resource::queue_keys(&permits.queue_base))
                    .collect(),
            )
            .in_parts(InParts::LockKeyAlone)
            .with_payload(hand_over_arguments_on(
                channel.clone(),
                &release_id,
                per_node_timeout,
            )),
        // Every other permit, the record and the queue; the waiter's id, liveness and place.
        Delete::GiveBackAndQueue {
            others,
            record,
            keys,
            arguments,
        } => compare_and_delete(&scripts::GIVE_BACK_AND_QUEUE)
            .with_extra_keys(
                others
                    .iter()
                    .chain(std::iter::once(record))
                    .chain(keys)
                    .cloned()
                    .collect(),
            )
            .with_payload(arguments.clone()),
    };
    // Our own first queued waiter need not wait for the message to come back from a node, nor
    // even for the deletes to be done: its round shares our connections, so each node runs
    // our release first. If a node handed the lock to a waiter of another process instead,
    // ours loses one round there and waits on; the nodes' messages wake the waiter each named.
    let wakes = matches!(
        delete,
        Delete::Release { .. }
            | Delete::ReleasePermit(_)
            | Delete::ReleaseMany { .. }
            | Delete::ReleaseRead { silent: false, .. }
    );
    let other_channels: Vec<Vec<u8>> = match delete {
        Delete::ReleaseMany { others } => others
            .iter()
            .map(|other| resource::release_channel(other))
            .collect(),
        _ => Vec::new(),
    };
    shared
        .fanout()
        .run_behind(request, per_node_timeout, wait, after, || {
            if wakes {
                shared.releases.released(&channel, release_id.as_bytes());
            }
            for other in &other_channels {
                shared.releases.released(other, release_id.as_bytes());
            }
        })
        .await
}

/// The arguments after the first of a script that hands the lock over (`scripts/lua/hand_over.lua`,
/// in `RELEASE` and `DEQUEUE`): the release channel, the release id the message carries, and
/// the reservation in ms.
pub(crate) fn hand_over_arguments(
    key: &[u8],
    release_id: &str,
    per_node_timeout: Duration,
) -> Vec<Vec<u8>> {
    hand_over_arguments_on(resource::release_channel(key), release_id, per_node_timeout)
}

/// [`hand_over_arguments`] with the lock's release channel already made.
pub(crate) fn hand_over_arguments_on(
    channel: Vec<u8>,
    release_id: &str,
    per_node_timeout: Duration,
) -> Vec<Vec<u8>> {
    let reservation = u64::try_from(reservation(per_node_timeout).as_millis()).unwrap_or(u64::MAX);
    vec![
        channel,
        release_id.as_bytes().to_vec(),
        reservation.to_string().into_bytes(),
    ]
}

/// How long a release keeps the lock reserved for the waiter it hands it to: time for the
/// waiter to hear the message and run one round. Should the waiter be gone, this is how long
/// the lock stays idle: twice the per-node timeout, at least 20 ms.
fn reservation(per_node_timeout: Duration) -> Duration {
    per_node_timeout
        .saturating_mul(2)
        .max(Duration::from_millis(20))
}
