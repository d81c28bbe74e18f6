//! The last handle of a client: its drop waits, briefly, for the clean-ups the client's locks
//! left running, so a program that releases its locks and returns from `main` leaves nothing
//! behind without calling [`RedLock::settle`](crate::RedLock::settle).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeFlavor};

use crate::protocol::shared::Shared;

/// Held by a [`RedLock`](crate::RedLock) and its clones and by nothing else (the background
/// tasks hold the client's state, not this): dropped with the last handle.
#[derive(Debug)]
pub(crate) struct LastHandle(pub(crate) Arc<Shared>);

impl Drop for LastHandle {
    /// Waits up to the client's `settle_on_drop` (1 s by default) for the clean-ups still
    /// running: a release's deletes beyond the majority, a dropped lock's release, a
    /// cancelled acquire's. Only at the root of a multi-thread runtime's `block_on` (the end
    /// of `#[tokio::main]`), where no task runs and the runtime's workers run the clean-ups
    /// meanwhile. Nowhere else:
    /// - inside a task (a handle kept by a spawned task, or dropped with it as the runtime
    ///   shuts down), waiting would hold a worker, and at shutdown the clean-ups cannot run;
    /// - on a current-thread runtime, they would run on this very thread (call `settle`).
    fn drop(&mut self) {
        let tracker = &self.0.background;
        let within = self.0.config.settle_on_drop;
        if tracker.is_empty() || within.is_zero() || tokio::task::try_id().is_some() {
            return;
        }
        let multi_thread = Handle::try_current()
            .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::MultiThread);
        if !multi_thread {
            tracing::debug!(
                "last client handle dropped with clean-ups running on a current-thread \
                 runtime: not waited for (RedLock::settle waits)"
            );
            return;
        }
        // A plain sleep, no timer: the runtime may be shutting down, its time driver with it.
        let deadline = Instant::now().checked_add(within);
        while !tracker.is_empty() && deadline.is_none_or(|deadline| Instant::now() < deadline) {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !tracker.is_empty() {
            tracing::debug!(
                ?within,
                "last client handle dropped: clean-ups still running"
            );
        }
    }
}
