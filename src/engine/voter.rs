//! What the engine needs of one voter, and the real voter: a Redis master behind its
//! multiplexed connection ([`Node`]).
//!
//! The seam lets the engine's timing (early decision, the round's one deadline, stragglers,
//! suspect voters) be tested without servers, with scripted voters in virtual time (the tests
//! in `round.rs`).

use std::future::Future;

use redis::ServerErrorKind;

use crate::core::node_id::NodeId;
use crate::core::report::NodeOutcome;
use crate::engine::classify::Grant;
use crate::engine::encoded::{EncodedRequest, Part};
use crate::errors::node_error::NodeError;
use crate::voters::node::Node;
use crate::voters::server_link::{Connected, breaks_connection};

/// How often a request a cluster answered `TRYAGAIN` (its slot is being moved) is sent again.
const TRY_AGAIN_RETRIES: u32 = 10;
/// How long to wait before sending it again: the ten retries span about the time a
/// resharding takes to move one batch of a slot's keys.
const TRY_AGAIN_DELAY: std::time::Duration = std::time::Duration::from_millis(20);

/// One voter of a round.
pub(crate) trait Voter: Send + Sync + 'static {
    /// Who it is, for the report.
    fn id(&self) -> &NodeId;

    /// Whether a request to it timed out and nothing was heard from it since: a round that
    /// waits for every voter stops waiting for a suspect one once decided without it.
    fn is_suspect(&self) -> bool;

    /// Marks it suspect (a request timed out) or not (it answered).
    fn set_suspect(&self, suspect: bool);

    /// The server inside the voter that serves `key` now, when that can change (a
    /// Sentinel-resolved voter, a cluster's shard), for the report.
    fn server(&self, _key: &[u8]) -> Option<std::sync::Arc<str>> {
        None
    }

    /// Sends `request` and classifies the answer. Unbounded: the caller bounds it. `queued`
    /// runs once the request is handed to the voter's connection (first in line behind what
    /// was handed before), whether or not it was answered yet; a voter that may send the
    /// request again on another connection (a Redis Cluster's redirections) never runs it, and
    /// the round orders the request once it is answered. Whatever comes back once the
    /// request was sent (a reply, an error, a broken connection) clears the voter's suspicion;
    /// a failure before sending (no connection yet, restart grace) does not.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the request; one already queued on the connection may
    /// still reach the server (see `EncodedRequest::deliver_anyway`).
    fn ask(
        &self,
        request: &EncodedRequest,
        queued: impl FnOnce() + Send,
    ) -> impl Future<Output = (NodeOutcome, Option<Grant>)> + Send;
}

impl Voter for Node {
    fn id(&self) -> &NodeId {
        Node::id(self)
    }

    fn is_suspect(&self) -> bool {
        Node::is_suspect(self)
    }

    fn set_suspect(&self, suspect: bool) {
        Node::set_suspect(self, suspect);
    }

    fn server(&self, key: &[u8]) -> Option<std::sync::Arc<str>> {
        Node::server(self, key)
    }

    async fn ask(
        &self,
        request: &EncodedRequest,
        queued: impl FnOnce() + Send,
    ) -> (NodeOutcome, Option<Grant>) {
        // A request to a Cluster voter may be redirected and sent again elsewhere, so it is
        // ordered only once answered (the round marks it then), not once queued.
        let mut queued = (!self.is_cluster()).then_some(queued);
        let mut answer = exchange(self, request, None, &mut queued).await;
        if request.has_parts() && matches!(&answer, Err(NodeError::Redis(err)) if is_try_again(err))
        {
            // Its keys are half moved, and stay refused until the whole slot has moved: sent
            // in parts of one key each (see `InParts`), every part tried even when one fails,
            // so as little as possible is left behind.
            tracing::debug!(node = %self.id(), "a slot is half moved: sending the request key by key");
            // Boxed: rare, and a second `exchange` held beside the first would double the
            // size of every request's future (3,000 bytes against 1,400 measured), which the
            // round allocates once per node.
            answer = Box::pin(in_parts(self, request)).await;
        }
        match answer {
            Err(err) => (NodeOutcome::Failed(err), None),
            Ok(reply) => request.classify(reply),
        }
    }
}

/// Sends each part of `request` on its own (see `InParts`) and combines their answers.
///
/// # Cancel safety
/// As `Voter::ask`.
async fn in_parts(node: &Node, request: &EncodedRequest) -> Result<redis::Value, NodeError> {
    let mut answers = Vec::with_capacity(request.parts().len());
    for part in request.parts() {
        answers.push(exchange(node, request, Some(part), &mut None::<fn()>).await);
    }
    request.combine(answers)
}

/// Whether the cluster refused a multi-key request because its slot is half moved.
fn is_try_again(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(ServerErrorKind::TryAgain)
}

