//! # redquorum
//!
//! Redlock for Rust: a distributed lock over N independent Redis masters that is trusted only
//! when a majority (N/2+1) granted it in time.
//!
//! One acquire sends a plain `SET key token NX PX ttl` to every master at once, all bounded
//! by one short per-node timeout, and decides the moment a majority has answered either
//! way. The lock is returned only with a majority of grants and validity left:
//! `validity = ttl − elapsed − (ttl × drift_factor + 2 ms)`, measured on the monotonic clock
//! from before the first request. A failed round deletes its key from *every* node with an
//! atomic compare-and-delete before retrying after a random delay. Extend and release are
//! compare-and-act scripts too: no key is ever deleted or renewed without checking its token.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), redquorum::Error> {
//! let rl = redquorum::RedLock::new([
//!     "redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003",
//!     "redis://127.0.0.1:7004", "redis://127.0.0.1:7005",
//! ])?;
//! let lock = rl.acquire("orders:42", Duration::from_secs(10)).await?;
//! // … the critical section, finished before lock.valid_until() …
//! lock.release().await?;
//! # Ok(()) }
//! ```
//!
//! The guarantees and the assumptions they rest on: `DESIGN.md` §8, "The assumptions".
//!
//! # Features
//!
//! - `tls`: `rediss://` nodes over TLS (rustls with the ring provider). Certificates are
//!   verified unless a URL ends in `#insecure`. Without it a `rediss://` node is a
//!   configuration error.
//! - `tls-aws-lc-rs`: the same with the aws-lc-rs provider. Whichever is on, the provider is
//!   installed as rustls's process default only if the application installed none before
//!   building a client, so an application that has both compiled in does not panic at the
//!   first TLS connection, and one that chose its own keeps it.
//! - `metrics`: counters, histograms and a gauge through the `metrics` facade (names in
//!   [`telemetry`]).
//! - `testing`: [`testing::MemoryLocks`], an in-memory [`LockService`] for unit tests of code
//!   written against the [`LockService`] and [`HeldLock`] traits (enable it in
//!   `[dev-dependencies]`).
//!
//! The `redquorum` command is its own package, `redquorum-cli`; real local `redis-server`
//! masters for tests are `redquorum-testkit`.

// Doc tests deny warnings but the two every `# async fn demo(…)` example trips (as tokio does).
#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]
#![cfg_attr(not(test), forbid(clippy::panic))]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod api;
mod core;
mod engine;
mod errors;
#[cfg(test)]
mod model;
mod protocol;
mod scripts;
#[cfg(feature = "testing")]
pub mod testing;
mod voters;

pub use self::core::telemetry;

pub use self::core::config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_DRIFT_FACTOR, MAX_DERIVED_NODE_TIMEOUT, MAX_TTL,
    MIN_DERIVED_NODE_TIMEOUT, derived_node_timeout,
};
pub use self::core::node_id::NodeId;
pub use self::core::quorum::DRIFT_FLOOR;
pub use self::core::report::{NodeOutcome, NodeReport, Report};
pub use self::core::resource::{DEFAULT_KEY_PREFIX, KeyLayout, MAX_RESOURCE_LEN};
pub use self::core::retry::RetryPolicy;
pub use self::core::token::Token;
pub use api::builder::{Builder, MAX_HOLDER_INFO};
pub use api::election::{Election, Leadership, Leading};
pub use api::fence_seeding::{FenceSeeding, Seeding};
pub use api::inspect::{Holding, Inspection, NodeInspection};
pub use api::lease::{Lease, LeaseOptions, LeaseSignal};
pub use api::lock::Lock;
pub use api::lock_service::{HeldLock, LockService};
pub use api::redlock::RedLock;
pub use api::rw_lock::RwLock;
pub use api::semaphore::{Permit, Semaphore};
pub use api::semaphore_inspection::{NodePermits, SemaphoreInspection};
pub use errors::config_error::ConfigError;
pub use errors::error::{Error, Failure, LostReason, Operation};
pub use errors::node_error::NodeError;
pub use protocol::acquire_many::MAX_RESOURCES_PER_LOCK;
pub use protocol::leader_info::Leader;
pub use protocol::permit::MAX_PERMITS;
pub use voters::cluster::ClusterNode;
pub use voters::sentinel::SentinelNode;
pub use voters::source::{IntoNode, NodeSource};

/// The README's examples, compiled with the documentation's.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
