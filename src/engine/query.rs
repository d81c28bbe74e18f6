//! Reads sent to every node at once, outside the round machinery: no vote, no tally, every
//! answer waited for (inspection and the leader's info).

use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::core::node_id::NodeId;
use crate::errors::node_error::NodeError;
use crate::voters::node::Node;

/// Sends `pipeline` (about `key` and keys of its hash slot) to every node at once and waits
/// for every answer, each node bounded by `timeout` (waiting for its connection included).
/// Answers are in node order, each with the time since the start. A cluster's redirection is
/// not followed here (it is a failed read), but the slot is routed right from then on.
///
/// # Cancel safety
/// Cancel safe: a read that is dropped changes nothing on the servers.
pub(crate) async fn query_everywhere<T: redis::FromRedisValue>(
    nodes: &[Node],
    key: &[u8],
    pipeline: &redis::Pipeline,
    timeout: Duration,
) -> Vec<(NodeId, Result<T, NodeError>, Duration)> {
    let start = Instant::now();
    join_all(nodes.iter().map(|node| async move {
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
        (node.id().clone(), answer, start.elapsed())
    }))
    .await
}
