//! One quorum round: the same script sent to every node at once, decided at the majority.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use redis::{Script, ServerErrorKind, Value};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use crate::deadline::{Awake, Deadline};
use crate::error::Operation;
use crate::node::{Node, breaks_connection};
use crate::node_error::NodeError;
use crate::quorum::{Decision, Tally, Vote};
use crate::report::{NodeOutcome, NodeReport, Report};
use crate::scripts::{Lua, ScriptReply};
use crate::settings::Timing;
use crate::telemetry;
use crate::token::Token;
use crate::verdict::{self, RoundKind, Verdict};

/// The command a round runs on every node.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Command {
    /// One of our scripts (`EVALSHA`, loaded on `NOSCRIPT` and sent again).
    Script(&'static Lua),
    /// The plain acquire: `SET key token NX PX ttl`, one native command. A refusal does not
    /// say when the holder's key expires; the cleanup after a failed round does (its
    /// compare-and-delete answers with the holder's ttl, see `Report::learn_expiries`).
    SetIfAbsent,
}

impl Command {
    fn name(self) -> &'static str {
        match self {
            Self::Script(lua) => lua.script().get_hash(),
            Self::SetIfAbsent => "SET NX PX",
        }
    }
}

/// What to send to every node.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) command: Command,
    pub(crate) key: Vec<u8>,
    /// `KEYS[2]…`, for the scripts that take them: the fence counter (and an older version's
    /// per-resource counter), or the leader info.
    pub(crate) extra_keys: Vec<Vec<u8>>,
    pub(crate) token: String,
    /// The numeric argument (`ARGV[2]`): the ttl in ms, or the fencing token to confirm.
    pub(crate) number: Option<u64>,
    /// Bytes arguments after the others (leader info; release channel and release id).
    pub(crate) payload: Vec<Vec<u8>>,
    /// What a node that did what we asked is reported as.
    pub(crate) done: NodeOutcome,
    /// Skip nodes still within their restart grace (acquire only: they must not vote).
    pub(crate) settled_nodes_only: bool,
    /// The nodes whose "done" counts toward the majority (the fencing confirm: the masters
    /// that granted before the acquire was decided); a "done" from any other node is reported
    /// as [`NodeOutcome::LateGrant`] and counts as no vote. `None`: every node counts.
    pub(crate) counted: Option<Vec<bool>>,
    /// Extend: the nodes to re-add a missing key on (`ARGV[3]` = `1`; `0` elsewhere). `None`:
    /// no such argument.
    pub(crate) readd_on: Option<Vec<bool>>,
    /// Fenced confirm: each master's re-seed epoch at its grant, sent as the last argument to
    /// that master (empty where unknown, which the script never counts). `None`: no such
    /// argument.
    pub(crate) epochs: Option<Vec<Option<u64>>>,
    /// For metrics.
    pub(crate) operation: Operation,
}

impl Request {
    /// `command` on `key` for `operation`, with `token` as the first argument; a node that did
    /// what was asked is reported as `done`. Every other part is empty until set below.
    pub(crate) fn new(
        operation: Operation,
        command: Command,
        key: &[u8],
        token: &Token,
        done: NodeOutcome,
    ) -> Self {
        Self {
            command,
            key: key.to_vec(),
            extra_keys: Vec::new(),
            token: token.expose().to_owned(),
            number: None,
            payload: Vec::new(),
            done,
            settled_nodes_only: false,
            counted: None,
            readd_on: None,
            epochs: None,
            operation,
        }
    }

    /// Sets the `extra_keys` field (see there).
    pub(crate) fn with_extra_keys(mut self, keys: Vec<Vec<u8>>) -> Self {
        self.extra_keys = keys;
        self
    }

    /// Sets the `number` field (see there).
    pub(crate) fn with_number(mut self, number: u64) -> Self {
        self.number = Some(number);
        self
    }

    /// Sets the `payload` field (see there).
    pub(crate) fn with_payload(mut self, payload: Vec<Vec<u8>>) -> Self {
        self.payload = payload;
        self
    }

    /// Acquire: nodes within their restart grace are not asked (they must not vote).
    pub(crate) fn settled_nodes_only(mut self) -> Self {
        self.settled_nodes_only = true;
        self
    }

    /// Sets the `counted` field (see there).
    pub(crate) fn counting_only(mut self, counted: Vec<bool>) -> Self {
        self.counted = Some(counted);
        self
    }

