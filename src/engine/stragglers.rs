//! The requests of a decided round still running at the decision, and, per node, whether its
//! request is ordered on its connection, so a later delete on that node lands behind it.

use std::sync::Arc;

use tokio::sync::watch;

/// Per node, whether a request of a round is *ordered*: handed to the node's connection (a
/// command nothing will send again), or finished, or abandoned. Anything sent on that
/// connection afterwards reaches the node behind it: the multiplexed connection is one FIFO
/// queue (the redis crate's bounded channel, whose waiting senders are served in order).
#[derive(Debug)]
pub(super) struct Ordered {
    pub(super) nodes: watch::Sender<Vec<bool>>,
}

impl Ordered {
    pub(super) fn new(count: usize) -> Arc<Self> {
        Arc::new(Self {
            nodes: watch::Sender::new(vec![false; count]),
        })
    }

    pub(super) fn mark(&self, index: usize) {
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
pub(super) struct MarkOnDrop {
    pub(super) ordered: Arc<Ordered>,
    pub(super) index: usize,
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
    pub(super) ordered: watch::Receiver<Vec<bool>>,
    pub(super) done: watch::Receiver<bool>,
    /// Which nodes' requests were still running, and what they answered late: one allocation
    /// per round that has stragglers, which most rounds decided at the majority have.
    pub(super) late: Arc<LateAnswers>,
}

/// What a round's stragglers are, and answered after the decision.
#[derive(Debug)]
pub(super) struct LateAnswers {
    /// Per node, whether its request was still running at the decision.
    pub(super) nodes: Box<[bool]>,
    /// A straggler answered that its fence counter was not re-seeded (fenced acquire): the
    /// decision came before it, so the round's report does not show it.
    pub(super) unseeded: std::sync::atomic::AtomicBool,
    /// A straggler did not do what was asked (refused, failed or timed out).
    pub(super) not_done: std::sync::atomic::AtomicBool,
}

impl Stragglers {
    /// Whether the request to `index` was still running at the decision and is not yet
    /// ordered on its connection.
    pub(super) fn unordered(&self, index: usize) -> bool {
        self.late.nodes.get(index).copied().unwrap_or(false)
            && !self.ordered.borrow().get(index).copied().unwrap_or(true)
    }

    /// Waits until every straggler has finished, then says whether one answered that its
    /// fence counter was not re-seeded since its server started.
    pub(crate) async fn unseeded(&self) -> bool {
        let mut done = self.done.clone();
        let _ = done.wait_for(|finished| *finished).await;
        self.late
            .unseeded
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until every straggler has finished, then says whether each did what was asked.
    pub(crate) async fn all_done(&self) -> bool {
        let mut done = self.done.clone();
        let _ = done.wait_for(|finished| *finished).await;
        !self
            .late
            .not_done
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until the request to `index` is ordered on its connection.
    pub(super) async fn ordered(&self, index: usize) {
        let mut ordered = self.ordered.clone();
        // An error means every sender is gone (the round's tasks ended): nothing to wait for.
        let _ = ordered
            .wait_for(|nodes| nodes.get(index).copied().unwrap_or(true))
            .await;
    }
}
