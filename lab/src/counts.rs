//! `redquorum-lab bench --counts`: the work one acquire+release pair costs, as counts that do
//! not move with the machine's noise, for the raw baseline and redquorum in the same run:
//! allocations (the binary's counting allocator, `stats_alloc`), system calls (`perf stat`
//! attached to this process, where `perf` runs), tasks spawned (`telemetry::tasks_spawned`),
//! bytes to and from the servers and their commands with the µs each took (`INFO stats` and
//! `INFO commandstats` of every master, before and after).
//!
//! Distinct keys per side and per pair: what a pair costs, not what contention adds. Counted
//! twice: one task (pairs one after another), and 64 tasks at once (where a connection's
//! writes carry several requests each, and the wake-ups differ).

use std::collections::BTreeMap;
use std::time::Duration;

use redquorum::RedLock;
use redquorum_testkit::baseline::Baseline;
use serde_json::{Value, json};

use crate::error::LabError;

/// Pairs run before counting (connections made, scripts loaded, caches warm).
const WARM_UP: usize = 100;

/// What one side's pairs cost, per pair.
pub(crate) struct PairCounts {
    /// Pairs that failed (a master slower than the per-node timeout on a loaded machine):
    /// their work is counted with the others', as a user's would be.
    failed: usize,
    allocations: Option<f64>,
    allocated_bytes: Option<f64>,
    syscalls: Option<f64>,
    tasks: f64,
    bytes_to_servers: f64,
    bytes_from_servers: f64,
    /// Per command: calls per pair, and µs per call.
    commands: BTreeMap<String, (f64, f64)>,
}

/// A side of the comparison: how it runs one pair (given the pair's number).
#[derive(Clone)]
pub(crate) enum Side {
    Baseline(Baseline),
    RedQuorum(RedLock, &'static str),
}

impl Side {
    async fn pair(&self, i: usize) -> Result<(), LabError> {
        match self {
            Side::Baseline(baseline) => baseline
                .pair(&format!("redquorum:{{count:raw:{i}}}"))
                .await
                .map(drop)
                .map_err(failed),
            Side::RedQuorum(rl, name) => crate::bench::pair(rl, format!("count:{name}:{i}"))
                .await
                .map_err(failed),
        }
    }
}

fn failed(e: impl std::fmt::Display) -> LabError {
    LabError::new(format!("bench --counts: {e}"))
}

/// Every master's `INFO stats` and `INFO commandstats`, summed.
#[derive(Debug, Default, Clone)]
struct ServerTotals {
    bytes_in: u64,
    bytes_out: u64,
    /// Per command: calls and µs.
    commands: BTreeMap<String, (u64, u64)>,
}

impl ServerTotals {
    async fn read(urls: &[String]) -> Result<Self, LabError> {
        let mut totals = Self::default();
        for url in urls {
            let client = redis::Client::open(url.as_str()).map_err(failed)?;
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(failed)?;
            let info: String = redis::cmd("INFO")
                .arg("stats")
                .arg("commandstats")
                .query_async(&mut conn)
                .await
                .map_err(failed)?;
            totals.add(&info);
        }
        Ok(totals)
    }

    fn add(&mut self, info: &str) {
        for line in info.lines() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("total_net_input_bytes:") {
                self.bytes_in += n.parse::<u64>().unwrap_or(0);
            } else if let Some(n) = line.strip_prefix("total_net_output_bytes:") {
                self.bytes_out += n.parse::<u64>().unwrap_or(0);
            } else if let Some(rest) = line.strip_prefix("cmdstat_") {
                let Some((name, fields)) = rest.split_once(':') else {
                    continue;
                };
                let field = |key: &str| {
                    fields
                        .split(',')
                        .find_map(|f| f.strip_prefix(key))
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                let entry = self.commands.entry(name.to_owned()).or_default();
                entry.0 += field("calls=");
                entry.1 += field("usec=");
            }
        }
    }

