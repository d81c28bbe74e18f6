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
    /// cancelled acquire's. Only on a multi-thread runtime, whose other threads run them
    /// while this one waits (`block_in_place`); on a current-thread runtime they could not
    /// run, so nothing waits there (call `settle`).
    fn drop(&mut self) {
        let tracker = &self.0.background;
        let within = self.0.config.settle_on_drop;
        if tracker.is_empty() || within.is_zero() {
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
        let deadline = Instant::now() + within;
        // No timer: the runtime may be shutting down, and its time driver with it.
        tokio::task::block_in_place(|| {
            while !tracker.is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        if !tracker.is_empty() {
            tracing::debug!(
                ?within,
                "last client handle dropped: clean-ups still running"
            );
        }
    }
}
