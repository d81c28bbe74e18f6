//! What a round's answers mean: the one verdict every round ends in.
//!
//! Acquire, the fencing confirm, extend, release and the leader-info write all send one request
//! to every node and count the answers in a [`Tally`]. What the counts *mean* is decided here,
//! once, free of I/O, so it can be tested exhaustively and compiled into the model checker
//! (`crate::model`):
//!
//! | verdict | when | error |
//! |---|---|---|
//! | `Ok(())` | a majority did what we asked, with validity left | — |
//! | [`Rejection::TooLate`] | a majority did, but too late to leave any validity | `ValidityExhausted` |
//! | [`Rejection::Busy`] | acquire: enough nodes answered, too many hold another owner's key | `Conflict` |
//! | [`Rejection::Gone`] | a held lock: the answers *prove* it could have been lost, or a release began after the local deadline | `Expired` |
//! | [`Rejection::Outage`] | anything else: too many nodes failed to answer usefully | `NoQuorum` |
//!
//! The verdict is a `Result`, and a [`Rejection`] becomes the caller's [`Error`] in one place
//! ([`Rejection::error`]) once the call's [`Failure`] (attempts, elapsed time, report) is known.
//!
//! "Gone" is a safety alarm (the critical section may have overlapped another holder's), so
//! it needs evidence, never a guess. The evidence is a node that *granted* the lock (per the
//! lock's last acquire or extend) and now answers that our key is missing or someone else's:
//! the lock could have been lost when those nodes, together with every node that never
//! granted it, could form a majority for somebody else. That proof wins over a majority that
//! answers for us now: a renewal re-adds our key where it is missing on a node that never
//! granted it, which can make "now" look better than "all along". A timeout, an unreachable node, or a
//! node whose grant was never seen is no evidence: then the verdict is an outage (our keys
//! expire with their ttl), and a lease retries until its deadline. The other proof is our own
//! clock: a release that starts after the local deadline is `Gone`, since another client may
//! have taken the lock from then on.

use crate::core::quorum::{Decision, Tally, Vote};
use crate::errors::error::{Error, Failure};

/// Which kind of round is being judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoundKind {
    /// Taking a lock nobody (that we know of) holds for us.
    Acquire,
    /// Keeping a lock we were granted: the fencing confirm, extend, the leader-info write.
    Renew,
    /// Giving a lock back.
    Release,
}

/// Why a round did not do what it asked. See the module table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejection {
    TooLate,
    Busy,
    Gone,
    Outage,
}

/// What a round's answers mean: `Ok(())` when it won.
pub(crate) type Verdict = Result<(), Rejection>;

impl Rejection {
    /// The error the caller gets, carrying `failure`.
    pub(crate) fn error(self, failure: Failure) -> Error {
        let failure = Box::new(failure);
        match self {
            Self::TooLate => Error::ValidityExhausted(failure),
            Self::Busy => Error::Conflict(failure),
            Self::Gone => Error::Expired(failure),
            Self::Outage => Error::NoQuorum(failure),
        }
    }
}

/// Judges one round.
///
/// - `tally`: this round's votes.
/// - `validity_left`: acquire, confirm, extend: whether validity was left when the round was
///   decided (counted from the start of the round that set or renewed the key); release:
///   whether the lock's local deadline had not passed when the release began.
/// - `granted`: for a held lock, how each node last answered the acquire or extend that
///   granted it (`Vote::Yes` = it held our key then), in node order; `None` when unknown, in
///   which case every node counts as a grantor.
/// - `now`: this round's vote of each node, in node order (same length as `granted`).
pub(crate) fn judge(
    kind: RoundKind,
    tally: &Tally,
    validity_left: bool,
    granted: Option<&[Vote]>,
    now: &[Vote],
) -> Verdict {
    let held = matches!(kind, RoundKind::Renew | RoundKind::Release);
    match (kind, tally.decision()) {
        // Released after the local deadline: someone else may have held it since.
        (RoundKind::Release, _) if !validity_left => Err(Rejection::Gone),
        // Proof first: a majority now answering for us does not undo a window in which
        // another client could have held a majority (keys re-added by a renewal, or a
        // straggler grant, make "now" look better than "all along").
        _ if held && could_have_been_lost(tally.quorum(), granted, now) => Err(Rejection::Gone),
        (_, Decision::Won) if validity_left => Ok(()),
        (RoundKind::Acquire | RoundKind::Renew, Decision::Won) => Err(Rejection::TooLate),
        (RoundKind::Acquire, _) if tally.lost_to_outage() => Err(Rejection::Outage),
        (RoundKind::Acquire, _) => Err(Rejection::Busy),
        _ => Err(Rejection::Outage),
    }
}

