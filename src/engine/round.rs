//! One quorum round: the same script sent to every node at once, decided at the majority.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio_util::task::TaskTracker;

use crate::core::clock::{Awake, Deadline};
use crate::core::config::Timing;
use crate::core::quorum::{Tally, Vote};
use crate::core::report::{NodeOutcome, NodeReport, Report};
use crate::core::telemetry;
use crate::core::verdict::{self, Rejection, RoundKind, Verdict};
use crate::engine::classify::Grant;
use crate::engine::encoded::EncodedRequest;
pub(crate) use crate::engine::heard::Wait;
use crate::engine::heard::{Answer, Heard, timed_out};
use crate::engine::request::Request;
pub(crate) use crate::engine::stragglers::Stragglers;
use crate::engine::stragglers::{LateAnswers, MarkOnDrop, Ordered, Raised};
use crate::engine::voter::Voter;
use crate::errors::node_error::NodeError;

/// A finished round.
#[derive(Debug)]
pub(crate) struct Round {
    /// Taken before the first request was created: the start of the validity clock.
    pub(crate) start: Instant,
    /// Both clocks at `start`, to tell later whether the host was suspended since.
    pub(crate) awake: Awake,
    /// When the round was decided (or every node had answered).
    pub(crate) decided: Instant,
    pub(crate) tally: Tally,
    pub(crate) report: Report,
    pub(crate) stragglers: Option<Stragglers>,
    /// The highest fence counter among the answers before the decision (fenced acquire).
    pub(crate) fence: Option<u64>,
    /// What each master's grant said, for the grants before the decision: a fenced
    /// acquire's counter and re-seed epoch, a permit acquire's permit number.
    pub(crate) grants: Vec<Option<Grant>>,
    /// A native command of the round answered "not done" on a node before the decision
    /// (`EncodedRequest::native_missed`): someone waits for the lock there, most likely.
    pub(crate) native_missed: bool,
}

impl Round {
    /// Time from the round's first send to its decision.
    pub(crate) fn elapsed(&self) -> Duration {
        self.decided.saturating_duration_since(self.start)
    }

    /// The win rule of a round that takes a lock: a majority of grants, and validity left.
    ///
    /// - validity = `ttl − elapsed − drift`, `elapsed` counted from before the first send
    ///   (never from the decision: a key granted early in a slow round expires that much
    ///   sooner on its master), and at least the minimum validity;
    /// - the lock's local deadline is then `ttl − drift` after the first send, brought
    ///   forward by any suspend of the host since ([`Round::valid_until`]).
    ///
    /// # Errors
    /// The round's [`Rejection`]: busy, an outage, or too late.
    pub(crate) fn won(&self, timing: &Timing) -> Result<Deadline, Rejection> {
        self.judge(RoundKind::Acquire, self.validity_left(timing), None)?;
        Ok(self.valid_until(timing))
    }

    /// The rule of a round that renews a held lock: as [`Round::won`], judged against how
    /// each node answered the round that granted or last renewed it (`granted`).
    pub(crate) fn renewed(&self, timing: &Timing, granted: &[Vote]) -> Verdict {
        self.judge(RoundKind::Renew, self.validity_left(timing), Some(granted))
    }

    /// Whether `ttl − elapsed − drift` is at least the minimum validity.
    fn validity_left(&self, timing: &Timing) -> bool {
        timing.validity_after(self.elapsed()).is_some()
    }

    /// This round's one verdict (`crate::core::verdict`): `granted` is how each node answered
    /// the round that granted or last renewed a held lock (`None` for an acquire).
    pub(crate) fn judge(
        &self,
        kind: RoundKind,
        validity_left: bool,
        granted: Option<&[Vote]>,
    ) -> Verdict {
        verdict::judge(
            kind,
            &self.tally,
            validity_left,
            granted,
            &self.report.votes(),
        )
    }

    /// The local deadline of a lock this round took or renewed: `ttl − drift` after the
    /// round's first send, brought forward by any suspend of the host since then
    /// (`crate::core::clock::Deadline`).
    pub(crate) fn valid_until(&self, timing: &Timing) -> Deadline {
        Deadline::after(self.awake, timing.validity_span())
            .unwrap_or_else(|| Deadline::at(self.awake))
    }
}

/// The voters a round goes to, and the tracker of what a round leaves running (its
/// stragglers, and the deletes it no longer waits for), which `RedLock::settle` waits for.
pub(crate) struct Fanout<'a, V> {
    pub(crate) voters: &'a Arc<[V]>,
    pub(crate) background: &'a TaskTracker,
}

