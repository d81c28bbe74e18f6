//! What every handle of one client shares: its nodes, settings, release watch and the
//! clean-ups it left running. The protocol works on this, never on the API's handle, so the
//! layers below the API know nothing of [`RedLock`](crate::RedLock), [`Lock`](crate::Lock) or
//! leases.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::core::config::Config;
use crate::core::retry::Jitter;
use crate::engine::round::Fanout;
use crate::errors::error::Error;
use crate::protocol::fence_sweep::{self, FenceSweep};
use crate::voters::node::Node;
use crate::voters::release_watch::ReleaseWatch;

/// The state behind a [`RedLock`](crate::RedLock) and every lock it hands out.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Shared with the engine's background tasks (stragglers, deliveries).
    pub(crate) nodes: Arc<[Node]>,
    pub(crate) config: Config,
    pub(crate) jitter: Jitter,
    pub(crate) releases: ReleaseWatch,
    /// Clean-ups running in the background (a cancelled acquire's compare-and-delete, a
    /// dropped lock's release, the engine's stragglers and the deletes it delivers in the
    /// background), for [`RedLock::settle`](crate::RedLock::settle).
    pub(crate) background: TaskTracker,
    /// Seeds every slot's fence counter on every master in the background, from the first
    /// fenced acquire on.
    pub(crate) fence_sweep: FenceSweep,
}

impl Shared {
    pub(crate) fn new(
        nodes: Arc<[Node]>,
        config: Config,
        jitter: Jitter,
        releases: ReleaseWatch,
    ) -> Self {
        Self {
            nodes,
            config,
            jitter,
            releases,
            background: {
                // Closed from the start: spawning still works, and `wait` then means "until
                // nothing is running", with no close/reopen race between `settle` callers.
                let tracker = TaskTracker::new();
                tracker.close();
                tracker
            },
            fence_sweep: FenceSweep::default(),
        }
    }

    /// What a fence sweep of this client works on (`crate::protocol::fence_sweep`).
    pub(crate) fn sweep_scope(&self) -> fence_sweep::Scope<'_> {
        fence_sweep::Scope {
            nodes: &self.nodes,
            prefix: &self.config.key_prefix,
            timeout: self.sweep_timeout(),
        }
    }

    /// Starts this client's fence sweeper, once (`crate::protocol::fence_sweep`).
    pub(crate) fn start_fence_sweep(&self) {
        self.fence_sweep
            .start(&self.nodes, &self.config.key_prefix, self.sweep_timeout());
    }

    /// Each request of a fence sweep is bounded by the per-node timeout, or the largest a
    /// derived one can be.
    fn sweep_timeout(&self) -> Duration {
        self.config
            .per_node_timeout
            .unwrap_or(crate::MAX_DERIVED_NODE_TIMEOUT)
    }

    /// The client's voters, for a round: every round goes to all of them, and leaves what
    /// it still runs to the client's tracker.
    pub(crate) fn fanout(&self) -> Fanout<'_, Node> {
        Fanout {
            voters: &self.nodes,
            background: &self.background,
        }
    }

    /// How many nodes must agree.
    pub(crate) fn quorum(&self) -> usize {
        crate::core::quorum::quorum(self.nodes.len())
    }

    /// Runs a clean-up on `runtime`, tracked for [`settle`](Self::settle).
    pub(crate) fn spawn_cleanup<F>(&self, runtime: &tokio::runtime::Handle, cleanup: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        crate::core::telemetry::task_spawned();
        self.background.spawn_on(cleanup, runtime);
    }

    /// Waits at most `within` for the tracked clean-ups; true when none is left.
    ///
    /// # Cancel safety
    /// Cancel safe: the clean-ups go on without it.
    pub(crate) async fn settle(&self, within: Duration) -> bool {
        tokio::time::timeout(within, self.background.wait())
            .await
            .is_ok()
    }
}

/// [`Error::NoRuntime`] outside a tokio runtime: checked before any I/O, because the nodes'
/// connections and the clean-ups need one.
pub(crate) fn ensure_runtime() -> Result<(), Error> {
    tokio::runtime::Handle::try_current()
        .map(drop)
        .map_err(|_| Error::NoRuntime)
}
