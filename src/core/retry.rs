//! When to try again after a failed round, and how long to wait first.

use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// How [`RedLock::acquire`](crate::RedLock::acquire) retries a failed round.
///
/// Each retry waits `delay` plus a random share of `jitter` (uniform), so contenders that
/// collided once are unlikely to collide again. Retrying stops after `max_attempts` rounds or
/// once `max_wait` has passed since the call began, whichever comes first (a wait is cut short
/// so that the last round starts at the deadline). Invalid arguments are never retried.
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | `max_attempts` | [`DEFAULT_MAX_ATTEMPTS`](Self::DEFAULT_MAX_ATTEMPTS) (10) |
/// | `max_wait` | none |
/// | `delay` | [`DEFAULT_DELAY`](Self::DEFAULT_DELAY) (50 ms) |
/// | `jitter` | [`DEFAULT_JITTER`](Self::DEFAULT_JITTER) (150 ms) |
///
/// ```
/// use std::time::Duration;
/// use redquorum::RetryPolicy;
///
/// let patient = RetryPolicy::default()
///     .max_attempts(None)
///     .max_wait(Some(Duration::from_secs(30)))
///     .delay(Duration::from_millis(100))
///     .jitter(Duration::from_millis(100));
/// let impatient = RetryPolicy::once();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: Option<u32>,
    max_wait: Option<Duration>,
    delay: Duration,
    jitter: Duration,
}

impl RetryPolicy {
    /// Default number of rounds.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;
    /// Default fixed part of the wait between rounds.
    pub const DEFAULT_DELAY: Duration = Duration::from_millis(50);
    /// Default random part of the wait between rounds.
    pub const DEFAULT_JITTER: Duration = Duration::from_millis(150);

    /// A single round, no retry.
    pub fn once() -> Self {
        Self::default().max_attempts(Some(1))
    }

    /// At most this many rounds (`None`: no limit; then set a `max_wait`).
    pub fn max_attempts(mut self, attempts: Option<u32>) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Start no round later than this long after the call began (`None`: no deadline).
    pub fn max_wait(mut self, wait: Option<Duration>) -> Self {
        self.max_wait = wait;
        self
    }

    /// The fixed part of the wait between rounds.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The random part of the wait between rounds: up to this much is added to `delay`.
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// This policy's delays, with no limit on the number of rounds but a wait of at most
    /// `max_wait`: what every `acquire_within` retries with.
    pub(crate) fn within(&self, max_wait: Duration) -> Self {
        self.clone().max_attempts(None).max_wait(Some(max_wait))
    }

    pub(crate) fn attempts_limit(&self) -> Option<u32> {
        self.max_attempts
    }

    pub(crate) fn wait_limit(&self) -> Option<Duration> {
        self.max_wait
    }

    pub(crate) fn allows_any_attempt(&self) -> bool {
        self.max_attempts != Some(0)
    }

    /// The wait before the next round: `delay + uniform(0..=jitter)`.
    pub(crate) fn next_delay(&self, rng: &Jitter) -> Duration {
        let jitter_ns = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        let extra = if jitter_ns == 0 {
            0
        } else {
            rng.draw(jitter_ns)
        };
        self.delay.saturating_add(Duration::from_nanos(extra))
    }

    /// The longest wait [`next_delay`](Self::next_delay) can draw: `delay + jitter`.
    pub(crate) fn longest_delay(&self) -> Duration {
        self.delay.saturating_add(self.jitter)
    }

    /// The wait before the next round: [`next_delay`](Self::next_delay), but never past the
    /// holder's expiry as the nodes reported it (`holder_left`, plus 1 ms so the key is gone
    /// when the round lands), nor past what is left of the call's wait (`wait_left`).
    pub(crate) fn delay_before_next(
        &self,
        rng: &Jitter,
        holder_left: Option<Duration>,
        wait_left: Option<Duration>,
    ) -> Duration {
        let mut delay = self.next_delay(rng);
        if let Some(left) = holder_left {
            delay = delay.min(left.saturating_add(Duration::from_millis(1)));
        }
        if let Some(left) = wait_left {
            delay = delay.min(left);
        }
        delay
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: Some(Self::DEFAULT_MAX_ATTEMPTS),
            max_wait: None,
            delay: Self::DEFAULT_DELAY,
            jitter: Self::DEFAULT_JITTER,
        }
    }
}