    /// `self − earlier − overhead` (what reading the totals itself adds).
    fn since(&self, earlier: &Self, overhead: &Self) -> Self {
        let mut commands = BTreeMap::new();
        for (name, (calls, usec)) in &self.commands {
            let (c0, u0) = earlier.commands.get(name).copied().unwrap_or_default();
            let (co, uo) = overhead.commands.get(name).copied().unwrap_or_default();
            let calls = calls.saturating_sub(c0).saturating_sub(co);
            if calls > 0 {
                commands.insert(
                    name.clone(),
                    (calls, usec.saturating_sub(u0).saturating_sub(uo)),
                );
            }
        }
        Self {
            bytes_in: self
                .bytes_in
                .saturating_sub(earlier.bytes_in)
                .saturating_sub(overhead.bytes_in),
            bytes_out: self
                .bytes_out
                .saturating_sub(earlier.bytes_out)
                .saturating_sub(overhead.bytes_out),
            commands,
        }
    }
}

/// `perf stat` counting this process's system calls (every thread) until stopped; `None` when
/// `perf` is missing or not allowed to attach.
struct SyscallCounter {
    child: tokio::process::Child,
}

impl SyscallCounter {
    async fn start() -> Option<Self> {
        let child = tokio::process::Command::new("perf")
            .args(["stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p"])
            .arg(std::process::id().to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .ok()?;
        // Attached within moments; the calls counted meanwhile are few against the pairs'.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Some(Self { child })
    }

    async fn stop(self) -> Option<u64> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()?).ok()?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).ok()?;
        let output = tokio::time::timeout(Duration::from_secs(5), self.child.wait_with_output())
            .await
            .ok()?
            .ok()?;
        String::from_utf8_lossy(&output.stderr)
            .lines()
            .find(|line| line.contains("raw_syscalls:sys_enter"))
            .and_then(|line| line.split(',').next()?.trim().parse().ok())
    }
}

/// Runs `pairs` pairs of `side` on `tasks` tasks at once (after a warm-up) and counts what
/// they cost.
///
/// # Panics
/// When `tasks` is 0 or more than `pairs` (the bench's sizes never are).
pub(crate) async fn count(
    side: &Side,
    urls: &[String],
    pairs: usize,
    tasks: usize,
) -> Result<PairCounts, LabError> {
    for i in 0..WARM_UP {
        // A pair that fails (a timeout under load) is no reason to stop counting.
        let _ = side.pair(i).await;
    }
    // What reading the servers' totals adds to them, measured by reading twice.
    let first = ServerTotals::read(urls).await?;
    let second = ServerTotals::read(urls).await?;
    let overhead = second.since(&first, &ServerTotals::default());
    let syscalls = SyscallCounter::start().await;
    let before = ServerTotals::read(urls).await?;
    let allocated = stats_alloc::INSTRUMENTED_SYSTEM.stats();
    let spawned = redquorum::telemetry::tasks_spawned();
    assert!(
        tasks > 0 && pairs >= tasks,
        "{pairs} pairs cannot be shared by {tasks} tasks"
    );
    let each = pairs / tasks;
    // A set, so a failed worker (or a stop) aborts the others rather than leaving them running.
    let mut workers = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let side = side.clone();
        workers.spawn(async move {
            let first = WARM_UP + t * each;
            let mut failures = 0usize;
            for i in first..first + each {
                if side.pair(i).await.is_err() {
                    failures += 1;
                }
            }
            failures
        });
    }
    let mut failures = 0usize;
    while let Some(worker) = workers.join_next().await {
        failures += worker.map_err(failed)?;
    }
    let pairs = each * tasks;
    let spawned = redquorum::telemetry::tasks_spawned() - spawned;
    let allocated_after = stats_alloc::INSTRUMENTED_SYSTEM.stats();
    let after = ServerTotals::read(urls).await?;
    let syscalls = match syscalls {
        Some(counter) => counter.stop().await,
        None => None,
    };
    let servers = after.since(&before, &overhead);
    let per_pair = |n: u64| n as f64 / pairs as f64;
    let allocations = allocated_after.allocations + allocated_after.reallocations
        - allocated.allocations
        - allocated.reallocations;
    // No allocation at all: the binary runs without the counting allocator (a test of the
    // library alone), so there is no count.
    let counted = allocations > 0;
    Ok(PairCounts {
        failed: failures,
        allocations: counted.then(|| per_pair(allocations as u64)),
        allocated_bytes: counted.then(|| {
            per_pair((allocated_after.bytes_allocated - allocated.bytes_allocated) as u64)
        }),
        syscalls: syscalls.map(per_pair),
        tasks: per_pair(spawned),
        bytes_to_servers: per_pair(servers.bytes_in),
        bytes_from_servers: per_pair(servers.bytes_out),
        commands: servers
            .commands
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .map(|(name, (calls, usec))| {
                (
                    name.clone(),
                    (per_pair(*calls), *usec as f64 / (*calls).max(1) as f64),
                )
            })
            .collect(),
    })
}