/// The verdict of a round some of whose nodes have not answered yet (`None`), if it is the
/// same whatever they answer: then the round need not wait for them (a release decided at the
/// majority). `None` while the answers still out could change it.
///
/// Three completions suffice: every verdict is a threshold on counts that each answer moves
/// one way. "Gone" grows with refusals (all-`Refused` is its best case); "won" grows with yes
/// votes (all-`Yes` is its best case, all-`Failed` its worst); an acquire's busy-or-outage
/// split grows with failures (all-`Failed`). If the three uniform completions agree, every
/// mixed one does too (checked exhaustively by the tests).
pub(crate) fn settled(
    kind: RoundKind,
    validity_left: bool,
    granted: Option<&[Vote]>,
    partial: &[Option<Vote>],
) -> Option<Verdict> {
    let complete = |fill: Vote| {
        let now: Vec<Vote> = partial.iter().map(|v| v.unwrap_or(fill)).collect();
        let mut tally = Tally::new(now.len());
        for vote in &now {
            tally.record(*vote);
        }
        judge(kind, &tally, validity_left, granted, &now)
    };
    let verdict = complete(Vote::Yes);
    (complete(Vote::Refused) == verdict && complete(Vote::Failed) == verdict).then_some(verdict)
}

/// Whether the nodes that may have been free of our key at some point since the grant (every
/// node that never granted it, plus every granting node that now refuses) could make a
/// majority for another client.
fn could_have_been_lost(quorum: usize, granted: Option<&[Vote]>, now: &[Vote]) -> bool {
    let n = now.len();
    let was_ours = |i: usize| granted.is_none_or(|g| g.get(i) == Some(&Vote::Yes));
    let grantors = (0..n).filter(|i| was_ours(*i)).count();
    let lost_grantors = now
        .iter()
        .enumerate()
        .filter(|(i, vote)| was_ours(*i) && **vote == Vote::Refused)
        .count();
    (n - grantors) + lost_grantors >= quorum
}

#[cfg(test)]
mod tests {
    use super::*;
    use Vote::{Failed as F, Refused as R, Yes as Y};

    fn tally(votes: &[Vote]) -> Tally {
        let mut t = Tally::new(votes.len());
        for v in votes {
            t.record(*v);
        }
        t
    }

    fn held(granted: &[Vote], now: &[Vote], validity_left: bool) -> Verdict {
        judge(
            RoundKind::Release,
            &tally(now),
            validity_left,
            Some(granted),
            now,
        )
    }

    /// Each verdict becomes its error.
    ///
    /// Mutation: `error()` returning `None` for every verdict.
    #[test]
    fn each_rejection_becomes_its_error() {
        use crate::core::report::Report;
        use crate::errors::error::Operation;
        let error = |r: Rejection| {
            r.error(Failure::new(
                Operation::Release,
                b"r",
                1,
                std::time::Duration::ZERO,
                Report::default(),
            ))
        };
        assert!(error(Rejection::TooLate).is_validity_exhausted());
        assert!(error(Rejection::Busy).is_conflict());
        assert!(error(Rejection::Gone).is_expired());
        assert!(error(Rejection::Outage).is_no_quorum());
    }

    /// A node never got the SET, two granting nodes are paused; the release deletes on the
    /// other two. Not a majority released, but nothing proves the lock lost.
    #[test]
    fn timeouts_are_an_outage_not_an_expiry() {
        let granted = [F, Y, Y, Y, Y];
        let now = [R, F, F, Y, Y];
        assert_eq!(held(&granted, &now, true), Err(Rejection::Outage));
        // Every node timing out is an outage too.
        assert_eq!(held(&granted, &[F; 5], true), Err(Rejection::Outage));
    }

