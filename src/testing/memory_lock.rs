//! The double's lock.

use super::*;

/// A lock of [`MemoryLocks`]: valid until `ttl − drift` after its acquire or last extend, on
/// tokio's clock. Dropping it without release deletes its key at once (the real lock
/// schedules that delete).
#[must_use = "a lock should be released with `release().await`"]
pub struct MemoryLock {
    pub(super) store: Arc<Store>,
    pub(super) client: Arc<Client>,
    pub(super) resource: Vec<u8>,
    pub(super) owner: u64,
    pub(super) ttl: Duration,
    pub(super) deadline: Instant,
    pub(super) fencing_token: Option<u64>,
    pub(super) released: bool,
    /// A read lock: a share of the resource, not its key.
    pub(super) read: bool,
}

impl MemoryLock {
    fn failure(&self, rejection: Rejection, operation: Operation, report: Report) -> Error {
        rejection.error(Failure::new(
            operation,
            &self.resource,
            1,
            Duration::ZERO,
            report,
        ))
    }

    /// As [`Lock::extend`](crate::Lock::extend).
    ///
    /// # Errors
    /// [`Error::Expired`] once the deadline has passed or the key is gone or someone else's;
    /// [`Error::NoQuorum`] during an outage (the deadline stays); [`Error::Config`] for an
    /// invalid `ttl`.
    ///
    /// # Cancel safety
    /// Cancel safe: it completes without waiting.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        let timing = self.client.config.timing(ttl)?;
        if self.expired() {
            return Err(self.failure(Rejection::Gone, Operation::Extend, Report::default()));
        }
        let now = Instant::now();
        let mut state = self.store.state();
        if state.outage {
            drop(state);
            return Err(self.failure(Rejection::Outage, Operation::Extend, timed_out(&timing)));
        }
        if self.read {
            // A share renews only while live and no writer holds the key.
            let writer = state
                .live(&self.resource, now)
                .is_some_and(|key| key.owner != READERS);
            let share = state
                .shares
                .get_mut(&self.resource)
                .and_then(|shares| shares.get_mut(&self.owner))
                .filter(|expires| **expires >= now);
            if let (false, Some(expires)) = (writer, share) {
                *expires = now + timing.ttl;
                state.hold_for_readers(&self.resource, now);
                drop(state);
                self.ttl = timing.ttl;
                self.deadline = now + timing.validity_span();
                return Ok(());
            }
            let gone = match state.live(&self.resource, now) {
                Some(key) if key.owner != READERS => NodeOutcome::HeldByOther {
                    expires_in: Some(key.expires.saturating_duration_since(now)),
                },
                _ => NodeOutcome::Missing,
            };
            drop(state);
            return Err(self.failure(Rejection::Gone, Operation::Extend, one_line(gone)));
        }
        match state.live(&self.resource, now) {
            Some(key) if key.owner == self.owner => {
                key.expires = now + timing.ttl;
                drop(state);
                self.ttl = timing.ttl;
                self.deadline = now + timing.validity_span();
                Ok(())
            }
            _ => {
                let gone = state
                    .not_ours(&self.resource, self.owner, now)
                    .unwrap_or(NodeOutcome::Missing);
                drop(state);
                Err(self.failure(Rejection::Gone, Operation::Extend, one_line(gone)))
            }
        }
    }

    /// As [`Lock::release`](crate::Lock::release): deletes the key if it is still ours.
    ///
    /// # Errors
    /// [`Error::Expired`] if the deadline had passed before the release, or the key was gone
    /// or someone else's; [`Error::NoQuorum`] during an outage (the key then expires with its
    /// ttl).
    ///
    /// # Cancel safety
    /// Cancel safe: it completes without waiting.
    pub async fn release(mut self) -> Result<Report> {
        self.released = true;
        let expired_before = self.expired();
        if self.store.state().outage {
            let timing = self.client.config.timing(self.ttl)?;
            // A release that began after the deadline is an expiry whatever the answers.
            let rejection = if expired_before {
                Rejection::Gone
            } else {
                Rejection::Outage
            };
            return Err(self.failure(rejection, Operation::Release, timed_out(&timing)));
        }
        let outcome = self.delete();
        let deleted = matches!(outcome, NodeOutcome::Released);
        let report = one_line(outcome);
        if expired_before || !deleted {
            return Err(self.failure(Rejection::Gone, Operation::Release, report));
        }
        Ok(report)
    }

    fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Deletes its key, or its share.
    fn delete(&self) -> NodeOutcome {
        if self.read {
            self.store.delete_share(&self.resource, self.owner)
        } else {
            self.store.delete(&self.resource, self.owner)
        }
    }
}

impl Drop for MemoryLock {
    fn drop(&mut self) {
        // During an outage the real lock's background release reaches no master either: the
        // key stays until its ttl.
        if !self.released && !self.store.state().outage {
            self.delete();
        }
    }
}

impl fmt::Debug for MemoryLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLock")
            .field("resource", &HeldLock::resource_display(self))
            .field("ttl", &self.ttl)
            .field("fencing_token", &self.fencing_token)
            .field("remaining", &HeldLock::remaining(self))
            .finish_non_exhaustive()
    }
}

impl Leased for MemoryLock {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<Report>> {
        Box::pin(MemoryLock::release(*self))
    }
}

impl Renewable for MemoryLock {
    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn valid_until(&self) -> Instant {
        self.deadline
    }

    fn lease_deadline(&self) -> LeaseDeadline {
        LeaseDeadline::Tokio(self.deadline)
    }

    fn is_expired(&self) -> bool {
        self.expired()
    }

    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<()>> + Send {
        MemoryLock::extend(self, ttl)
    }
}

impl HeldLock for MemoryLock {
    fn resource(&self) -> &[u8] {
        &self.resource
    }

    fn resource_display(&self) -> String {
        resource::display(&self.resource)
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn valid_until(&self) -> Instant {
        self.deadline
    }

    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    fn is_expired(&self) -> bool {
        self.expired()
    }

    fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<()>> + Send {
        MemoryLock::extend(self, ttl)
    }

    fn release(self) -> impl Future<Output = Result<Report>> + Send {
        MemoryLock::release(self)
    }

    fn into_lease(self, options: LeaseOptions) -> Lease {
        let resource = HeldLock::resource_display(&self);
        lease::lease(self, resource, options)
    }
}
