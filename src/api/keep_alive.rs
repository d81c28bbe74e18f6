//! A lease's keep-alive task: when it renews, retries and gives up, over any lock that can be
//! renewed ([`Renewable`]), so the schedule is tested in virtual time without servers.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::Result;
use crate::api::lock::Lock;
use crate::core::clock::Deadline;
use crate::errors::error::LostReason;

/// How a [`Lease`](crate::Lease) renews its lock.
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | [`renew_every`](Self::renew_every) | a third of the lock's ttl |
/// | [`max_extensions`](Self::max_extensions) | no limit |
/// | [`max_hold`](Self::max_hold) | no limit |
///
/// ```
/// use std::time::Duration;
/// # fn main() -> Result<(), redquorum::ConfigError> {
/// let options = redquorum::LeaseOptions::default()
///     .renew_every(Duration::from_secs(2))?
///     .max_hold(Some(Duration::from_secs(3600)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseOptions {
    renew_every: Option<Duration>,
    max_extensions: Option<u32>,
    max_hold: Option<Duration>,
}

impl LeaseOptions {
    /// Renew this often (it must be shorter than the ttl to be of use: a lease whose renewal
    /// would come after its deadline is lost at the deadline).
    ///
    /// # Errors
    /// [`ConfigError::ZeroTimeout`](crate::ConfigError::ZeroTimeout) for zero,
    /// [`ConfigError::TooLong`](crate::ConfigError::TooLong) above
    /// [`MAX_TTL`](crate::MAX_TTL).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # fn main() -> Result<(), redquorum::ConfigError> {
    /// let o = redquorum::LeaseOptions::default().renew_every(Duration::from_millis(500))?;
    /// assert!(redquorum::LeaseOptions::default().renew_every(Duration::MAX).is_err());
    /// # Ok(()) }
    /// ```
    pub fn renew_every(mut self, interval: Duration) -> Result<Self, crate::ConfigError> {
        if interval.is_zero() {
            return Err(crate::ConfigError::ZeroTimeout("renewal interval"));
        }
        if interval > crate::MAX_TTL {
            return Err(crate::ConfigError::TooLong {
                what: "renewal interval",
                value: interval,
                max: crate::MAX_TTL,
            });
        }
        self.renew_every = Some(interval);
        Ok(self)
    }

    /// Stop renewing after this many extensions; the lease is then lost at its deadline.
    pub fn max_extensions(mut self, max: Option<u32>) -> Self {
        self.max_extensions = max;
        self
    }

    /// Stop renewing once the lease has been held this long; it is then lost at its deadline.
    pub fn max_hold(mut self, max: Option<Duration>) -> Self {
        self.max_hold = max;
        self
    }
}

/// A leased lock's deadline, on the clock its lock keeps: a real lock's follows the monotonic
/// clock and the host's suspends ([`Deadline`]); the test double's follows tokio's clock, so
/// tests that pause and advance time see its lease lost on time.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaseDeadline {
    /// A real lock's.
    Awake(Deadline),
    /// The in-memory double's (`crate::testing`).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    Tokio(tokio::time::Instant),
}

impl LeaseDeadline {
    pub(crate) fn passed(&self) -> bool {
        match self {
            Self::Awake(deadline) => deadline.passed(),
            Self::Tokio(at) => tokio::time::Instant::now() >= *at,
        }
    }

    pub(crate) fn instant(&self) -> Instant {
        match self {
            Self::Awake(deadline) => deadline.instant(),
            Self::Tokio(at) => at.into_std(),
        }
    }
}

/// What the keep-alive task needs of its lock. A seam, so the schedule below is tested in
/// virtual time (`tokio::time::pause`) with a scripted lock and no servers; [`Lock`] and the
/// in-memory double's lock (`crate::testing`) are the implementations outside the tests.
pub(crate) trait Renewable: Send + 'static {
    /// The ttl each renewal asks for.
    fn ttl(&self) -> Duration;
    /// The local deadline, on tokio's clock (the same clock as `std`'s outside paused tests).
    fn valid_until(&self) -> tokio::time::Instant;
    /// The deadline the lease's signal shows, on the lock's own clock.
    fn lease_deadline(&self) -> LeaseDeadline;
    /// Whether the deadline has passed, read anew: a suspend of the host brings it forward.
    fn is_expired(&self) -> bool;
    /// One extension round.
    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<()>> + Send;
}

impl Renewable for Lock {
    fn ttl(&self) -> Duration {
        Lock::ttl(self)
    }

    fn valid_until(&self) -> tokio::time::Instant {
        Lock::valid_until(self).into()
    }

