//! The protocol: what rounds to run and what their answers mean. Acquire (with the queue and
//! the clean-up of failed rounds), extend, release, multi-resource locks, permits, leader info,
//! and fencing (the confirm, re-seeding and the background seeding sweep).
//!
//! Knows nothing of the public types built on it (`RedLock`, `Lock`, leases, elections).

pub(crate) mod acquire;
pub(crate) mod acquire_many;
pub(crate) mod between_rounds;
pub(crate) mod cleanup;
pub(crate) mod confirm;
pub(crate) mod extend;
pub(crate) mod fence_sweep;
pub(crate) mod fencing;
pub(crate) mod leader_info;
pub(crate) mod permit;
pub(crate) mod queue;
pub(crate) mod release;
pub(crate) mod reseed;
pub(crate) mod shared;