    /// Sets the `readd_on` field (see there).
    pub(crate) fn readding_on(mut self, nodes: Vec<bool>) -> Self {
        self.readd_on = Some(nodes);
        self
    }

    /// Sets the `epochs` field (see there).
    pub(crate) fn with_epochs(mut self, epochs: Vec<Option<u64>>) -> Self {
        self.epochs = Some(epochs);
        self
    }
}

/// How long a round waits.
#[derive(Debug, Clone)]
pub(crate) enum Wait {
    /// Until the round is won or lost; nodes that have not answered by then go on in the
    /// background (see [`Stragglers`]).
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
    /// Until every node has answered or timed out (a failed acquire's cleanup: its report says
    /// how long the holder's key lives; an extend that re-adds keys). A suspect node is not
    /// waited for once the round is decided without it: its request goes on in the
    /// background.
    ForAll,
}

/// Per node, whether a request of a round is *ordered*: handed to the node's connection (a
/// command nothing will send again), or finished, or abandoned. Anything sent on that
/// connection afterwards reaches the node behind it: the multiplexed connection is one FIFO
/// queue (the redis crate's bounded channel, whose waiting senders are served in order).
#[derive(Debug)]
struct Ordered {
    nodes: watch::Sender<Vec<bool>>,
}

impl Ordered {
    fn new(count: usize) -> Arc<Self> {
        Arc::new(Self {
            nodes: watch::Sender::new(vec![false; count]),
        })
    }

    fn mark(&self, index: usize) {
        self.nodes
            .send_if_modified(|nodes| match nodes.get_mut(index) {
                Some(ordered) if !*ordered => {
                    *ordered = true;
                    true
                }
                _ => false,
            });
    }
}

/// Marks its node's request ordered when dropped: finished, or abandoned at the deadline.
struct MarkOnDrop {
    ordered: Arc<Ordered>,
    index: usize,
}

impl Drop for MarkOnDrop {
    fn drop(&mut self) {
        self.ordered.mark(self.index);
    }
}

/// Requests of a decided round that were still running at the decision.
///
/// They keep running in a background task, each bounded by the per-node timeout, so a slow
/// node still gets the key (and a lock survives later node failures better). A later
/// compare-and-delete on one of these nodes is sent once that node's request is *ordered*
/// ([`Ordered`]): at once for a `SET` already on its connection, after the answer for a script
/// (a `NOSCRIPT` answer sends it again) or for a request still waiting for its connection.
/// Otherwise the straggler could land after the delete and leave a key behind. It never
/// waits for other nodes' stragglers.
#[derive(Debug, Clone)]
pub(crate) struct Stragglers {
    nodes: Arc<[bool]>,
    ordered: watch::Receiver<Vec<bool>>,
    done: watch::Receiver<bool>,
    /// A straggler answered that its fence counter was not re-seeded (fenced acquire): the
    /// decision came before it, so the round's report does not show it.
    unseeded: Arc<std::sync::atomic::AtomicBool>,
}

impl Stragglers {
    /// Whether the request to `index` was still running at the decision and is not yet
    /// ordered on its connection.
    fn unordered(&self, index: usize) -> bool {
        self.nodes.get(index).copied().unwrap_or(false)
            && !self.ordered.borrow().get(index).copied().unwrap_or(true)
    }

    /// Waits until every straggler has finished, then says whether one answered that its
    /// fence counter was not re-seeded since its server started.
    pub(crate) async fn unseeded(&self) -> bool {
        let mut done = self.done.clone();
        let _ = done.wait_for(|finished| *finished).await;
        self.unseeded.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until the request to `index` is ordered on its connection.
    async fn ordered(&self, index: usize) {
        let mut ordered = self.ordered.clone();
        // An error means every sender is gone (the round's tasks ended): nothing to wait for.
        let _ = ordered
            .wait_for(|nodes| nodes.get(index).copied().unwrap_or(true))
            .await;
    }
}

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
    /// Each master's re-seed epoch at its grant, for the grants before the decision (fenced
    /// acquire).
    pub(crate) epochs: Vec<Option<u64>>,
}

impl Round {
    pub(crate) fn elapsed(&self) -> Duration {
        self.decided.saturating_duration_since(self.start)
    }

    /// The local deadline of a lock this round took or renewed: `ttl − drift` after the
    /// round's first send, brought forward by any suspend of the host since then
    /// (`crate::deadline`).
    /// This round's one verdict (`crate::verdict`): `granted` is how each node answered the
    /// round that granted or last renewed a held lock (`None` for an acquire).
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