impl PairCounts {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "failed_pairs": self.failed,
            "allocations": self.allocations,
            "allocated_bytes": self.allocated_bytes,
            "syscalls": self.syscalls,
            "tasks_spawned": self.tasks,
            "bytes_to_servers": self.bytes_to_servers,
            "bytes_from_servers": self.bytes_from_servers,
            "commands": self.commands.iter().map(|(name, (calls, us))| {
                (name.clone(), json!({"calls_per_pair": calls, "us_per_call": us}))
            }).collect::<serde_json::Map<String, Value>>(),
        })
    }
}

/// The counts table: one column per side, named by `names`.
pub(crate) fn print(
    sides: &[(&str, &PairCounts)],
    (pairs, tasks): (usize, usize),
    say: &impl Fn(String),
) {
    let mut header = format!(
        "work per acquire+release pair, {tasks} task{}, {pairs} pairs each, five masters",
        if tasks == 1 { "" } else { "s" }
    );
    for (name, _) in sides {
        header.push_str(&format!(" {name:>14}"));
    }
    say(header);
    let width = 66;
    let row = |label: &str, values: Vec<String>| {
        let mut line = format!("  {label:<width$}");
        for value in values {
            line.push_str(&format!(" {value:>14}"));
        }
        line
    };
    let number = |n: Option<f64>| n.map_or_else(|| "n/a".to_owned(), |n| format!("{n:.1}"));
    if sides.iter().any(|(_, c)| c.failed > 0) {
        say(row(
            "pairs that failed (counted with the others)",
            sides.iter().map(|(_, c)| c.failed.to_string()).collect(),
        ));
    }
    say(row(
        "allocations",
        sides.iter().map(|(_, c)| number(c.allocations)).collect(),
    ));
    say(row(
        "bytes allocated",
        sides
            .iter()
            .map(|(_, c)| number(c.allocated_bytes))
            .collect(),
    ));
    say(row(
        "system calls (perf; n/a without it)",
        sides.iter().map(|(_, c)| number(c.syscalls)).collect(),
    ));
    say(row(
        "tasks spawned",
        sides.iter().map(|(_, c)| number(Some(c.tasks))).collect(),
    ));
    say(row(
        "bytes sent to the servers",
        sides
            .iter()
            .map(|(_, c)| number(Some(c.bytes_to_servers)))
            .collect(),
    ));
    say(row(
        "bytes received from them",
        sides
            .iter()
            .map(|(_, c)| number(Some(c.bytes_from_servers)))
            .collect(),
    ));
    say("  server commands per pair (µs per call)".to_owned());
    let mut names: Vec<&String> = sides.iter().flat_map(|(_, c)| c.commands.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        say(row(
            &format!("  {name}"),
            sides
                .iter()
                .map(|(_, c)| match c.commands.get(name) {
                    Some((calls, us)) => format!("{calls:.1} ({us:.1})"),
                    None => "-".to_owned(),
                })
                .collect(),
        ));
    }
    say(String::new());
}