impl<V: Voter> Fanout<'_, V> {
    /// Sends `request` to every voter in parallel, each bounded by `per_node_timeout`, and
    /// returns the round once `wait` says it is over.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the requests not yet answered, but a release's (see
    /// `EncodedRequest::deliver_anyway`).
    pub(crate) async fn run(
        &self,
        request: Request,
        per_node_timeout: Duration,
        wait: Wait,
    ) -> Round {
        self.run_behind(request, per_node_timeout, wait, None, || {})
            .await
    }

    /// As [`Fanout::run`], with:
    /// - `behind`: on a voter where a request of an earlier round is still running, this
    ///   round's request is sent only once that one is ordered on its connection (see
    ///   [`Stragglers`]);
    /// - `sent`: runs once the requests that need not wait are queued on their connections,
    ///   before any answer; whatever is sent on those connections after it reaches each voter
    ///   behind this round's request.
    ///
    /// Every request sent at the start is bounded by one deadline (`per_node_timeout` after
    /// the start, on tokio's clock), one timer for them all. A request that first waits for a
    /// straggler carries its own timeout, started once it is sent. A voter whose request times
    /// out becomes suspect ([`Voter::is_suspect`]) until it answers again.
    ///
    /// # Cancel safety
    /// As [`Fanout::run`].
    pub(crate) async fn run_behind(
        &self,
        request: Request,
        per_node_timeout: Duration,
        wait: Wait,
        behind: Option<&Stragglers>,
        sent: impl FnOnce(),
    ) -> Round {
        let awake = Awake::now();
        let start = awake.instant();
        // On tokio's clock (the same as `start`'s outside tests), so the engine's timing can
        // be tested in virtual time.
        let deadline = tokio::time::Instant::now() + per_node_timeout;
        let prepared = Arc::new(EncodedRequest::new(request));
        let request = prepared.request();
        let ordered = Ordered::new(self.voters.len());
        let mut flight = self.send(&prepared, &ordered, per_node_timeout, start, behind);
        let mut heard = Heard::new(self.voters.len());
        // The first polls run every request up to its send on the connection; the few answers
        // they may already give (a voter known to be down) wait in `early`.
        let mut early = Vec::new();
        while let Poll::Ready(Some(answer)) = futures::poll!(flight.bounded.next()) {
            early.push(answer);
        }
        while let Poll::Ready(Some(answer)) = futures::poll!(flight.alone.next()) {
            early.push(answer);
        }
        sent();
        let mut early = early.into_iter();
        let expiry = tokio::time::sleep_until(deadline);
        tokio::pin!(expiry);
        let counted = request.counted.as_deref();
        loop {
            if wait.is_over(&heard, self.voters)
                || (matches!(wait, Wait::UntilDecided) && heard.give_up_on_suspects(self.voters))
            {
                break;
            }
            let answer = match early.next() {
                Some(answer) => answer,
                None => tokio::select! {
                    biased;
                    Some(answer) = flight.bounded.next(), if !flight.bounded.is_empty() => answer,
                    Some(answer) = flight.alone.next(), if !flight.alone.is_empty() => answer,
                    () = &mut expiry, if !flight.bounded.is_empty() => {
                        // Every request still bounded by the deadline has timed out.
                        self.stop_waiting(&mut flight, &prepared);
                        heard.time_out(self.voters, &flight.behind, per_node_timeout);
                        continue;
                    }
                    else => break,
                },
            };
            heard.record(self.voters, counted, answer);
        }
        // An answer the first polls gave that the decision came before.
        for (index, outcome, _, latency) in early {
            tracing::debug!(node = index, %outcome, ?latency, "answer after the round was decided");
        }
        let decided = Instant::now();
        let pending = flight.bounded.len() + flight.alone.len();
        telemetry::round_decided(request.operation, heard.tally.decision());
        tracing::debug!(
            command = request.command.name(),
            decision = ?heard.tally.decision(),
            elapsed = ?decided.saturating_duration_since(start),
            pending,
            "round decided"
        );
        let stragglers = (pending > 0)
            .then(|| self.follow(flight, &heard.answers, &prepared, &ordered, deadline));
        let report = self.report(
            heard.answers,
            &prepared,
            decided.saturating_duration_since(start),
        );
        Round {
            start,
            awake,
            decided,
            tally: heard.tally,
            report,
            stragglers,
            fence: heard.fence,
            grants: heard.grants,
            native_missed: prepared.native_missed(),
        }
    }

    /// Starts one request per voter: at once, or, on a voter where a request of `behind` is
    /// still unordered, once it is ordered.
    fn send(
        &self,
        prepared: &Arc<EncodedRequest>,
        ordered: &Arc<Ordered>,
        per_node_timeout: Duration,
        start: Instant,
        behind: Option<&Stragglers>,
    ) -> InFlight<impl Future<Output = Answer> + Send + 'static> {
        // Which requests wait, decided once: the answer changes as those stragglers get
        // ordered, and every use (which set a request is in, what it waits for, whether the
        // deadline times it out, whether it is a straggler of this round) must agree.
        let waits: Vec<bool> = (0..self.voters.len())
            .map(|index| behind.is_some_and(|b| b.unordered(index)))
            .collect();
        let ask = |index: usize| {
            let after = behind
                .filter(|_| waits.get(index).copied().unwrap_or(false))
                .cloned();
            ask_one(
                self.voters.clone(),
                self.background.clone(),
                prepared.clone(),
                MarkOnDrop {
                    ordered: ordered.clone(),
                    index,
                },
                after,
                (per_node_timeout, start),
            )
        };
        let behind = |index: &usize| waits.get(*index).copied().unwrap_or(false);
        let count = self.voters.len();
        let bounded = (0..count).filter(|i| !behind(i)).map(&ask).collect();
        let alone = (0..count).filter(behind).map(&ask).collect();
        InFlight {
            bounded,
            alone,
            behind: waits,
        }
    }

    /// Stops waiting for the requests bounded by the round's deadline. A compare-and-delete
    /// is not dropped but followed in the background until its connection takes it (see
    /// `EncodedRequest::deliver_anyway`).
    fn stop_waiting<F>(&self, flight: &mut InFlight<F>, prepared: &EncodedRequest)
    where
        F: Future<Output = Answer> + Send + 'static,
    {
        let timed_out = std::mem::take(&mut flight.bounded);
        if prepared.deliver_anyway {
            deliver_in_background(self.background, timed_out);
        }
    }

    /// Follows the requests still running at the decision in a background task, still bounded
    /// as in the round, and returns what later rounds need to know of them.
    fn follow<F>(
        &self,
        mut flight: InFlight<F>,
        answers: &[Option<(NodeOutcome, Duration)>],
        prepared: &Arc<EncodedRequest>,
        ordered: &Arc<Ordered>,
        deadline: tokio::time::Instant,
    ) -> Stragglers
    where
        F: Future<Output = Answer> + Send + 'static,
    {
        let pending_nodes: Box<[bool]> = answers.iter().map(Option::is_none).collect();
        let mut unanswered = pending_nodes.to_vec();
        let late = Arc::new(LateAnswers {
            nodes: pending_nodes,
            unseeded: AtomicBool::new(false),
            not_done: AtomicBool::new(false),
            finished: Raised::new(1),
        });
        let answers_late = late.clone();
        let prepared = prepared.clone();
        let voters = self.voters.clone();
        let tracker = self.background.clone();
        // Finished when the loop ends, or when the task is dropped, even before its first poll
        // (the runtime shutting down): either way nothing is left to wait for.
        let finished = FinishOnDrop(late.clone());
        crate::core::telemetry::task_spawned();
        self.background.spawn(async move {
            let _finished = finished;
            let expiry = tokio::time::sleep_until(deadline);
            tokio::pin!(expiry);
            loop {
                let (index, outcome, _, latency) = tokio::select! {
                    Some(answer) = flight.bounded.next(), if !flight.bounded.is_empty() => answer,
                    Some(answer) = flight.alone.next(), if !flight.alone.is_empty() => answer,
                    () = &mut expiry, if !flight.bounded.is_empty() => {
                        let timed_out = std::mem::take(&mut flight.bounded);
                        if prepared.deliver_anyway {
                            deliver_in_background(&tracker, timed_out);
                        }
                        // Only the requests the deadline bounded: one sent behind a straggler
                        // of an earlier round carries its own timeout, not yet passed, and
                        // marking its voter would have rounds give up on a healthy voter
                        // (`Heard::give_up_on_suspects`).
                        for ((voter, unanswered), behind) in
                            voters.iter().zip(&unanswered).zip(&flight.behind)
                        {
                            if *unanswered && !behind {
                                voter.set_suspect(true);
                                answers_late.not_done.store(true, Ordering::Release);
                            }
                        }
                        continue;
                    }
                    else => break,
                };
                if let Some(slot) = unanswered.get_mut(index) {
                    *slot = false;
                }
                tracing::debug!(node = index, %outcome, ?latency, "answer after the round was decided");
                if matches!(outcome, NodeOutcome::Failed(NodeError::Unseeded)) {
                    answers_late.unseeded.store(true, Ordering::Release);
                }
                if !prepared.is_done(&outcome) {
                    answers_late.not_done.store(true, Ordering::Release);
                }
            }
        });
        Stragglers {
            ordered: ordered.clone(),
            late,
        }
    }

    /// The round's report: each voter's answer, or no reply by the decision (`elapsed`).
    fn report(
        &self,
        answers: Vec<Option<(NodeOutcome, Duration)>>,
        prepared: &EncodedRequest,
        elapsed: Duration,
    ) -> Report {
        let lines = self
            .voters
            .iter()
            .zip(answers)
            .map(|(voter, answer)| {
                let (outcome, latency) = answer.unwrap_or((NodeOutcome::NoReply, elapsed));
                NodeReport::new(voter.id().clone(), outcome, latency)
                    .with_server(voter.server(prepared.key()))
            })
            .collect();
        Report::new(lines)
    }
}

