//! Clock readings: when a round started, on both of the host's clocks ([`Awake`]), and a
//! lock's local deadline, brought forward by any suspend of the host since ([`Deadline`]).

use std::time::{Duration, Instant};

// The deadline: a lock's validity as an instant, brought forward by any time the host spent
// suspended.
//
// Validity is counted on the monotonic clock (`Instant`), which on Linux does not advance
// while the host is suspended (a laptop lid, a VM paused by its hypervisor): a client whose
// host slept for a minute would wake up believing its 10 s lock still valid, though the
// servers expired the key long ago. Linux also keeps `CLOCK_BOOTTIME`, which does advance
// during a suspend; the difference between how far the two clocks moved since the lock's
// round started is the time the host slept, and the deadline moves that much earlier.
//
// Elsewhere (no `CLOCK_BOOTTIME`), a suspend cannot be told and is not detected: the
// assumptions (`DESIGN.md` §8) say so.

/// Both clocks, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Awake {
    monotonic: Instant,
    /// `CLOCK_BOOTTIME`, where there is one.
    boottime: Option<Duration>,
}

impl Awake {
    /// Reads both clocks now (the boot clock first, so scheduling between the two reads can
    /// only make the sleep look longer, never hide it).
    pub(crate) fn now() -> Self {
        let boottime = boottime();
        Self {
            monotonic: Instant::now(),
            boottime,
        }
    }

    /// A reading with these values, for tests elsewhere in the crate.
    #[cfg(test)]
    pub(crate) fn of(monotonic: Instant, boottime: Option<Duration>) -> Self {
        Self {
            monotonic,
            boottime,
        }
    }

    /// How long passed from this reading to `later`, the host's suspends included (where
    /// the boot clock tells them).
    pub(crate) fn elapsed_until(&self, later: &Awake) -> Duration {
        later
            .monotonic
            .saturating_duration_since(self.monotonic)
            .saturating_add(self.slept_until(later))
    }

    /// When this reading was taken, on the monotonic clock.
    pub(crate) fn instant(&self) -> Instant {
        self.monotonic
    }

    /// How long the host was suspended between this reading and `later`.
    pub(crate) fn slept_until(&self, later: &Awake) -> Duration {
        match (self.boottime, later.boottime) {
            (Some(then), Some(now)) => slept(
                now.saturating_sub(then),
                later.monotonic.saturating_duration_since(self.monotonic),
            ),
            _ => Duration::ZERO,
        }
    }
}

/// The suspend between two readings: how much further the boot clock moved than the
/// monotonic one. Never negative.
fn slept(boot_moved: Duration, monotonic_moved: Duration) -> Duration {
    boot_moved.saturating_sub(monotonic_moved)
}

#[cfg(target_os = "linux")]
fn boottime() -> Option<Duration> {
    use nix::time::{ClockId, clock_gettime};
    let now = clock_gettime(ClockId::CLOCK_BOOTTIME).ok()?;
    let secs = u64::try_from(now.tv_sec()).ok()?;
    let nanos = u32::try_from(now.tv_nsec()).ok()?;
    Some(Duration::new(secs, nanos))
}

#[cfg(not(target_os = "linux"))]
fn boottime() -> Option<Duration> {
    None
}

/// A local deadline: `at` on the monotonic clock, moved earlier by any suspend of the host
/// since `since` (the start of the round it was computed from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    at: Instant,
    since: Awake,
}

impl Deadline {
    /// `span` after the reading `since` (when the round started); `None` when that instant
    /// cannot be represented.
    pub(crate) fn after(since: Awake, span: Duration) -> Option<Self> {
        Some(Self {
            at: since.instant().checked_add(span)?,
            since,
        })
    }

    /// A deadline that has already passed at the reading `since` (for a span that cannot be
    /// represented).
    pub(crate) fn at(since: Awake) -> Self {
        Self {
            at: since.instant(),
            since,
        }
    }

    /// The deadline as an instant of the monotonic clock, as of now: earlier by the time the
    /// host slept since the round started.
    pub(crate) fn instant(&self) -> Instant {
        self.instant_as_of(&Awake::now())
    }

    fn instant_as_of(&self, now: &Awake) -> Instant {
        let slept = self.since.slept_until(now);
        self.at.checked_sub(slept).unwrap_or(self.since.instant())
    }

    /// Time left before the deadline (zero once passed).
    pub(crate) fn remaining(&self) -> Duration {
        let now = Awake::now();
        self.instant_as_of(&now)
            .saturating_duration_since(now.instant())
    }

    /// Whether the deadline has passed.
    pub(crate) fn passed(&self) -> bool {
        self.remaining().is_zero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(monotonic: Instant, boottime: Duration) -> Awake {
        Awake {
            monotonic,
            boottime: Some(boottime),
        }
    }

    #[test]
    fn a_suspend_brings_the_deadline_forward_by_its_length() {
        let start = Instant::now();
        let since = reading(start, Duration::from_secs(1000));
        let deadline = Deadline::after(since, Duration::from_secs(10)).expect("deadline");
        // Awake all along: 3 s on both clocks, the deadline stays.
        let awake = reading(start + Duration::from_secs(3), Duration::from_secs(1003));
        assert_eq!(
            deadline.instant_as_of(&awake),
            start + Duration::from_secs(10)
        );
        // 3 s awake and 60 s asleep: the boot clock moved 63 s, and the lock is long gone.
        let woke = reading(start + Duration::from_secs(3), Duration::from_secs(1063));
        assert_eq!(since.slept_until(&woke), Duration::from_secs(60));
        assert!(deadline.instant_as_of(&woke) <= woke.instant());
        // A 4 s nap leaves 3 s of the 10.
        let nap = reading(start + Duration::from_secs(3), Duration::from_secs(1007));
        assert_eq!(deadline.instant_as_of(&nap), start + Duration::from_secs(6));
    }

    /// On the real clocks, with no suspend: an hour ahead is not passed, now is.
    #[test]
    fn passed_and_remaining_on_the_real_clocks() {
        let hour = Deadline::after(Awake::now(), Duration::from_secs(3600)).expect("deadline");
        assert!(!hour.passed());
        assert!(hour.remaining() > Duration::from_secs(3500));
        let now = Deadline::at(Awake::now());
        assert!(now.passed());
        assert_eq!(now.remaining(), Duration::ZERO);
    }

    #[test]
    fn without_a_boot_clock_nothing_is_detected() {
        let start = Instant::now();
        let since = Awake {
            monotonic: start,
            boottime: None,
        };
        let later = reading(start + Duration::from_secs(1), Duration::from_secs(99));
        assert_eq!(since.slept_until(&later), Duration::ZERO);
        // A boot clock that went back (it never does) is no suspend either.
        assert_eq!(
            slept(Duration::ZERO, Duration::from_secs(1)),
            Duration::ZERO
        );
    }

    /// On this machine, with no suspend, the two clocks agree to well under a millisecond.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_real_clocks_agree_while_awake() {
        let since = Awake::now();
        assert!(since.boottime.is_some(), "Linux has CLOCK_BOOTTIME");
        std::thread::sleep(Duration::from_millis(20));
        // Preemption between the two reads of a reading shows as a little sleep; a wrong
        // clock (the wall clock, say) would show as years.
        let slept = since.slept_until(&Awake::now());
        assert!(slept < Duration::from_millis(100), "{slept:?}");
    }
}
