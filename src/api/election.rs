//! Leader election in etcd's shape: campaign, resign, proclaim, leader, observe.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::api::lease::{Lease, LeaseOptions, LeaseSignal};
use crate::api::redlock::RedLock;
use crate::core::config::Timing;
use crate::core::retry::RetryPolicy;
use crate::core::token::Token;
use crate::errors::error::{Error, Failure, LostReason, Operation};
use crate::protocol::leader_info::{self, Leader, LeaderReading};
use crate::protocol::shared::ensure_runtime;
use crate::{Result, core::resource};

/// How long one acquire attempt of a campaign waits before it starts over.
const CAMPAIGN_WAIT: Duration = Duration::from_secs(5);

/// An election on one resource. Create it with [`RedLock::election`].
///
/// Candidates [`campaign`](Self::campaign) and wait until they lead; a leader holds a
/// [`Leadership`] (a fenced lease) until it [resigns](Leadership::resign) or
/// [loses](Leadership::lost) it. Anyone can ask for the current [`leader`](Self::leader) as
/// agreed by a majority, or [`observe`](Self::observe) changes.
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
/// let election = rl.election("scheduler", Duration::from_secs(10))?;
/// let leadership = election.campaign("worker-7").await?;
/// println!("leading in term {}", leadership.term());
/// tokio::select! {
///     reason = leadership.lost() => eprintln!("no longer leader: {reason}"),
///     _ = run_scheduler(leadership.term()) => {}
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// # async fn run_scheduler(_term: u64) {}
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    redlock: RedLock,
    resource: Vec<u8>,
    ttl: Duration,
    timing: Timing,
    lock_key: Vec<u8>,
    info_key: Vec<u8>,
}

impl RedLock {
    /// An election on `resource` whose leaders hold it for `ttl` at a time (renewed every
    /// ttl/3 while they lead). Leadership always carries a fencing token, the term.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid resource or ttl (no I/O).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let election = rl.election("scheduler", Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Election> {
        let resource = resource.as_ref();
        resource::validate(resource)?;
        self.shared().config.needs_tagged_keys("elections")?;
        let timing = self.shared().config.timing(ttl)?;
        let prefix = &self.shared().config.key_prefix;
        Ok(Election {
            redlock: self.clone(),
            resource: resource.to_vec(),
            ttl,
            timing,
            lock_key: resource::lock_key(prefix, resource),
            info_key: resource::leader_key(prefix, resource),
        })
    }
}

