//! What the engine needs of one voter, and the real voter: a Redis master behind its
//! multiplexed connection ([`Node`]).
//!
//! The seam lets the engine's timing (early decision, the round's one deadline, stragglers,
//! suspect voters) be tested without servers, with scripted voters in virtual time (the tests
//! in `round.rs`).

use std::future::Future;

use redis::ServerErrorKind;

use crate::node::{Node, breaks_connection};
use crate::node_error::NodeError;
use crate::node_id::NodeId;
use crate::report::NodeOutcome;
use crate::request::{Grant, Prepared};

/// One voter of a round.
pub(crate) trait Voter: Send + Sync + 'static {
    /// Who it is, for the report.
    fn id(&self) -> &NodeId;

    /// Whether a request to it timed out and nothing was heard from it since: a round that
    /// waits for every voter stops waiting for a suspect one once decided without it.
    fn is_suspect(&self) -> bool;

    /// Marks it suspect (a request timed out) or not (it answered).
    fn set_suspect(&self, suspect: bool);

    /// The server inside the voter it speaks for now, when that can change (a
    /// Sentinel-resolved voter), for the report.
    fn server(&self) -> Option<std::sync::Arc<str>> {
        None
    }

    /// Sends `request` and classifies the answer. Unbounded: the caller bounds it. `queued`
    /// runs once the request is handed to the voter's connection (first in line behind what
    /// was handed before), whether or not it was answered yet. Whatever comes back once the
    /// request was sent (a reply, an error, a broken connection) clears the voter's suspicion;
    /// a failure before sending (no connection yet, restart grace) does not.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the request; one already queued on the connection may
    /// still reach the server (see `Prepared::deliver_anyway`).
    fn ask(
        &self,
        request: &Prepared,
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

    fn server(&self) -> Option<std::sync::Arc<str>> {
        Node::server(self)
    }

    async fn ask(
        &self,
        request: &Prepared,
        queued: impl FnOnce() + Send,
    ) -> (NodeOutcome, Option<Grant>) {
        let call = async {
            let ready = self.connection().await?;
            if request.settled_nodes_only {
                self.check_settled(&ready)?;
            }
            if request.needs_run_id() && ready.run_id.is_none() {
                return Err(NodeError::Unidentified);
            }
            let (mut conn, generation) = (ready.conn, ready.generation);
            let send = request.send(&mut conn, self.id().index(), ready.run_id.as_deref());
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
            self.set_suspect(false);
            answer.map_err(|err| {
                let read_only = err.kind() == redis::ErrorKind::Server(ServerErrorKind::ReadOnly);
                if breaks_connection(&err) {
                    self.report_broken(generation);
                } else if read_only && self.follows_failovers() {
                    // A failover demoted the server this voter spoke for: reconnect, and the
                    // sentinels name the new master.
                    tracing::info!(node = %self.id(), "the voter's server was demoted; looking its master up again");
                    self.report_broken(generation);
                } else if read_only {
                    tracing::warn!(
                        node = %self.id(),
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
}
