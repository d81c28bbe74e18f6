//! The public API: [`RedLock`](crate::RedLock) and its builder, locks, leases, elections,
//! semaphores, multi-resource locks, inspection, fence seeding, and the service traits that
//! the in-memory test double implements too.
//!
//! The top layer: each type here calls the protocol and turns its verdicts into results.

pub(crate) mod builder;
pub(crate) mod election;
pub(crate) mod fence_seeding;
pub(crate) mod inspect;
pub(crate) mod keep_alive;
pub(crate) mod last_handle;
pub(crate) mod lease;
pub(crate) mod lock;
pub(crate) mod lock_service;
pub(crate) mod multi_lock;
pub(crate) mod redlock;
pub(crate) mod rw_lock;
pub(crate) mod semaphore;
pub(crate) mod semaphore_inspection;
pub(crate) mod with_lock;