impl Election {
    /// Waits until this candidate leads, then returns its [`Leadership`], advertising `value`.
    ///
    /// Retries for as long as it takes (bound it with `tokio::time::timeout` if needed): busy
    /// and unreachable rounds are retried with the client's retry delays.
    ///
    /// # Errors
    /// [`Error::Config`] or [`Error::NoRuntime`] only; every other failure is retried.
    ///
    /// # Cancel safety
    /// A cancelled campaign cleans up after itself: a round in flight deletes its keys, and a
    /// lock already won but not yet returned is released in the background.
    ///
    /// ```no_run
    /// # async fn demo(election: redquorum::Election) -> Result<(), redquorum::Error> {
    /// let leadership = election.campaign("10.0.0.7:8080").await?;
    /// # drop(leadership); Ok(()) }
    /// ```
    pub async fn campaign(&self, value: impl Into<Vec<u8>>) -> Result<Leadership> {
        let value = value.into();
        let policy = RetryPolicy::default()
            .max_attempts(None)
            .max_wait(Some(CAMPAIGN_WAIT));
        loop {
            let mut lock = match self
                .redlock
                .acquire_fenced(&self.resource, self.ttl, &policy)
                .await
            {
                Ok(lock) => lock,
                Err(e @ (Error::Config(_) | Error::NoRuntime)) => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "campaign round failed, campaigning on");
                    continue;
                }
            };
            let Some(term) = lock.fencing_token() else {
                continue;
            };
            let token = lock.token().clone();
            // The leader info expires with the lock, and the lease renews both.
            lock.set_companion(self.info_key.clone());
            match self.write_info(&token, term, &value).await {
                Ok(()) => {
                    let lease = lock.into_lease(LeaseOptions::default());
                    tracing::info!(term, "elected");
                    return Ok(Leadership {
                        election: self.clone(),
                        lease,
                        token,
                        term,
                        value,
                    });
                }
                Err(e) => {
                    tracing::debug!(error = %e, "could not advertise the leader, campaigning on");
                    let _ = lock.release().await;
                }
            }
        }
    }

    /// Leads whenever it can until `stop` is cancelled: campaigns (as [`campaign`](Self::campaign)),
    /// runs `lead` while this candidate leads, and campaigns again afterwards — the loop every
    /// service and the `redquorum elect` command would otherwise write (client-go's
    /// `leaderelection.Run`, Curator's `LeaderSelector` with auto-requeue).
    ///
    /// - Leadership lost (see [`Leadership::lost`]): `lead`'s future is dropped at once — it
    ///   must not act as leader after that — and the candidate campaigns again.
    /// - `lead` returns: the candidate resigns (another may take over) and campaigns again.
    /// - `stop` cancelled: while campaigning, the campaign is dropped (its round cleans up
    ///   after itself); while leading, `lead`'s future is dropped and the candidate resigns
    ///   before `run` returns `Ok(())`.
    ///
    /// `lead` gets a [`Leading`]: the term (the fencing token to hand to what it writes), the
    /// value and the loss signal; `run` keeps the [`Leadership`] itself, to resign it. (A
    /// leader that must [`proclaim`](Leadership::proclaim) new values campaigns by hand.)
    /// It is called once per leadership, so it is an `FnMut` returning a future that owns what
    /// it uses: clone shared state into it, as in the example.
    ///
    /// # Errors
    /// [`Error::NoRuntime`] outside a tokio runtime. Outages and busy rounds are not errors:
    /// the campaign waits them out.
    ///
    /// # Cancel safety
    /// Dropping the future stops as a cancelled `stop` does, except that the resignation
    /// happens in the background (the dropped leadership's release).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let election = rl.election("scheduler", Duration::from_secs(10))?;
    /// let stop = tokio_util::sync::CancellationToken::new();
    /// let jobs = std::sync::Arc::new(Jobs);
    /// election
    ///     .run("worker-7", &stop, |leading| {
    ///         let jobs = jobs.clone();
    ///         // Dropped at once if the leadership is lost.
    ///         async move { jobs.schedule(leading.term()).await }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// # struct Jobs;
    /// # impl Jobs { async fn schedule(&self, _term: u64) {} }
    /// ```
    pub async fn run<F, Fut>(
        &self,
        value: impl Into<Vec<u8>>,
        stop: &tokio_util::sync::CancellationToken,
        mut lead: F,
    ) -> Result<()>
    where
        F: FnMut(Leading) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let value = value.into();
        loop {
            let leadership = tokio::select! {
                biased;
                () = stop.cancelled() => return Ok(()),
                campaigned = self.campaign(value.clone()) => campaigned?,
            };
            let signal = leadership.signal();
            let leading = Leading {
                term: leadership.term(),
                value: leadership.value().to_vec(),
                signal: signal.clone(),
            };
            let ended = tokio::select! {
                biased;
                () = stop.cancelled() => Ended::Stopped,
                reason = signal.lost() => Ended::Lost(reason),
                () = lead(leading) => Ended::Returned,
            };
            match ended {
                Ended::Lost(reason) => {
                    tracing::warn!(term = leadership.term(), %reason, "leadership lost, campaigning again");
                }
                Ended::Returned | Ended::Stopped => {
                    let term = leadership.term();
                    if let Err(e) = leadership.resign().await {
                        tracing::warn!(term, error = %e, "resigning failed; the lock expires with its ttl");
                    }
                    if matches!(ended, Ended::Stopped) {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The current leader, as agreed by a majority: the leader named on a majority of nodes
    /// whose lock is held by that same leader.
    ///
    /// # Errors
    /// [`Error::NoLeader`] when no candidate leads on a majority; [`Error::NoQuorum`] when too
    /// few nodes answered to tell.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```no_run
    /// # async fn demo(election: redquorum::Election) {
    /// match election.leader().await {
    ///     Ok(leader) => println!("leader: term {}", leader.term()),
    ///     Err(e) if e.is_no_leader() => println!("nobody leads"),
    ///     Err(e) => eprintln!("cannot tell: {e}"),
    /// }
    /// # }
    /// ```
    pub async fn leader(&self) -> Result<Leader> {
        ensure_runtime()?;
        let start = Instant::now();
        match leader_info::read(
            self.redlock.shared(),
            &self.lock_key,
            &self.info_key,
            self.timing.per_node_timeout,
        )
        .await
        {
            LeaderReading::Leader(leader) => Ok(leader),
            LeaderReading::NoLeader => Err(Error::NoLeader {
                resource: resource::display(&self.resource),
            }),
            LeaderReading::NoQuorum(report) => Err(Error::NoQuorum(Box::new(Failure::new(
                Operation::Connect,
                &self.resource,
                1,
                start.elapsed(),
                report,
            )))),
        }
    }

    /// The latest leader, kept up to date by a background task that asks a majority every
    /// quarter ttl (`None` while nobody leads or it cannot tell). Latest value wins; the task
    /// ends when every receiver is dropped.
    ///
    /// Must be called inside a tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime: the polling runs as a task on it (`tokio::spawn` panics
    /// there).
    ///
    /// ```no_run
    /// # async fn demo(election: redquorum::Election) {
    /// let mut leaders = election.observe();
    /// while leaders.changed().await.is_ok() {
    ///     if let Some(l) = &*leaders.borrow() { println!("term {}", l.term()); }
    /// }
    /// # }
    /// ```
    pub fn observe(&self) -> watch::Receiver<Option<Leader>> {
        let (tx, rx) = watch::channel(None);
        let election = self.clone();
        let interval = (self.ttl / 4).max(Duration::from_millis(10));
        crate::core::telemetry::task_spawned();
        tokio::spawn(async move {
            loop {
                let current = election.leader().await.ok();
                tx.send_if_modified(|seen| {
                    if *seen == current {
                        false
                    } else {
                        *seen = current;
                        true
                    }
                });
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
            }
        });
        rx
    }

    /// Advertises `value` for the holder of `token` on a majority.
    async fn write_info(&self, token: &Token, term: u64, value: &[u8]) -> Result<()> {
        leader_info::write(
            self.redlock.shared(),
            &self.lock_key,
            &self.info_key,
            token,
            &leader_info::encode(token, term, value),
            self.timing.per_node_timeout,
        )
        .await
        .map_err(|(rejection, round)| {
            rejection.error(Failure::new(
                Operation::Extend,
                &self.resource,
                1,
                round.elapsed(),
                round.report,
            ))
        })
    }
}

/// What the work of [`Election::run`] gets while it leads: the term, the value and the loss
/// signal of the [`Leadership`] that `run` holds for it.
///
/// ```
/// # fn demo(leading: redquorum::Leading) {
/// let fencing_token = leading.term();
/// let shutdown = leading.signal().cancellation_token();
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Leading {
    term: u64,
    value: Vec<u8>,
    signal: LeaseSignal,
}

impl Leading {
    /// The term: the leadership's fencing token.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The advertised value.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The leadership's deadline and loss signal (`run` also drops the work when it fires).
    pub fn signal(&self) -> &LeaseSignal {
        &self.signal
    }
}

/// How one leadership under [`Election::run`] ended.
enum Ended {
    Stopped,
    Lost(LostReason),
    Returned,
}

/// Leading an [`Election`]: a fenced lease plus the advertised value.
///
/// Watch [`lost`](Self::lost) and stop acting as leader when it fires; it fires by the lease's
/// local deadline, before any other candidate can be elected under the stated assumptions.
/// Dropping a `Leadership` stops the renewals (another candidate takes over once it expires,
/// or sooner, as the lock's `Drop` schedules a release); [`resign`](Self::resign) hands over
/// at once.
///
/// ```no_run
/// # async fn demo(leadership: redquorum::Leadership) -> Result<(), redquorum::Error> {
/// println!("term {} as {:?}", leadership.term(), leadership.value());
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a Leadership gives up leading; call resign().await to hand over cleanly"]
pub struct Leadership {
    election: Election,
    lease: Lease,
    token: Token,
    term: u64,
    value: Vec<u8>,
}

impl Leadership {
    /// The term: this leadership's fencing token.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The advertised value.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// Resolves when leadership is lost (see [`Lease::lost`]).
    ///
    /// # Cancel safety
    /// Cancel safe.
    ///
    /// ```no_run
    /// # async fn demo(l: redquorum::Leadership) { let reason = l.lost().await; }
    /// ```
    pub async fn lost(&self) -> LostReason {
        self.lease.lost().await
    }

    /// A token cancelled when the leadership is lost, resigned or dropped: hand it to the
    /// work that only the leader may do ([`LeaseSignal::cancellation_token`]).
    pub fn cancellation_token(&self) -> tokio_util::sync::CancellationToken {
        self.lease.cancellation_token()
    }

    /// A cloneable view of the deadline and the loss signal.
    pub fn signal(&self) -> LeaseSignal {
        self.lease.signal()
    }

    /// Changes the advertised value without a new election (same term).
    ///
    /// # Errors
    /// [`Error::Expired`] when this candidate no longer holds the lock on a majority;
    /// [`Error::NoQuorum`] when too many nodes failed. The old value stays advertised then.
    ///
    /// # Cancel safety
    /// If dropped part-way, some nodes may advertise the new value and others the old one;
    /// [`Election::leader`] reports whichever a majority agrees on.
    ///
    /// ```no_run
    /// # async fn demo(mut l: redquorum::Leadership) -> Result<(), redquorum::Error> {
    /// l.proclaim("10.0.0.7:9090").await?;
    /// # Ok(()) }
    /// ```
    pub async fn proclaim(&mut self, value: impl Into<Vec<u8>>) -> Result<()> {
        let value = value.into();
        self.election
            .write_info(&self.token, self.term, &value)
            .await?;
        self.value = value;
        Ok(())
    }

    /// Gives up leadership at once: stops the renewals and releases the lock, so another
    /// candidate can be elected.
    ///
    /// # Errors
    /// As [`Lease::release`].
    ///
    /// # Cancel safety
    /// If dropped part-way, the release happens in the background.
    ///
    /// ```no_run
    /// # async fn demo(l: redquorum::Leadership) -> Result<(), redquorum::Error> {
    /// l.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn resign(self) -> Result<()> {
        self.lease.release().await.map(drop)
    }
}
