//! The command run under a lock: started behind the guard (`guard.rs`) in a process group of
//! its own, signalled as a group, and stopped — SIGKILL included — before the lock's deadline.

use std::ffi::OsString;
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use redquorum::{LeaseSignal, LostReason};
use tokio::signal::unix::{SignalKind, signal};

use crate::events::{self, Event};
use crate::exit::{self, CliError};
use crate::guard;

/// A running command: the guard process, leader of the command's process group (or, with
/// `--foreground`, a member of redquorum's).
#[derive(Debug)]
pub(crate) struct Child {
    process: tokio::process::Child,
    /// The guard's pid, which is also the command's process group unless `foreground`.
    guard: Option<Pid>,
    foreground: bool,
    /// The signal that asks the command to stop (`--kill-signal`).
    stop_signal: Signal,
}

/// How a command is run and stopped (`run` and `elect` flags).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Supervision {
    /// The stop starts this long before an unrenewed deadline (`--kill-grace`).
    pub(crate) grace: Duration,
    /// In redquorum's process group (`--foreground`).
    pub(crate) foreground: bool,
    /// The first signal of a stop (`--kill-signal`); SIGKILL follows.
    pub(crate) stop_signal: Signal,
}

/// Starts `command` with `env` added, behind the guard, in a new process group (as `timeout(1)`
/// does), so the whole group can be stopped on lock loss and dies with redquorum; with
/// `foreground`, in redquorum's own group (as `timeout --foreground`), stopped through the
/// guard process by process.
///
/// # Cancel safety
/// Not cancel safe: dropped after the spawn, the command runs on (until redquorum exits, when
/// the guard stops it).
pub(crate) async fn spawn(
    command: &[OsString],
    env: &[(&str, String)],
    supervision: Supervision,
) -> Result<Child, CliError> {
    let foreground = supervision.foreground;
    if command.is_empty() {
        return Err(CliError::usage("no command given after --"));
    }
    let me = std::env::current_exe()
        .map_err(|e| CliError::failure(format!("cannot find the redquorum binary: {e}")))?;
    let mut cmd = tokio::process::Command::new(me);
    cmd.arg(guard::SUBCOMMAND)
        .arg("--parent")
        .arg(std::process::id().to_string());
    if foreground {
        cmd.arg("--foreground")
            .arg("--stop-signal")
            .arg((supervision.stop_signal as i32).to_string());
    } else {
        cmd.process_group(0);
    }
    cmd.arg("--").args(command).kill_on_drop(false);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let process = guard::spawn_from_lasting_thread(cmd)
        .await
        .map_err(|e| CliError::new(exit::NOT_EXECUTABLE, format!("cannot start the guard: {e}")))?;
    let guard = process
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    Ok(Child {
        process,
        guard,
        foreground,
        stop_signal: supervision.stop_signal,
    })
}

impl Child {
    /// Waits for the command and every process it started to exit (the guard waits for them
    /// all, like `flock`, whose lock is held while any inheritor holds it).
    ///
    /// # Cancel safety
    /// Cancel safe: the command keeps running and can be waited for again.
    pub(crate) async fn wait(&mut self) -> Result<ExitStatus, CliError> {
        Ok(self.process.wait().await?)
    }

    /// Sends `signal` to the command's process group. In the foreground, where the group is
    /// redquorum's, only SIGTERM (relayed by the guard to the command as its stop signal) and
    /// SIGKILL (the guard kills every process the command started) are sent; the terminal's
    /// signals reached the command directly.
    pub(crate) fn signal(&self, signal: Signal) {
        let Some(guard) = self.guard else {
            return;
        };
        if !self.foreground {
            let _ = killpg(guard, signal);
            return;
        }
        let relayed = match signal {
            Signal::SIGTERM => Signal::SIGTERM,
            Signal::SIGKILL => Signal::SIGUSR2,
            _ => return,
        };
        let _ = nix::sys::signal::kill(guard, relayed);
    }

    /// Stops the command's group (Ctrl-Z) but keeps the guard awake: should redquorum be
    /// killed while everything is stopped, the guard must still be able to SIGKILL the group
    /// (a stopped guard would leave the command stopped for ever, or continued by the kernel
    /// with no lock once the group is orphaned). In the foreground the terminal stops them.
    pub(crate) fn suspend(&self) {
        self.signal(Signal::SIGSTOP);
        if let (false, Some(guard)) = (self.foreground, self.guard) {
            let _ = nix::sys::signal::kill(guard, Signal::SIGCONT);
        }
    }