    pub(crate) fn valid_until(&self, timing: &Timing) -> Deadline {
        Deadline::after(self.awake, timing.validity_span())
            .unwrap_or_else(|| Deadline::at(self.awake))
    }
}

/// Sends `request` to every node in parallel, each bounded by `per_node_timeout`.
pub(crate) async fn run(
    nodes: &Arc<[Node]>,
    background: &TaskTracker,
    request: Request,
    per_node_timeout: Duration,
    wait: Wait,
) -> Round {
    run_then(
        nodes,
        background,
        request,
        per_node_timeout,
        wait,
        None,
        || {},
    )
    .await
}

/// As [`run`]. With `after`, a node's request is sent only once that node's straggler from an
/// earlier round is ordered on its connection (see [`Stragglers`]). `sent` runs as soon as the requests that need not wait for a straggler are
/// queued on their connections, before any answer. Whatever is sent on the same connections
/// after that reaches each node behind this round's request.
///
/// Every request starts with the round, so one deadline (`start + per_node_timeout`), one
/// timer, bounds them all, instead of a timer per node. Only a request that first waits for a
/// straggler of an earlier round carries its own timeout, started once it is sent. A node whose
/// request times out becomes suspect (`Node::is_suspect`) until it answers again.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_then(
    nodes: &Arc<[Node]>,
    background: &TaskTracker,
    request: Request,
    per_node_timeout: Duration,
    wait: Wait,
    after: Option<&Stragglers>,
    sent: impl FnOnce(),
) -> Round {
    let awake = Awake::now();
    let start = awake.instant();
    let deadline = tokio::time::Instant::from_std(start) + per_node_timeout;
    let prepared = Arc::new(Prepared::new(&request));
    let count = nodes.len();
    let ordered = Ordered::new(count);
    let waits = |index: usize| after.is_some_and(|a| a.unordered(index));
    let node_request = |index: usize| {
        let nodes = nodes.clone();
        let tracker = background.clone();
        let prepared = prepared.clone();
        let after = after.filter(|a| a.unordered(index)).cloned();
        let mark = MarkOnDrop {
            ordered: ordered.clone(),
            index,
        };
        async move {
            // Queued on the connection and never sent again: ordered from now on.
            let queued = || {
                if !prepared.resendable() {
                    mark.ordered.mark(index);
                }
            };
            let asked = match nodes.get(index) {
                Some(node) => match &after {
                    Some(after) => {
                        after.ordered(index).await;
                        let answer = if prepared.deliver_anyway {
                            // Its own task, so the timeout only stops the waiting.
                            let (nodes, prepared) = (nodes.clone(), prepared.clone());
                            let delivery = tracker.spawn(async move {
                                match nodes.get(index) {
                                    Some(node) => ask(node, &prepared, || {}).await,
                                    None => (NodeOutcome::NoReply, None),
                                }
                            });
                            tokio::time::timeout(per_node_timeout, async {
                                delivery.await.unwrap_or((NodeOutcome::NoReply, None))
                            })
                            .await
                        } else {
                            tokio::time::timeout(per_node_timeout, ask(node, &prepared, queued))
                                .await
                        };
                        answer.unwrap_or_else(|_| timed_out(per_node_timeout))
                    }
                    None => ask(node, &prepared, queued).await,
                },
                None => (NodeOutcome::NoReply, None),
            };
            drop(mark);
            (index, asked.0, asked.1, start.elapsed())
        }
    };
    // Bounded by the round's deadline, and abandoned (dropped) when it passes.
    let mut bounded: FuturesUnordered<_> = (0..count)
        .filter(|i| !waits(*i))
        .map(node_request)
        .collect();
    // Each bounded by its own timeout.
    let mut alone: FuturesUnordered<_> =
        (0..count).filter(|i| waits(*i)).map(node_request).collect();
    let mut answers: Vec<Option<(NodeOutcome, Duration)>> = vec![None; count];
    let mut tally = Tally::new(count);
    let mut fence: Option<u64> = None;
    let mut epochs: Vec<Option<u64>> = vec![None; count];
    let finished = |tally: &Tally, answers: &[Option<(NodeOutcome, Duration)>]| match &wait {
        Wait::UntilDecided => tally.decision() != Decision::Open,
        Wait::UntilSettled {
            kind,
            validity_left,
            granted,
        } => {
            let partial: Vec<Option<Vote>> = answers
                .iter()
                .map(|answer| answer.as_ref().map(|(outcome, _)| outcome.vote()))
                .collect();
            verdict::settled(*kind, *validity_left, granted.as_deref(), &partial).is_some()
        }
        // A suspect node is not waited for once the round is decided without it; while its
        // answer could still decide the round, it is (bounded by the deadline).
        Wait::ForAll => {
            tally.decision() != Decision::Open
                && answers
                    .iter()
                    .zip(nodes.iter())
                    .all(|(answer, node)| answer.is_some() || node.is_suspect())
        }
    };
    // The first polls run every request up to its send on the connection; the few answers
    // they may already give (a node known to be down) wait in `early`.
    let mut early = Vec::new();
    while let std::task::Poll::Ready(Some(answer)) = futures::poll!(bounded.next()) {
        early.push(answer);
    }
    while let std::task::Poll::Ready(Some(answer)) = futures::poll!(alone.next()) {
        early.push(answer);
    }
    sent();
    let mut early = early.into_iter();
    let expiry = tokio::time::sleep_until(deadline);
    tokio::pin!(expiry);
    while !finished(&tally, &answers) {
        let answer = match early.next() {
            Some(answer) => answer,
            None => tokio::select! {
                biased;
                Some(answer) = bounded.next(), if !bounded.is_empty() => answer,
                Some(answer) = alone.next(), if !alone.is_empty() => answer,
                () = &mut expiry, if !bounded.is_empty() => {
                    // Every request still bounded by the deadline has timed out: stop waiting
                    // for them. A compare-and-delete is not dropped but followed in the
                    // background until its connection takes it (see `Prepared::deliver_anyway`).
                    let timed_out_requests = std::mem::take(&mut bounded);
                    if prepared.deliver_anyway {
                        deliver_in_background(background, timed_out_requests);
                    }
                    for (index, slot) in answers.iter_mut().enumerate() {
                        if slot.is_none() && !waits(index) {
                            let (outcome, _) = timed_out(per_node_timeout);
                            record(nodes, &mut tally, index, &outcome, per_node_timeout);
                            *slot = Some((outcome, per_node_timeout));
                        }
                    }
                    continue;
                }
                else => break,
            },
        };
        let (index, mut outcome, grant, latency) = answer;
        let counted = request
            .counted
            .as_ref()
            .is_none_or(|c| c.get(index) == Some(&true));
        if !counted && outcome.vote() == Vote::Yes {
            outcome = NodeOutcome::LateGrant;
        }
        if let Some(grant) = grant {
            fence = fence.max(Some(grant.counter));
            if let Some(slot) = epochs.get_mut(index) {
                *slot = Some(grant.epoch);
            }
        }
        record(nodes, &mut tally, index, &outcome, latency);
        if let Some(slot) = answers.get_mut(index) {
            *slot = Some((outcome, latency));
        }
    }
    // An answer the first polls gave that the decision came before.
    for (index, outcome, _, latency) in early {
        tracing::debug!(node = index, %outcome, ?latency, "answer after the round was decided");
    }
    let decided = Instant::now();
    let pending = bounded.len() + alone.len();
    telemetry::round_decided(request.operation, tally.decision());
    tracing::debug!(
        command = request.command.name(),
        decision = ?tally.decision(),
        elapsed = ?decided.saturating_duration_since(start),
        pending,
        "round decided"
    );
    let stragglers = (pending > 0).then(|| {
        let pending_nodes: Arc<[bool]> = answers.iter().map(Option::is_none).collect();
        let (finished, done) = watch::channel(false);
        let unseeded = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let late_unseeded = unseeded.clone();
        let (nodes, deliver_anyway) = (nodes.clone(), prepared.deliver_anyway);
        let tracker = background.clone();
        let mut unanswered = pending_nodes.to_vec();
        background.spawn(async move {
            let expiry = tokio::time::sleep_until(deadline);
            tokio::pin!(expiry);
            loop {
                let (index, outcome, _, latency) = tokio::select! {
                    Some(answer) = bounded.next(), if !bounded.is_empty() => answer,
                    Some(answer) = alone.next(), if !alone.is_empty() => answer,
                    () = &mut expiry, if !bounded.is_empty() => {
                        let timed_out_requests = std::mem::take(&mut bounded);
                        if deliver_anyway {
                            deliver_in_background(&tracker, timed_out_requests);
                        }
                        for (node, unanswered) in nodes.iter().zip(&unanswered) {
                            if *unanswered {
                                node.set_suspect(true);
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
                    late_unseeded.store(true, std::sync::atomic::Ordering::Release);
                }
            }
            finished.send_replace(true);
        });
        Stragglers {
            nodes: pending_nodes,
            ordered: ordered.nodes.subscribe(),
            done,
            unseeded,
        }
    });
    let report = nodes
        .iter()
        .zip(answers)
        .map(|(node, answer)| {
            let (outcome, latency) = answer.unwrap_or((
                NodeOutcome::NoReply,
                decided.saturating_duration_since(start),
            ));
            NodeReport::new(node.id().clone(), outcome, latency)
        })
        .collect();
    Round {
        start,
        awake,
        decided,
        tally,
        report: Report::new(report),
        stragglers,
        fence,
        epochs,
    }
}

/// Polls requests we no longer wait for until each is answered (or its connection breaks), so
/// the redis crate does not skip them as abandoned (see `Prepared::deliver_anyway`).
fn deliver_in_background<F>(background: &TaskTracker, mut requests: FuturesUnordered<F>)
where
    F: std::future::Future + Send + 'static,
    F::Output: Send,
{
    background.spawn(async move { while requests.next().await.is_some() {} });
}

/// Counts one node's answer in the tally, and in the logs and metrics.
fn record(
    nodes: &[Node],
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

fn timed_out(per_node_timeout: Duration) -> (NodeOutcome, Option<Grant>) {
    (
        NodeOutcome::Failed(NodeError::TimedOut(per_node_timeout)),
        None,
    )
}

/// A request built once per round and sent to every node as is: the arguments are encoded
/// once, not once per node.
struct Prepared {
    wire: Wire,
    done: NodeOutcome,
    settled_nodes_only: bool,
    /// Keep a request we stopped waiting for running until its connection has taken it.
    ///
    /// The redis crate's multiplexed connection skips a queued request whose caller went away
    /// before the connection's driver took it: behind a master that stopped reading (its
    /// buffers full), a compare-and-delete whose timeout fired would never be sent, and the
    /// released lock's key would outlive the master's recovery until its ttl. So a release
    /// is never dropped: once we stop waiting, a background task keeps it alive until it is
    /// answered or its connection breaks. Other requests may be dropped: an acquire or extend
    /// that never reaches the server does no harm.
    deliver_anyway: bool,
}

enum Wire {
    Script {
        script: &'static Script,
        evalsha: redis::Cmd,
        /// The same script with its last argument `1`, for the nodes marked (extend's re-add).
        marked: Option<(Vec<bool>, redis::Cmd)>,
        /// Append the server's `run_id` to the arguments (see `Lua::takes_run_id`).
        run_id: bool,
        /// Append each node's own value (see `Request::epochs`).
        per_node: Option<Vec<Option<u64>>>,
    },
    SetIfAbsent(redis::Cmd),
}

impl Prepared {
    fn new(request: &Request) -> Self {
        let wire = match request.command {
            Command::Script(lua) => {
                let script = lua.script();
                let mut evalsha = redis::cmd("EVALSHA");
                evalsha
                    .arg(script.get_hash())
                    .arg(1 + request.extra_keys.len())
                    .arg(request.key.as_slice());
                for extra in &request.extra_keys {
                    evalsha.arg(extra.as_slice());
                }
                evalsha.arg(request.token.as_str());
                if let Some(number) = request.number {
                    evalsha.arg(number);
                }
                for payload in &request.payload {
                    evalsha.arg(payload.as_slice());
                }
                let marked = request.readd_on.as_ref().map(|nodes| {
                    let mut marked = evalsha.clone();
                    marked.arg("1");
                    evalsha.arg("0");
                    (nodes.clone(), marked)
                });
                Wire::Script {
                    script,
                    evalsha,
                    marked,
                    run_id: lua.takes_run_id(),
                    per_node: request.epochs.clone(),
                }
            }
            Command::SetIfAbsent => {
                let mut set = redis::cmd("SET");
                set.arg(request.key.as_slice())
                    .arg(request.token.as_str())
                    .arg("NX")
                    .arg("PX")
                    .arg(request.number.unwrap_or(0));
                Wire::SetIfAbsent(set)
            }
        };
        Self {
            wire,
            done: request.done.clone(),
            settled_nodes_only: request.settled_nodes_only,
            deliver_anyway: request.operation == Operation::Release,
        }
    }

    /// Sends the request on `conn`; a script the server does not know (a restarted node, a
    /// `SCRIPT FLUSH`) is loaded and sent once more.
    async fn send(
        &self,
        conn: &mut MultiplexedConnection,
        node: usize,
        server_run: Option<&str>,
    ) -> redis::RedisResult<Value> {
        match &self.wire {
            Wire::Script {
                script,
                evalsha,
                marked,
                run_id,
                per_node,
            } => {
                let cmd = match marked {
                    Some((nodes, marked)) if nodes.get(node) == Some(&true) => marked,
                    _ => evalsha,
                };
                let extended;
                let cmd = match (server_run.filter(|_| *run_id), per_node) {
                    (Some(server_run), _) => {
                        let mut with_run_id = cmd.clone();
                        with_run_id.arg(server_run);
                        extended = with_run_id;
                        &extended
                    }
                    (None, Some(values)) => {
                        let mut with_value = cmd.clone();
                        match values.get(node).copied().flatten() {
                            Some(value) => with_value.arg(value),
                            None => with_value.arg(""),
                        };
                        extended = with_value;
                        &extended
                    }
                    (None, None) => cmd,
                };
                match cmd.query_async(conn).await {
                    Err(err)
                        if err.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript) =>
                    {
                        script.load_async(conn).await?;
                        cmd.query_async(conn).await
                    }
                    answer => answer,
                }
            }
            Wire::SetIfAbsent(set) => set.query_async(conn).await,
        }
    }

    /// Whether the request may be sent a second time (a script after `NOSCRIPT`): then it is
    /// ordered on its connection only once answered, not once queued.
    fn resendable(&self) -> bool {
        matches!(self.wire, Wire::Script { .. })
    }

    /// Whether the request carries the server's `run_id`, so cannot go to a server that
    /// would not say it.
    fn needs_run_id(&self) -> bool {
        matches!(self.wire, Wire::Script { run_id: true, .. })
    }

    fn classify(&self, reply: Value) -> (NodeOutcome, Option<Grant>) {
        match self.wire {
            Wire::Script { .. } => classify(reply, &self.done),
            Wire::SetIfAbsent(_) => classify_set_if_absent(reply, &self.done),
        }
    }
}

/// Sends the request to one node and classifies its answer. Unbounded: the caller bounds it.
/// `queued` runs once the request is handed to the node's connection (first in line behind
/// what was handed before), whether or not it was answered yet.
async fn ask(
    node: &Node,
    request: &Prepared,
    queued: impl FnOnce(),
) -> (NodeOutcome, Option<Grant>) {
    let call = async {
        let ready = node.connection().await?;
        if request.settled_nodes_only {
            node.check_settled(&ready)?;
        }
        if request.needs_run_id() && ready.run_id.is_none() {
            return Err(NodeError::Unidentified);
        }
        let (mut conn, generation) = (ready.conn, ready.generation);
        let send = request.send(&mut conn, node.id().index(), ready.run_id.as_deref());
        tokio::pin!(send);
        // The first poll hands the command to the connection's queue (or to the line of
        // senders waiting for room in it, served in order).
        let first = futures::poll!(send.as_mut());
        queued();
        let answer = match first {
            std::task::Poll::Ready(answer) => answer,
            std::task::Poll::Pending => send.await,
        };
        // Something came back from the server (or the connection broke): not hung.
        node.set_suspect(false);
        answer.map_err(|err| {
            if breaks_connection(&err) {
                node.report_broken(generation);
            }
            if err.kind() == redis::ErrorKind::Server(ServerErrorKind::ReadOnly) {
                tracing::warn!(
                    node = %node.id(),
                    "node is a read-only replica: Redlock needs N independent masters, \
                     a replica cannot vote and must not be listed"
                );
            }
            NodeError::Redis(err)
        })
    };
    match call.await {
        Err(err) => (NodeOutcome::Failed(err), None),
        Ok(reply) => request.classify(reply),
    }
}

/// The reply to `SET key token NX PX ttl`: `OK` is a grant, nil another owner's key (its
/// ttl unknown until the cleanup asks). Total, like [`classify`].
pub(crate) fn classify_set_if_absent(
    reply: Value,
    done: &NodeOutcome,
) -> (NodeOutcome, Option<Grant>) {
    match reply {
        Value::Okay => (done.clone(), None),
        Value::Nil => (NodeOutcome::HeldByOther { expires_in: None }, None),
        other => (unexpected(&other), None),
    }
}

/// What one master's grant of a fenced acquire says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Grant {
    /// The fence counter after the grant's increment.
    pub(crate) counter: u64,
    /// The master's re-seed epoch at the grant, which its confirm must name
    /// (`scripts::CONFIRM_FENCE`).
    pub(crate) epoch: u64,
}

/// What a script's reply says about the node, and what a fenced acquire's grant returned.
/// Total: any reply shape, including ones no script of ours sends, is an outcome (an unexpected
/// one is a failed vote), never a panic.
pub(crate) fn classify(reply: Value, done: &NodeOutcome) -> (NodeOutcome, Option<Grant>) {
    match reply {
        Value::Int(code) => (classify_code(code, done), None),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(-1), Value::Int(counter), Value::Int(epoch)] => {
                match (u64::try_from(*counter), u64::try_from(*epoch)) {
                    (Ok(counter), Ok(epoch)) => (done.clone(), Some(Grant { counter, epoch })),
                    _ => (unexpected(&Value::Array(items)), None),
                }
            }
            _ => (unexpected(&Value::Array(items)), None),
        },
        other => (unexpected(&other), None),
    }
}

