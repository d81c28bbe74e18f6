//! What a round has heard so far, when that ends it (`Wait`), and how one answer is counted.

use std::time::Duration;

use crate::core::quorum::{Decision, Tally, Vote};
use crate::core::report::NodeOutcome;
use crate::core::telemetry;
use crate::core::verdict;
use crate::core::verdict::RoundKind;
use crate::engine::classify::Grant;
use crate::engine::voter::Voter;
use crate::errors::node_error::NodeError;

/// How long a round waits.
#[derive(Debug, Clone)]
pub(crate) enum Wait {
    /// Until the round is won or lost, or only a suspect node could still win it once a
    /// majority answered (`Heard::give_up_on_suspects`); nodes that have not answered by
    /// then go on in the background (see [`Stragglers`]).
    UntilDecided,
    /// Until the round's verdict can no longer change, whatever the nodes still out answer
    /// (`verdict::settled`): a release is decided at the majority in the common case, and
    /// waits (bounded) for more answers only when they decide between gone and outage. The
    /// requests still out go on in the background (tracked, so `RedLock::settle` waits for
    /// them), each already queued on its connection.
    UntilSettled {
        kind: RoundKind,
        validity_left: bool,
        granted: Option<Vec<Vote>>,
    },
    /// A permit round (`crate::protocol::permit`): until one permit has a majority of grants, or no
    /// permit can reach one with the answers still out. The tally above counts a grant of any
    /// permit as a yes, so it cannot decide such a round; a suspect node is waited for while
    /// its answer could still make a majority and fewer than a majority have answered
    /// (bounded by the deadline), as in a round [`UntilDecided`](Self::UntilDecided).
    UntilPermitDecided,
    /// Until every node has answered or timed out (an extend that re-adds keys, a release
    /// after the deadline). A suspect node is not waited for once the round is decided
    /// without it: its request goes on in the background.
    ForAll,
    /// Until every node that is not suspect has answered or timed out: a failed acquire's
    /// cleanup, which deletes, and whose report says how long the holder's key lives. No
    /// verdict rests on it, so a suspect node is not waited for at all, decided or not: its
    /// delete goes on in the background, and the next round goes behind it. (Waiting while a
    /// suspect's answer could decide it had a waiter whose round split two against two
    /// around a paused master wait out that master's timeout once more.)
    ForAllButSuspects,
}

/// One voter's answer: its index, what it said, its grant, and the time since the round
/// started.
pub(crate) type Answer = (usize, NodeOutcome, Option<Grant>, Duration);

/// What a round has heard so far.
pub(super) struct Heard {
    /// Per voter: its answer and when it came.
    pub(super) answers: Vec<Option<(NodeOutcome, Duration)>>,
    pub(super) tally: Tally,
    /// The highest fence counter among the answers.
    pub(super) fence: Option<u64>,
    /// Per voter, what its grant said.
    pub(super) grants: Vec<Option<Grant>>,
}

impl Heard {
    pub(super) fn new(count: usize) -> Self {
        Self {
            answers: vec![None; count],
            tally: Tally::new(count),
            fence: None,
            grants: vec![None; count],
        }
    }

    /// Takes one voter's answer. A grant from a voter not `counted` (see
    /// `Request::counted`) is a late grant: no vote.
    pub(super) fn record<V: Voter>(
        &mut self,
        voters: &[V],
        counted: Option<&[bool]>,
        answer: Answer,
    ) {
        let (index, mut outcome, grant, latency) = answer;
        let counts = counted.is_none_or(|c| c.get(index) == Some(&true));
        if !counts && outcome.vote() == Vote::Yes {
            outcome = NodeOutcome::LateGrant;
        }
        if let Some(grant) = grant {
            self.fence = self.fence.max(Some(grant.counter));
            if let Some(slot) = self.grants.get_mut(index) {
                *slot = Some(grant);
            }
        }
        record(voters, &mut self.tally, index, &outcome, latency);
        if let Some(slot) = self.answers.get_mut(index) {
            *slot = Some((outcome, latency));
        }
    }

    /// Ends this undecided round as lost when only a suspect voter could still win it: a
    /// majority has answered, and the yes votes plus the voters still out that are not
    /// suspect (their last request timed out, and nothing has come from them since) fall
    /// short of a majority. Each suspect voter still out is then counted as failed (so too
    /// few answers at all is an outage, not contention); its request stays out (its answer
    /// `None`), followed as a straggler. Whether the round was given up.
    ///
    /// Such a round is not worth the wait: a suspect voter is most likely paused or cut off,
    /// and waiting for its deadline is what made a paused master cost contended waiters most
    /// of their availability in the soak (rounds split 2–2 around a hand-off, each then
    /// waiting out the paused master's timeout). Giving up is safe, as any lost round is: the
    /// requests still out go on as stragglers, and a late grant among them is the cleanup's
    /// to delete. It costs a round only where a suspect voter was alive after all and would
    /// have granted. With fewer than a majority answered it waits, so a client whose voters
    /// all timed out once still waits for their answers (each one clears the suspicion).
    ///
    /// Suspicion is read once per voter, so the voters counted as failed are exactly as many
    /// as the decision was made on (another task may clear a flag meanwhile).
    pub(super) fn give_up_on_suspects<V: Voter>(&mut self, voters: &[V]) -> bool {
        // Cheap checks first: this runs at every answer of a round not yet decided, and the
        // common round is decided at the majority's last answer.
        let quorum = self.tally.quorum();
        let answered = self.answered();
        if self.tally.decision() != Decision::Open || answered < quorum {
            return false;
        }
        let suspects = self.suspects_out(voters);
        let out_not_suspect = self.answers.len() - answered - suspects;
        let given_up = suspects > 0 && self.tally.yes() + out_not_suspect < quorum;
        if given_up {
            for _ in 0..suspects {
                self.tally.record(Vote::Failed);
            }
        }
        given_up
    }

