//! The fan-out engine: a request built once, sent to every voter at once, each answer
//! classified and tallied, the round decided the moment its outcome is known, and what was
//! still running (stragglers, deliveries) followed in the background.
//!
//! Knows nothing of what a round is for: the protocol gives it the request and reads the
//! verdict.

pub(crate) mod classify;
pub(crate) mod encoded;
pub(crate) mod gather;
pub(crate) mod heard;
pub(crate) mod query;
pub(crate) mod request;
pub(crate) mod round;
pub(crate) mod stragglers;
pub(crate) mod voter;
