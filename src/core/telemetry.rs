//! What redquorum tells about itself: metrics and logs.
//!
//! # Metrics
//!
//! With the `metrics` feature, redquorum records these through the
//! [`metrics`](https://docs.rs/metrics) facade (install any recorder/exporter); without it,
//! nothing is recorded and nothing is linked. `tests/integration/metric_recording.rs` checks
//! the counts, the gauge and the per-node histograms with a real recorder.
//!
//! ```
//! assert_eq!(redquorum::telemetry::LOCKS_HELD, "redquorum_locks_held");
//! ```
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `redquorum_operations_total` | counter | `operation` (acquire, extend, release, connect), `outcome` (ok, conflict, no_quorum, validity_exhausted, expired, config, no_runtime, lease_lost, no_leader, held_by_caller, permit_count_differs) |
//! | `redquorum_rounds_total` | counter | `operation`, `decision` (won, lost) |
//! | `redquorum_operation_duration_seconds` | histogram | `operation`, `outcome` |
//! | `redquorum_node_latency_seconds` | histogram | `node` (`host:port`), `outcome` (success, refused, failed) |
//! | `redquorum_locks_held` | gauge | — |
//!
//! # Logs
//!
//! redquorum logs through [`tracing`](https://docs.rs/tracing):
//! - a `redquorum.acquire`, `redquorum.extend` or `redquorum.release` span per call (DEBUG;
//!   fields: the resource, and the ttl or whether the lock had expired before the release);
//! - a `round decided` event per round (DEBUG: the decision, the time taken, the nodes still
//!   pending);
//! - each node's answer (TRACE);
//! - connection losses and reconnects, per node.
//!
//! Neither a whole token nor a password is ever logged, and no `Debug` output of a client, a
//! lock or an error prints a password. `tests/observability.rs` captures every span and event
//! at TRACE and checks it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::core::quorum::Decision;
use crate::core::report::NodeOutcome;
use crate::errors::error::{Error, Operation};

/// Counter of finished calls.
pub const OPERATIONS_TOTAL: &str = "redquorum_operations_total";
/// Counter of quorum rounds.
pub const ROUNDS_TOTAL: &str = "redquorum_rounds_total";
/// Histogram of call durations (acquire: all rounds and waits), in seconds.
pub const OPERATION_DURATION_SECONDS: &str = "redquorum_operation_duration_seconds";
/// Histogram of one node's answer time within a round, in seconds.
pub const NODE_LATENCY_SECONDS: &str = "redquorum_node_latency_seconds";
/// Gauge of locks acquired and not yet released or dropped, in this process.
pub const LOCKS_HELD: &str = "redquorum_locks_held";

#[cfg(feature = "metrics")]
fn operation_label(operation: Operation) -> &'static str {
    match operation {
        Operation::Acquire => "acquire",
        Operation::Extend => "extend",
        Operation::Release => "release",
        Operation::Connect => "connect",
    }
}

#[cfg(feature = "metrics")]
fn outcome_label(result: Result<(), &Error>) -> &'static str {
    match result {
        Ok(()) => "ok",
        Err(Error::Conflict(_)) => "conflict",
        Err(Error::NoQuorum(_)) => "no_quorum",
        Err(Error::ValidityExhausted(_)) => "validity_exhausted",
        Err(Error::Expired(_)) => "expired",
        Err(Error::Config(_)) => "config",
        Err(Error::NoRuntime) => "no_runtime",
        Err(Error::LeaseLost { .. }) => "lease_lost",
        Err(Error::NoLeader { .. }) => "no_leader",
        Err(Error::HeldByCaller { .. }) => "held_by_caller",
        Err(Error::PermitCountDiffers { .. }) => "permit_count_differs",
    }
}

#[cfg(feature = "metrics")]
pub(crate) fn operation_finished(
    operation: Operation,
    result: Result<(), &Error>,
    elapsed: Duration,
) {
    let (operation, outcome) = (operation_label(operation), outcome_label(result));
    metrics::counter!(OPERATIONS_TOTAL, "operation" => operation, "outcome" => outcome)
        .increment(1);
    metrics::histogram!(OPERATION_DURATION_SECONDS, "operation" => operation, "outcome" => outcome)
        .record(elapsed.as_secs_f64());
}

#[cfg(feature = "metrics")]
pub(crate) fn round_decided(operation: Operation, decision: Decision) {
    let decision = if decision == Decision::Won {
        "won"
    } else {
        "lost"
    };
    metrics::counter!(ROUNDS_TOTAL, "operation" => operation_label(operation), "decision" => decision)
        .increment(1);
}

#[cfg(feature = "metrics")]
pub(crate) fn node_answered(address: &str, outcome: &NodeOutcome, latency: Duration) {
    let outcome = match outcome.vote() {
        crate::core::quorum::Vote::Yes => "success",
        crate::core::quorum::Vote::Refused => "refused",
        crate::core::quorum::Vote::Failed => "failed",
    };
    metrics::histogram!(NODE_LATENCY_SECONDS, "node" => address.to_owned(), "outcome" => outcome)
        .record(latency.as_secs_f64());
}

#[cfg(feature = "metrics")]
pub(crate) fn locks_held(delta: f64) {
    metrics::gauge!(LOCKS_HELD).increment(delta);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn operation_finished(_: Operation, _: Result<(), &Error>, _: Duration) {}

/// Runs one call of `operation` and records its outcome and duration.
///
/// # Cancel safety
/// As `call`; a call dropped part-way records nothing.
pub(crate) async fn recorded<T>(
    operation: Operation,
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let started = std::time::Instant::now();
    let result = call.await;
    operation_finished(operation, result.as_ref().map(drop), started.elapsed());
    result
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn round_decided(_: Operation, _: Decision) {}

#[cfg(not(feature = "metrics"))]
pub(crate) fn node_answered(_: &str, _: &NodeOutcome, _: Duration) {}

#[cfg(not(feature = "metrics"))]
pub(crate) fn locks_held(_: f64) {}

/// Tasks spawned so far by this process's redquorum clients.
static TASKS_SPAWNED: AtomicU64 = AtomicU64::new(0);

/// Counts a task a client spawns (every `spawn` in the crate calls it).
pub(crate) fn task_spawned() {
    TASKS_SPAWNED.fetch_add(1, Ordering::Relaxed);
}

/// How many tasks this process's redquorum clients have spawned so far: a count for profiling
/// (`redquorum-lab bench --counts` prints it per acquire+release pair), not a metric.
///
/// ```
/// let before = redquorum::telemetry::tasks_spawned();
/// assert!(redquorum::telemetry::tasks_spawned() >= before);
/// ```
pub fn tasks_spawned() -> u64 {
    TASKS_SPAWNED.load(Ordering::Relaxed)
}
