//! `redquorum-lab contend`: one lock handed around between separate processes.
//!
//! The in-process hand-off of `redquorum-lab bench` cannot show what happens between
//! processes, where waiters learn of a release only through the masters. Here `processes`
//! worker processes each take one resource in a loop for a fixed time, hold it for a random
//! 0..=`hold_max` and release it. Each worker prints its turns (asked, acquired, release
//! called, on `CLOCK_MONOTONIC`, which every process of the host shares) as one JSON line;
//! this process merges them into the figures: acquisitions, the share of the time the lock was
//! held ("busy"), per-process counts, the longest wait and the overlaps (two holders at once:
//! must be 0).
//!
//! The same run can measure another client on the same masters: `--against BIN` runs `BIN`
//! as the workers instead, with the same arguments and the same output (the rslock contender
//! in `lab/rslock-contender/` speaks it).

use std::process::Stdio;
use std::time::Duration;

use rand::RngExt;
use redquorum::{RedLock, RetryPolicy};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::error::LabError;
use crate::monotonic::{monotonic_ns, nanos, sleep_until_ns};
use crate::report::{Spread, ms, verdict};
use crate::stop::{StopSignals, exit_code};

const NODES: usize = 5;
/// The ttl every worker asks for: far above any hold, so a lock never lapses while held.
const TTL: Duration = Duration::from_secs(1);
/// The resource the workers contend for.
const RESOURCE: &str = "contend:one";
/// How long the workers get to start and connect before the measured window opens.
const START_AFTER: Duration = Duration::from_secs(3);

/// What to run.
#[derive(Debug, Clone)]
pub struct Contention {
    /// How many worker processes contend.
    pub processes: usize,
    /// The measured window.
    pub seconds: u64,
    /// Each hold lasts a random 0..=this.
    pub hold_max: Duration,
    /// Another client's worker binary, measured after redquorum on the same masters.
    pub against: Option<std::path::PathBuf>,
}

/// Runs redquorum's workers (and `against`'s, if given) and prints the figures (`--json`: as
/// JSON on stdout). Its masters are stopped on every way out; SIGINT, SIGTERM or SIGHUP stop
/// it early (the workers end with their window anyway).
///
/// # Errors
/// When the masters cannot be started or a worker fails.
pub async fn contend(run: Contention, as_json: bool) -> Result<u8, LabError> {
    let mut signals = StopSignals::listen()?;
    let cluster = crate::masters::start("contend", NODES).await?;
    let urls = cluster.urls();
    let result = tokio::select! {
        result = measure(&urls, &run) => Ok(result),
        signal = signals.recv() => Err(signal),
    };
    cluster.down()?;
    let figures = match result {
        Ok(figures) => figures?,
        Err(signal) => return Ok(exit_code(signal)),
    };
    if as_json {
        println!(
            "{:#}",
            Value::Array(figures.iter().map(Figures::to_json).collect())
        );
    } else {
        print(&figures, &run);
    }
    Ok(0)
}

async fn measure(urls: &[String], run: &Contention) -> Result<Vec<Figures>, LabError> {
    let mut figures = vec![measure_one("redquorum", None, urls, run).await?];
    if let Some(bin) = &run.against {
        let name = bin
            .file_stem()
            .map_or_else(|| "other".to_owned(), |s| s.to_string_lossy().into_owned());
        figures.push(measure_one(&name, Some(bin), urls, run).await?);
    }
    Ok(figures)
}