    fn lease_deadline(&self) -> LeaseDeadline {
        LeaseDeadline::Awake(self.deadline())
    }

    fn is_expired(&self) -> bool {
        Lock::is_expired(self)
    }

    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<()>> + Send {
        Lock::extend(self, ttl)
    }
}

/// Renews `lock` until told to stop, lost, or past a limit; returns the lock. Every
/// successful extension is passed to `renewed`, a loss (once) to `lose`.
///
/// The schedule: renew every `interval` (a third of the ttl by default); after a failed
/// extension, try again after a quarter of the interval; give up at the deadline, even while
/// an extension hangs; lose at once when an extension finds the lock gone.
pub(crate) async fn keep_alive<L: Renewable>(
    mut lock: L,
    options: LeaseOptions,
    renewed: impl Fn(&L) + Send,
    lose: impl Fn(LostReason) + Send,
    mut stop: oneshot::Receiver<()>,
) -> L {
    let ttl = lock.ttl();
    let interval = options
        .renew_every
        .unwrap_or(ttl / 3)
        .max(Duration::from_millis(1));
    let held_since = tokio::time::Instant::now();
    let mut extensions = 0u32;
    // Checked: an interval past the deadline only means the lease is lost there.
    let after = |interval: Duration| tokio::time::Instant::now().checked_add(interval);
    let mut next_renewal = after(interval).unwrap_or_else(|| lock.valid_until());
    let limit_reached = |extensions: u32| {
        options.max_extensions.is_some_and(|max| extensions >= max)
            || options
                .max_hold
                .is_some_and(|max| held_since.elapsed() >= max)
    };
    loop {
        let deadline = lock.valid_until();
        let wake = if limit_reached(extensions) {
            deadline
        } else {
            next_renewal.min(deadline)
        };
        tokio::select! {
            _ = &mut stop => return lock,
            _ = tokio::time::sleep_until(wake) => {}
        }
        // Both checked anew on waking: `max_hold` may have passed during the sleep, and a
        // suspend of the host brings the deadline forward (the timers did not run meanwhile).
        let limit_reached = limit_reached(extensions);
        if lock.is_expired() {
            lose(if limit_reached {
                LostReason::LimitReached
            } else {
                LostReason::DeadlinePassed
            });
            return wait_for_stop(lock, stop).await;
        }
        if limit_reached {
            // No renewal past a limit: sleep on to the deadline.
            continue;
        }
        // The extension may hang; the deadline does not wait for it.
        let extended = tokio::select! {
            _ = &mut stop => return lock,
            result = tokio::time::timeout_at(deadline, lock.extend(ttl)) => result,
        };
        match extended {
            Ok(Ok(())) => {
                extensions = extensions.saturating_add(1);
                renewed(&lock);
                next_renewal = after(interval).unwrap_or_else(|| lock.valid_until());
            }
            Ok(Err(e)) if e.is_expired() => {
                lose(LostReason::Gone(Arc::new(e)));
                return wait_for_stop(lock, stop).await;
            }
            Ok(Err(e)) => {
                // Nodes failed or answered too late: try again soon, until the deadline.
                tracing::debug!(error = %e, "lease extension failed, retrying");
                next_renewal = after((interval / 4).max(Duration::from_millis(1)))
                    .unwrap_or_else(|| lock.valid_until());
            }
            Err(_) => {
                lose(LostReason::DeadlinePassed);
                return wait_for_stop(lock, stop).await;
            }
        }
    }
}

/// After a loss: keep the lock (so `release` can report on it) until the lease is released or
/// dropped; no more renewals.
async fn wait_for_stop<L>(lock: L, stop: oneshot::Receiver<()>) -> L {
    let _ = stop.await;
    lock
}

