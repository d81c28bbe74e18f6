//! The command line, as clap parses it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::exit;

/// Redlock from the shell: run a command under a lock held by a majority of independent Redis
/// masters, elect a leader, inspect a lock, and run a local five-master cluster to try it on.
#[derive(Debug, Parser)]
#[command(name = "redquorum", version, after_help = exit::TABLE)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands that never talk to the masters, and the global options they ignore: hidden
/// from their help, completions and manual pages (still accepted, as global options are).
const OFFLINE: [&str; 3] = ["completions", "man", "dev"];
const CONNECTION: [&str; 10] = [
    "nodes",
    "config",
    "dev",
    "node_timeout",
    "connect_timeout",
    "restart_grace",
    "key_prefix",
    "drift_factor",
    "key_layout",
    "native_commands",
];

/// The command line as parsed and documented: [`Cli`]'s, with the connection options hidden
/// where they mean nothing ([`OFFLINE`]): each of those subcommands gets a hidden copy of
/// them, which the global ones then do not replace.
pub(crate) fn command() -> clap::Command {
    let mut cli = <Cli as clap::CommandFactory>::command();
    let hidden: Vec<clap::Arg> = cli
        .get_arguments()
        .filter(|arg| CONNECTION.contains(&arg.get_id().as_str()))
        .map(|arg| arg.clone().global(false).hide(true))
        .collect();
    for name in OFFLINE {
        cli = cli.mut_subcommand(name, |sub| with_hidden(sub, &hidden));
    }
    cli
}