/// Starts the workers, waits for their lines, and merges them.
async fn measure_one(
    client: &str,
    bin: Option<&std::path::Path>,
    urls: &[String],
    run: &Contention,
) -> Result<Figures, LabError> {
    let start_ns = monotonic_ns()?.saturating_add(nanos(START_AFTER));
    let program = match bin {
        Some(bin) => bin.to_path_buf(),
        None => std::env::current_exe()?,
    };
    let mut children = Vec::new();
    for process in 0..run.processes {
        let mut command = tokio::process::Command::new(&program);
        if bin.is_none() {
            command.arg("contend-worker");
        }
        command
            .args(["--nodes", &urls.join(",")])
            .args(["--process", &process.to_string()])
            .args(["--start-ns", &start_ns.to_string()])
            .args(["--seconds", &run.seconds.to_string()])
            .args(["--hold-max-us", &run.hold_max.as_micros().to_string()])
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        children.push(command.spawn()?);
    }
    // The whole machine's CPU time over the window: the workers' and the masters' (the
    // machine is otherwise idle during a run).
    sleep_until_ns(start_ns).await?;
    let busy_before = machine_cpu();
    sleep_until_ns(start_ns.saturating_add(run.seconds.saturating_mul(1_000_000_000))).await?;
    let cpu = machine_cpu()
        .zip(busy_before)
        .map(|(after, before)| after.saturating_sub(before));
    let mut turns = Vec::new();
    let mut rounds = 0u64;
    let mut counted_rounds = true;
    let mut failed_releases = Some(0u64);
    for (process, mut child) in children.into_iter().enumerate() {
        let mut out = String::new();
        if let Some(stdout) = child.stdout.as_mut() {
            stdout.read_to_string(&mut out).await?;
        }
        let status = child.wait().await?;
        if !status.success() {
            return Err(LabError::new(format!(
                "contend: {client} worker {process} failed: {status}"
            )));
        }
        let line: Value = serde_json::from_str(out.trim())
            .map_err(|e| LabError::new(format!("contend: worker {process}'s output: {e}")))?;
        for t in line["turns"].as_array().into_iter().flatten() {
            let at = |i: usize| t.get(i).and_then(Value::as_u64).unwrap_or(0);
            turns.push(Turn {
                process,
                asked: at(0),
                acquired: at(1),
                released: at(2),
            });
        }
        match line["rounds"].as_u64() {
            Some(n) => rounds += n,
            None => counted_rounds = false,
        }
        failed_releases = failed_releases
            .zip(line["failed_releases"].as_u64())
            .map(|(sum, n)| sum + n);
    }
    let window = (
        start_ns,
        start_ns.saturating_add(run.seconds.saturating_mul(1_000_000_000)),
    );
    let mut figures = Figures::of(
        client,
        turns,
        run.processes,
        window,
        counted_rounds.then_some(rounds),
    );
    #[allow(clippy::cast_precision_loss)]
    {
        figures.cpu_us_per_acquisition =
            cpu.map(|c| c.as_secs_f64() * 1e6 / figures.acquisitions.max(1) as f64);
    }
    figures.failed_releases = failed_releases;
    Ok(figures)
}

/// CPU time the whole machine spent busy since boot (`/proc/stat`: every state but idle and
/// iowait), or `None` where there is no such file.
fn machine_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …
    let busy: u64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| *t)
        .sum();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|hz| u64::try_from(hz).ok())
        .filter(|hz| *hz > 0)?;
    Some(Duration::from_nanos(
        busy.saturating_mul(1_000_000_000 / hz),
    ))
}

/// One acquisition, in nanoseconds on `CLOCK_MONOTONIC`.
#[derive(Debug, Clone, Copy)]
struct Turn {
    process: usize,
    asked: u64,
    acquired: u64,
    /// When the holder called release: the next holder may only acquire after it.
    released: u64,
}

/// One client's figures.
#[derive(Debug)]
struct Figures {
    client: String,
    acquisitions: usize,
    per_process: Vec<usize>,
    /// Share of the window during which the lock was held.
    busy: f64,
    mean_hold_ms: f64,
    /// From asking to acquiring (its max is the longest wait).
    wait: Spread,
    /// From one holder calling release to the next holder's acquire returning.
    gap: Spread,
    /// Turns whose acquire returned before the previous holder called release.
    overlaps: usize,
    /// Rounds per acquisition (redquorum's workers count them).
    rounds_per_acquisition: Option<f64>,
    /// The machine's busy CPU time over the window per acquisition (workers and masters).
    cpu_us_per_acquisition: Option<f64>,
    /// Releases that failed, leaving the lock to lapse by its ttl (redquorum's workers count
    /// them; the rslock contender does not report them).
    failed_releases: Option<u64>,
}