/// Sends `request` to `node`, or its part `part` (see `InParts`), following the cluster's
/// redirections. A part is routed afresh by its own key, as the whole was, never sent where
/// the whole was refused: which master refused says nothing about where one key is. (Before
/// Redis 7.0 the importing master answered `TRYAGAIN`: a part sent there after `ASKING` could
/// run without its key; untested, only 7.0 is at hand.) `queued` runs once the request is handed to
/// the connection (see `Voter::ask`).
///
/// # Cancel safety
/// As `Voter::ask`.
async fn exchange(
    node: &Node,
    request: &EncodedRequest,
    part: Option<&Part>,
    queued: &mut Option<impl FnOnce() + Send>,
) -> Result<redis::Value, NodeError> {
    let key = part.map_or(request.key(), Part::key);
    let ready = node.connection(key).await?;
    match send_on(node, request, part, (&ready, false), queued).await? {
        Ok(reply) => Ok(reply),
        // Boxed: an error answer is rare, and the future that handles it (a cluster's
        // redirections, `TRYAGAIN`'s waits) would size every request's, which a round
        // allocates once per node.
        Err(err) => Box::pin(after_error(node, request, part, ready, err)).await,
    }
}

/// Sends `request` (or its `part`) once on `ready` (with `ASKING` first when `asking`), unless
/// that connection may not carry it; `queued` runs once the command is handed to the
/// connection. The outer error: not sent; the inner one: the server's (or the connection's).
///
/// # Cancel safety
/// As `Voter::ask`.
async fn send_on(
    node: &Node,
    request: &EncodedRequest,
    part: Option<&Part>,
    (ready, asking): (&Connected, bool),
    queued: &mut Option<impl FnOnce() + Send>,
) -> Result<redis::RedisResult<redis::Value>, NodeError> {
    if request.settled_nodes_only {
        node.check_settled(ready)?;
    }
    if request.needs_run_id() && ready.run_id.is_none() {
        return Err(NodeError::Unidentified);
    }
    let mut conn = ready.conn.clone();
    let send = async {
        match part {
            None => {
                request
                    .send(
                        &mut conn,
                        (node.id().index(), ready.run_id.as_deref()),
                        asking,
                        &ready.native,
                    )
                    .await
            }
            Some(part) => part.send(&mut conn, asking).await,
        }
    };
    tokio::pin!(send);
    // The first poll hands the command to the connection's queue (or to the line of
    // senders waiting for room in it, served in order). Polled by hand, so no first answer
    // is kept beside the request's future while it waits.
    let mut queued = queued.take();
    let answer = std::future::poll_fn(|cx| {
        let poll = send.as_mut().poll(cx);
        if let Some(queued) = queued.take() {
            queued();
        }
        poll
    })
    .await;
    // Something came back from the server (or the connection broke): not hung.
    node.set_suspect(false);
    Ok(answer)
}

/// What [`exchange`] does once the server answered `err` on `ready`: waits and sends again
/// while a cluster's slot is half moved (`TRYAGAIN`), follows its redirections, or reports
/// the error (and a connection it broke, or a server that was demoted).
///
/// # Cancel safety
/// As `Voter::ask`.
async fn after_error(
    node: &Node,
    request: &EncodedRequest,
    part: Option<&Part>,
    mut ready: Connected,
    mut err: redis::RedisError,
) -> Result<redis::Value, NodeError> {
    let mut asking = false;
    // A slot being moved can take two redirections (`MOVED` to its new master, which answers
    // `ASK` while some keys are still on the way); more mean the cluster is moving it again,
    // and this vote is simply not had this time.
    let mut redirections_left = 2;
    let mut retries_left = TRY_AGAIN_RETRIES;
    loop {
        let try_again = is_try_again(&err);
        if try_again && part.is_none() && request.has_parts() {
            // Sent in parts instead, by the caller.
            return Err(NodeError::Redis(err));
        }
        let again = if try_again && retries_left > 0 {
            // A multi-key script on a slot whose keys are half moved: not run, and runnable
            // once the keys have moved (a migration moves them in batches).
            retries_left -= 1;
            tokio::time::sleep(TRY_AGAIN_DELAY).await;
            true
        } else if redirections_left > 0 {
            redirections_left -= 1;
            // A redirected request was not run: sent again to the master named.
            match node.redirect(&err, &ready).await {
                Some(redirected) => {
                    let redirected = redirected?;
                    tracing::debug!(node = %node.id(), error = %err, "following the cluster's redirection");
                    ready = redirected.ready;
                    asking = redirected.asking;
                    true
                }
                None => false,
            }
        } else {
            false
        };
        if again {
            match send_on(node, request, part, (&ready, asking), &mut None::<fn()>).await? {
                Ok(reply) => return Ok(reply),
                Err(next) => {
                    err = next;
                    continue;
                }
            }
        }
        let read_only = err.kind() == redis::ErrorKind::Server(ServerErrorKind::ReadOnly);
        if breaks_connection(&err) {
            ready.report_broken();
        } else if read_only && node.follows_failovers() {
            // A failover demoted the server this voter spoke for: reconnect, and the sentinels
            // name the new master.
            tracing::info!(node = %node.id(), "the voter's server was demoted; looking its master up again");
            ready.report_broken();
        } else if read_only {
            tracing::warn!(
                node = %node.id(),
                "node is a read-only replica: Redlock needs N independent masters, a replica \
                 cannot vote and must not be listed"
            );
        }
        return Err(NodeError::answered(err));
    }
}