fn with_hidden(mut sub: clap::Command, hidden: &[clap::Arg]) -> clap::Command {
    sub = sub.args(hidden.iter().cloned());
    let nested: Vec<String> = sub
        .get_subcommands()
        .map(|nested| nested.get_name().to_owned())
        .collect();
    for name in nested {
        sub = sub.mut_subcommand(name, |nested| with_hidden(nested, hidden));
    }
    sub
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct Global {
    /// The masters, comma-separated (`redis://host:port`, `rediss://…` with TLS, `redis://:password@…`,
    /// `redis+sentinel://host:port,host:port/master` for a master found through Sentinel,
    /// `redis+cluster://host:port,host:port` for a Redis Cluster).
    /// Prefer the environment variable or the config file for passwords: arguments are visible
    /// in `ps`. Without it, REDQUORUM_NODES, then the config file's `nodes`.
    #[arg(
        long,
        global = true,
        env = "REDQUORUM_NODES",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub(crate) nodes: Vec<String>,
    /// The config file (TOML: `nodes = [...]`, `node-timeout`, `restart-grace`, `key-prefix`,
    /// `drift-factor`, `kill-signal`; flags and the environment override it) [default: the first of
    /// $XDG_CONFIG_HOME/redquorum/config.toml and /etc/redquorum/config.toml that exists].
    #[arg(long, global = true, env = "REDQUORUM_CONFIG", hide_env_values = true)]
    pub(crate) config: Option<PathBuf>,
    /// Use the local dev cluster (`redquorum dev up`); --nodes, REDQUORUM_NODES and the config
    /// file are then ignored.
    #[arg(long, global = true)]
    pub(crate) dev: bool,
    /// Machine-readable output: JSON on stdout (status, observe, dev status), and
    /// for run and elect one JSON event per line on stderr (acquired, renewed, lost, released,
    /// elected, leader, …), redquorum's log lines included (the command's own stderr, and
    /// clap's usage errors, stay as they are).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) tuning: Tuning,
    /// More log lines on stderr: -v info, -vv debug, -vvv trace (the default shows warnings:
    /// lost connections, a lost lease, a risky node list). RUST_LOG, when set, decides alone.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub(crate) quiet: bool,
}

/// How the client talks to the masters (`run`, `elect`, `status`, `observe`); each also from
/// the environment and the config file.
#[derive(Debug, Clone, Args)]
#[command(
    next_help_heading = "Connection and tuning (every subcommand; flags, environment, config file)"
)]
pub(crate) struct Tuning {
    /// How long one request to one master may take before it counts as failed [default:
    /// derived from the ttl, 1/100 of it within 10ms..=50ms]. Raise it for masters more than
    /// a few milliseconds away.
    #[arg(long, global = true, hide_env_values = true, env = "REDQUORUM_NODE_TIMEOUT", value_parser = duration)]
    pub(crate) node_timeout: Option<Duration>,
    /// How long connecting to one master may take (TCP, TLS, AUTH, the server's identity)
    /// [default: 1s]. A command goes on once a majority is connected: a master that does not
    /// answer costs a short grace after them, not this.
    #[arg(long, global = true, hide_env_values = true, env = "REDQUORUM_CONNECT_TIMEOUT", value_parser = duration)]
    pub(crate) connect_timeout: Option<Duration>,
    /// A master up for less than this may have restarted empty while a lock was held on it:
    /// it does not vote on acquire until then (set it to your longest ttl) [default: none].
    #[arg(long, global = true, hide_env_values = true, env = "REDQUORUM_RESTART_GRACE", value_parser = duration)]
    pub(crate) restart_grace: Option<Duration>,
    /// The prefix of every key and channel redquorum uses [default: redquorum:].
    #[arg(
        long,
        global = true,
        hide_env_values = true,
        env = "REDQUORUM_KEY_PREFIX"
    )]
    pub(crate) key_prefix: Option<String>,
    /// The clock drift allowed, as a fraction of the ttl (0 ≤ f < 0.5: the lease renews every
    /// ttl/3 and needs validity well past it; the library takes up to 1) [default: 0.01].
    #[arg(
        long,
        global = true,
        hide_env_values = true,
        env = "REDQUORUM_DRIFT_FACTOR"
    )]
    pub(crate) drift_factor: Option<f64>,
    /// `shared`: the lock key is exactly the prefix + the resource, the key node-redlock,
    /// redsync and pottery use, so `run` shares its lock with them (set `--key-prefix ""` for
    /// node-redlock and redsync, `redlock:` for pottery). Plain locks only: `run` then hands
    /// the command no fencing token, and `--permits` and `elect` are refused [default: tagged].
    #[arg(
        long,
        global = true,
        hide_env_values = true,
        env = "REDQUORUM_KEY_LAYOUT",
        value_enum
    )]
    pub(crate) key_layout: Option<Layout>,
    /// `false`: release and renew with the Lua scripts only, never with a server's own
    /// compare commands (`DELIFEQ`, `SET … IFEQ`, where a server has them) [default: true].
    #[arg(
        long,
        global = true,
        hide_env_values = true,
        env = "REDQUORUM_NATIVE_COMMANDS",
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub(crate) native_commands: Option<bool>,
    /// The config file's `kill-signal` (`run` and `elect` take `--kill-signal` first).
    #[arg(skip)]
    pub(crate) kill_signal: Option<nix::sys::signal::Signal>,
}

/// How lock keys are named (`redquorum::KeyLayout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Layout {
    /// `prefix{resource}`: one hash slot per resource; fencing, elections and semaphores.
    Tagged,
    /// `prefix` + `resource`, as other languages' Redlock clients name it.
    Shared,
}

