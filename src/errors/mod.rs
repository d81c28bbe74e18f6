//! The typed errors: what a caller is told ([`Error`](crate::Error)), what a voter's failure
//! was ([`NodeError`](crate::NodeError)), and what is wrong with a configuration
//! ([`ConfigError`](crate::ConfigError)).
//!
//! Values only: beside the core, below every layer that can fail.

pub(crate) mod config_error;
pub(crate) mod error;
pub(crate) mod node_error;