/// The keep-alive schedule in virtual time: a scripted lock, no servers. Each test names the
/// mutation of `keep_alive` that makes it fail (run, and recorded in `tests/MUTATIONS.md`).
#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use tokio::time::Instant;

    use super::*;
    use crate::core::report::Report;
    use crate::errors::error::{Error, Failure, Operation};

    /// What one scripted extension does, after `took` of virtual time.
    #[derive(Clone, Copy)]
    enum Step {
        /// Succeeds: the deadline becomes the extension's start + ttl.
        Renew { took: Duration },
        /// Fails with an outage (nodes down): worth retrying.
        Fail { took: Duration },
        /// Finds the lock gone.
        Gone { took: Duration },
        /// Never answers.
        Hang,
    }

    /// A lock whose extensions follow a script (then succeed at once), recording when each
    /// was called, in virtual time since the test began.
    struct Scripted {
        ttl: Duration,
        valid_until: Instant,
        script: VecDeque<Step>,
        began: Instant,
        calls: Arc<Mutex<Vec<Duration>>>,
    }

    impl Renewable for Scripted {
        fn ttl(&self) -> Duration {
            self.ttl
        }

        fn valid_until(&self) -> Instant {
            self.valid_until
        }

        fn lease_deadline(&self) -> LeaseDeadline {
            LeaseDeadline::Tokio(self.valid_until)
        }

        fn is_expired(&self) -> bool {
            Instant::now() >= self.valid_until
        }

        fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<()>> + Send {
            let started = Instant::now();
            if let Ok(mut calls) = self.calls.lock() {
                calls.push(started - self.began);
            }
            let step = self.script.pop_front().unwrap_or(Step::Renew {
                took: Duration::ZERO,
            });
            let valid_until = &mut self.valid_until;
            async move {
                let failure = || {
                    Box::new(Failure::new(
                        Operation::Extend,
                        b"r",
                        1,
                        Duration::ZERO,
                        Report::default(),
                    ))
                };
                match step {
                    Step::Renew { took } => {
                        tokio::time::sleep(took).await;
                        *valid_until = started + ttl;
                        Ok(())
                    }
                    Step::Fail { took } => {
                        tokio::time::sleep(took).await;
                        Err(Error::NoQuorum(failure()))
                    }
                    Step::Gone { took } => {
                        tokio::time::sleep(took).await;
                        Err(Error::Expired(failure()))
                    }
                    Step::Hang => std::future::pending().await,
                }
            }
        }
    }

    const TTL: Duration = Duration::from_secs(30);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// What a lease run showed: when each extension was asked for, and when (and why) the
    /// lease was lost, in virtual time since it began.
    #[derive(Debug)]
    struct Run {
        calls: Vec<Duration>,
        renewals: Vec<Duration>,
        lost: Option<(Duration, LostReason)>,
    }

    /// Runs a lease over a fresh `TTL` lock with `script`, for `watch` of virtual time, then
    /// stops it.
    async fn run(script: &[Step], options: LeaseOptions, watch: Duration) -> Run {
        let began = Instant::now();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let lock = Scripted {
            ttl: TTL,
            valid_until: began + TTL,
            script: script.iter().copied().collect(),
            began,
            calls: calls.clone(),
        };
        let renewals = Arc::new(Mutex::new(Vec::new()));
        let lost = Arc::new(Mutex::new(None));
        let (stop, stop_rx) = oneshot::channel();
        crate::core::telemetry::task_spawned();
        let task = tokio::spawn(keep_alive(
            lock,
            options,
            {
                let renewals = renewals.clone();
                move |_: &Scripted| renewals.lock().expect("not poisoned").push(began.elapsed())
            },
            {
                let lost = lost.clone();
                move |reason| {
                    let mut lost = lost.lock().expect("not poisoned");
                    assert!(lost.is_none(), "lost twice");
                    *lost = Some((began.elapsed(), reason));
                }
            },
            stop_rx,
        ));
        tokio::time::sleep(watch).await;
        stop.send(()).expect("the task waits for stop");
        task.await.expect("the keep-alive task ends");
        let calls = calls.lock().expect("not poisoned").clone();
        let renewals = renewals.lock().expect("not poisoned").clone();
        let lost = lost.lock().expect("not poisoned").take();
        Run {
            calls,
            renewals,
            lost,
        }
    }

    /// Mutation: renewing every `ttl / 2` (or `ttl`) instead of `ttl / 3`.
    #[tokio::test(start_paused = true)]
    async fn renews_every_third_of_the_ttl() {
        let run = run(&[], LeaseOptions::default(), secs(95)).await;
        assert_eq!(
            run.calls,
            [
                secs(10),
                secs(20),
                secs(30),
                secs(40),
                secs(50),
                secs(60),
                secs(70),
                secs(80),
                secs(90)
            ]
        );
        assert_eq!(run.renewals, run.calls);
        assert!(run.lost.is_none(), "{run:?}");
    }

    /// The next renewal is counted from the end of the last one, not the start.
    /// Mutation: computing `next_renewal` before the extension.
    #[tokio::test(start_paused = true)]
    async fn a_slow_renewal_pushes_the_next_one_back() {
        let run = run(
            &[Step::Renew { took: secs(4) }],
            LeaseOptions::default(),
            secs(30),
        )
        .await;
        assert_eq!(run.calls, [secs(10), secs(24)]);
        assert_eq!(run.renewals, [secs(14), secs(24)]);
    }

    /// Mutation: retrying after a full interval (or not at all) after a failure.
    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_is_retried_after_a_quarter_interval() {
        let script = [Step::Fail { took: secs(1) }, Step::Fail { took: secs(1) }];
        let run = run(&script, LeaseOptions::default(), secs(20)).await;
        // 10: fails at 11, retried at 11 + 2.5; fails at 14.5, retried at 17: renewed.
        assert_eq!(
            run.calls,
            [secs(10), Duration::from_millis(13_500), secs(17)]
        );
        assert_eq!(run.renewals, [secs(17)]);
        assert!(run.lost.is_none(), "{run:?}");
    }

    /// Failures until the deadline: lost exactly at the deadline, with retries until then.
    /// Mutation: losing on the first failure (`Ok(Err(e))` treated as gone) fails it.
    #[tokio::test(start_paused = true)]
    async fn failures_until_the_deadline_lose_it_at_the_deadline() {
        let script = [Step::Fail {
            took: Duration::ZERO,
        }; 16];
        let run = run(&script, LeaseOptions::default(), secs(40)).await;
        // 10, then every 2.5 s: 12.5 … 27.5; the retry due at 30 is the deadline itself.
        assert_eq!(run.calls.len(), 8, "{run:?}");
        assert!(run.renewals.is_empty());
        let (at, reason) = run.lost.expect("lost");
        assert_eq!(at, TTL);
        assert!(matches!(reason, LostReason::DeadlinePassed), "{reason:?}");
    }

    /// A hanging extension does not hold the loss back past the deadline.
    /// Mutation: awaiting `lock.extend(ttl)` without `timeout_at(deadline, …)`.
    #[tokio::test(start_paused = true)]
    async fn a_hanging_renewal_is_lost_at_the_deadline() {
        let run = run(&[Step::Hang], LeaseOptions::default(), secs(60)).await;
        assert_eq!(run.calls, [secs(10)]);
        let (at, reason) = run.lost.expect("lost");
        assert_eq!(at, TTL);
        assert!(matches!(reason, LostReason::DeadlinePassed), "{reason:?}");
    }

    /// Mutation: treating "gone" like any failure (retrying until the deadline).
    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_finds_the_lock_gone_loses_it_at_once() {
        let run = run(
            &[Step::Gone { took: secs(1) }],
            LeaseOptions::default(),
            secs(60),
        )
        .await;
        assert_eq!(run.calls, [secs(10)]);
        let (at, reason) = run.lost.expect("lost");
        assert_eq!(at, secs(11));
        assert!(matches!(reason, LostReason::Gone(_)), "{reason:?}");
    }

    /// Renewed at 10 s and 20 s only, then lost for a limit at the last deadline (20 + 30 s).
    fn renewed_twice_then_lost_at_the_limit(run: Run) {
        assert_eq!(run.calls, [secs(10), secs(20)]);
        let (at, reason) = run.lost.expect("lost");
        assert_eq!(at, secs(50));
        assert!(matches!(reason, LostReason::LimitReached), "{reason:?}");
    }

    /// Mutation: `extensions >= max` → `extensions > max` (one renewal too many).
    #[tokio::test(start_paused = true)]
    async fn max_extensions_stops_renewing_and_loses_at_the_deadline() {
        let options = LeaseOptions::default().max_extensions(Some(2));
        renewed_twice_then_lost_at_the_limit(run(&[], options, secs(80)).await);
    }

    /// No renewal once `max_hold` has passed, even one already scheduled (the renewal due at
    /// 30 s, after 25 s of holding, is not made).
    /// Mutation: ignoring `max_hold`, or checking it only before the sleep.
    #[tokio::test(start_paused = true)]
    async fn max_hold_stops_renewing_and_loses_at_the_deadline() {
        let options = LeaseOptions::default().max_hold(Some(secs(25)));
        renewed_twice_then_lost_at_the_limit(run(&[], options, secs(80)).await);
    }

    /// Stopping while an extension hangs returns the lock at once, lost or not.
    /// Mutation: a plain `.await` of the extension instead of the `select!` with `stop`.
    #[tokio::test(start_paused = true)]
    async fn stop_interrupts_a_hanging_renewal() {
        let began = Instant::now();
        let run = run(&[Step::Hang], LeaseOptions::default(), secs(15)).await;
        assert_eq!(run.calls, [secs(10)]);
        assert!(run.lost.is_none(), "{run:?}");
        assert_eq!(began.elapsed(), secs(15));
    }
}