/// The random source of retry delays: seeded (reproducible, for tests) or the thread RNG.
#[derive(Debug)]
pub(crate) enum Jitter {
    Seeded(Box<Mutex<StdRng>>),
    Thread,
}

impl Jitter {
    pub(crate) fn new(seed: Option<u64>) -> Self {
        match seed {
            Some(seed) => Self::Seeded(Box::new(Mutex::new(StdRng::seed_from_u64(seed)))),
            None => Self::Thread,
        }
    }

    /// Uniform in `0..=max`.
    fn draw(&self, max: u64) -> u64 {
        match self {
            Self::Seeded(rng) => rng
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .random_range(0..=max),
            Self::Thread => rand::rng().random_range(0..=max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_within_delay_plus_jitter() {
        let policy = RetryPolicy::default()
            .delay(Duration::from_millis(10))
            .jitter(Duration::from_millis(5));
        let rng = Jitter::new(None);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let d = policy.next_delay(&rng);
            assert!(
                d >= Duration::from_millis(10) && d <= Duration::from_millis(15),
                "{d:?}"
            );
            seen.insert(d);
        }
        assert!(seen.len() > 100, "jitter should spread the delays");
    }

    #[test]
    fn a_seed_replays_the_same_delays() {
        let policy = RetryPolicy::default();
        let a = Jitter::new(Some(42));
        let b = Jitter::new(Some(42));
        let c = Jitter::new(Some(43));
        let da: Vec<_> = (0..20).map(|_| policy.next_delay(&a)).collect();
        let db: Vec<_> = (0..20).map(|_| policy.next_delay(&b)).collect();
        let dc: Vec<_> = (0..20).map(|_| policy.next_delay(&c)).collect();
        assert_eq!(da, db);
        assert_ne!(da, dc);
    }

    /// Mutation: dropping either cap (the holder's expiry or the wait left).
    #[test]
    fn a_retry_waits_no_longer_than_the_holder_or_the_call() {
        let policy = RetryPolicy::default()
            .delay(Duration::from_millis(100))
            .jitter(Duration::ZERO);
        let rng = Jitter::new(None);
        let ms = Duration::from_millis;
        assert_eq!(policy.delay_before_next(&rng, None, None), ms(100));
        assert_eq!(policy.delay_before_next(&rng, Some(ms(30)), None), ms(31));
        assert_eq!(policy.delay_before_next(&rng, Some(ms(500)), None), ms(100));
        assert_eq!(policy.delay_before_next(&rng, None, Some(ms(20))), ms(20));
        assert_eq!(
            policy.delay_before_next(&rng, Some(ms(30)), Some(ms(20))),
            ms(20)
        );
        assert_eq!(
            policy.delay_before_next(&rng, Some(ms(10)), Some(ms(20))),
            ms(11)
        );
        assert_eq!(
            policy.delay_before_next(&rng, Some(Duration::MAX), None),
            ms(100)
        );
        assert_eq!(
            policy.delay_before_next(&rng, None, Some(Duration::ZERO)),
            Duration::ZERO
        );
    }

    #[test]
    fn no_jitter_means_exactly_the_delay() {
        let policy = RetryPolicy::default().jitter(Duration::ZERO);
        assert_eq!(
            policy.next_delay(&Jitter::new(None)),
            RetryPolicy::DEFAULT_DELAY
        );
        let huge = RetryPolicy::default()
            .delay(Duration::MAX)
            .jitter(Duration::MAX);
        assert_eq!(huge.next_delay(&Jitter::new(Some(1))), Duration::MAX);
    }
}
