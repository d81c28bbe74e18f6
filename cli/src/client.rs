//! The client the command line asks for: the masters, and the tuning flags (`--node-timeout`,
//! `--connect-timeout`, `--restart-grace`, `--key-prefix`, `--drift-factor`, `--key-layout`,
//! each also from the environment).

use std::time::Duration;

use redquorum::{KeyLayout, RedLock};

use crate::args::{Layout, Tuning};
use crate::exit::CliError;

/// A `RedLock` over `nodes` with `tuning` applied; a bad value is a usage error (exit 64)
/// naming the flag, found before any connection is made. `fencing` is what the command would
/// like: in the shared key layout there is none (other clients keep no fence counters).
pub(crate) fn redlock(
    nodes: Vec<String>,
    tuning: &Tuning,
    fencing: bool,
    holder: Option<String>,
) -> Result<RedLock, CliError> {
    if let Some(factor) = tuning.drift_factor
        && !(0.0..0.5).contains(&factor)
    {
        return Err(CliError::usage(format!(
            "drift factor {factor} (--drift-factor, REDQUORUM_DRIFT_FACTOR or the config \
             file's drift-factor): must be at least 0 and below 0.5 (the fraction of the ttl \
             the clocks may drift by)"
        )));
    }
    if tuning.node_timeout.is_some_and(|t| t.is_zero()) {
        return Err(CliError::usage(
            "the node timeout (--node-timeout, REDQUORUM_NODE_TIMEOUT or node-timeout) must be more than 0",
        ));
    }
    if tuning.connect_timeout.is_some_and(|t| t.is_zero()) {
        return Err(CliError::usage(
            "the connect timeout (--connect-timeout, REDQUORUM_CONNECT_TIMEOUT or connect-timeout) must be more than 0",
        ));
    }
    let shared = tuning.key_layout == Some(Layout::Shared);
    let given = nodes.clone();
    let mut builder = RedLock::builder(nodes).fencing(fencing && !shared);
    if shared {
        builder = builder.key_layout(KeyLayout::Shared);
    }
    if let Some(timeout) = tuning.node_timeout {
        builder = builder.per_node_timeout(timeout);
    }
    if let Some(timeout) = tuning.connect_timeout {
        builder = builder.connect_timeout(timeout);
    }
    if let Some(grace) = tuning.restart_grace {
        builder = builder.restart_grace(grace);
    }
    if let Some(prefix) = &tuning.key_prefix {
        builder = builder.key_prefix(prefix);
    }
    if let Some(factor) = tuning.drift_factor {
        builder = builder.drift_factor(factor);
    }
    if let Some(native) = tuning.native_commands {
        builder = builder.native_commands(native);
    }
    if let Some(about) = holder {
        builder = builder.holder_info(about);
    }
    // `run` and `elect` settle before they exit, bounded by what the lock's state needs
    // (`settle` below): the drop must not wait again for a hung master's delete.
    builder = builder.settle_on_drop(Duration::ZERO);
    builder.build().map_err(|e| match &e {
        redquorum::Error::Config(redquorum::ConfigError::InvalidNode { index, source }) => {
            let url = given.get(*index).map_or("?", String::as_str);
            CliError::usage(format!(
                "node {index} ({}) is invalid: {}; a master is redis://[user:password@]host:port, \
                 rediss://… with TLS, unix:///path, redis+sentinel://s1:26379,s2:26379/name \
                 or redis+cluster://h1:7000,h2:7000",
                without_password(url),
                why_invalid(url, source),
            ))
        }
        _ => e.into(),
    })
}

/// The shortest ttl `run` and `elect` take, whatever the per-node timeout: below it, the
/// host's own scheduling (starting the command, a loaded machine) is a large part of the ttl.
const MIN_LEASE_TTL: Duration = Duration::from_millis(100);

/// How many per-node timeouts a lease's ttl must hold: its first renewal, at a third of the
/// ttl, may take the whole timeout and fail, and its retry, a quarter interval later, must
/// still end before the deadline: `ttl/3 + T + ttl/12 + T < ttl − drift` needs about 3.5 T.
const LEASE_TTL_IN_NODE_TIMEOUTS: u32 = 4;