/// One voter's request of a round, as a future that answers with its index. `after`: the
/// straggler of an earlier round it waits behind (then it carries its own timeout).
fn ask_one<V: Voter>(
    voters: Arc<[V]>,
    background: TaskTracker,
    prepared: Arc<EncodedRequest>,
    mark: MarkOnDrop,
    after: Option<Stragglers>,
    (per_node_timeout, start): (Duration, Instant),
) -> impl Future<Output = Answer> + Send + 'static {
    let index = mark.index;
    async move {
        // Queued on the connection and never sent again: ordered from now on.
        let queued = || {
            if !prepared.resendable() {
                mark.ordered.mark(index);
            }
        };
        let asked = match (voters.get(index), &after) {
            (None, _) => (NodeOutcome::NoReply, None),
            (Some(voter), None) => voter.ask(&prepared, queued).await,
            // Boxed: waiting behind a straggler is the rare case, and its future (a second
            // request's, a timer) would size every request's, which the round allocates once
            // per node.
            (Some(voter), Some(after)) => {
                Box::pin(async {
                    after.ordered(index).await;
                    let answer = if prepared.deliver_anyway {
                        // Owned, so that when the timeout stops the waiting (or the round is
                        // dropped) the request goes on in a task of its own until its connection
                        // has taken it; answered in time (the common case), it needs no task.
                        let (voters, prepared) = (voters.clone(), prepared.clone());
                        let delivery = DeliverOnDrop {
                            delivery: Some(Box::pin(async move {
                                match voters.get(index) {
                                    Some(voter) => voter.ask(&prepared, || {}).await,
                                    None => (NodeOutcome::NoReply, None),
                                }
                            })),
                            background: background.clone(),
                        };
                        delivery.answer_within(per_node_timeout).await
                    } else {
                        // Ordered only once answered (or dropped), not once queued: the first
                        // poll that ran `queued` may only have joined the line of senders
                        // waiting for room on a connection still draining what piled up
                        // behind a hung master, and a request released by this mark (a
                        // waiter's leaving round) could then reach the node first and be
                        // overtaken by this one (found with MONITOR on a resumed master: a
                        // semaphore waiter's queued round landed after its leaving round and
                        // queued it again).
                        tokio::time::timeout(per_node_timeout, voter.ask(&prepared, || {}))
                            .await
                            .ok()
                    };
                    answer.unwrap_or_else(|| timed_out(per_node_timeout))
                })
                .await
            }
        };
        drop(mark);
        (index, asked.0, asked.1, start.elapsed())
    }
}