impl Tuning {
    /// The signal that starts a command's stop: `asked` (the flag or its variable), else the
    /// config file's, else SIGTERM.
    pub(crate) fn kill_signal(
        &self,
        asked: Option<nix::sys::signal::Signal>,
    ) -> nix::sys::signal::Signal {
        asked
            .or(self.kill_signal)
            .unwrap_or(nix::sys::signal::Signal::SIGTERM)
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding a lock: the distributed `flock`.
    ///
    /// Takes RESOURCE on a majority (waiting up to --wait), renews it every ttl/3 while the
    /// command runs, releases it once the command and every process it started have exited,
    /// and exits with the command's code. If the lock is lost, or is --kill-grace from its
    /// deadline without a renewal, the command's process group gets SIGTERM, then SIGKILL a
    /// quarter of the grace before the deadline, and redquorum exits 76: the command never
    /// runs past the lock, and dies with redquorum even if redquorum is SIGKILLed. SIGINT,
    /// SIGTERM and SIGHUP are forwarded to it.
    /// The command sees REDQUORUM_RESOURCE and REDQUORUM_FENCING_TOKEN (a number that grows
    /// from one holder to the next: hand it to what you write to, so it can refuse an older one).
    #[command(after_help = exit::TABLE)]
    Run(RunArgs),
    /// Internal: the guard between redquorum and a supervised command (see guard.rs).
    #[command(name = "__guard", hide = true)]
    Guard {
        /// The pid of the redquorum that started this guard.
        #[arg(long)]
        parent: u32,
        /// The command stays in redquorum's process group (see `run --foreground`).
        #[arg(long)]
        foreground: bool,
        /// In the foreground: the signal to give the command when redquorum sends SIGTERM
        /// (its --kill-signal), as a number.
        #[arg(long, default_value_t = 15)]
        stop_signal: i32,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<OsString>,
    },
    /// Run a command while this candidate leads an election, campaigning again when it loses.
    ///
    /// The command sees REDQUORUM_RESOURCE, REDQUORUM_LEADER_ID, REDQUORUM_TERM and
    /// REDQUORUM_FENCING_TOKEN (= the term). It is stopped (SIGTERM, then SIGKILL) when
    /// leadership is lost; when it exits by itself, redquorum resigns and exits with its code.
    #[command(after_help = exit::TABLE)]
    Elect(ElectArgs),
    /// Show what every master holds for RESOURCE: holder, remaining ttl, fence counter, leader.
    #[command(after_help = exit::TABLE)]
    Status {
        /// The lock's name.
        resource: String,
    },
    /// Seed every master's fence counters now and show, per master, whether fencing is
    /// seeded for its current term.
    ///
    /// Fencing tokens survive any minority of masters down only while every master is seeded
    /// (clients seed in the background; this does it now). Run it after deploying and after
    /// a master restarted or failed over; in a rolling restart, restart the next master only
    /// once it says every master is seeded. Exits 0 when every master is, 69 otherwise.
    #[command(after_help = exit::TABLE)]
    Fence {
        /// Only look (one request per master): seed nothing.
        #[arg(long)]
        check: bool,
    },
    /// Follow an election's leader, as a majority of masters sees it: one line (or JSON
    /// object) now and one at every change, until interrupted (like `etcdctl elect -l`).
    #[command(after_help = exit::TABLE)]
    Observe(ObserveArgs),
    /// Print a shell completion script: `redquorum completions bash > /etc/bash_completion.d/redquorum`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) on stdout, or write one page per subcommand into --dir.
    Man {
        /// Write redquorum.1, redquorum-run.1, … into this directory instead.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// A local cluster of independent redis-server masters on 127.0.0.1, for trying things out.
    ///
    /// State lives under $REDQUORUM_DEV_DIR, or $XDG_STATE_HOME/redquorum/dev, or
    /// ~/.local/state/redquorum/dev. Nodes are numbered from 0.
    Dev {
        #[command(subcommand)]
        action: DevAction,
    },
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// How long each renewal keeps the lock (e.g. 30s, 500ms, 2m).
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub(crate) ttl: Duration,
    /// How long to wait for a busy lock before giving up with exit code 75: a duration, or
    /// `forever` (flock's and consul lock's default). The default, 0s, tries once: "run this
    /// job on exactly one host" wants the other hosts to skip it. `-w` as in flock.
    #[arg(
        short = 'w',
        long,
        default_value = "0s",
        value_parser = wait_limit,
        conflicts_with = "nonblock"
    )]
    pub(crate) wait: WaitLimit,
    /// Try once and exit 75 (or --conflict-exit-code) if the lock is busy (flock's -n); the
    /// default unless --wait says otherwise.
    #[arg(short = 'n', long)]
    pub(crate) nonblock: bool,
    /// The exit code for a busy lock instead of 75, so a script can tell it from its
    /// command's own codes (flock's -E); 0 makes "another host has it" a success, for
    /// schedulers that retry failures (a Kubernetes Job).
    #[arg(short = 'E', long)]
    pub(crate) conflict_exit_code: Option<u8>,
    /// How long before the lock's deadline an unrenewed command gets SIGTERM; SIGKILL follows
    /// at the latest a quarter of it before the deadline, so the command never outlives the
    /// lock. At most half of --ttl; by default a third of it, at most 10s.
    #[arg(long, value_parser = duration)]
    pub(crate) kill_grace: Option<Duration>,
    /// Keep the command in redquorum's process group, so an interactive command can read the
    /// terminal and gets Ctrl-C and Ctrl-Z from it directly (as `timeout --foreground`).
    /// redquorum then forwards only SIGTERM, and on loss kills the command and every process
    /// it started one by one rather than as a group. Without it the command runs in a group
    /// of its own, and one that reads the terminal is stopped by SIGTTIN.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// The signal that asks the command to stop (on loss, or --kill-grace before an unrenewed
    /// deadline); SIGKILL follows if it does not. Also `kill-signal` in the config file
    /// [default: TERM].
    #[arg(long, hide_env_values = true, env = "REDQUORUM_KILL_SIGNAL", value_parser = stop_signal)]
    pub(crate) kill_signal: Option<nix::sys::signal::Signal>,
    /// Keep the lock at least this long after taking it, even when the command finishes
    /// sooner, so that hosts whose timers fire a little later find it taken and skip: "one at
    /// a time" becomes "one per run" (SIGINT or SIGTERM end the hold early).
    #[arg(long, value_parser = duration)]
    pub(crate) min_hold: Option<Duration>,
    /// Hold one of N permits of the semaphore RESOURCE instead of the lock RESOURCE, so at
    /// most N such commands run at once (consul lock -n; here -n stays flock's non-blocking
    /// flag). Every run must give the same N (another N is refused, exit 64, while permits are
    /// held). The command gets REDQUORUM_PERMIT (0 to N−1,
    /// never the same for two commands at once) instead of a fencing token.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(redquorum::MAX_PERMITS)))]
    pub(crate) permits: Option<u32>,
    /// Hold a read lock of RESOURCE (flock -s): any number of --shared commands run at once,
    /// but none beside a command without it, which holds the lock RESOURCE itself, the write
    /// lock (flock -x). A waiting exclusive command keeps new --shared ones out. The command
    /// gets in REDQUORUM_FENCING_TOKEN the token of the last exclusive run it may observe.
    #[arg(short = 's', long, conflicts_with_all = ["permits", "exclusive"])]
    pub(crate) shared: bool,
    /// Hold the lock RESOURCE alone (flock -x): the default, accepted for flock's scripts.
    #[arg(short = 'x', long)]
    pub(crate) exclusive: bool,
    /// The lock's name.
    pub(crate) resource: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// This candidate's name, advertised as the leader's value while it leads.
    #[arg(long)]
    pub(crate) id: String,
    /// How long leadership lasts without a renewal (renewed every ttl/3).
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub(crate) ttl: Duration,
    /// How long before the leadership's deadline an unrenewed command gets SIGTERM; SIGKILL
    /// follows at the latest a quarter of it before the deadline, so the command never
    /// outlives the leadership. At most half of --ttl; by default a third of it, at most 10s.
    #[arg(long, value_parser = duration)]
    pub(crate) kill_grace: Option<Duration>,
    /// Keep the command in redquorum's process group, so an interactive command can read the
    /// terminal and gets Ctrl-C and Ctrl-Z from it directly (as `timeout --foreground`).
    /// redquorum then forwards only SIGTERM, and on loss kills the command and every process
    /// it started one by one rather than as a group. Without it the command runs in a group
    /// of its own, and one that reads the terminal is stopped by SIGTTIN.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// The signal that asks the command to stop (on loss, or --kill-grace before an unrenewed
    /// deadline); SIGKILL follows if it does not. Also `kill-signal` in the config file
    /// [default: TERM].
    #[arg(long, hide_env_values = true, env = "REDQUORUM_KILL_SIGNAL", value_parser = stop_signal)]
    pub(crate) kill_signal: Option<nix::sys::signal::Signal>,
    /// Lead at most once: when leadership is lost, stop the command and exit 76 instead of
    /// campaigning again, and let the service manager (systemd's `Restart=`) decide.
    #[arg(long)]
    pub(crate) once: bool,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464, any path):
    /// redquorum_cli_leader (1 while leading), redquorum_cli_terms_won_total,
    /// redquorum_cli_leadership_lost_total, and the library's redquorum_* metrics.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics: Option<std::net::SocketAddr>,
    /// The election's name.
    pub(crate) resource: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct ObserveArgs {
    /// How often to ask the masters.
    #[arg(long, default_value = "1s", value_parser = duration)]
    pub(crate) every: Duration,
    /// Print the leader once and exit: 0 when a majority tells (someone or nobody leads), 69
    /// when too few masters answer.
    #[arg(long)]
    pub(crate) once: bool,
    /// Follow the lock's holders instead of an election's leader: the exclusive holder (a
    /// `run` without --shared, a write lock), or how many --shared readers hold it, or free.
    #[arg(long)]
    pub(crate) holders: bool,
    /// The election's name (with --holders, the lock's).
    pub(crate) resource: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DevAction {
    /// Start the cluster (or the nodes of it that are down).
    Up {
        /// How many masters.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=15))]
        count: u16,
        /// Which server the masters run: redis (redis-server) or valkey (valkey-server), on
        /// PATH. Default: the running cluster's, else redis.
        #[arg(long, env = "REDQUORUM_DEV_SERVER", value_parser = ["redis", "valkey"])]
        server: Option<String>,
    },
    /// Stop every node and delete the cluster's state.
    Down,
    /// Each node's port, pid, state and ping time.
    Status,
    /// SIGKILL node N (a crash).
    Kill { node: usize },
    /// SIGSTOP node N (a hung master: connections stay open, nothing answers).
    Pause { node: usize },
    /// SIGCONT node N.
    Resume { node: usize },
    /// Start node N again on its port and data (killing it first if it runs).
    Restart { node: usize },
}

/// A humantime duration: `30s`, `500ms`, `2m`, `1h 30m`.
fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (try 30s, 500ms or 2m)"))
}

