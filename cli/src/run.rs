//! `redquorum run`: a command under a lock held by a majority.

use std::time::{Duration, Instant};

use redquorum::{Lease, LeaseOptions, Lock, RedLock, RetryPolicy};

use crate::args::{RunArgs, Tuning, WaitLimit};
use crate::child::{self, Ending, Holding, Signals, Supervision};
use crate::client;
use crate::events::{self, Event};
use crate::exit::{self, CliError};

/// How often a long wait says what it is waiting for.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub(crate) async fn run(
    nodes: Vec<String>,
    args: RunArgs,
    tuning: &Tuning,
) -> Result<u8, CliError> {
    let kill_grace = child::kill_grace(args.ttl, args.kill_grace)?;
    client::lease_ttl(args.ttl, tuning)?;
    let rl = client::redlock(nodes, tuning, true, Some(client::holder(&args.command)))?;
    let ended = run_with(&rl, args, tuning, kill_grace).await;
    // A release is decided at the majority; its other deletes finish in the background, and
    // must before the process exits.
    client::settle(&rl, tuning).await;
    ended
}

async fn run_with(
    rl: &RedLock,
    args: RunArgs,
    tuning: &Tuning,
    kill_grace: Duration,
) -> Result<u8, CliError> {
    let mut signals = Signals::new()?;
    let wait = if args.nonblock {
        WaitLimit::For(Duration::ZERO)
    } else {
        args.wait
    };
    let taken = async {
        client::connect_first(rl).await?;
        let what = match (args.permits, args.shared) {
            (Some(permits), _) => Taken::Permit(permits),
            (None, true) => Taken::Shared,
            (None, false) => Taken::Exclusive,
        };
        acquire(rl, &args.resource, what, args.ttl, wait).await
    };
    let taken = tokio::select! {
        lock = taken => Ok(lock),
        signal = signals.recv() => Err(signal),
    };
    // The acquire is dropped by now: if a signal cancelled it, its clean-up was spawned.
    let (lock, permit) = match taken {
        Ok(lock) => lock.map_err(|mut e| {
            if e.code == exit::BUSY
                && let Some(code) = args.conflict_exit_code
            {
                e.code = code;
            }
            e
        })?,
        Err(signal) => {
            return Ok(child::signal_code(signal));
        }
    };
    let acquired_at = Instant::now();
    events::emit(Event::Acquired {
        resource: &args.resource,
        fencing_token: lock.fencing_token(),
        permit,
        valid_until: lock.valid_until(),
    });
    // A permit's holder gets its permit's number; a lock's, its fencing token (none in the
    // shared key layout, where no fence counter is kept).
    let mut env = vec![("REDQUORUM_RESOURCE", args.resource.clone())];
    match (permit, lock.fencing_token()) {
        (Some(permit), _) => env.push(("REDQUORUM_PERMIT", permit.to_string())),
        (None, Some(token)) => env.push(("REDQUORUM_FENCING_TOKEN", token.to_string())),
        (None, None) => {}
    }
    let lease = lock.into_lease(LeaseOptions::default());
    let ending = child::run_guarded(
        &args.command,
        &env,
        lease.signal(),
        Holding {
            resource: &args.resource,
            term: None,
        },
        &mut signals,
        Supervision {
            grace: kill_grace,
            foreground: args.foreground,
            stop_signal: tuning.kill_signal(args.kill_signal),
        },
    )
    .await;
    let resource = args.resource.as_str();
    match ending {
        Ok(Ending::Lost) => {
            // Stopped before an unrenewed deadline, the lock may still be ours: free it now.
            if lease.release().await.is_ok() {
                events::emit(Event::Released { resource });
            }
            Ok(exit::LOST)
        }
        Ok(Ending::Exited(code)) => {
            // A signal forwarded to the command (systemctl stop, a pod deletion) ends the
            // hold before it starts: redquorum was asked to stop, not to linger.
            if let Some(hold) = args.min_hold.filter(|_| !signals.asked_to_stop()) {
                // Beyond what an Instant can hold: until a signal or the loss.
                let until = acquired_at.checked_add(hold);
                hold_until(&lease, resource, until, &mut signals).await;
            }
            match lease.release().await {
                Ok(_) => events::emit(Event::Released { resource }),
                Err(e) => events::emit(Event::ReleaseFailed {
                    resource,
                    error: e.to_string(),
                }),
            }
            Ok(code)
        }
        Err(e) => {
            let _ = lease.release().await;
            Err(e)
        }
    }
}

