//! `CLOCK_MONOTONIC`, the one clock every process of the host shares: how the lab's worker
//! processes time their holds so that one process can compare them.

use std::time::Duration;

use crate::error::LabError;

/// `d` in nanoseconds, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `CLOCK_MONOTONIC` in nanoseconds.
///
/// # Errors
/// When the clock cannot be read.
pub(crate) fn monotonic_ns() -> Result<u64, LabError> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_err(|e| LabError::new(format!("CLOCK_MONOTONIC: {e}")))?;
    let secs = u64::try_from(now.tv_sec()).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec()).unwrap_or(0);
    Ok(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// Sleeps until `at` on `CLOCK_MONOTONIC`.
///
/// # Errors
/// When the clock cannot be read.
pub(crate) async fn sleep_until_ns(at: u64) -> Result<(), LabError> {
    let now = monotonic_ns()?;
    tokio::time::sleep(Duration::from_nanos(at.saturating_sub(now))).await;
    Ok(())
}
