//! Several resources as one lock: `RedLock::acquire_many` and its variants.

use std::time::Duration;

use crate::api::lock::Lock;
use crate::api::redlock::RedLock;
use crate::core::held_locks;
use crate::core::retry::RetryPolicy;
use crate::errors::config_error::ConfigError;
use crate::errors::error::{Error, Operation};
use crate::protocol::acquire_many::{MAX_RESOURCES_PER_LOCK, acquire_many};
use crate::protocol::shared::ensure_runtime;
use crate::voters::node::Node;
use crate::{Result, core::resource, core::telemetry};

impl RedLock {
    /// Takes every resource of `resources` as one lock, for `ttl`, retrying as the client's
    /// retry policy says: all or nothing on each master, one majority for the whole set.
    ///
    /// Two clients asking for overlapping sets, in any order, never deadlock: a master grants
    /// a set whole or not at all, and a round that did not win gives back what it got before
    /// it waits. The lock is one [`Lock`]: [`extend`](Lock::extend) renews every key,
    /// [`release`](Lock::release) deletes every key and wakes the waiters of each resource,
    /// and [`resources`](Lock::resources) lists them. It carries no fencing token, so a client
    /// built with fencing refuses it ([`ConfigError::Unfenced`]): its holders would let a
    /// stalled single holder's token be accepted after them. Waiting is by timed retries
    /// (never past the earliest expiry the masters reported): the set does not queue on the
    /// masters as a single resource's waiters do, and is not fair against them — a resource
    /// reserved for a queued waiter is taken, and a steady stream of single-lock hand-offs can
    /// keep a set waiting; a set released does not hand over to the queued waiters, who are
    /// woken and retry.
    ///
    /// # Errors
    /// - [`Error::Config`]: no resources ([`ConfigError::NoResources`]), one twice
    ///   ([`ConfigError::DuplicateResource`]), more than
    ///   [`MAX_RESOURCES_PER_LOCK`](crate::MAX_RESOURCES_PER_LOCK), an invalid resource or
    ///   ttl; nothing sent;
    /// - [`Error::HeldByCaller`]: one of them is held by the `with_lock` work asking;
    /// - as [`acquire`](Self::acquire) otherwise ([`Error::Conflict`] when some resource of the
    ///   set is held).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire): a dropped call gives back what its round got, in the
    /// background.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// // Move stock between two warehouses: both or neither.
    /// let both = rl.acquire_many(&["stock:berlin", "stock:lyon"], Duration::from_secs(10)).await?;
    /// // … the transfer, finished before both.valid_until() …
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_many<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
    ) -> Result<Lock> {
        let policy = self.shared().config.retry.clone();
        self.acquire_many_with(resources, ttl, &policy).await
    }

    /// One round of [`acquire_many`](Self::acquire_many): takes the set if it is free now.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Cancel safety
    /// As [`acquire_many`](Self::acquire_many).
    pub async fn try_acquire_many<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
    ) -> Result<Lock> {
        self.acquire_many_with(resources, ttl, &RetryPolicy::once())
            .await
    }

    /// [`acquire_many`](Self::acquire_many), retrying as `policy` says.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many); [`ConfigError::NoAttempts`] for a policy that
    /// allows no attempt.
    ///
    /// # Cancel safety
    /// As [`acquire_many`](Self::acquire_many).
    pub async fn acquire_many_with<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<Lock> {
        telemetry::recorded(Operation::Acquire, async {
            let config = &self.shared().config;
            if config.fencing {
                return Err(ConfigError::Unfenced("multi-resource locks").into());
            }
            if resources.is_empty() {
                return Err(ConfigError::NoResources.into());
            }
            if resources.len() > MAX_RESOURCES_PER_LOCK {
                return Err(ConfigError::TooManyResources {
                    len: resources.len(),
                    max: MAX_RESOURCES_PER_LOCK,
                }
                .into());
            }
            let mut set: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(resources.len());
            for resource in resources {
                let resource = resource.as_ref();
                resource::validate(resource)?;
                set.push((config.lock_key(resource), resource.to_vec()));
            }
            // In key order, so every client sends a set alike (the script does not need it).
            set.sort();
            let twice = set.windows(2).find_map(|pair| match pair {
                [a, b] if a.0 == b.0 => Some(resource::display(&a.1)),
                _ => None,
            });
            if let Some(name) = twice {
                return Err(ConfigError::DuplicateResource(name).into());
            }
            if self.shared().nodes.iter().any(Node::is_cluster) {
                // Checked here, not left to the cluster's CROSSSLOT answer: that would be a
                // failed vote on every cluster voter, reported as an outage, not as bad input.
                let slot = |key: &[u8]| resource::slot_of(key);
                let mut slots = set.iter().map(|(key, name)| (slot(key), name));
                if let Some((first_slot, first)) = slots.next()
                    && let Some((_, other)) = slots.find(|(s, _)| *s != first_slot)
                {
                    return Err(ConfigError::CrossSlot {
                        first: resource::display(first),
                        other: resource::display(other),
                    }
                    .into());
                }
            }
            let timing = config.timing(ttl)?;
            if !policy.allows_any_attempt() {
                return Err(ConfigError::NoAttempts.into());
            }
            ensure_runtime()?;
            if let Some((_, held)) = set
                .iter()
                .find(|(key, _)| held_locks::held_here(self.client_address(), key))
            {
                return Err(Error::HeldByCaller {
                    resource: resource::display(held),
                });
            }
            let keys: Vec<Vec<u8>> = set.iter().map(|(key, _)| key.clone()).collect();
            let mut pairs = set.into_iter().map(|(key, resource)| (resource, key));
            let (first, _) = pairs.next().ok_or(ConfigError::NoResources)?;
            let others: Vec<(Vec<u8>, Vec<u8>)> = pairs.collect();
            let shown = resource::joined(
                std::iter::once(first.as_slice()).chain(others.iter().map(|(r, _)| r.as_slice())),
            );
            let acquired = acquire_many(self.shared(), &keys, &shown, &timing, policy).await?;
            let mut lock = Lock::new(self.shared().clone(), &first, acquired);
            lock.set_others(others);
            Ok(lock)
        })
        .await
    }
}