    /// The stop signal (`--kill-signal`, SIGTERM by default) to the group now, SIGKILL at
    /// `kill_at` if it has not exited by then, and waits until it has.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped before the SIGKILL, the command may run on.
    pub(crate) async fn terminate(
        &mut self,
        resource: &str,
        kill_at: Instant,
    ) -> Result<ExitStatus, CliError> {
        // In the foreground the guard turns SIGTERM into the stop signal.
        self.signal(if self.foreground {
            Signal::SIGTERM
        } else {
            self.stop_signal
        });
        let grace = kill_at.saturating_duration_since(Instant::now());
        if let Ok(status) = tokio::time::timeout(grace, self.process.wait()).await {
            return Ok(status?);
        }
        events::emit(Event::Killing {
            resource,
            after: grace,
            signal: self.stop_signal.to_string(),
        });
        self.signal(Signal::SIGKILL);
        self.wait().await
    }
}

/// How a command run under a lock or a leadership ended.
#[derive(Debug)]
pub(crate) enum Ending {
    /// It exited by itself, with this code (as a shell reports it).
    Exited(u8),
    /// The lock or leadership was lost, or was about to expire unrenewed; the command has been
    /// stopped.
    Lost,
}

/// Why a supervised command is being stopped.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The lease says the lock is lost.
    Lost(LostReason),
    /// No renewal came in time: the stop must be complete by the deadline.
    NotRenewed {
        /// The grace the stop started with.
        grace: Duration,
    },
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lost(reason) => reason.fmt(f),
            Self::NotRenewed { grace } => write!(
                f,
                "not renewed {grace:.1?} before its deadline, the time the command gets to stop"
            ),
        }
    }
}

/// Resolves when the command must start stopping: the lease is lost, or its deadline is less
/// than `grace` away and no renewal has moved it.
///
/// # Cancel safety
/// Cancel safe: it only watches.
async fn stop_due(lease: &LeaseSignal, grace: Duration) -> Stop {
    loop {
        let deadline = lease.valid_until();
        let start_stopping = deadline.checked_sub(grace).unwrap_or(deadline);
        tokio::select! {
            reason = lease.lost() => return Stop::Lost(reason),
            () = tokio::time::sleep_until(start_stopping.into()) => {
                if lease.valid_until() <= deadline {
                    return Stop::NotRenewed { grace };
                }
            }
        }
    }
}

/// When the SIGKILL goes out if the command ignores the SIGTERM: a quarter of the grace before
/// the deadline, so the kill is done before another holder can be granted the lock, and never
/// later than `grace` after the SIGTERM.
fn kill_time(deadline: Instant, grace: Duration) -> Instant {
    let now = Instant::now();
    let latest = deadline.checked_sub(grace / 4).unwrap_or(now);
    latest.min(now + grace)
}

/// What a supervised command runs under: a lock, or one term of a leadership.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holding<'a> {
    pub(crate) resource: &'a str,
    /// The term, for a leadership.
    pub(crate) term: Option<u64>,
}

/// Runs `command` (with `env`) until it exits (with every process it started) or it must stop
/// for the lock, forwarding the signals redquorum receives to it. The stop starts the grace
/// before the lease's deadline when no renewal came, or at once when the lease is lost: a
/// `lost` event says why, the command gets the stop signal and, if it ignores it, SIGKILL a
/// quarter of the grace before the deadline. So the command never runs past the lock's
/// deadline. Each renewal is a `renewed` event.
///
/// # Cancel safety
/// Not cancel safe: dropping it leaves the command running (until redquorum exits).
pub(crate) async fn run_guarded(
    command: &[OsString],
    env: &[(&str, String)],
    lease: LeaseSignal,
    holding: Holding<'_>,
    signals: &mut Signals,
    supervision: Supervision,
) -> Result<Ending, CliError> {
    let grace = supervision.grace;
    let resource = holding.resource;
    // Ctrl-Z: without this, redquorum alone would stop and the command would run on with
    // nobody renewing its lock.
    let mut suspend = signal(SignalKind::from_raw(Signal::SIGTSTP as i32))?;
    let mut child = spawn(command, env, supervision).await?;
    let stop = stop_due(&lease, grace);
    tokio::pin!(stop);
    let mut renewals = lease.clone();
    let mut renewing = true;
    loop {
        tokio::select! {
            status = child.wait() => {
                let code = exit_code(status?);
                events::emit(Event::Exited { resource, code });
                return Ok(Ending::Exited(code));
            }
            why = &mut stop => {
                events::emit(Event::Lost { resource, term: holding.term, why: why.to_string() });
                child.terminate(resource, kill_time(lease.valid_until(), grace)).await?;
                return Ok(Ending::Lost);
            }
            renewed = renewals.renewed(), if renewing => match renewed {
                Some(valid_until) => events::emit(Event::Renewed { resource, valid_until }),
                None => renewing = false,
            },
            signal = signals.recv() => child.signal(signal),
            _ = suspend.recv() => suspend_with(&child, &lease, resource, grace),
        }
    }
}