impl Figures {
    #[allow(clippy::cast_precision_loss)]
    fn of(
        client: &str,
        mut turns: Vec<Turn>,
        processes: usize,
        (from, to): (u64, u64),
        rounds: Option<u64>,
    ) -> Self {
        turns.sort_by_key(|t| t.acquired);
        let overlaps = turns
            .windows(2)
            .filter(|w| matches!(w, [a, b] if b.acquired < a.released))
            .count();
        let mut per_process = vec![0; processes];
        for t in &turns {
            if let Some(n) = per_process.get_mut(t.process) {
                *n += 1;
            }
        }
        let held: u64 = turns
            .iter()
            .map(|t| t.released.min(to).saturating_sub(t.acquired.max(from)))
            .sum();
        let count = turns.len().max(1) as f64;
        Self {
            client: client.to_owned(),
            acquisitions: turns.len(),
            per_process,
            busy: held as f64 / to.saturating_sub(from).max(1) as f64,
            mean_hold_ms: turns
                .iter()
                .map(|t| t.released.saturating_sub(t.acquired) as f64)
                .sum::<f64>()
                / count
                / 1e6,
            wait: Spread::of(
                turns
                    .iter()
                    .map(|t| Duration::from_nanos(t.acquired.saturating_sub(t.asked)))
                    .collect(),
            ),
            gap: Spread::of(
                turns
                    .windows(2)
                    .filter_map(|w| match w {
                        [a, b] => Some(Duration::from_nanos(b.acquired.saturating_sub(a.released))),
                        _ => None,
                    })
                    .collect(),
            ),
            overlaps,
            rounds_per_acquisition: rounds.map(|r| r as f64 / count),
            cpu_us_per_acquisition: None,
            failed_releases: None,
        }
    }

    /// (max − min) / mean of the per-process counts.
    #[allow(clippy::cast_precision_loss)]
    fn spread(&self) -> f64 {
        let max = self.per_process.iter().max().copied().unwrap_or(0) as f64;
        let min = self.per_process.iter().min().copied().unwrap_or(0) as f64;
        let mean =
            self.per_process.iter().sum::<usize>() as f64 / self.per_process.len().max(1) as f64;
        if mean > 0.0 { (max - min) / mean } else { 0.0 }
    }

    fn to_json(&self) -> Value {
        json!({
            "client": self.client,
            "acquisitions": self.acquisitions,
            "per_process": self.per_process,
            "spread": self.spread(),
            "busy": self.busy,
            "mean_hold_ms": self.mean_hold_ms,
            "longest_wait_ms": ms(self.wait.max),
            "wait_p99_ms": ms(self.wait.p99),
            "handoff_gap_p50_ms": ms(self.gap.p50),
            "handoff_gap_p99_ms": ms(self.gap.p99),
            "overlaps": self.overlaps,
            "rounds_per_acquisition": self.rounds_per_acquisition,
            "cpu_us_per_acquisition": self.cpu_us_per_acquisition,
            "failed_releases": self.failed_releases,
        })
    }
}

#[allow(clippy::cast_precision_loss)]
fn print(figures: &[Figures], run: &Contention) {
    println!(
        "redquorum-lab contend: {} processes, one lock, holds of 0–{} ms, {} s, on {NODES} local masters (memory only)",
        run.processes,
        run.hold_max.as_secs_f64() * 1e3,
        run.seconds
    );
    println!(
        "  client          acquisitions   busy   per process (spread)                 longest wait   bound   wait p99   gap p50 / p99     rounds/acq   CPU/acq   overlaps"
    );
    for f in figures {
        // The fairness bound of the target: 2 × mean hold × the other waiters.
        let bound = 2.0 * f.mean_hold_ms * (run.processes.saturating_sub(1)) as f64;
        println!(
            "  {:<15} {:>12} {:>5.1}%   {:<28} ({:>4.1}%) {:>10.1} ms {:>5.1} ms {:>7.1} ms {:>6.2} / {:>5.2} ms {:>12} {:>9} {:>10}",
            f.client,
            f.acquisitions,
            f.busy * 100.0,
            format!("{:?}", f.per_process),
            f.spread() * 100.0,
            ms(f.wait.max),
            bound,
            ms(f.wait.p99),
            ms(f.gap.p50),
            ms(f.gap.p99),
            f.rounds_per_acquisition
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}")),
            f.cpu_us_per_acquisition
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.0} µs")),
            f.overlaps,
        );
    }
    for f in figures {
        if let Some(failed @ 1..) = f.failed_releases {
            println!(
                "  {}: {failed} releases failed; the lock lapsed by its ttl after each",
                f.client
            );
        }
    }
    if let [ours, theirs] = figures {
        let bound = 2.0 * ours.mean_hold_ms * (run.processes.saturating_sub(1)) as f64;
        println!(
            "  targets: acquisitions ≥ {}'s ({} vs {}): {}; busy ≥ {}'s: {}; per-process counts within 10% (spread {:.1}%): {}; longest wait ≤ bound ({:.1} ≤ {:.1} ms): {}",
            theirs.client,
            ours.acquisitions,
            theirs.acquisitions,
            verdict(ours.acquisitions >= theirs.acquisitions),
            theirs.client,
            verdict(ours.busy >= theirs.busy),
            ours.spread() * 100.0,
            verdict(ours.spread() <= 0.10),
            ms(ours.wait.max),
            bound,
            verdict(ms(ours.wait.max) <= bound),
        );
    }
}

