//! Quorum counting and validity arithmetic, free of I/O.
//!
//! Everything the algorithm decides from numbers lives here, so it can be tested exhaustively
//! without a server: how many votes make a majority, when a round is decided, how much clock
//! drift to allow for, and how long a lock stays valid after a round. The local deadline that
//! validity becomes is `crate::core::clock`.

use std::time::Duration;

/// The fixed part of the drift allowance, added to `ttl × drift_factor`.
///
/// The Redis page adds 2 ms for the granularity of the servers' expiry clocks.
pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// The number of votes that make a majority of `n` nodes: `n / 2 + 1`.
///
/// For an even `n` this is more than half, so two disjoint groups can never both reach it.
pub(crate) const fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The clock-drift allowance for a lock of `ttl`: `ttl × factor + 2 ms`, saturating.
///
/// `factor` is validated to lie in `[0, 1)` by the builder; a factor outside that range (or NaN)
/// is treated as the largest allowance possible, so a bad value can only shorten validity.
pub(crate) fn drift(ttl: Duration, factor: f64) -> Duration {
    let proportional = if (0.0..1.0).contains(&factor) {
        Duration::try_from_secs_f64(ttl.as_secs_f64() * factor).unwrap_or(Duration::MAX)
    } else {
        ttl
    };
    proportional.saturating_add(DRIFT_FLOOR)
}

/// What is left of a lock's validity: `ttl − elapsed − drift`, or `None` when nothing is left.
///
/// `elapsed` is measured on a monotonic clock from before the first request of the round. A
/// result of exactly zero counts as nothing left.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|left| !left.is_zero())
}

/// How a node answered, reduced to what counts for the majority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Vote {
    /// The node did what we asked (granted, extended, released).
    Yes,
    /// The node answered, but the key is not ours (another owner, or gone).
    Refused,
    /// The node did not answer usefully (error, timeout, unreachable, not yet answered).
    Failed,
}

/// Where a round stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Neither side can be sure yet.
    Open,
    /// A majority said yes.
    Won,
    /// A majority can no longer say yes.
    Lost,
}

/// Running counts of a round's votes over `n` nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Tally {
    n: usize,
    yes: usize,
    refused: usize,
    failed: usize,
}

impl Tally {
    pub(crate) const fn new(n: usize) -> Self {
        Self {
            n,
            yes: 0,
            refused: 0,
            failed: 0,
        }
    }

