//! One quorum round: the same script sent to every node at once, decided at the majority.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::Script;
use tokio::sync::watch;

use crate::error::NodeError;
use crate::node::{Node, breaks_connection};
use crate::quorum::{Decision, Tally};
use crate::redlock::RedLock;
use crate::report::{NodeOutcome, NodeReport, Report};
use crate::scripts::ScriptReply;

/// What to send to every node.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) script: &'static Script,
    pub(crate) key: Vec<u8>,
    pub(crate) token: String,
    /// The ttl argument in ms, for the scripts that take one.
    pub(crate) ttl_ms: Option<u64>,
    /// What a node that did what we asked is reported as.
    pub(crate) done: NodeOutcome,
    /// Skip nodes still within their restart grace (acquire only: they must not vote).
    pub(crate) settled_nodes_only: bool,
}

/// How long a round waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Until the round is won or lost; nodes that have not answered by then go on in the
    /// background (see [`Stragglers`]).
    UntilDecided,
    /// Until every node has answered or timed out (release: we want every key gone).
    ForAll,
}

/// Requests of a decided round that were still running at the decision.
///
/// They keep running in a background task, each bounded by the per-node timeout, so a slow
/// node still gets the key (and a lock survives later node failures better) and the scripts
/// finish loading. A later compare-and-delete on one of these nodes must wait for them: a
/// request still waiting for a connection, or between `NOSCRIPT` and its retry, could otherwise
/// land after the delete and leave a key behind.
#[derive(Debug, Clone)]
pub(crate) struct Stragglers {
    nodes: Arc<[bool]>,
    done: watch::Receiver<bool>,
}

impl Stragglers {
    /// Waits until the request to `index` has finished, if it was a straggler.
    async fn settled(&self, index: usize) {
        if self.nodes.get(index).copied().unwrap_or(false) {
            let mut done = self.done.clone();
            // An error means the task is gone (its runtime shut down): nothing left to wait for.
            let _ = done.wait_for(|finished| *finished).await;
        }
    }
}

/// A finished round.
#[derive(Debug)]
pub(crate) struct Round {
    /// Taken before the first request was created: the start of the validity clock.
    pub(crate) start: Instant,
    /// When the round was decided (or every node had answered).
    pub(crate) decided: Instant,
    pub(crate) tally: Tally,
    pub(crate) report: Report,
    pub(crate) stragglers: Option<Stragglers>,
}

impl Round {
    pub(crate) fn elapsed(&self) -> Duration {
        self.decided.saturating_duration_since(self.start)
    }
}

/// Sends `request` to every node of `redlock` in parallel, each bounded by `per_node_timeout`.
///
/// With `after`, a node's request is sent only once that node's straggler from an earlier round
/// has finished.
pub(crate) async fn run(
    redlock: &RedLock,
    request: Request,
    per_node_timeout: Duration,
    wait: Wait,
    after: Option<&Stragglers>,
) -> Round {
    let request = Arc::new(request);
    let count = redlock.nodes().len();
    let start = Instant::now();
    let mut pending: FuturesUnordered<_> = (0..count)
        .map(|index| {
            let redlock = redlock.clone();
            let request = request.clone();
            let after = after.cloned();
            async move {
                if let Some(after) = &after {
                    after.settled(index).await;
                }
                let outcome = match redlock.nodes().get(index) {
                    Some(node) => ask(node, &request, per_node_timeout).await,
                    None => NodeOutcome::NoReply,
                };
                (index, outcome, start.elapsed())
            }
        })
        .collect();
    let mut answers: Vec<Option<(NodeOutcome, Duration)>> = vec![None; count];
    let mut tally = Tally::new(count);
    while let Some((index, outcome, latency)) = pending.next().await {
        tally.record(outcome.vote());
        tracing::trace!(node = index, %outcome, ?latency, "node answered");
        if let Some(slot) = answers.get_mut(index) {
            *slot = Some((outcome, latency));
        }
        if wait == Wait::UntilDecided && tally.decision() != Decision::Open {
            break;
        }
    }
    let decided = Instant::now();
    tracing::debug!(
        script = request.script.get_hash(),
        decision = ?tally.decision(),
        elapsed = ?decided.saturating_duration_since(start),
        pending = pending.len(),
        "round decided"
    );
    let stragglers = (!pending.is_empty()).then(|| {
        let nodes: Arc<[bool]> = answers.iter().map(Option::is_none).collect();
        let (finished, done) = watch::channel(false);
        tokio::spawn(async move {
            while let Some((index, outcome, latency)) = pending.next().await {
                tracing::debug!(node = index, %outcome, ?latency, "answer after the round was decided");
            }
            finished.send_replace(true);
        });
        Stragglers { nodes, done }
    });
    let report = redlock
        .nodes()
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
        decided,
        tally,
        report: Report::new(report),
        stragglers,
    }
}

async fn ask(node: &Node, request: &Request, per_node_timeout: Duration) -> NodeOutcome {
    let call = async {
        let ready = node.connection().await?;
        if request.settled_nodes_only {
            node.check_settled(&ready)?;
        }
        let (mut conn, generation) = (ready.conn, ready.generation);
        let mut invocation = request.script.key(request.key.as_slice());
        invocation.arg(request.token.as_str());
        if let Some(ttl_ms) = request.ttl_ms {
            invocation.arg(ttl_ms);
        }
        invocation
            .invoke_async::<i64>(&mut conn)
            .await
            .map_err(|err| {
                if breaks_connection(&err) {
                    node.report_broken(generation);
                }
                NodeError::Redis(err)
            })
    };
    match tokio::time::timeout(per_node_timeout, call).await {
        Err(_) => NodeOutcome::Failed(NodeError::TimedOut(per_node_timeout)),
        Ok(Err(err)) => NodeOutcome::Failed(err),
        Ok(Ok(code)) => match ScriptReply::from_code(code) {
            Some(ScriptReply::Done) => request.done.clone(),
            Some(ScriptReply::Missing) => NodeOutcome::Missing,
            Some(ScriptReply::Foreign { expires_in_ms }) => NodeOutcome::HeldByOther {
                expires_in: expires_in_ms.map(Duration::from_millis),
            },
            None => NodeOutcome::Failed(NodeError::UnexpectedReply(code)),
        },
    }
}
