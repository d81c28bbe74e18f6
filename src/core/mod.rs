//! The pure core: values and arithmetic with no I/O and no async. The majority and the
//! validity (`quorum`), the verdict on a round's answers, retry delays, tokens, resource keys,
//! reports, settings and metric names.
//!
//! Knows nothing of servers, connections or rounds: everything here is tested without Redis.

pub(crate) mod clock;
pub(crate) mod config;
pub(crate) mod held_locks;
pub(crate) mod native;
pub(crate) mod node_id;
pub(crate) mod permit_keys;
pub(crate) mod quorum;
pub(crate) mod report;
pub(crate) mod resource;
pub(crate) mod retry;
pub(crate) mod server_clock;
pub mod telemetry;
pub(crate) mod token;
pub(crate) mod verdict;