    pub(crate) fn record(&mut self, vote: Vote) {
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::Refused => self.refused += 1,
            Vote::Failed => self.failed += 1,
        }
    }

    /// The yes votes so far.
    pub(crate) const fn yes(&self) -> usize {
        self.yes
    }

    pub(crate) const fn quorum(&self) -> usize {
        quorum(self.n)
    }

    /// Decided as soon as it is decided: won at a majority of yes votes, lost as soon as more
    /// than `n − quorum` nodes have said anything else.
    pub(crate) fn decision(&self) -> Decision {
        let quorum = self.quorum();
        if self.yes >= quorum {
            Decision::Won
        } else if self.refused + self.failed > self.n - quorum {
            Decision::Lost
        } else {
            Decision::Open
        }
    }

    /// Why a lost round was lost: an outage when the nodes that answered at all could not have
    /// made a majority even had every one of them said yes; contention otherwise.
    ///
    /// Counting this way keeps "held by another owner" and "nodes are down" apart: with two of
    /// five nodes down and the other three holding someone else's key, the lock is busy, not
    /// unreachable.
    pub(crate) fn lost_to_outage(&self) -> bool {
        self.n - self.failed < self.quorum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn quorum_is_a_strict_majority_for_every_n() {
        let expected = [
            (1, 1),
            (2, 2),
            (3, 2),
            (4, 3),
            (5, 3),
            (6, 4),
            (7, 4),
            (8, 5),
            (9, 5),
        ];
        for (n, q) in expected {
            assert_eq!(quorum(n), q, "n = {n}");
            // Two disjoint sets of nodes can never both reach it.
            assert!(2 * quorum(n) > n, "n = {n}");
        }
    }

    /// Every order of every mix of votes, for N = 1..=9: the decision is reached exactly when
    /// the counts force it, and never flips once made.
    #[test]
    fn tally_decides_exactly_when_forced() {
        for n in 1..=9usize {
            let q = quorum(n);
            // Enumerate all vote sequences of length n over three kinds (3^9 = 19683 at most).
            let total = 3usize.pow(n as u32);
            for code in 0..total {
                let mut votes = Vec::with_capacity(n);
                let mut c = code;
                for _ in 0..n {
                    votes.push([Vote::Yes, Vote::Refused, Vote::Failed][c % 3]);
                    c /= 3;
                }
                let mut tally = Tally::new(n);
                let mut first_decision = None;
                for (i, vote) in votes.iter().enumerate() {
                    tally.record(*vote);
                    let yes = votes[..=i].iter().filter(|v| **v == Vote::Yes).count();
                    let no = i + 1 - yes;
                    let expected = if yes >= q {
                        Decision::Won
                    } else if no > n - q {
                        Decision::Lost
                    } else {
                        Decision::Open
                    };
                    assert_eq!(tally.decision(), expected, "n={n} votes={votes:?} i={i}");
                    match first_decision {
                        None if expected != Decision::Open => first_decision = Some(expected),
                        Some(d) => assert_eq!(d, tally.decision(), "decision flipped"),
                        None => {}
                    }
                }
                // After all n votes the round is always decided.
                assert_ne!(tally.decision(), Decision::Open, "n={n} votes={votes:?}");
                let all_yes = votes.iter().filter(|v| **v == Vote::Yes).count();
                assert_eq!(tally.decision() == Decision::Won, all_yes >= q);
            }
        }
    }

    #[test]
    fn even_n_needs_more_than_half() {
        let mut tally = Tally::new(4);
        tally.record(Vote::Yes);
        tally.record(Vote::Yes);
        assert_eq!(tally.decision(), Decision::Open, "2 of 4 is not a majority");
        tally.record(Vote::Refused);
        assert_eq!(
            tally.decision(),
            Decision::Open,
            "the last node could still make 3 of 4"
        );
        tally.record(Vote::Failed);
        assert_eq!(tally.decision(), Decision::Lost, "3 of 4 is out of reach");
    }

    #[test]
    fn outage_and_contention_are_told_apart() {
        // 5 nodes: 2 down, 3 held by someone else -> contention.
        let mut t = Tally::new(5);
        for v in [
            Vote::Failed,
            Vote::Failed,
            Vote::Refused,
            Vote::Refused,
            Vote::Refused,
        ] {
            t.record(v);
        }
        assert_eq!(t.decision(), Decision::Lost);
        assert!(!t.lost_to_outage());
        // 3 down -> outage, whatever the others said.
        let mut t = Tally::new(5);
        for v in [
            Vote::Failed,
            Vote::Failed,
            Vote::Failed,
            Vote::Refused,
            Vote::Yes,
        ] {
            t.record(v);
        }
        assert!(t.lost_to_outage());
        // Decided early: 2 refused + 1 failed of 5 is lost, and it is contention.
        let mut t = Tally::new(5);
        for v in [Vote::Refused, Vote::Failed, Vote::Refused] {
            t.record(v);
        }
        assert_eq!(t.decision(), Decision::Lost);
        assert!(!t.lost_to_outage());
    }

    #[test]
    fn drift_is_proportional_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10), 0.01), 102 * MS);
        assert_eq!(drift(Duration::from_secs(1), 0.01), 12 * MS);
        assert_eq!(drift(Duration::ZERO, 0.01), 2 * MS);
        assert_eq!(drift(Duration::from_secs(10), 0.0), 2 * MS);
        // Out-of-range factors can only make the allowance larger, never smaller.
        assert_eq!(drift(Duration::from_secs(1), f64::NAN), 1002 * MS);
        assert_eq!(drift(Duration::from_secs(1), -0.5), 1002 * MS);
        assert_eq!(drift(Duration::from_secs(1), 7.0), 1002 * MS);
    }

    #[test]
    fn drift_saturates_on_huge_ttls() {
        assert!(drift(Duration::MAX, 0.5) >= Duration::MAX / 2 - Duration::from_secs(1));
        assert_eq!(drift(Duration::MAX, 0.0), 2 * MS);
        assert_eq!(
            drift(Duration::MAX, 2.0),
            Duration::MAX,
            "saturates instead of overflowing"
        );
        let year = Duration::from_secs(365 * 24 * 3600);
        let d = drift(year, 0.01);
        assert!(d > year / 101 && d < year / 99);
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift() {
        let ttl = Duration::from_secs(10);
        let d = drift(ttl, 0.01);
        assert_eq!(validity(ttl, 5 * MS, d), Some(ttl - 5 * MS - 102 * MS));
        assert_eq!(validity(ttl, Duration::ZERO, d), Some(ttl - d));
    }

    #[test]
    fn validity_never_underflows() {
        // Tiny ttls: drift alone exceeds them.
        for ttl_ms in 0..=2u64 {
            let ttl = Duration::from_millis(ttl_ms);
            assert_eq!(
                validity(ttl, Duration::ZERO, drift(ttl, 0.01)),
                None,
                "{ttl_ms} ms"
            );
        }
        // 3 ms leaves 3 − 2.03 = 0.97 ms.
        let three = Duration::from_millis(3);
        assert_eq!(
            validity(three, Duration::ZERO, drift(three, 0.01)),
            Some(Duration::from_micros(970))
        );
        // Exactly used up is nothing left.
        assert_eq!(validity(10 * MS, 8 * MS, 2 * MS), None);
        assert_eq!(validity(10 * MS, 7 * MS, 2 * MS), Some(MS));
        // Elapsed longer than the ttl (a late grant).
        assert_eq!(validity(MS, Duration::from_secs(3), Duration::ZERO), None);
        // Drift larger than ttl.
        assert_eq!(validity(5 * MS, Duration::ZERO, 6 * MS), None);
        assert_eq!(validity(Duration::ZERO, Duration::MAX, Duration::MAX), None);
    }

    #[test]
    fn validity_of_huge_ttls() {
        let ttl = Duration::MAX;
        assert_eq!(
            validity(ttl, Duration::ZERO, Duration::ZERO),
            Some(Duration::MAX)
        );
        assert!(validity(ttl, Duration::from_secs(1), drift(ttl, 0.01)).is_some());
    }
}