    #[test]
    fn granting_nodes_that_lost_our_key_prove_it_gone() {
        // Granted on a bare majority; one of them now says "missing": the two that never
        // granted plus that one could have granted someone else.
        let granted = [Y, Y, Y, F, R];
        assert_eq!(held(&granted, &[R, Y, Y, F, F], true), Err(Rejection::Gone));
        // Granted everywhere; three refuse now.
        assert_eq!(held(&[Y; 5], &[R, R, R, F, F], true), Err(Rejection::Gone));
        // Granted everywhere; two refuse, one times out: the other two still hold it.
        assert_eq!(
            held(&[Y; 5], &[R, R, F, Y, Y], true),
            Err(Rejection::Outage)
        );
    }

    /// Keys re-added on the two nodes that never granted give 4 yes of 5, but a granting node
    /// lost our key: with the two that were free, another client could have had a majority.
    #[test]
    fn proof_of_loss_wins_over_a_majority_now() {
        let granted = [Y, Y, Y, F, F];
        assert_eq!(held(&granted, &[R, Y, Y, Y, Y], true), Err(Rejection::Gone));
        // Without the loss, the re-added keys are simply ours.
        assert_eq!(held(&granted, &[Y, Y, Y, Y, Y], true), Ok(()));
    }

    #[test]
    fn a_non_granting_node_refusing_is_no_evidence() {
        // Granted on nodes 0..3; nodes 3 and 4 never held it and say so; node 2 times out.
        let granted = [Y, Y, Y, F, F];
        assert_eq!(
            held(&granted, &[Y, Y, F, R, R], true),
            Err(Rejection::Outage)
        );
    }

    #[test]
    fn a_release_past_the_deadline_is_gone_whatever_the_answers() {
        assert_eq!(held(&[Y; 3], &[Y, Y, Y], false), Err(Rejection::Gone));
        assert_eq!(held(&[Y; 3], &[F, F, F], false), Err(Rejection::Gone));
    }

    /// A renewal decided too late for its new validity is not proof of loss: the lock's old
    /// deadline may still be ahead, and a lease retries until it passes.
    #[test]
    fn a_slow_renewal_is_too_late_not_gone() {
        let renew = |now: &[Vote], left: bool| {
            judge(RoundKind::Renew, &tally(now), left, Some(&[Y; 3]), now)
        };
        assert_eq!(renew(&[Y, Y, F], false), Err(Rejection::TooLate));
        assert_eq!(renew(&[Y, Y, F], true), Ok(()));
        assert_eq!(renew(&[F, F, Y], false), Err(Rejection::Outage));
        assert_eq!(renew(&[R, R, Y], true), Err(Rejection::Gone));
    }

    #[test]
    fn acquire_keeps_contention_and_outage_apart() {
        let judge_acquire =
            |now: &[Vote], left: bool| judge(RoundKind::Acquire, &tally(now), left, None, now);
        assert_eq!(judge_acquire(&[Y, Y, Y, F, F], true), Ok(()));
        assert_eq!(
            judge_acquire(&[Y, Y, Y, F, F], false),
            Err(Rejection::TooLate)
        );
        assert_eq!(judge_acquire(&[F, F, R, R, R], true), Err(Rejection::Busy));
        assert_eq!(
            judge_acquire(&[F, F, F, R, Y], true),
            Err(Rejection::Outage)
        );
    }

