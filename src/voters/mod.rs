//! The voters' servers and connections: where a voter's servers are found (a standalone
//! master, a Sentinel group, a Redis Cluster's shards and slot map), one supervised link to
//! each server with its restart grace and identity, TLS, and the pub/sub watch of releases.
//!
//! Knows nothing of rounds or locks: it hands the engine a connection to the server that
//! serves a key now.

pub(crate) mod cluster;
pub(crate) mod node;
pub(crate) mod release_watch;
pub(crate) mod restart_grace;
pub(crate) mod sentinel;
pub(crate) mod server_identity;
pub(crate) mod server_link;
pub(crate) mod shards;
pub(crate) mod slot_map;
pub(crate) mod source;
pub(crate) mod supervisor;
#[cfg(any(feature = "tls", feature = "tls-aws-lc-rs"))]
pub(crate) mod tls;
pub(crate) mod url;
