//! Being asked to stop: the demo and the bench end early on SIGINT, SIGTERM or SIGHUP, stop
//! the masters they started, and exit 128 + the signal's number, as a shell would report.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// The stop signals, listened to from creation on.
#[derive(Debug)]
pub(crate) struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Starts listening (a signal received from now on is not lost).
    pub(crate) fn listen() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next stop signal.
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

/// The exit code after being stopped by `signal`.
pub(crate) fn exit_code(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(1)
}
