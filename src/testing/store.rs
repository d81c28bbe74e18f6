//! What every client of the double shares: the keys, their owners and expiries, the fence
//! counters and the waiters' wake-ups.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::core::config::Config;
use crate::core::report::NodeOutcome;
use crate::core::retry::Jitter;

/// What every client of one double shares: the keys.
#[derive(Default)]
pub(super) struct Store {
    pub(super) state: Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) keys: HashMap<Vec<u8>, Key>,
    pub(super) fences: HashMap<Vec<u8>, u64>,
    /// A wake-up per resource waited for: a release wakes only that resource's waiters, as
    /// the real client's release channel does. One per resource ever waited for (a test's
    /// handful).
    pub(super) waiters: HashMap<Vec<u8>, Arc<Notify>>,
    pub(super) outage: bool,
    pub(super) owners: u64,
    /// Per resource, its readers' shares: owner → expiry. While any is live, the resource's
    /// key is held by [`READERS`] until the last of them, as the real masters keep the
    /// readers' mark on the lock key.
    pub(super) shares: HashMap<Vec<u8>, HashMap<u64, Instant>>,
    /// Per resource, how many acquires of its lock (its write lock) wait for their turn: while
    /// any does, new readers are refused, as a live waiter in the real lock's queue refuses
    /// them, so readers cannot starve a writer.
    pub(super) writers_waiting: HashMap<Vec<u8>, usize>,
}

/// The owner of a key held for readers (owners are numbered from 1).
pub(super) const READERS: u64 = 0;

/// The identity of one client of the double.
#[derive(Debug, Default)]
pub(super) struct ClientId(#[allow(dead_code, reason = "only its address is used")] u8);

/// One held key: who holds it, and when it expires on tokio's clock.
#[derive(Clone, Copy)]
pub(super) struct Key {
    pub(super) owner: u64,
    pub(super) expires: Instant,
}

/// One client's settings.
#[derive(Clone)]
pub(super) struct Client {
    pub(super) config: Config,
    pub(super) jitter: Arc<Jitter>,
}

impl Default for Client {
    fn default() -> Self {
        Self {
            config: Config::default(),
            jitter: Arc::new(Jitter::new(None)),
        }
    }
}

impl State {
    /// The key of `resource` if it has not expired at `now` (an expired one is dropped, as
    /// Redis drops it).
    pub(super) fn live(&mut self, resource: &[u8], now: Instant) -> Option<&mut Key> {
        if self
            .keys
            .get(resource)
            // Redis frees a key once its expiry is in the past, not at it.
            .is_some_and(|key| key.expires < now)
        {
            self.keys.remove(resource);
        }
        self.keys.get_mut(resource)
    }

    /// What the node says about `resource` to `owner`: ours (`None`), or how it is not.
    pub(super) fn not_ours(
        &mut self,
        resource: &[u8],
        owner: u64,
        now: Instant,
    ) -> Option<NodeOutcome> {
        match self.live(resource, now) {
            Some(key) if key.owner == owner => None,
            Some(key) => Some(NodeOutcome::HeldByOther {
                expires_in: Some(key.expires.saturating_duration_since(now)),
            }),
            None => Some(NodeOutcome::Missing),
        }
    }
}

impl Store {
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every statement that changes it; a panic elsewhere
        // while the lock was held leaves nothing half done.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Removes `owner`'s share of `resource`, the key then held for the live shares only;
    /// what the node said (`Released` for a live share).
    pub(super) fn delete_share(&self, resource: &[u8], owner: u64) -> NodeOutcome {
        let mut state = self.state();
        let now = Instant::now();
        let live = state
            .shares
            .get_mut(resource)
            .and_then(|shares| shares.remove(&owner))
            .is_some_and(|expires| expires >= now);
        state.hold_for_readers(resource, now);
        if live {
            NodeOutcome::Released
        } else {
            NodeOutcome::Missing
        }
    }

    /// Deletes `resource`'s key if `owner` holds it, waking its waiters; what the node said.
    pub(super) fn delete(&self, resource: &[u8], owner: u64) -> NodeOutcome {
        let mut state = self.state();
        match state.not_ours(resource, owner, Instant::now()) {
            None => {
                state.keys.remove(resource);
                state.wake(resource);
                NodeOutcome::Released
            }
            Some(other) => other,
        }
    }

    /// The wake-up of `resource`'s waiters.
    pub(super) fn waiters(&self, resource: &[u8]) -> Arc<Notify> {
        self.state()
            .waiters
            .entry(resource.to_vec())
            .or_default()
            .clone()
    }
}

impl State {
    /// The latest expiry of `resource`'s live shares (expired ones dropped), if any.
    pub(super) fn shares_until(&mut self, resource: &[u8], now: Instant) -> Option<Instant> {
        let shares = self.shares.get_mut(resource)?;
        shares.retain(|_, expires| *expires >= now);
        let last = shares.values().max().copied();
        if shares.is_empty() {
            self.shares.remove(resource);
        }
        last
    }

    /// Keeps `resource`'s key held for its readers until the last live share, no longer; with
    /// none left, frees it and wakes its waiters. Only a key held for readers is touched.
    pub(super) fn hold_for_readers(&mut self, resource: &[u8], now: Instant) {
        if self
            .live(resource, now)
            .is_some_and(|key| key.owner != READERS)
        {
            return;
        }
        match self.shares_until(resource, now) {
            Some(until) => {
                self.keys.insert(
                    resource.to_vec(),
                    Key {
                        owner: READERS,
                        expires: until,
                    },
                );
            }
            None => {
                if self.keys.remove(resource).is_some() {
                    self.wake(resource);
                }
            }
        }
    }

    /// Counts one more waiting writer of `resource`.
    pub(super) fn writer_waits(&mut self, resource: &[u8]) {
        *self.writers_waiting.entry(resource.to_vec()).or_insert(0) += 1;
    }

    /// Counts one waiting writer of `resource` less.
    pub(super) fn writer_done(&mut self, resource: &[u8]) {
        if let Some(n) = self.writers_waiting.get_mut(resource) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.writers_waiting.remove(resource);
            }
        }
    }

    /// Wakes the waiters of `resource`.
    pub(super) fn wake(&self, resource: &[u8]) {
        if let Some(waiters) = self.waiters.get(resource) {
            waiters.notify_waiters();
        }
    }
}