    /// Exhaustive over N = 1..=7, every grant pattern and every answer pattern, for releases
    /// and renewals: `Gone` exactly when another client could have assembled a majority from
    /// nodes that were free of our key at some time; else `Won` at a majority of yes; never
    /// `Gone` when no granting node refused (timeouts alone are never evidence).
    #[test]
    #[ignore = "exhaustive: .ci/test runs it optimised, with the model checks"]
    fn held_verdicts_exhaustively() {
        for n in 1..=7usize {
            let patterns = 3usize.pow(n as u32);
            let decode = |mut code: usize| -> Vec<Vote> {
                (0..n)
                    .map(|_| {
                        let v = [Y, R, F][code % 3];
                        code /= 3;
                        v
                    })
                    .collect()
            };
            for g in 0..patterns {
                let granted = decode(g);
                for c in 0..patterns {
                    let now = decode(c);
                    let q = crate::core::quorum::quorum(n);
                    let yes = now.iter().filter(|v| **v == Y).count();
                    let free: usize = (0..n).filter(|i| granted[*i] != Y || now[*i] == R).count();
                    for kind in [RoundKind::Release, RoundKind::Renew] {
                        let verdict = judge(kind, &tally(&now), true, Some(&granted), &now);
                        let expected = if free >= q {
                            Err(Rejection::Gone)
                        } else if yes >= q {
                            Ok(())
                        } else {
                            Err(Rejection::Outage)
                        };
                        assert_eq!(
                            verdict, expected,
                            "{kind:?} n={n} granted={granted:?} now={now:?}"
                        );
                        let evidence = (0..n).any(|i| granted[i] == Y && now[i] == R);
                        let grantors = granted.iter().filter(|v| **v == Y).count();
                        if grantors >= q && !evidence {
                            assert_ne!(verdict, Err(Rejection::Gone), "no evidence: {now:?}");
                        }
                    }
                }
            }
        }
    }

    /// Property, exhaustive for up to 5 nodes, every kind, both validities, every grant
    /// pattern: `settled` answers only when every way the missing answers could come gives
    /// that verdict, and always answers once every node has.
    #[test]
    #[ignore = "exhaustive: .ci/test runs it optimised, with the model checks"]
    fn settled_verdicts_hold_for_every_completion() {
        let decode = |n: usize, mut code: usize, with_missing: bool| -> Vec<Option<Vote>> {
            let base = if with_missing { 4 } else { 3 };
            (0..n)
                .map(|_| {
                    let v = [Some(Y), Some(R), Some(F), None][code % base];
                    code /= base;
                    v
                })
                .collect()
        };
        for n in 1..=5usize {
            for g in 0..3usize.pow(n as u32) {
                let granted: Vec<Vote> = decode(n, g, false).into_iter().flatten().collect();
                for p in 0..4usize.pow(n as u32) {
                    let partial = decode(n, p, true);
                    let missing: Vec<usize> = (0..n).filter(|i| partial[*i].is_none()).collect();
                    for kind in [RoundKind::Acquire, RoundKind::Renew, RoundKind::Release] {
                        for left in [true, false] {
                            let grants = (kind != RoundKind::Acquire).then_some(&granted[..]);
                            let answer = settled(kind, left, grants, &partial);
                            if missing.is_empty() {
                                let now: Vec<Vote> = partial.iter().flatten().copied().collect();
                                assert_eq!(
                                    answer,
                                    Some(judge(kind, &tally(&now), left, grants, &now))
                                );
                                continue;
                            }
                            let Some(verdict) = answer else { continue };
                            for c in 0..3usize.pow(missing.len() as u32) {
                                let mut now: Vec<Vote> =
                                    partial.iter().map(|v| v.unwrap_or(F)).collect();
                                let mut code = c;
                                for i in &missing {
                                    now[*i] = [Y, R, F][code % 3];
                                    code /= 3;
                                }
                                assert_eq!(
                                    judge(kind, &tally(&now), left, grants, &now),
                                    verdict,
                                    "{kind:?} granted={granted:?} partial={partial:?} now={now:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_release_settles_at_the_majority_when_the_rest_cannot_prove_a_loss() {
        let settle = |granted: &[Vote], partial: &[Option<Vote>]| {
            settled(RoundKind::Release, true, Some(granted), partial)
        };
        // One master hung (it never granted): three releases decide it.
        let partial = [Some(Y), Some(Y), Some(Y), None, None];
        assert_eq!(settle(&[Y, Y, Y, Y, F], &partial), Some(Ok(())));
        // Two that never granted plus two grantors still out could still prove a loss.
        assert_eq!(
            settle(&[Y, Y, Y, F, F], &[Some(Y), None, None, Some(Y), Some(Y)]),
            None
        );
    }
}