/// Raises a round's stragglers' `finished` flag when dropped.
struct FinishOnDrop(Arc<LateAnswers>);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.0.finished.raise(0);
    }
}

/// A delete being delivered behind a straggler: dropped before its answer came (its timeout
/// passed, or the round was dropped), it goes on in a background task until its connection
/// has taken it (see `EncodedRequest::deliver_anyway`).
struct DeliverOnDrop<F: Future<Output = (NodeOutcome, Option<Grant>)> + Send + 'static> {
    delivery: Option<std::pin::Pin<Box<F>>>,
    background: TaskTracker,
}

impl<F: Future<Output = (NodeOutcome, Option<Grant>)> + Send + 'static> DeliverOnDrop<F> {
    /// Its answer, if it comes within `timeout`; else `None`, and the delivery goes on.
    async fn answer_within(mut self, timeout: Duration) -> Option<(NodeOutcome, Option<Grant>)> {
        let answer = tokio::time::timeout(timeout, self.delivery.as_mut()?)
            .await
            .ok();
        if answer.is_some() {
            self.delivery = None;
        }
        answer
    }
}

impl<F: Future<Output = (NodeOutcome, Option<Grant>)> + Send + 'static> Drop for DeliverOnDrop<F> {
    fn drop(&mut self) {
        if let Some(delivery) = self.delivery.take() {
            crate::core::telemetry::task_spawned();
            self.background.spawn(async move {
                delivery.await;
            });
        }
    }
}

/// The requests of a round still in flight.
struct InFlight<F> {
    /// Sent at the start: bounded by the round's one deadline, abandoned when it passes.
    bounded: FuturesUnordered<F>,
    /// Each sent behind a straggler of an earlier round, bounded by its own timeout.
    alone: FuturesUnordered<F>,
    /// Per voter, whether its request is in `alone`.
    behind: Vec<bool>,
}

/// Polls requests we no longer wait for until each is answered (or its connection breaks), so
/// the redis crate does not skip them as abandoned (see `EncodedRequest::deliver_anyway`).
fn deliver_in_background<F>(background: &TaskTracker, mut requests: FuturesUnordered<F>)
where
    F: std::future::Future + Send + 'static,
    F::Output: Send,
{
    crate::core::telemetry::task_spawned();
    background.spawn(async move { while requests.next().await.is_some() {} });
}

