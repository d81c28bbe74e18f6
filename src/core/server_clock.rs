//! The servers' wall clocks as this host can follow them, and the moment the voters agree a
//! waiter queued: its place in a lock's queue (`DESIGN.md` §7).
//!
//! A waiter's place must be the same number on every master, so every master orders the
//! waiters alike and hands the lock to the same one. It used to be this host's wall clock, so a
//! host whose clock ran Δ ahead was served after every waiter that queued within Δ after it:
//! a starvation as long as the host's clock error (hours, for a host without NTP). The
//! assumptions (`DESIGN.md` §8) bound clock *rates*, not offsets. So the place is read from the
//! servers' clocks instead: each connection reads its server's `server_time_usec` in the
//! `INFO server` it sends anyway (Redis 6.2 and later, every Valkey), pairs it with this
//! host's clocks, and follows it from there: on the monotonic clock, plus any suspend the boot
//! clock saw. A place is the median of the voters' clocks followed so: with three or more
//! known, one server whose clock is off moves nobody's place (with two, the earlier is
//! taken), and two clients of the same voters agree on it to within the servers' own offsets
//! plus half a round trip, whatever their hosts' wall clocks say. What remains of the host's
//! clock is its rate over one connection's life (tens of ppm without NTP: seconds a day).
//! With no voter's clock known (none connected yet, or servers before Redis 6.2), the host's
//! wall clock stands in, and a waiter's place is drawn again before each round until a
//! voter's clock is known.

use std::time::Instant;

use crate::core::clock::Awake;

/// One server's wall clock, read at connection time and followed on this host's clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerClock {
    /// The server's clock, in µs since the Unix epoch, at `at`.
    usec: u64,
    /// When, on this host: the answer's arrival, the reading moved on by half the round trip
    /// (the server read its clock somewhere inside it, so the error is at most half of it).
    at: Awake,
}

impl ServerClock {
    /// The server said `usec` in answer to a request sent at `sent` and answered at
    /// `received`.
    pub(crate) fn read(usec: u64, sent: Instant, received: Awake) -> Self {
        let half = received.instant().saturating_duration_since(sent) / 2;
        Self {
            usec: usec.saturating_add(micros(half)),
            at: received,
        }
    }

    /// The server's clock at `now`, in µs, followed from the reading at this host's rate,
    /// through any suspend of the host (the monotonic clock stops during one, the boot clock
    /// does not).
    pub(crate) fn at(&self, now: &Awake) -> u64 {
        self.usec.saturating_add(micros(self.at.elapsed_until(now)))
    }
}

fn micros(span: std::time::Duration) -> u64 {
    u64::try_from(span.as_micros()).unwrap_or(u64::MAX)
}

/// The place the voters agree on from their clocks at one moment (`readings`, in µs): the
/// median (the lower of the two middle ones for an even count); `None` when no voter's clock
/// is known (none connected, or none said its time).
pub(crate) fn agreed(mut readings: Vec<u64>) -> Option<u64> {
    if readings.is_empty() {
        return None;
    }
    readings.sort_unstable();
    readings.get((readings.len() - 1) / 2).copied()
}

/// This host's wall clock, in µs since the Unix epoch: the place when no voter's clock is
/// known (it orders this waiter as before the servers' clocks were used).
pub(crate) fn host_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Mutations: no half round trip added shifts the reading by 2 ms; following on the
    /// monotonic clock alone loses the 60 s suspend.
    #[test]
    fn a_reading_is_placed_in_the_middle_of_its_round_trip_and_follows_the_host() {
        let sent = Instant::now();
        let boot = Duration::from_secs(1_000);
        let received = Awake::of(sent + Duration::from_millis(4), Some(boot));
        let clock = ServerClock::read(1_000_000, sent, received);
        assert_eq!(clock.at(&received), 1_002_000);
        let later = Awake::of(
            sent + Duration::from_millis(14),
            Some(boot + Duration::from_millis(10)),
        );
        assert_eq!(clock.at(&later), 1_012_000);
        // The host slept 60 s (the boot clock moved on, the monotonic one did not).
        let woke = Awake::of(
            sent + Duration::from_millis(14),
            Some(boot + Duration::from_millis(60_010)),
        );
        assert_eq!(clock.at(&woke), 61_012_000);
    }

    /// Mutation: the mean instead of the median lets one server an hour off move every place
    /// by 12 minutes.
    #[test]
    fn the_agreed_place_is_the_median_so_one_clock_far_off_moves_nothing() {
        let hour = 3_600_000_000;
        assert_eq!(agreed(vec![10, 11, 12, 13, 12 + hour]), Some(12));
        assert_eq!(agreed(vec![12 + hour, 10, 11]), Some(11));
        assert_eq!(agreed(vec![7, 9]), Some(7));
        assert_eq!(agreed(vec![5]), Some(5));
        assert_eq!(agreed(Vec::new()), None);
    }
}
