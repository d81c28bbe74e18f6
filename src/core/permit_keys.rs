//! The keys of a semaphore: its permits', its record of their number, and its release
//! channel.

use crate::core::resource;

/// The keys of a semaphore's permits, in permit order, the key of its record of how many
/// permits it has, and the channel their releases are published on: made once per
/// semaphore, not on every acquire.
#[derive(Debug)]
pub(crate) struct PermitKeys {
    pub(crate) keys: Vec<Vec<u8>>,
    /// The record of how many permits the semaphore has (`resource::permit_count_key`): set by
    /// every grant, renewed with every permit, deleted with the last one
    /// (`scripts::ACQUIRE_PERMIT`).
    pub(crate) record: Vec<u8>,
    pub(crate) channel: Vec<u8>,
    /// Where this semaphore's waiters of this number of permits queue (`prefix{name}:permits:<P>`,
    /// the queue's keys beside it, `resource::queue_keys`): one queue per number, so a release
    /// never reserves a permit for a waiter that counts fewer permits and never looks at it
    /// (the record keeps two numbers from being in use at once, but not from waiting at once).
    pub(crate) queue_base: Vec<u8>,
}

impl PermitKeys {
    /// The keys of the `permits` permits of the semaphore `name` under `prefix`.
    pub(crate) fn new(prefix: &[u8], name: &[u8], permits: u32) -> Self {
        let keys: Vec<Vec<u8>> = (0..permits)
            .map(|index| resource::permit_key(prefix, name, index))
            .collect();
        let channel = resource::release_channel(&resource::permit_key(prefix, name, 0));
        let record = resource::permit_count_key(prefix, name);
        let mut queue_base = record.clone();
        queue_base.extend_from_slice(format!(":{permits}").as_bytes());
        Self {
            keys,
            record,
            channel,
            queue_base,
        }
    }

    /// How many permits the semaphore has (one key each).
    pub(crate) fn permits(&self) -> u32 {
        u32::try_from(self.keys.len()).unwrap_or(u32::MAX)
    }
}