/// The engine's timing in virtual time (`tokio::time::pause`), with scripted voters instead of
/// servers: each test names the mutation of the engine that makes it fail.
#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use tokio::time::Instant as Virtual;

    use super::*;
    use crate::core::node_id::NodeId;
    use crate::core::quorum::Decision;
    use crate::core::token::Token;
    use crate::engine::request::Command;
    use crate::errors::error::Operation;
    use crate::scripts;

    const TIMEOUT: Duration = Duration::from_millis(50);

    /// What a scripted voter does with one request.
    #[derive(Debug, Clone)]
    enum Reply {
        /// Answers with this outcome after this long.
        After(Duration, NodeOutcome),
        /// Grants permit (or fence counter) `.1` after this long.
        Permit(Duration, u64),
        /// Never answers (a SIGSTOPped master).
        Never,
    }

    use Reply::{After, Never, Permit};

    fn yes(after_ms: u64) -> Reply {
        After(Duration::from_millis(after_ms), NodeOutcome::Granted)
    }

    fn no(after_ms: u64) -> Reply {
        After(
            Duration::from_millis(after_ms),
            NodeOutcome::HeldByOther { expires_in: None },
        )
    }

    /// A voter that answers each request as its script says, in order, and records when each
    /// request was sent and how many answers it gave.
    #[derive(Debug)]
    struct Scripted {
        id: NodeId,
        suspect: AtomicBool,
        replies: Mutex<VecDeque<Reply>>,
        sent_at: Mutex<Vec<Virtual>>,
        answered: AtomicUsize,
    }

    impl Voter for Scripted {
        fn id(&self) -> &NodeId {
            &self.id
        }

        fn is_suspect(&self) -> bool {
            self.suspect.load(Ordering::Relaxed)
        }

        fn set_suspect(&self, suspect: bool) {
            self.suspect.store(suspect, Ordering::Relaxed);
        }

        fn ask(
            &self,
            _request: &EncodedRequest,
            queued: impl FnOnce() + Send,
        ) -> impl Future<Output = (NodeOutcome, Option<Grant>)> + Send {
            self.sent_at.lock().expect("lock").push(Virtual::now());
            let reply = self
                .replies
                .lock()
                .expect("lock")
                .pop_front()
                .unwrap_or(Never);
            let answer = match reply {
                After(delay, outcome) => Some((delay, outcome, None)),
                Permit(delay, counter) => Some((
                    delay,
                    NodeOutcome::Granted,
                    Some(Grant { counter, epoch: 0 }),
                )),
                Never => None,
            };
            async move {
                queued();
                let Some((delay, outcome, grant)) = answer else {
                    return std::future::pending().await;
                };
                tokio::time::sleep(delay).await;
                self.set_suspect(false);
                self.answered.fetch_add(1, Ordering::Relaxed);
                (outcome, grant)
            }
        }
    }

    /// One voter per script; voter `i` answers its `k`-th request with `scripts[i][k]`.
    fn voters(scripts: Vec<Vec<Reply>>) -> Arc<[Scripted]> {
        scripts
            .into_iter()
            .enumerate()
            .map(|(index, replies)| Scripted {
                id: NodeId::new(index, format!("voter-{index}").into()),
                suspect: AtomicBool::new(false),
                replies: Mutex::new(replies.into()),
                sent_at: Mutex::new(Vec::new()),
                answered: AtomicUsize::new(0),
            })
            .collect()
    }

    fn fanout<'a>(nodes: &'a Arc<[Scripted]>, tracker: &'a TaskTracker) -> Fanout<'a, Scripted> {
        Fanout {
            voters: nodes,
            background: tracker,
        }
    }

    fn acquire() -> Request {
        Request::new(
            Operation::Acquire,
            Command::SetIfAbsent,
            b"k",
            &Token::generate(),
            NodeOutcome::Granted,
        )
        .with_number(1000)
    }

    fn release() -> Request {
        Request::new(
            Operation::Release,
            Command::Script(&scripts::RELEASE),
            b"k",
            &Token::generate(),
            NodeOutcome::Released,
        )
    }

    fn outcomes(round: &Round) -> Vec<String> {
        round
            .report
            .iter()
            .map(|n| n.outcome().to_string())
            .collect()
    }

    /// `at` is `expected` after `t0`, to the timer wheel's millisecond.
    fn assert_at(t0: Virtual, at: Virtual, expected: Duration) {
        let elapsed = at - t0;
        assert!(
            elapsed >= expected && elapsed <= expected + Duration::from_millis(1),
            "at {elapsed:?}, expected {expected:?}"
        );
    }

    /// Mutation: deciding only once every voter answered (`Wait::UntilDecided` finished when
    /// all answers are in) makes the round end at the deadline instead of at 1 ms.
    #[tokio::test(start_paused = true)]
    async fn a_round_is_decided_at_the_majority_while_the_rest_hang() {
        let nodes = voters(vec![
            vec![yes(1)],
            vec![yes(1)],
            vec![yes(1)],
            vec![Never],
            vec![Never],
        ]);
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let round = fanout(&nodes, &tracker)
            .run(acquire(), TIMEOUT, Wait::UntilDecided)
            .await;
        assert_at(t0, Virtual::now(), Duration::from_millis(1));
        assert_eq!(round.tally.decision(), Decision::Won);
        assert!(round.stragglers.is_some(), "two requests still out");
        let outcomes = outcomes(&round);
        assert!(
            outcomes[3].contains("not waited for") && outcomes[4].contains("not waited for"),
            "{outcomes:?}"
        );
        // The stragglers run on in the tracked background until the round's one deadline,
        // when the hung voters become suspect and the background work ends.
        assert!(!nodes[3].is_suspect());
        tracker.close();
        tracker.wait().await;
        assert_at(t0, Virtual::now(), TIMEOUT);
        assert!(nodes[3].is_suspect() && nodes[4].is_suspect());
        assert!(!nodes[0].is_suspect());
    }

    /// A round that only a suspect voter could still win (two yes, two refusals, the fifth
    /// voter's last request timed out) is lost at once, not at the deadline: busy, as the
    /// refusals say. With failures instead of the refusals it is an outage, the suspect
    /// counted as failed. With one yes, two refusals and a healthy voter still out, the
    /// healthy one's yes could not make a majority either: lost at once too.
    ///
    /// Mutations: the round's loop without `give_up_on_suspects` makes every round end at the
    /// deadline; `give_up_on_suspects` not counting the suspect as failed makes the second
    /// round busy, an outage called a conflict; its rule asking that no healthy voter be out
    /// (`out_not_suspect == 0`) makes the third wait for the healthy voter.
    #[tokio::test(start_paused = true)]
    async fn a_round_only_a_suspect_voter_could_win_is_lost_without_waiting_for_it() {
        let failed = || {
            After(
                Duration::from_millis(1),
                NodeOutcome::Failed(NodeError::UnexpectedReply("a test's".to_owned())),
            )
        };
        let nodes = voters(vec![
            vec![yes(1), yes(1), yes(1)],
            vec![yes(1), yes(1), yes(10)],
            vec![no(1), failed(), no(1)],
            vec![no(1), failed(), no(1)],
            vec![Never, Never, Never],
        ]);
        nodes[4].set_suspect(true);
        let tracker = TaskTracker::new();
        for expected in [
            Err(Rejection::Busy),
            Err(Rejection::Outage),
            Err(Rejection::Busy),
        ] {
            let t0 = Virtual::now();
            let round = fanout(&nodes, &tracker)
                .run(acquire(), TIMEOUT, Wait::UntilDecided)
                .await;
            assert_at(t0, Virtual::now(), Duration::from_millis(1));
            assert_eq!(round.tally.decision(), Decision::Lost);
            assert_eq!(
                round.judge(RoundKind::Acquire, true, None),
                expected,
                "{:?}",
                outcomes(&round)
            );
            assert!(
                outcomes(&round)[4].contains("not waited for"),
                "{:?}",
                outcomes(&round)
            );
            assert!(round.stragglers.is_some(), "the suspect's request goes on");
        }
    }

    /// A permit round split between two permits (two grants each) that only the suspect fifth
    /// voter could decide is lost at once; with the fifth voter not suspect, it is waited for
    /// and decides.
    ///
    /// Mutation: `Wait::UntilPermitDecided` without its suspect clause makes the first round
    /// end at the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_permit_round_only_a_suspect_voter_could_decide_is_lost_without_waiting_for_it() {
        let permit = |n| Permit(Duration::from_millis(1), n);
        let nodes = voters(vec![
            vec![permit(0), permit(0)],
            vec![permit(0), permit(0)],
            vec![permit(1), permit(1)],
            vec![permit(1), permit(1)],
            vec![Never, Permit(Duration::from_millis(20), 1)],
        ]);
        nodes[4].set_suspect(true);
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let round = fanout(&nodes, &tracker)
            .run(acquire(), TIMEOUT, Wait::UntilPermitDecided)
            .await;
        assert_at(t0, Virtual::now(), Duration::from_millis(1));
        assert!(round.stragglers.is_some(), "the suspect's request goes on");
        nodes[4].set_suspect(false);
        let t0 = Virtual::now();
        let round = fanout(&nodes, &tracker)
            .run(acquire(), TIMEOUT, Wait::UntilPermitDecided)
            .await;
        assert_at(t0, Virtual::now(), Duration::from_millis(20));
        assert_eq!(
            round
                .grants
                .iter()
                .flatten()
                .filter(|g| g.counter == 1)
                .count(),
            3
        );
    }

    /// A suspect voter is waited for while fewer than a majority have answered: a client whose
    /// every voter timed out once (a blip of the network) still takes the lock once they
    /// answer again, and each answer clears the suspicion.
    ///
    /// Mutation: `give_up_on_suspects` without its `answered < quorum` return makes the round lost
    /// before any answer.
    #[tokio::test(start_paused = true)]
    async fn suspect_voters_are_waited_for_until_a_majority_answered() {
        let nodes = voters(vec![
            vec![yes(5)],
            vec![yes(5)],
            vec![yes(5)],
            vec![Never],
            vec![Never],
        ]);
        for node in nodes.iter() {
            node.set_suspect(true);
        }
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let round = fanout(&nodes, &tracker)
            .run(acquire(), TIMEOUT, Wait::UntilDecided)
            .await;
        assert_at(t0, Virtual::now(), Duration::from_millis(5));
        assert_eq!(round.tally.decision(), Decision::Won);
        assert!(nodes[..3].iter().all(|n| !n.is_suspect()));
    }

    /// Mutation: not marking a timed-out voter suspect (`record` without `set_suspect(true)`)
    /// fails the suspect check.
    #[tokio::test(start_paused = true)]
    async fn one_deadline_times_out_every_hung_voter_and_makes_it_suspect() {
        let nodes = voters(vec![
            vec![yes(1)],
            vec![yes(2)],
            vec![Never],
            vec![Never],
            vec![Never],
        ]);
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let round = fanout(&nodes, &tracker)
            .run(acquire(), TIMEOUT, Wait::UntilDecided)
            .await;
        assert_at(t0, Virtual::now(), TIMEOUT);
        assert_eq!(round.tally.decision(), Decision::Lost);
        let outcomes = outcomes(&round);
        for outcome in &outcomes[2..] {
            assert!(outcome.contains("no reply within 50ms"), "{outcomes:?}");
        }
        assert!(nodes[2..].iter().all(Voter::is_suspect));
        assert!(!nodes[0].is_suspect());
        assert!(round.stragglers.is_none(), "nothing left running");
    }

    /// Mutation: waiting for suspect voters too (`Wait::ForAll` without `|| node.is_suspect()`)
    /// makes the second round wait 30 ms for the suspect voter.
    #[tokio::test(start_paused = true)]
    async fn waiting_for_all_waits_for_a_slow_voter_but_not_for_a_suspect_one() {
        let fast = || vec![yes(1), yes(1)];
        let nodes = voters(vec![fast(), fast(), fast(), fast(), vec![yes(30), yes(30)]]);
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let round = fanout(&nodes, &tracker)
            .run(acquire(), TIMEOUT, Wait::ForAll)
            .await;
        assert_at(t0, Virtual::now(), Duration::from_millis(30));
        assert_eq!(round.report.votes(), vec![Vote::Yes; 5]);

        nodes[4].set_suspect(true);
        let t1 = Virtual::now();
        let round = fanout(&nodes, &tracker)
            .run(acquire(), TIMEOUT, Wait::ForAll)
            .await;
        assert_at(t1, Virtual::now(), Duration::from_millis(1));
        assert_eq!(
            round.report.votes()[4],
            Vote::Failed,
            "reported as no reply"
        );
        // Its request goes on in the background, and its answer clears the suspicion.
        tracker.close();
        tracker.wait().await;
        assert!(!nodes[4].is_suspect());
    }

    /// Two yes, two refusals, and a suspect fifth voter whose yes comes at 30 ms.
    fn split_but_for_a_suspect() -> Arc<[Scripted]> {
        let nodes = voters(vec![
            vec![yes(1)],
            vec![yes(1)],
            vec![no(1)],
            vec![no(1)],
            vec![yes(30)],
        ]);
        nodes[4].set_suspect(true);
        nodes
    }

    /// A cleanup's wait skips a suspect voter even while its answer would decide the round:
    /// no verdict rests on a cleanup.
    ///
    /// Mutation: `Wait::ForAllButSuspects` asking for a decision too (`Wait::ForAll`'s rule)
    /// makes the round wait 30 ms for the suspect voter.
    #[tokio::test(start_paused = true)]
    async fn a_cleanup_does_not_wait_for_a_suspect_voter_even_while_it_would_decide() {
        let nodes = split_but_for_a_suspect();
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let round = fanout(&nodes, &tracker)
            .run(release(), TIMEOUT, Wait::ForAllButSuspects)
            .await;
        assert_at(t0, Virtual::now(), Duration::from_millis(1));
        assert!(round.stragglers.is_some(), "its delete goes on");
        tracker.close();
        tracker.wait().await;
        assert_eq!(nodes[4].answered.load(Ordering::Relaxed), 1, "delivered");
    }

    /// Mutation: skipping suspect voters before the round is decided (`Wait::ForAll` finished
    /// when every voter answered or is suspect, decided or not) ends the round open at 1 ms.
    #[tokio::test(start_paused = true)]
    async fn a_suspect_voter_is_waited_for_while_its_answer_decides_the_round() {
        let nodes = split_but_for_a_suspect();
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let round = fanout(&nodes, &tracker)
            .run(acquire(), TIMEOUT, Wait::ForAll)
            .await;
        assert_at(t0, Virtual::now(), Duration::from_millis(30));
        assert_eq!(round.tally.decision(), Decision::Won);
    }

    /// Mutation: dropping a release's request at the deadline like any other
    /// (`EncodedRequest::deliver_anyway` false) leaves the slow voter's delete unsent.
    #[tokio::test(start_paused = true)]
    async fn a_release_is_settled_at_the_majority_and_its_slow_deletes_still_delivered() {
        let slow = || vec![After(Duration::from_millis(200), NodeOutcome::Released)];
        let released = || vec![After(Duration::from_millis(1), NodeOutcome::Released)];
        let nodes = voters(vec![released(), released(), released(), slow(), slow()]);
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let wait = Wait::UntilSettled {
            kind: RoundKind::Release,
            validity_left: true,
            granted: None,
        };
        let round = fanout(&nodes, &tracker).run(release(), TIMEOUT, wait).await;
        assert_at(t0, Virtual::now(), Duration::from_millis(1));
        assert_eq!(round.tally.decision(), Decision::Won);
        tracker.close();
        tracker.wait().await;
        assert_at(t0, Virtual::now(), Duration::from_millis(200));
        assert_eq!(nodes[3].answered.load(Ordering::Relaxed), 1);
        assert_eq!(nodes[4].answered.load(Ordering::Relaxed), 1);
    }

    /// A first release round that voters 0 to 3 answer at 1 ms and voter 4 (suspect, so not
    /// waited for) leaves as its one straggler (a script, ordered only once answered, at its
    /// first answer), then a second release round behind it: its report.
    async fn behind_a_straggler_on_voter_4(
        nodes: &Arc<[Scripted]>,
        tracker: &TaskTracker,
    ) -> Round {
        behind_a_straggler_on_voter_4_as(nodes, tracker, (release(), Wait::ForAll)).await
    }

    /// As [`behind_a_straggler_on_voter_4`], the second round being `second`.
    async fn behind_a_straggler_on_voter_4_as(
        nodes: &Arc<[Scripted]>,
        tracker: &TaskTracker,
        (request, wait): (Request, Wait),
    ) -> Round {
        let t0 = Virtual::now();
        nodes[4].set_suspect(true);
        let first = fanout(nodes, tracker)
            .run(release(), TIMEOUT, Wait::ForAll)
            .await;
        let stragglers = first.stragglers.expect("voter 4 still out");
        assert_at(t0, Virtual::now(), Duration::from_millis(1));
        fanout(nodes, tracker)
            .run_behind(request, TIMEOUT, wait, Some(&stragglers), || {})
            .await
    }

    /// Voter 3 hangs in the second round; voter 4 answers the first at 30 ms, the second 40 ms
    /// after it is sent.
    fn voter_3_hangs_and_voter_4_is_slow() -> Arc<[Scripted]> {
        voters(vec![
            vec![yes(1), yes(1)],
            vec![yes(1), yes(1)],
            vec![yes(1), yes(1)],
            vec![yes(1), Never],
            vec![yes(30), yes(40)],
        ])
    }

    /// The deadline of a round decided before it marks suspect only the voters whose requests
    /// it bounded: voter 4's request, sent behind a straggler at 30 ms with its own timeout, is
    /// still running at the deadline (50 ms) and its voter is not suspect; voter 3, hung, is.
    ///
    /// Mutation: the stragglers' task marking every voter still out at the deadline (without
    /// `!behind`) makes voter 4 suspect at 50 ms, and rounds then give up on it
    /// (`Heard::give_up_on_suspects`).
    #[tokio::test(start_paused = true)]
    async fn the_deadline_marks_suspect_only_the_requests_it_bounded() {
        let nodes = voter_3_hangs_and_voter_4_is_slow();
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let second =
            behind_a_straggler_on_voter_4_as(&nodes, &tracker, (acquire(), Wait::UntilDecided))
                .await;
        assert_eq!(second.tally.decision(), Decision::Won);
        assert!(second.stragglers.is_some(), "voters 3 and 4 still out");
        tokio::time::sleep_until(t0 + Duration::from_millis(60)).await;
        assert!(nodes[3].is_suspect(), "hung past the deadline");
        assert!(!nodes[4].is_suspect(), "its own timeout has not passed");
    }

    /// A delete sent behind a straggler and not answered within its own timeout is still
    /// delivered, in the background (`DeliverOnDrop`); one answered in time needs no task.
    ///
    /// Mutation: no spawn in `DeliverOnDrop::drop` drops voter 4's delete at its timeout: it
    /// is answered once (the first round's), not twice.
    #[tokio::test(start_paused = true)]
    async fn a_delete_behind_a_straggler_is_delivered_after_its_timeout() {
        let nodes = voters(vec![
            vec![yes(1), yes(1)],
            vec![yes(1), yes(1)],
            vec![yes(1), yes(1)],
            vec![yes(1), yes(1)],
            vec![yes(30), yes(200)],
        ]);
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        // Decided without voter 4 (suspect); its delete, sent at 30 ms behind the straggler,
        // is followed in the background, and its own 50 ms pass at 80 ms.
        let second = behind_a_straggler_on_voter_4(&nodes, &tracker).await;
        assert_eq!(second.tally.decision(), Decision::Won);
        tracker.close();
        tracker.wait().await;
        assert_at(t0, Virtual::now(), Duration::from_millis(230));
        assert_eq!(nodes[4].answered.load(Ordering::Relaxed), 2);
    }

    /// A request that waits for an earlier round's straggler on its voter carries its own
    /// timeout from when it is sent: this round's deadline does not time it out, even once the
    /// straggler it waited for is ordered.
    ///
    /// Mutation: deciding afresh at the deadline whether a request waits (`waits` re-evaluated
    /// per use) records voter 4's running request as timed out at 51 ms, makes the
    /// voter suspect and leaves its request out of the round's stragglers.
    #[tokio::test(start_paused = true)]
    async fn a_request_behind_a_straggler_is_not_timed_out_by_the_rounds_deadline() {
        let nodes = voter_3_hangs_and_voter_4_is_slow();
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let second = behind_a_straggler_on_voter_4(&nodes, &tracker).await;
        // Voter 3 timed out at the deadline (51 ms); voter 4's request, sent at 30 ms,
        // answered at 70 ms.
        assert_at(t0, Virtual::now(), Duration::from_millis(70));
        let outcomes = outcomes(&second);
        assert!(outcomes[3].contains("no reply within 50ms"), "{outcomes:?}");
        assert_eq!(second.report.votes()[4], Vote::Yes, "{outcomes:?}");
        assert!(nodes[3].is_suspect() && !nodes[4].is_suspect());
    }

    /// A request sent behind a straggler counts as ordered on its voter only once answered,
    /// even a `SET`: its first poll may only have joined the line of senders waiting for room
    /// on a connection still draining a backlog, and a request released by the mark (a
    /// waiter's leaving round) could reach the node first.
    ///
    /// Mutation: marking it ordered once queued (`queued` for `|| {}` in `ask_one`'s branch
    /// behind a straggler) sends the delete behind it at 20 ms instead of at 40 ms.
    #[tokio::test(start_paused = true)]
    async fn a_request_sent_behind_a_straggler_is_ordered_once_answered() {
        // Node 4: a script answering at 20 ms, a `SET` sent behind it answering 20 ms later,
        // then the delete behind that.
        let quick = || vec![yes(1), yes(1), yes(1)];
        let nodes = voters(vec![
            quick(),
            quick(),
            quick(),
            quick(),
            vec![yes(20), yes(20), yes(1)],
        ]);
        let tracker = TaskTracker::new();
        let t0 = Virtual::now();
        let first = fanout(&nodes, &tracker)
            .run(release(), TIMEOUT, Wait::UntilDecided)
            .await;
        let first = first.stragglers.expect("the script still out on node 4");
        let second = fanout(&nodes, &tracker)
            .run_behind(acquire(), TIMEOUT, Wait::UntilDecided, Some(&first), || {})
            .await;
        let second = second.stragglers.expect("the SET still out on node 4");
        let _ = fanout(&nodes, &tracker)
            .run_behind(release(), TIMEOUT, Wait::ForAll, Some(&second), || {})
            .await;
        let sent = nodes[4].sent_at.lock().expect("lock").clone();
        assert_eq!(sent.len(), 3);
        assert_at(t0, sent[1], Duration::from_millis(20));
        assert_at(t0, sent[2], Duration::from_millis(40));
    }

    /// A delete behind a straggler of the same lock is sent once the straggler is ordered on
    /// its voter's connection: a `SET` at once (queued is enough), a script only once answered
    /// (a `NOSCRIPT` answer sends it again).
    ///
    /// Mutation: marking a `SET` ordered only once answered (`EncodedRequest::resendable` always
    /// true) sends the delete behind it at 20 ms instead of at 1 ms; marking a
    /// script ordered when queued (`EncodedRequest::resendable` false) sends the delete behind the
    /// script at 1 ms instead of at 20 ms.
    #[tokio::test(start_paused = true)]
    async fn a_delete_waits_only_until_the_straggler_on_its_voter_is_ordered() {
        for (first, sent_after) in [(acquire(), 1), (release(), 20)] {
            let replies = |first_ms| vec![yes(first_ms), yes(1)];
            let nodes = voters(vec![
                replies(1),
                replies(1),
                replies(1),
                replies(20),
                replies(20),
            ]);
            let tracker = TaskTracker::new();
            let t0 = Virtual::now();
            let round = fanout(&nodes, &tracker)
                .run(first, TIMEOUT, Wait::UntilDecided)
                .await;
            let stragglers = round.stragglers.expect("two requests still out");
            let fanout = fanout(&nodes, &tracker);
            let delete =
                fanout.run_behind(release(), TIMEOUT, Wait::ForAll, Some(&stragglers), || {});
            let _ = delete.await;
            let sent = nodes[4].sent_at.lock().expect("lock").clone();
            assert_eq!(sent.len(), 2);
            assert_at(t0, sent[1], Duration::from_millis(sent_after));
        }
    }
}