/// How long `run` waits for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitLimit {
    /// At most this long (zero: try once).
    For(Duration),
    /// Until the lock is free.
    Forever,
}

fn wait_limit(text: &str) -> Result<WaitLimit, String> {
    if text.eq_ignore_ascii_case("forever") {
        return Ok(WaitLimit::Forever);
    }
    duration(text).map(WaitLimit::For)
}

/// A signal by name (`TERM`, `SIGINT`, `hup`) or number; one a process can catch, since the
/// command is meant to stop cleanly on it (SIGKILL follows anyway).
pub(crate) fn stop_signal(text: &str) -> Result<nix::sys::signal::Signal, String> {
    use nix::sys::signal::Signal;
    let upper = text.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    let signal = match text.parse::<i32>() {
        Ok(number) => Signal::try_from(number).map_err(|e| format!("{text}: {e}"))?,
        Err(_) => name
            .parse::<Signal>()
            .map_err(|_| format!("{text}: not a signal name (try TERM, INT or HUP)"))?,
    };
    match signal {
        Signal::SIGKILL | Signal::SIGSTOP => Err(format!(
            "{text}: cannot be caught; the command must get a chance to stop (SIGKILL follows \
             anyway)"
        )),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;

    #[test]
    fn wait_takes_a_duration_or_forever() {
        assert_eq!(wait_limit("forever"), Ok(WaitLimit::Forever));
        assert_eq!(wait_limit("Forever"), Ok(WaitLimit::Forever));
        assert_eq!(
            wait_limit("1m"),
            Ok(WaitLimit::For(Duration::from_secs(60)))
        );
        assert_eq!(wait_limit("0s"), Ok(WaitLimit::For(Duration::ZERO)));
        assert!(wait_limit("always").is_err());
    }

    #[test]
    fn stop_signals_by_name_or_number_but_never_uncatchable() {
        for (text, signal) in [
            ("TERM", Signal::SIGTERM),
            ("sigint", Signal::SIGINT),
            ("hup", Signal::SIGHUP),
            ("10", Signal::SIGUSR1),
        ] {
            assert_eq!(stop_signal(text), Ok(signal), "{text}");
        }
        for text in ["KILL", "9", "STOP", "19", "NOPE", "0", "999"] {
            assert!(stop_signal(text).is_err(), "{text}");
        }
    }
}