fn unexpected(reply: &Value) -> NodeOutcome {
    let mut shown = format!("{reply:?}");
    truncate_on_char_boundary(&mut shown, SHOWN_REPLY_LEN);
    NodeOutcome::Failed(NodeError::UnexpectedReply(shown))
}

pub(crate) fn classify_code(code: i64, done: &NodeOutcome) -> NodeOutcome {
    match ScriptReply::from_code(code) {
        Some(ScriptReply::Done) => done.clone(),
        Some(ScriptReply::Missing) => NodeOutcome::Missing,
        Some(ScriptReply::Readded) => NodeOutcome::Readded,
        Some(ScriptReply::Unseeded) => NodeOutcome::Failed(NodeError::Unseeded),
        Some(ScriptReply::SeededSinceGrant) => NodeOutcome::Failed(NodeError::SeededSinceGrant),
        Some(ScriptReply::Foreign { expires_in_ms }) => NodeOutcome::HeldByOther {
            expires_in: expires_in_ms.map(Duration::from_millis),
        },
        None => NodeOutcome::Failed(NodeError::UnexpectedReply(code.to_string())),
    }
}

/// How much of an unexpected reply a report keeps, in bytes.
const SHOWN_REPLY_LEN: usize = 120;

fn truncate_on_char_boundary(text: &mut String, max: usize) {
    if text.len() > max {
        let cut = (0..=max)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        text.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    fn random_value(rng: &mut StdRng, depth: u32) -> Value {
        let kinds = if depth == 0 { 8 } else { 12 };
        match rng.random_range(0..kinds) {
            0 => Value::Nil,
            1 | 2 => Value::Int(match rng.random_range(0..4) {
                0 => rng.random_range(-5..5),
                1 => i64::MIN,
                2 => i64::MAX,
                _ => rng.random(),
            }),
            3 => Value::BulkString(
                (0..rng.random_range(0..300))
                    .map(|_| rng.random())
                    .collect(),
            ),
            4 => Value::SimpleString("OK\r\n\u{fffd}é".repeat(rng.random_range(0..50))),
            5 => Value::Okay,
            6 => Value::Double(f64::from_bits(rng.random())),
            7 => Value::Boolean(rng.random()),
            8 => Value::Array(
                (0..rng.random_range(0..4))
                    .map(|_| random_value(rng, depth - 1))
                    .collect(),
            ),
            9 => Value::Set(
                (0..rng.random_range(0..4))
                    .map(|_| random_value(rng, depth - 1))
                    .collect(),
            ),
            10 => Value::Map(
                (0..rng.random_range(0..3))
                    .map(|_| (random_value(rng, depth - 1), random_value(rng, depth - 1)))
                    .collect(),
            ),
            _ => Value::Attribute {
                data: Box::new(random_value(rng, depth - 1)),
                attributes: vec![(random_value(rng, depth - 1), random_value(rng, depth - 1))],
            },
        }
    }

    /// Property: every reply shape classifies without panicking; only the integers our scripts
    /// send count as an answer, everything else is a failed vote with a bounded description.
    #[test]
    fn every_reply_shape_classifies() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        for _ in 0..100_000 {
            let reply = random_value(&mut rng, 3);
            let expected = match &reply {
                Value::Int(-1) => "done",
                Value::Int(-2) => "missing",
                Value::Int(-5) => "readded",
                Value::Int(-6) => "unseeded",
                Value::Int(-7) => "seeded since grant",
                Value::Int(n) if *n >= 0 || *n == -3 => "held",
                Value::Array(items) => match items.as_slice() {
                    [Value::Int(-1), Value::Int(f), Value::Int(e)] if *f >= 0 && *e >= 0 => "done",
                    _ => "failed",
                },
                _ => "failed",
            };
            let (outcome, fence) = classify(reply.clone(), &NodeOutcome::Granted);
            assert_eq!(
                fence.is_some(),
                matches!(&reply, Value::Array(_)) && expected == "done"
            );
            let got = match &outcome {
                NodeOutcome::Granted => "done",
                NodeOutcome::Missing => "missing",
                NodeOutcome::Readded => "readded",
                NodeOutcome::Failed(NodeError::Unseeded) => "unseeded",
                NodeOutcome::Failed(NodeError::SeededSinceGrant) => "seeded since grant",
                NodeOutcome::HeldByOther { .. } => "held",
                NodeOutcome::Failed(NodeError::UnexpectedReply(shown)) => {
                    assert!(shown.len() <= SHOWN_REPLY_LEN);
                    "failed"
                }
                other => panic!("{reply:?} became {other:?}"),
            };
            assert_eq!(got, expected, "{reply:?}");
        }
    }

    /// Property: every reply to the plain acquire classifies without panicking; only `OK` is
    /// a grant, only nil a holder, anything else a failed vote.
    #[test]
    fn every_set_if_absent_reply_classifies() {
        let mut rng = StdRng::seed_from_u64(0x5e7);
        for _ in 0..100_000 {
            let reply = random_value(&mut rng, 3);
            let expected = match &reply {
                Value::Okay => "done",
                Value::Nil => "held",
                _ => "failed",
            };
            let (outcome, fence) = classify_set_if_absent(reply.clone(), &NodeOutcome::Granted);
            assert!(fence.is_none());
            let got = match &outcome {
                NodeOutcome::Granted => "done",
                NodeOutcome::HeldByOther { expires_in: None } => "held",
                NodeOutcome::Failed(NodeError::UnexpectedReply(shown)) => {
                    assert!(shown.len() <= SHOWN_REPLY_LEN);
                    "failed"
                }
                other => panic!("{reply:?} became {other:?}"),
            };
            assert_eq!(got, expected, "{reply:?}");
        }
    }

    #[test]
    fn held_replies_carry_the_remaining_ttl() {
        let (held, _) = classify(Value::Int(1500), &NodeOutcome::Released);
        assert!(
            matches!(held, NodeOutcome::HeldByOther { expires_in: Some(d) } if d == Duration::from_millis(1500))
        );
        let (forever, _) = classify(Value::Int(-3), &NodeOutcome::Released);
        assert!(matches!(
            forever,
            NodeOutcome::HeldByOther { expires_in: None }
        ));
        assert!(matches!(
            classify(Value::Int(-1), &NodeOutcome::Released),
            (NodeOutcome::Released, None)
        ));
        let fenced = classify(
            Value::Array(vec![Value::Int(-1), Value::Int(41), Value::Int(3)]),
            &NodeOutcome::Granted,
        );
        assert!(matches!(
            fenced,
            (
                NodeOutcome::Granted,
                Some(Grant {
                    counter: 41,
                    epoch: 3
                })
            )
        ));
        for bad in [[-1, -5, 0], [-1, 5, -1]] {
            let negative = classify(
                Value::Array(bad.iter().map(|n| Value::Int(*n)).collect()),
                &NodeOutcome::Granted,
            );
            assert!(matches!(negative, (NodeOutcome::Failed(_), None)));
        }
        // The reply of the fenced acquire before re-seeding (no epoch) is not a grant.
        let old = classify(
            Value::Array(vec![Value::Int(-1), Value::Int(41)]),
            &NodeOutcome::Granted,
        );
        assert!(matches!(old, (NodeOutcome::Failed(_), None)));
    }

    #[test]
    fn truncation_respects_utf8() {
        let mut s = "é".repeat(100);
        truncate_on_char_boundary(&mut s, 121);
        assert_eq!(s.len(), 120);
        let mut short = String::from("abc");
        truncate_on_char_boundary(&mut short, 120);
        assert_eq!(short, "abc");
    }
}