/// The worker's arguments, as `contend` passes them (also to `--against` binaries).
#[derive(Debug, Clone)]
pub struct Worker {
    /// The masters' URLs.
    pub nodes: Vec<String>,
    /// This worker's number, for its warm-up resource.
    pub process: usize,
    /// When the window opens, on `CLOCK_MONOTONIC`.
    pub start_ns: u64,
    /// How long the window stays open.
    pub seconds: u64,
    /// Each hold lasts a random 0..=this many µs.
    pub hold_max_us: u64,
}

impl Worker {
    /// When the window closes, on `CLOCK_MONOTONIC`.
    pub(crate) fn end_ns(&self) -> u64 {
        self.start_ns
            .saturating_add(self.seconds.saturating_mul(1_000_000_000))
    }
}

/// The retry policy of an acquire asked at `asked`: rounds until it holds or the window
/// closes at `end_ns`.
pub(crate) fn until_window_closes(asked: u64, end_ns: u64) -> RetryPolicy {
    RetryPolicy::default()
        .max_attempts(None)
        .max_wait(Some(Duration::from_nanos(end_ns.saturating_sub(asked))))
}

/// One redquorum worker: waits for the window, takes the lock in a loop until it closes,
/// prints its turns as one JSON line.
///
/// # Errors
/// When the client cannot be built or an operation fails for any reason but the window
/// closing.
pub async fn worker(args: Worker) -> Result<u8, LabError> {
    let rl = RedLock::builder(&args.nodes)
        .per_node_timeout(Duration::from_millis(50))
        .build()?;
    // Connect (and load the scripts) before the window opens.
    rl.acquire(&format!("contend:warm-up:{}", args.process), TTL)
        .await?
        .release()
        .await?;
    let end_ns = args.end_ns();
    sleep_until_ns(args.start_ns).await?;
    let mut turns = Vec::new();
    let mut rounds = 0u64;
    let mut failed_releases = 0u64;
    loop {
        let asked = monotonic_ns()?;
        if asked >= end_ns {
            break;
        }
        let policy = until_window_closes(asked, end_ns);
        let lock = match rl.acquire_with(RESOURCE, TTL, &policy).await {
            Ok(lock) => lock,
            // Whatever the last round met (a holder, or masters too slow for the timeout on a
            // loaded machine), the window closed while waiting.
            Err(_) if monotonic_ns()? >= end_ns => break,
            Err(e) => return Err(e.into()),
        };
        let acquired = monotonic_ns()?;
        rounds += u64::from(lock.attempts());
        let hold = rand::rng().random_range(0..=args.hold_max_us);
        tokio::time::sleep(Duration::from_micros(hold)).await;
        let released = monotonic_ns()?;
        // A release that fails (masters slower than the 50 ms timeout on a loaded machine)
        // leaves the lock to lapse by its ttl: the next holder waits longer, which the figures
        // show, and no overlap can come of it. Counted, not fatal, as a Redlock client's
        // user would treat it (rslock's unlock does not even report it).
        if let Err(e) = lock.release().await {
            if failed_releases == 0 {
                eprintln!("redquorum-lab: contend worker {}: {e}", args.process);
            }
            failed_releases += 1;
        }
        turns.push([asked, acquired, released]);
    }
    rl.settle(Duration::from_secs(5)).await;
    println!(
        "{}",
        json!({ "turns": turns, "rounds": rounds, "failed_releases": failed_releases })
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(process: usize, acquired: u64, released: u64) -> Turn {
        Turn {
            process,
            asked: acquired.saturating_sub(5),
            acquired,
            released,
        }
    }

    #[test]
    fn figures_count_busy_time_overlaps_and_spread() {
        let turns = vec![
            turn(0, 10, 30),
            turn(1, 30, 50),
            turn(0, 45, 60), // acquired before 1 called release: an overlap
            turn(1, 70, 90),
        ];
        let f = Figures::of("x", turns, 2, (0, 100), Some(8));
        assert_eq!(f.acquisitions, 4);
        assert_eq!(f.per_process, [2, 2]);
        assert_eq!(f.overlaps, 1);
        assert!((f.busy - 0.75).abs() < 1e-9, "{}", f.busy);
        assert_eq!(f.wait.max, Duration::from_nanos(5));
        assert_eq!(f.rounds_per_acquisition, Some(2.0));
        assert!(f.spread().abs() < 1e-9);
    }
}