/// Ctrl-Z (SIGTSTP) while a command runs: stop the command's group, then redquorum itself, as
/// a shell's job control expects. On SIGCONT the command continues only if the lock is still
/// comfortably ours (more than `grace` before its deadline, not lost); otherwise it stays
/// stopped and the stop that follows at once kills it without letting it run again.
///
/// In the foreground the terminal stopped the command already, and the shell's SIGCONT
/// reaches it directly: a command whose lock lapsed while stopped runs again until the stop
/// that follows kills it (a few milliseconds). `--foreground`'s price, documented.
fn suspend_with(child: &Child, lease: &LeaseSignal, resource: &str, grace: Duration) {
    child.suspend();
    events::emit(Event::Suspended { resource });
    let _ = nix::sys::signal::raise(Signal::SIGSTOP);
    // Continued (fg, bg or SIGCONT).
    let renewable = Instant::now()
        .checked_add(grace)
        .is_some_and(|t| t < lease.valid_until());
    if renewable && !lease.is_lost() {
        child.signal(Signal::SIGCONT);
    } else {
        events::emit(Event::LapsedWhileSuspended { resource });
    }
}

/// The default kill grace: a third of the ttl, at most this.
pub(crate) const MAX_DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// The kill grace to use: `asked`, or a third of the ttl (at most [`MAX_DEFAULT_GRACE`]).
/// Refuses one that leaves renewals too little of the ttl: the stop starts `grace` before the
/// deadline, and a lease renews every ttl/3.
pub(crate) fn kill_grace(ttl: Duration, asked: Option<Duration>) -> Result<Duration, CliError> {
    let grace = asked.unwrap_or_else(|| (ttl / 3).min(MAX_DEFAULT_GRACE));
    // Name a flag only if the user set it: the default grace follows from the ttl.
    if asked.is_none() && grace.is_zero() {
        return Err(CliError::usage(format!(
            "--ttl {} is too short: the lock must outlive the time a stopped command is given to \
             exit (a third of the ttl by default)",
            humantime::format_duration(ttl)
        )));
    }
    if grace.is_zero() || grace.saturating_mul(2) > ttl {
        return Err(CliError::usage(format!(
            "--kill-grace {} must be more than 0 and at most half of --ttl {}: the command is \
             stopped (SIGKILL included) before the lock's deadline, and renewals need the rest",
            humantime::format_duration(grace),
            humantime::format_duration(ttl)
        )));
    }
    Ok(grace)
}

/// The exit code a shell would report: the code, or 128 + the signal that ended it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::FAILURE),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(exit::FAILURE),
        (None, None) => exit::FAILURE,
    }
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to redquorum, to forward or to stop on.
#[derive(Debug)]
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    /// Whether any was received yet (all four ask to stop).
    received: bool,
}

impl Signals {
    pub(crate) fn new() -> Result<Self, CliError> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            received: false,
        })
    }

    /// True once a signal was received (and forwarded to the command, or acted on): redquorum
    /// was asked to stop, and should not linger (`--min-hold`).
    pub(crate) fn asked_to_stop(&self) -> bool {
        self.received
    }

    /// The next signal received.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal not yet taken stays queued.
    pub(crate) async fn recv(&mut self) -> Signal {
        let signal = tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        };
        self.received = true;
        signal
    }
}

/// The code to exit with after being ended by `signal` while no command ran.
pub(crate) fn signal_code(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(exit::FAILURE)
}