/// Refuses, before anything connects, a ttl whose lease could not survive one renewal
/// (`--ttl 13ms` would be lost at once, exit 76). Names the per-node
/// timeout's source only when the user set it.
pub(crate) fn lease_ttl(ttl: Duration, tuning: &Tuning) -> Result<(), CliError> {
    let node_timeout = tuning
        .node_timeout
        .unwrap_or_else(|| redquorum::derived_node_timeout(ttl));
    let minimum = MIN_LEASE_TTL.max(node_timeout * LEASE_TTL_IN_NODE_TIMEOUTS);
    if ttl >= minimum {
        return Ok(());
    }
    let why = match tuning.node_timeout {
        Some(set) => format!(
            "the per-node timeout is {} (--node-timeout, REDQUORUM_NODE_TIMEOUT or the config \
             file's node-timeout), and a renewal and its retry, each up to that timeout, must \
             end before the deadline: raise --ttl to {} or more, or lower the timeout",
            humantime::format_duration(set),
            humantime::format_duration(minimum)
        ),
        None => format!(
            "the lock is renewed every third of the ttl, and the command's start and the host's \
             scheduling need room too: give --ttl {} or more",
            humantime::format_duration(minimum)
        ),
    };
    Err(CliError::usage(format!(
        "--ttl {} is too short for a lease: {why}",
        humantime::format_duration(ttl)
    )))
}

/// Why the redis crate refused `url`, in words an operator can act on.
fn why_invalid(url: &str, refused: &impl std::fmt::Display) -> String {
    const SCHEMES: [&str; 6] = [
        "redis",
        "rediss",
        "unix",
        "redis+unix",
        "redis+sentinel",
        "redis+cluster",
    ];
    match url::Url::parse(url) {
        Err(url::ParseError::RelativeUrlWithoutBase) => "no scheme (redis://…)".to_owned(),
        Err(e) => e.to_string(),
        Ok(parsed) if !SCHEMES.contains(&parsed.scheme()) => {
            format!("{}:// is not a Redis URL scheme", parsed.scheme())
        }
        Ok(_) => refused.to_string(),
    }
}

/// `url` with the password of its user part, if any, replaced by `***`: errors are printed
/// and logged.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Connects to every master before the first round, so a one-shot `run` does not spend its
/// first round's per-node budget (milliseconds) on TCP, TLS, AUTH and loading scripts. A
/// master that cannot be reached now is no error here: the round that follows reports it.
/// Two masters that are one server (`ConfigError::DuplicateNode`, found by `run_id`) are.
///
/// # Errors
/// The configuration error when two configured masters are one server.
///
/// # Cancel safety
/// Cancel safe: connections go on being made in the background.
pub(crate) async fn connect_first(rl: &RedLock) -> Result<(), redquorum::Error> {
    match rl.connect().await {
        Err(e) if e.is_config() => Err(e),
        Err(e) => {
            tracing::debug!(error = %e, "not every master connected before the first round");
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}

/// Before exiting: lets what runs in the background finish (a release's deletes beyond the
/// majority, a cancelled acquire's clean-up), so no key is left behind until its ttl.
///
/// It waits twice the per-node timeout (the given one, or the derived one's ceiling): a
/// request to a connected master ends within one, and may queue behind another. A delete for
/// a master that is not connected by now, after the connect step's grace and the whole
/// command, waits for a connection that a hung or unreachable master does not give; waiting
/// for it (up to the connect timeout) would only delay the exit, and its key expires with its
/// ttl.
///
/// # Cancel safety
/// Cancel safe: the clean-up goes on without it (until the process exits).
pub(crate) async fn settle(rl: &RedLock, tuning: &Tuning) {
    let node_timeout = tuning
        .node_timeout
        .unwrap_or(redquorum::MAX_DERIVED_NODE_TIMEOUT);
    if !rl.settle(node_timeout.saturating_mul(2)).await {
        tracing::warn!(
            "clean-ups did not finish (a cancelled acquire's, or deletes queued for a master that is not answering); their keys expire with their ttl"
        );
    }
}

/// Who holds, as `run` and `elect` describe themselves in their locks' values
/// (`Builder::holder_info`), for `status` and for the line a skipped run prints: "HOST pid PID
/// PROGRAM". The program's name only, never its arguments: the value is readable by anyone
/// who can read the keys, and arguments carry secrets (`psql postgres://user:password@…`).
/// Anything the library refuses (not printable ASCII, a `:`: `Builder::holder_info`) shows as
/// `_`, and the whole is cut to the library's `MAX_HOLDER_INFO`.
pub(crate) fn holder(command: &[std::ffi::OsString]) -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "?".to_owned());
    let program = command
        .first()
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_name)
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut about: String = format!("{host} pid {} {program}", std::process::id())
        .chars()
        .map(|c| {
            if c == ':' || !(c.is_ascii_graphic() || c == ' ') {
                '_'
            } else {
                c
            }
        })
        .collect();
    about.truncate(redquorum::MAX_HOLDER_INFO);
    about.trim_end().to_owned()
}
