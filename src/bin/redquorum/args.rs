//! The command line, as clap parses it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

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

/// Options every subcommand takes.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// The masters, comma-separated (`redis://host:port`, `rediss://…` with TLS, `redis://:password@…`).
    /// Prefer the environment variable or a nodes file for passwords: arguments are visible in `ps`.
    /// Without it, REDQUORUM_NODES, then the nodes file, then the local dev cluster.
    #[arg(
        long,
        global = true,
        env = "REDQUORUM_NODES",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub(crate) nodes: Vec<String>,
    /// A nodes file: one URL per line, `#` starts a comment
    /// [default: $XDG_CONFIG_HOME/redquorum/nodes when it exists].
    #[arg(long, global = true, env = "REDQUORUM_CONFIG", hide_env_values = true)]
    pub(crate) config: Option<PathBuf>,
    /// Print machine-readable JSON on stdout (status, dev status, demo, bench).
    #[arg(long, global = true)]
    pub(crate) json: bool,
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
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<OsString>,
    },
    /// Run a command while this candidate leads an election, campaigning again when it loses.
    ///
    /// The command sees REDQUORUM_RESOURCE, REDQUORUM_LEADER_ID, REDQUORUM_TERM and
    /// REDQUORUM_FENCING_TOKEN (= the term). It is stopped (SIGTERM, then SIGKILL) when
    /// leadership is lost; when it exits by itself, redquorum resigns and exits with its code.
    Elect(ElectArgs),
    /// Show what every master holds for RESOURCE: holder, remaining ttl, fence counter, leader.
    Status {
        /// The lock's name.
        resource: String,
    },
    /// A local cluster of independent redis-server masters on 127.0.0.1, for trying things out.
    ///
    /// State lives under $REDQUORUM_DEV_DIR, or $XDG_STATE_HOME/redquorum/dev, or
    /// ~/.local/state/redquorum/dev. Nodes are numbered from 0.
    Dev {
        #[command(subcommand)]
        action: DevAction,
    },
    /// A live demo: three candidates elect a leader on five local masters while masters are
    /// killed, paused and restarted. Ends by itself with a summary (about 50 s, 25 s with --quick).
    Demo {
        /// A shorter schedule (about 25 s).
        #[arg(long)]
        quick: bool,
    },
    /// The performance table: latency, throughput, hand-off to waiters, fencing and a hung
    /// master, each next to a raw baseline (plain SET NX PX and compare-and-delete on the
    /// redis crate) measured in the same run on five memory-only masters it starts itself.
    /// About 40 s (10 s with --quick).
    Bench {
        /// Smaller samples (about 10 s): for a smoke test, not for figures.
        #[arg(long)]
        quick: bool,
    },
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// How long each renewal keeps the lock (e.g. 30s, 500ms, 2m).
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub(crate) ttl: Duration,
    /// How long to wait for a busy lock before giving up with exit code 75 (0s: try once).
    #[arg(long, default_value = "0s", value_parser = duration)]
    pub(crate) wait: Duration,
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
    /// The election's name.
    pub(crate) resource: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DevAction {
    /// Start the cluster (or the nodes of it that are down).
    Up {
        /// How many masters.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=15))]
        count: u16,
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
