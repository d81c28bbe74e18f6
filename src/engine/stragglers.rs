//! The requests of a decided round still running at the decision, and, per node, whether its
//! request is ordered on its connection, so a later delete on that node lands behind it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Flags that are only ever raised, and a wait for one of them: what a watch channel would do
/// here, without its lock and wake-ups for a flag nobody waits for. Every request of every
/// round raises one, and almost never does anyone wait for it.
#[derive(Debug)]
pub(super) struct Raised {
    flags: Box<[AtomicBool]>,
    /// Someone waited for a flag: raising one must wake the waiters.
    watched: AtomicBool,
    notify: Notify,
}

impl Raised {
    pub(super) fn new(count: usize) -> Self {
        Self {
            flags: (0..count).map(|_| AtomicBool::new(false)).collect(),
            watched: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }

    /// Raises flag `index` (no flag: nothing to do).
    pub(super) fn raise(&self, index: usize) {
        let Some(flag) = self.flags.get(index) else {
            return;
        };
        // Sequentially consistent with `wait`'s store and load: either the waiter sees the
        // flag raised, or this sees `watched` and wakes it.
        if !flag.swap(true, Ordering::SeqCst) && self.watched.load(Ordering::SeqCst) {
            self.notify.notify_waiters();
        }
    }

    /// Whether flag `index` is raised (a flag that does not exist is).
    pub(super) fn is_raised(&self, index: usize) -> bool {
        self.flags
            .get(index)
            .is_none_or(|flag| flag.load(Ordering::SeqCst))
    }

    /// Waits until flag `index` is raised.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub(super) async fn wait(&self, index: usize) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before `watched` is set and the flag read, so a raise after the read
            // wakes it.
            notified.as_mut().enable();
            self.watched.store(true, Ordering::SeqCst);
            if self.is_raised(index) {
                return;
            }
            notified.await;
        }
    }
}

/// Per node, whether a request of a round is *ordered*: handed to the node's connection (a
/// command nothing will send again), or finished, or abandoned. Anything sent on that
/// connection afterwards reaches the node behind it: the multiplexed connection is one FIFO
/// queue (the redis crate's bounded channel, whose waiting senders are served in order).
#[derive(Debug)]
pub(super) struct Ordered {
    pub(super) nodes: Raised,
}

impl Ordered {
    pub(super) fn new(count: usize) -> Arc<Self> {
        Arc::new(Self {
            nodes: Raised::new(count),
        })
    }

    pub(super) fn mark(&self, index: usize) {
        self.nodes.raise(index);
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
    /// Marked for every request of the round, each when its future ends at the latest.
    pub(super) ordered: Arc<Ordered>,
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
    /// One flag, raised once every straggler has finished (or their task was dropped).
    pub(super) finished: Raised,
}

impl Stragglers {
    /// Whether the request to `index` was still running at the decision and is not yet
    /// ordered on its connection.
    pub(super) fn unordered(&self, index: usize) -> bool {
        self.late.nodes.get(index).copied().unwrap_or(false) && !self.ordered.nodes.is_raised(index)
    }

    /// Waits until every straggler has finished, then says whether one answered that its
    /// fence counter was not re-seeded since its server started.
    pub(crate) async fn unseeded(&self) -> bool {
        self.late.finished.wait(0).await;
        self.late
            .unseeded
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until every straggler has finished, then says whether each did what was asked.
    pub(crate) async fn all_done(&self) -> bool {
        self.late.finished.wait(0).await;
        !self
            .late
            .not_done
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until the request to `index` is ordered on its connection.
    pub(super) async fn ordered(&self, index: usize) {
        // Every request's future marks its node when it ends, at the latest: this ends.
        self.ordered.nodes.wait(index).await;
    }
}
