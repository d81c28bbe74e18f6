//! The command run under a lock: spawned in its own process group, signalled as a group.

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use redquorum::LostReason;
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::{self, CliError};

/// A running command and its process group.
#[derive(Debug)]
pub(crate) struct Child {
    process: tokio::process::Child,
    group: Option<Pid>,
}

/// Starts `command` with `env` added, in a new process group (as `timeout(1)` does), so the
/// whole group can be stopped on lock loss.
pub(crate) fn spawn(command: &[OsString], env: &[(&str, String)]) -> Result<Child, CliError> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| CliError::usage("no command given after --"))?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).process_group(0);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let process = cmd.spawn().map_err(|e| {
        let name = program.to_string_lossy();
        match e.kind() {
            std::io::ErrorKind::NotFound => {
                CliError::new(exit::NOT_FOUND, format!("{name}: command not found"))
            }
            _ => CliError::new(exit::NOT_EXECUTABLE, format!("{name}: {e}")),
        }
    })?;
    let group = process
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    Ok(Child { process, group })
}

impl Child {
    /// Waits for the command to exit.
    ///
    /// # Cancel safety
    /// Cancel safe: the command keeps running and can be waited for again.
    pub(crate) async fn wait(&mut self) -> Result<ExitStatus, CliError> {
        Ok(self.process.wait().await?)
    }

    /// Sends `signal` to the command's process group.
    pub(crate) fn signal(&self, signal: Signal) {
        if let Some(group) = self.group {
            let _ = killpg(group, signal);
        }
    }

    /// SIGTERM to the group, then SIGKILL after `grace` if the command has not exited.
    pub(crate) async fn terminate(&mut self, grace: Duration) -> Result<ExitStatus, CliError> {
        self.signal(Signal::SIGTERM);
        if let Ok(status) = tokio::time::timeout(grace, self.process.wait()).await {
            let status = status?;
            // The leader of the group is gone; make sure the rest of it is too.
            self.signal(Signal::SIGKILL);
            return Ok(status);
        }
        eprintln!("redquorum: the command did not exit {grace:?} after SIGTERM; sending SIGKILL");
        self.signal(Signal::SIGKILL);
        self.wait().await
    }
}

/// How a command run under a lock or a leadership ended.
#[derive(Debug)]
pub(crate) enum Ending {
    /// It exited by itself, with this code (as a shell reports it).
    Exited(u8),
    /// The lock or leadership was lost; the command has been stopped.
    Lost,
}

/// Runs `command` (with `env`) until it exits or `lost` fires, forwarding the signals
/// redquorum receives to it. On loss, `on_lost` says why, then the command gets SIGTERM and,
/// after `grace`, SIGKILL.
///
/// # Cancel safety
/// Not cancel safe: dropping it leaves the command running.
pub(crate) async fn run_guarded(
    command: &[OsString],
    env: &[(&str, String)],
    lost: impl Future<Output = LostReason>,
    on_lost: impl FnOnce(LostReason),
    signals: &mut Signals,
    grace: Duration,
) -> Result<Ending, CliError> {
    let mut child = spawn(command, env)?;
    tokio::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => return Ok(Ending::Exited(exit_code(status?))),
            reason = &mut lost => {
                on_lost(reason);
                child.terminate(grace).await?;
                return Ok(Ending::Lost);
            }
            signal = signals.recv() => child.signal(signal),
        }
    }
}

/// The exit code a shell would report: the code, or 128 + the signal that ended it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::FAILURE),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(exit::FAILURE),
        (None, None) => exit::FAILURE,
    }
}

/// SIGINT, SIGTERM and SIGHUP sent to redquorum, to forward or to stop on.
#[derive(Debug)]
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn new() -> Result<Self, CliError> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal not yet taken stays queued.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

/// The code to exit with after being ended by `signal` while no command ran.
pub(crate) fn signal_code(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(exit::FAILURE)
}
