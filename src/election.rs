//! Leader election in etcd's shape: campaign, resign, proclaim, leader, observe.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::config::Timing;
use crate::error::{Error, Failure, Operation};
use crate::lease::{Lease, LeaseOptions, LeaseSignal, LostReason};
use crate::redlock::RedLock;
use crate::report::{NodeOutcome, NodeReport, Report};
use crate::retry::RetryPolicy;
use crate::round::{self, Command, Request, Wait};
use crate::token::Token;
use crate::verdict::{self, RoundKind};
use crate::{Result, resource, scripts};

/// How long one acquire attempt of a campaign waits before it starts over.
const CAMPAIGN_WAIT: Duration = Duration::from_secs(5);

/// The current leader of an election: its advertised value and its term.
///
/// The term is the leader's fencing token: it strictly increases from one leader to the next,
/// so a resource that remembers the highest term it has seen can refuse a deposed leader.
///
/// ```no_run
/// # async fn demo(election: redquorum::Election) -> Result<(), redquorum::Error> {
/// let leader = election.leader().await?;
/// println!("term {}: {}", leader.term(), String::from_utf8_lossy(leader.value()));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    value: Vec<u8>,
    term: u64,
}

impl Leader {
    /// The value the leader advertises (its address, its name…), as given to
    /// [`Election::campaign`] or [`Leadership::proclaim`].
    ///
    /// ```no_run
    /// # fn demo(l: &redquorum::Leader) { let _ = l.value(); }
    /// ```
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The leader's term (its fencing token).
    ///
    /// ```no_run
    /// # fn demo(l: &redquorum::Leader) { assert!(l.term() > 0); }
    /// ```
    pub fn term(&self) -> u64 {
        self.term
    }
}

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
        let timing = self.config().timing(ttl)?;
        let prefix = &self.config().key_prefix;
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
        crate::redlock::ensure_runtime()?;
        let start = Instant::now();
        let mut mget = redis::pipe();
        mget.cmd("MGET").arg(&self.lock_key).arg(&self.info_key);
        let answers = self
            .redlock
            .query_everywhere::<((Option<Vec<u8>>, Option<Vec<u8>>),)>(
                &mget,
                self.timing.per_node_timeout,
            )
            .await;
        let mut votes: Vec<(Leader, Vec<u8>, usize)> = Vec::new();
        let mut answered = 0;
        let mut report = Vec::new();
        for (id, answer, latency) in answers {
            match answer {
                Ok(((lock, info),)) => {
                    answered += 1;
                    report.push(NodeReport::new(id, NodeOutcome::Connected, latency));
                    let (Some(lock), Some(info)) = (lock, info) else {
                        continue;
                    };
                    let Some((token, leader)) = decode_info(&info) else {
                        continue;
                    };
                    if token != lock.as_slice() {
                        continue;
                    }
                    match votes.iter_mut().find(|(_, t, _)| t.as_slice() == token) {
                        Some((_, _, count)) => *count += 1,
                        None => votes.push((leader, token.to_vec(), 1)),
                    }
                }
                Err(e) => report.push(NodeReport::new(id, NodeOutcome::Failed(e), latency)),
            }
        }
        let quorum = self.redlock.quorum();
        if let Some((leader, _, _)) = votes.into_iter().find(|(_, _, count)| *count >= quorum) {
            return Ok(leader);
        }
        if answered < quorum {
            let failure = Failure::new(
                Operation::Connect,
                &self.resource,
                1,
                start.elapsed(),
                Report::new(report),
            );
            return Err(Error::NoQuorum(Box::new(failure)));
        }
        Err(Error::NoLeader {
            resource: resource::display(&self.resource),
        })
    }

    /// The latest leader, kept up to date by a background task that asks a majority every
    /// quarter ttl (`None` while nobody leads or it cannot tell). Latest value wins; the task
    /// ends when every receiver is dropped.
    ///
    /// Must be called inside a tokio runtime.
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
        let request = Request {
            command: Command::Script(&scripts::WRITE_LEADER_INFO),
            key: self.lock_key.clone(),
            extra_keys: vec![self.info_key.clone()],
            token: token.expose().to_owned(),
            number: None,
            payload: vec![encode_info(token, term, value)],
            done: NodeOutcome::Granted,
            settled_nodes_only: false,
            counted: None,
            readd_on: None,
            epochs: None,
            operation: Operation::Extend,
        };
        let round = round::run(
            &self.redlock,
            request,
            self.timing.per_node_timeout,
            Wait::UntilDecided,
            None,
        )
        .await;
        // Which nodes granted the lock is not known here (the lease keeps it): every node counts
        // as a grantor, so a refusal is evidence and a timeout is not. Validity is the lease's
        // business; the write only needs a majority.
        let verdict = verdict::judge(
            RoundKind::Renew,
            &round.tally,
            true,
            None,
            &round.report.votes(),
        );
        let Some(make) = verdict.error() else {
            return Ok(());
        };
        Err(make(Box::new(Failure::new(
            Operation::Extend,
            &self.resource,
            1,
            round.elapsed(),
            round.report,
        ))))
    }
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
    ///
    /// ```no_run
    /// # fn demo(l: &redquorum::Leadership) { let _ = l.term(); }
    /// ```
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The advertised value.
    ///
    /// ```no_run
    /// # fn demo(l: &redquorum::Leadership) { let _ = l.value(); }
    /// ```
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

    /// A cloneable view of the deadline and the loss signal.
    ///
    /// ```no_run
    /// # fn demo(l: &redquorum::Leadership) { let signal = l.signal(); }
    /// ```
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

/// `token:term:value`; the token is 40 hex digits.
fn encode_info(token: &Token, term: u64, value: &[u8]) -> Vec<u8> {
    let mut info = format!("{}:{term}:", token.expose()).into_bytes();
    info.extend_from_slice(value);
    info
}

pub(crate) fn decode_info(info: &[u8]) -> Option<(&[u8], Leader)> {
    let token = info.get(..40)?;
    let rest = info.get(40..)?.strip_prefix(b":")?;
    let colon = rest.iter().position(|b| *b == b':')?;
    let term = std::str::from_utf8(rest.get(..colon)?).ok()?.parse().ok()?;
    let value = rest.get(colon + 1..)?.to_vec();
    Some((token, Leader { value, term }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_info_round_trips_any_value() {
        let token = Token::generate();
        for value in [&b""[..], b"worker-7", b"a:b:c", b"\0\xff\n"] {
            let info = encode_info(&token, 42, value);
            let (t, leader) = decode_info(&info).expect("decodes");
            assert_eq!(t, token.expose().as_bytes());
            assert_eq!(leader.term(), 42);
            assert_eq!(leader.value(), value);
        }
    }

    #[test]
    fn malformed_info_is_ignored() {
        for info in [
            &b""[..],
            b"short",
            &[b'a'; 40],
            &[b'a'; 41],
            b"0123456789012345678901234567890123456789:x:v",
        ] {
            assert!(decode_info(info).is_none(), "{}", info.escape_ascii());
        }
    }
}
