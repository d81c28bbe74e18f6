//! Undoing a round that did not produce a lock, even when its caller goes away.

use std::sync::Arc;
use std::time::Duration;

use crate::core::report::Report;
use crate::core::token::Token;
use crate::engine::round::Stragglers;
use crate::protocol::queue::Queue;
use crate::protocol::release::{Delete, release_everywhere};
use crate::protocol::shared::Shared;

/// While armed, owns the duty to delete one round's key from every node.
///
/// [`Cleanup::run`] does it inline; if the guard is dropped while armed (the acquire future was
/// cancelled mid-round), it spawns the same compare-and-delete on the current tokio runtime.
/// Compare-and-delete only removes a key that still holds this round's token, so running it
/// twice, or after the key expired, is harmless.
#[derive(Debug)]
pub(crate) struct Cleanup {
    armed: Option<Arc<Shared>>,
    key: Vec<u8>,
    token: Token,
    per_node_timeout: Duration,
    after: Option<Stragglers>,
    /// What the delete does besides: [`Delete::Silent`] for a failed round (or
    /// [`Delete::SilentAndQueue`] once [`queue_as`](Self::queue_as) says so),
    /// [`Delete::Release`] for a dropped lock.
    delete: Delete,
}

impl Cleanup {
    pub(crate) fn arm(
        shared: Arc<Shared>,
        key: Vec<u8>,
        token: Token,
        per_node_timeout: Duration,
        delete: Delete,
    ) -> Self {
        Self {
            armed: Some(shared),
            key,
            token,
            per_node_timeout,
            after: None,
            delete,
        }
    }

    /// [`run`](Self::run) also joins `queue` (the spawned cleanup of a dropped future does
    /// not: the queue's own `Drop` leaves it): a lock's silent delete becomes
    /// [`Delete::SilentAndQueue`], a failed permit round's give-back (over every permit, with
    /// the record) [`Delete::GiveBackAndQueue`], a failed read round's delete of its share
    /// [`Delete::ReleaseRead`] with the queue's arguments.
    pub(crate) fn queue_as(&mut self, queue: &Queue) {
        let (keys, arguments) = queue.arguments();
        self.delete = match std::mem::replace(&mut self.delete, Delete::Silent) {
            Delete::GiveBack {
                others,
                record: Some(record),
            } => Delete::GiveBackAndQueue {
                others,
                record,
                keys,
                arguments,
            },
            Delete::ReleaseRead { readers, .. } => Delete::ReleaseRead {
                readers,
                silent: true,
                queue: Some(arguments),
            },
            _ => Delete::SilentAndQueue {
                keys,
                arguments,
                registration: queue.registration_arguments(),
            },
        };
    }

    /// Requests of the round still running in the background: on their nodes, the delete is
    /// sent only after them.
    pub(crate) fn after(&mut self, stragglers: Option<Stragglers>) {
        self.after = stragglers;
    }

    /// The keys now belong to a lock that will release them itself.
    pub(crate) fn disarm(mut self) {
        self.armed = None;
    }

    /// Deletes the keys now, waiting for every node but a suspect one (each bounded by the
    /// per-node timeout; a suspect node's delete goes on in the background), and returns the compare-and-delete's report (on nodes where another owner holds the
    /// key, it says for how much longer) and its requests still running on suspect nodes. If this future is dropped part-way, `Drop` spawns the
    /// cleanup again.
    pub(crate) async fn run(mut self) -> (Report, Option<Stragglers>) {
        let Some(shared) = &self.armed else {
            return (Report::default(), None);
        };
        let round = release_everywhere(
            shared,
            &self.key,
            &self.token,
            self.per_node_timeout,
            self.after.as_ref(),
            &self.delete,
        )
        .await;
        tracing::debug!(report = %round.report, "cleaned up after a failed round");
        self.armed = None;
        (round.report, round.stragglers)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(shared) = self.armed.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "acquire cancelled with no tokio runtime left; its keys expire with their ttl"
            );
            return;
        };
        let key = std::mem::take(&mut self.key);
        let token = self.token.clone();
        let timeout = self.per_node_timeout;
        let after = self.after.take();
        // Silent even if the round would have queued: the acquire is gone.
        let delete = match &self.delete {
            Delete::SilentAndQueue { .. } => Delete::Silent,
            Delete::GiveBackAndQueue { others, record, .. } => Delete::GiveBack {
                others: others.clone(),
                record: Some(record.clone()),
            },
            Delete::ReleaseRead {
                readers, silent, ..
            } => Delete::ReleaseRead {
                readers: readers.clone(),
                silent: *silent,
                queue: None,
            },
            other => other.clone(),
        };
        let tracker = shared.clone();
        tracker.spawn_cleanup(&runtime, async move {
            release_everywhere(&shared, &key, &token, timeout, after.as_ref(), &delete).await;
        });
    }
}