/// Keeps the lease (renewing) until `until` (`None`: no end), the lock is lost, or a signal
/// comes (`--min-hold`).
///
/// # Cancel safety
/// Cancel safe: it only waits.
async fn hold_until(lease: &Lease, resource: &str, until: Option<Instant>, signals: &mut Signals) {
    if until.is_some_and(|until| until <= Instant::now()) {
        return;
    }
    events::emit(Event::Holding { resource, until });
    let signal = lease.signal();
    let end = async {
        match until {
            Some(until) => tokio::time::sleep_until(until.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = end => {}
        _ = signal.lost() => {}
        _ = signals.recv() => {}
    }
}

/// What `run` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// The lock: the write lock of the read-write lock of the name (flock -x).
    Exclusive,
    /// A read lock (flock -s).
    Shared,
    /// One permit of the semaphore of this many permits.
    Permit(u32),
}

/// Acquires the lock `resource` (a read lock of it, or one permit of the semaphore
/// `resource`, as `what` says), waiting up to `wait` for one, and says on stderr what it waits
/// for. The permit is held as the lock on its key, with its number.
///
/// # Cancel safety
/// Cancel safe: a dropped acquire cleans up its keys.
pub(crate) async fn acquire(
    rl: &RedLock,
    resource: &str,
    what: Taken,
    ttl: Duration,
    wait: WaitLimit,
) -> Result<(Lock, Option<u32>), CliError> {
    let start = Instant::now();
    let permits = match what {
        Taken::Permit(permits) => Some(permits),
        _ => None,
    };
    let semaphore = match permits {
        Some(permits) => Some(rl.semaphore(resource, permits)?),
        None => None,
    };
    let shared = match what {
        Taken::Shared => Some(rl.rw_lock(resource)?),
        _ => None,
    };
    let forever = RetryPolicy::default().max_attempts(None).max_wait(None);
    let attempt = async {
        match (&semaphore, wait) {
            (None, wait) if let Some(rw) = &shared => match wait {
                WaitLimit::For(limit) if limit.is_zero() => rw.try_read(ttl).await,
                WaitLimit::For(limit) => rw.read_within(ttl, limit).await,
                WaitLimit::Forever => rw.read_with(ttl, &forever).await,
            }
            .map(|lock| (None, lock)),
            (Some(semaphore), wait) => {
                let permit = match wait {
                    WaitLimit::For(limit) if limit.is_zero() => semaphore.try_acquire(ttl).await,
                    WaitLimit::For(limit) => semaphore.acquire_within(ttl, limit).await,
                    WaitLimit::Forever => semaphore.acquire_with(ttl, &forever).await,
                }?;
                Ok((Some(permit.index()), permit.into_lock()))
            }
            (None, WaitLimit::For(limit)) if limit.is_zero() => {
                rl.try_acquire(resource, ttl).await.map(|lock| (None, lock))
            }
            (None, WaitLimit::For(limit)) => rl
                .acquire_within(resource, ttl, limit)
                .await
                .map(|lock| (None, lock)),
            (None, WaitLimit::Forever) => rl
                .acquire_with(resource, ttl, &forever)
                .await
                .map(|lock| (None, lock)),
        }
        .map(|(index, lock)| (lock, index))
    };
    let progress = {
        let (rl, resource) = (rl.clone(), resource.to_owned());
        AbortOnDrop(tokio::spawn(async move {
            loop {
                tokio::time::sleep(PROGRESS_EVERY).await;
                let holder = match permits {
                    Some(permits) => format!("all {permits} permits held"),
                    None => holder(&rl, &resource).await,
                };
                events::emit(Event::Waiting {
                    resource: &resource,
                    waited: start.elapsed(),
                    holder,
                });
            }
        }))
    };
    let result = attempt.await;
    drop(progress);
    // Who holds, when the holder describes itself (one more read, on a skip only).
    let about = match &result {
        // Readers hold the lock as `readers` (their mark), with no description of their own.
        Err(e) if e.is_conflict() && permits.is_none() => {
            rl.inspect(resource).await.ok().and_then(|seen| {
                crate::status::about(&seen)
                    .or_else(|| seen.majority_holder().filter(|who| who == "readers"))
            })
        }
        _ => None,
    };
    result.map_err(|e| {
        let remaining = held_for(&e);
        let differs = match &e {
            redquorum::Error::PermitCountDiffers {
                permits,
                in_use_with,
                ..
            } => Some(format!(
                "{resource} is in use with --permits {in_use_with}, not {permits}: every run of one semaphore must give the same --permits"
            )),
            _ => None,
        };
        let mut err = CliError::from(e);
        if let Some(message) = differs {
            err.message = message;
        }
        if err.code == exit::BUSY {
            let held = match permits {
                Some(permits) => format!("all {permits} permits of {resource} are held"),
                None => match &about {
                    Some(about) => format!("{resource} is held by {about}"),
                    None => format!("{resource} is held by another owner"),
                },
            };
            let remaining = remaining.map_or_else(String::new, |t| format!(" for another {t:.1?}"));
            // One line: cron mails what a skip prints, from every host that skipped. The
            // per-master detail is in the debug log (-vv).
            tracing::debug!(error = %err.message, "busy");
            err.message = format!("{held}{remaining} (waited {:.1?})", start.elapsed());
            err.skipped = true;
        }
        err
    })
}

/// How long the other owner's hold has left, as the longest ttl a master reported for it.
fn held_for(e: &redquorum::Error) -> Option<Duration> {
    e.report()?
        .iter()
        .filter_map(|line| match line.outcome() {
            redquorum::NodeOutcome::HeldByOther { expires_in } => *expires_in,
            _ => None,
        })
        .max()
}

/// Aborts a background task when dropped (also when the future owning it is cancelled).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Who holds a lock one waits for: "held by web1 pid 4242 backup.sh for another 4.2s" (a
/// holder that describes itself, as `run` and `elect` do), else "held by 1a2b3c4d …".
async fn holder(rl: &RedLock, resource: &str) -> String {
    match rl.inspect(resource).await {
        Ok(seen) => {
            let ttl = seen
                .nodes()
                .iter()
                .filter_map(|n| n.state().ok()?.ttl())
                .max();
            match (seen.majority_holder(), ttl) {
                (Some(who), Some(ttl)) => {
                    let who = crate::status::about(&seen).unwrap_or(who);
                    format!("held by {who} for another {:.1}s", ttl.as_secs_f64())
                }
                _ => format!(
                    "{} of {} masters answer",
                    seen.reachable(),
                    seen.nodes().len()
                ),
            }
        }
        Err(e) => e.to_string(),
    }
}
