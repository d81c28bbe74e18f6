//! Reads sent to every node at once, outside the round machinery: no vote and no tally; the
//! caller says when the answers decide (inspection and the leader's info).

use std::time::{Duration, Instant};

use crate::core::node_id::NodeId;
use crate::engine::gather::gather;
use crate::errors::node_error::NodeError;
use crate::voters::node::Node;

/// Sends `pipeline` (about `key` and keys of its hash slot) to every node at once, each node
/// bounded by `timeout` (waiting for its connection included), and waits for the answers as
/// [`gather`] does: every one until `decided` says those so far settle the question, then a
/// grace of at least `grace_floor`. A node not waited for is [`NodeError::TimedOut`] with the
/// time it was given. Answers are in node order, each with the time since the start. A
/// cluster's redirection is not followed here (it is a failed read), but the slot is routed
/// right from then on.
///
/// # Cancel safety
/// Cancel safe: a read that is dropped changes nothing on the servers.
pub(crate) async fn query_everywhere<T: redis::FromRedisValue>(
    nodes: &[Node],
    key: &[u8],
    pipeline: &redis::Pipeline,
    timeout: Duration,
    decided: impl Fn(&[Option<(Result<T, NodeError>, Duration)>]) -> bool,
    grace_floor: Duration,
) -> Vec<(NodeId, Result<T, NodeError>, Duration)> {
    let start = Instant::now();
    let asks = nodes.iter().map(|node| async move {
        let read = async {
            let ready = node.connection(key).await?;
            let mut conn = ready.conn.clone();
            pipeline.query_async(&mut conn).await.map_err(|err| {
                node.learn(&err, &ready);
                NodeError::Redis(err)
            })
        };
        let answer = match tokio::time::timeout(timeout, read).await {
            Ok(answer) => answer,
            Err(_) => Err(NodeError::TimedOut(timeout)),
        };
        (answer, start.elapsed())
    });
    let answers = gather(asks, decided, grace_floor).await;
    let waited = start.elapsed();
    nodes
        .iter()
        .zip(answers)
        .map(|(node, answer)| {
            let (answer, latency) =
                answer.unwrap_or_else(|| (Err(NodeError::TimedOut(waited)), waited));
            (node.id().clone(), answer, latency)
        })
        .collect()
}
