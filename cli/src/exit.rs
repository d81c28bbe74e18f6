//! Exit codes, and the error type that carries one.

use std::fmt;

/// The command succeeded (for `run` and `elect`: the command's own code is passed through).
pub(crate) const OK: u8 = 0;
/// Something else went wrong (I/O, a dev-cluster operation that failed).
pub(crate) const FAILURE: u8 = 1;
/// Bad usage or configuration: an unknown flag, a malformed node URL, no nodes at all.
pub(crate) const USAGE: u8 = 64;
/// No quorum: too few masters answered to take or inspect the lock.
pub(crate) const NO_QUORUM: u8 = 69;
/// A master refused the credentials (a wrong or missing user or password): no retry heals
/// that, the node URLs must change (`EX_NOPERM`).
pub(crate) const AUTHENTICATION: u8 = 77;
/// The lock was busy, still held by someone else when `--wait` ran out.
pub(crate) const BUSY: u8 = 75;
/// The lock (or leadership) was lost while the command ran; the command was stopped.
pub(crate) const LOST: u8 = 76;
/// The command could not be executed (as in a shell).
pub(crate) const NOT_EXECUTABLE: u8 = 126;
/// The command was not found (as in a shell).
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit-code table for `--help` and `cli/README.md`.
pub(crate) const TABLE: &str = "\
Exit codes:
  0        success (run, elect: the command exited 0)
  1..=63   run, elect: the command's own exit code
  1        other failures (I/O, dev cluster operations)
  64       usage or configuration error (bad flag, node URL or config file, no nodes)
  69       no quorum: too few masters reachable
  75       lock busy: still held by someone else when --wait ran out
  76       lock or leadership lost while the command ran (it was stopped)
  77       no quorum, and a master refused the credentials (fix the node URLs)
  126/127  the command could not be executed / was not found
  128+N    the command (or redquorum while waiting) ended by signal N";

/// A failure with the exit code it maps to and a message for stderr.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) code: u8,
    pub(crate) message: String,
    /// A busy lock skipped (`run -n`, or a wait that ran out): not a fault, so `-q` or
    /// `-E 0` silence it, as `flock -n` is silent.
    pub(crate) skipped: bool,
}

impl CliError {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            skipped: false,
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    pub(crate) fn failure(message: impl Into<String>) -> Self {
        Self::new(FAILURE, message)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<redquorum::Error> for CliError {
    fn from(e: redquorum::Error) -> Self {
        use redquorum::Error;
        let code = match &e {
            Error::Config(_) | Error::HeldByCaller { .. } | Error::PermitCountDiffers { .. } => {
                USAGE
            }
            Error::Conflict(_) => BUSY,
            Error::NoQuorum(_) | Error::ValidityExhausted(_) | Error::NoLeader { .. }
                if refused_credentials(&e) =>
            {
                AUTHENTICATION
            }
            Error::NoQuorum(_) | Error::ValidityExhausted(_) | Error::NoLeader { .. } => NO_QUORUM,
            Error::Expired(_) | Error::LeaseLost { .. } => LOST,
            _ => FAILURE,
        };
        Self::new(code, e.to_string())
    }
}

/// Whether a master of the failed round refused our credentials.
fn refused_credentials(e: &redquorum::Error) -> bool {
    e.report().is_some_and(|report| {
        report.iter().any(|line| {
            matches!(
                line.outcome(),
                redquorum::NodeOutcome::Failed(redquorum::NodeError::AuthenticationFailed(_))
            )
        })
    })
}

impl From<redquorum_testkit::DevError> for CliError {
    fn from(e: redquorum_testkit::DevError) -> Self {
        use redquorum_testkit::DevError;
        match e {
            DevError::Usage(message) => Self::usage(message),
            DevError::Failure(message) => Self::failure(message),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        Self::failure(e.to_string())
    }
}