    /// Whether every voter has answered or is suspect.
    fn all_but_suspects<V: Voter>(&self, voters: &[V]) -> bool {
        self.answers
            .iter()
            .zip(voters)
            .all(|(answer, voter)| answer.is_some() || voter.is_suspect())
    }

    /// How many voters have answered.
    fn answered(&self) -> usize {
        self.answers.iter().filter(|a| a.is_some()).count()
    }

    /// How many voters are still out and suspect, each one's suspicion read once.
    fn suspects_out<V: Voter>(&self, voters: &[V]) -> usize {
        self.answers
            .iter()
            .zip(voters)
            .filter(|(answer, voter)| answer.is_none() && voter.is_suspect())
            .count()
    }

    /// Every voter not heard from whose request was bounded by the deadline (not `behind` a
    /// straggler) has timed out.
    pub(super) fn time_out<V: Voter>(
        &mut self,
        voters: &[V],
        behind: &[bool],
        per_node_timeout: Duration,
    ) {
        for (index, slot) in self.answers.iter_mut().enumerate() {
            if slot.is_none() && !behind.get(index).copied().unwrap_or(false) {
                let (outcome, _) = timed_out(per_node_timeout);
                record(voters, &mut self.tally, index, &outcome, per_node_timeout);
                *slot = Some((outcome, per_node_timeout));
            }
        }
    }
}

impl Wait {
    /// Whether what was `heard` ends the round.
    pub(super) fn is_over<V: Voter>(&self, heard: &Heard, voters: &[V]) -> bool {
        let tally = &heard.tally;
        match self {
            // And a round only a suspect voter could win (`Heard::give_up_on_suspects`, which
            // the round asks once this says no).
            Wait::UntilDecided => tally.decision() != Decision::Open,
            Wait::UntilPermitDecided => {
                let mut counts: std::collections::HashMap<u64, usize> =
                    std::collections::HashMap::new();
                for grant in heard.grants.iter().flatten() {
                    *counts.entry(grant.counter).or_default() += 1;
                }
                let best = counts.values().copied().max().unwrap_or(0);
                let out = heard
                    .answers
                    .iter()
                    .filter(|answer| answer.is_none())
                    .count();
                // As a round only suspects could win (`Heard::give_up_on_suspects`): once a
                // majority answered, a suspect's answer is not waited for.
                let quorum = tally.quorum();
                best >= quorum
                    || best + out < quorum
                    || (heard.answers.len() - out >= quorum
                        && best + (out - heard.suspects_out(voters)) < quorum)
            }
            Wait::UntilSettled {
                kind,
                validity_left,
                granted,
            } => {
                let partial: Vec<Option<Vote>> = heard
                    .answers
                    .iter()
                    .map(|answer| answer.as_ref().map(|(outcome, _)| outcome.vote()))
                    .collect();
                verdict::settled(*kind, *validity_left, granted.as_deref(), &partial).is_some()
            }
            // A suspect voter is not waited for once the round is decided without it; while
            // its answer could still decide the round, it is (bounded by the deadline).
            Wait::ForAll => tally.decision() != Decision::Open && heard.all_but_suspects(voters),
            Wait::ForAllButSuspects => heard.all_but_suspects(voters),
        }
    }
}

/// Counts one node's answer in the tally, and in the logs and metrics.
pub(super) fn record<V: Voter>(
    nodes: &[V],
    tally: &mut Tally,
    index: usize,
    outcome: &NodeOutcome,
    latency: Duration,
) {
    // A key a renewal has just re-added is not yet proof of anything: it counts from the next
    // round on (the report keeps it as a yes), never toward this round's majority.
    let vote = match outcome {
        NodeOutcome::Readded => Vote::Failed,
        other => other.vote(),
    };
    tally.record(vote);
    tracing::trace!(node = index, %outcome, ?latency, "node answered");
    if let (Some(node), NodeOutcome::Failed(NodeError::TimedOut(_))) = (nodes.get(index), outcome) {
        node.set_suspect(true);
    }
    if let Some(node) = nodes.get(index) {
        telemetry::node_answered(node.id().address(), outcome, latency);
    }
}

pub(super) fn timed_out(per_node_timeout: Duration) -> (NodeOutcome, Option<Grant>) {
    (
        NodeOutcome::Failed(NodeError::TimedOut(per_node_timeout)),
        None,
    )
}
