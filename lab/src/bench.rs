//! `redquorum-lab bench`: the performance table. Every figure is printed next to a baseline
//! measured in the same run on the same five masters, and each target of the project is
//! checked against the ratios of this run, never against absolute times from elsewhere.
//!
//! The masters are started by the bench itself, memory-only (no AOF, no snapshots: the client
//! is measured, not the disk), on free ports, and stopped at the end.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redquorum::RedLock;
use serde_json::{Value, json};

use crate::cpu::Meter;
use crate::error::LabError;
use crate::report::{Spread, ms, sayer, show, us, verdict};
use crate::stop::{StopSignals, exit_code};
use redquorum_testkit::DevCluster;
use redquorum_testkit::baseline::{Baseline, TTL};

const NODES: usize = 5;
/// The per-node timeout of every client in the bench.
const NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// The master that is SIGSTOPped for the hung-master figures.
const HUNG: usize = 4;

/// How much of each measurement to take.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    sequential: usize,
    throughput_for: Duration,
    handoff_rounds: usize,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                sequential: 300,
                throughput_for: Duration::from_millis(700),
                handoff_rounds: 15,
            }
        } else {
            Self {
                sequential: 2000,
                throughput_for: Duration::from_secs(3),
                handoff_rounds: 50,
            }
        }
    }
}

/// Runs every measurement and prints the table (`--json`: the figures as JSON on stdout, the
/// table on stderr). SIGINT, SIGTERM or SIGHUP stop it early; its masters are stopped on every
/// way out.
///
/// Returns the exit code: 0, or 128 + N when stopped by signal N.
///
/// # Errors
/// When the masters cannot be started or a measurement fails.
pub async fn bench(
    quick: bool,
    counts: bool,
    against: Option<&Path>,
    as_json: bool,
) -> Result<u8, LabError> {
    let mut signals = StopSignals::listen()?;
    let dir = std::env::temp_dir().join(format!("redquorum-bench-{}", std::process::id()));
    let kind = redquorum_testkit::ServerKind::for_dev()
        .map_err(LabError::new)?
        .unwrap_or(redquorum_testkit::ServerKind::Redis);
    let cluster =
        tokio::task::spawn_blocking(move || DevCluster::start_memory_only(dir, NODES, kind))
            .await
            .map_err(|e| LabError::new(e.to_string()))??;
    let measured = async {
        if counts {
            count_all(&cluster, Sizes::new(quick), as_json).await
        } else {
            measure(&cluster, Sizes::new(quick), against, as_json).await
        }
    };
    let result = tokio::select! {
        result = measured => Ok(result),
        signal = signals.recv() => Err(signal),
    };
    // Every node runs again before it is stopped: a paused one would not hear SIGTERM.
    let _ = cluster.resume(HUNG);
    cluster.down()?;
    let figures = match result {
        Ok(figures) => figures?,
        Err(signal) => return Ok(exit_code(signal)),
    };
    if as_json {
        println!("{figures:#}");
    }
    Ok(0)
}

async fn measure(
    cluster: &DevCluster,
    sizes: Sizes,
    against: Option<&Path>,
    as_json: bool,
) -> Result<Value, LabError> {
    let say = sayer(as_json);
    let urls = cluster.urls();
    let pids: Vec<u32> = cluster.nodes.iter().filter_map(|n| n.pid()).collect();
    let baseline = Baseline::connect(&urls).await.map_err(failed)?;
    let rl = client(&urls, |b| b)?;
    // The same, told to use scripts only: what the servers' own commands gain, in this run.
    let scripts = client(&urls, |b| b.native_commands(false))?;
    say(format!(
        "redquorum-lab bench: {NODES} local {} masters (memory only), {} CPUs, per-node \
         timeout {} ms.\nEvery ratio is redquorum / the raw baseline of this same run (the raw \
         baseline: SET NX PX to all, wait for a majority, compare-and-delete on all).\n",
        cluster.kind().program(),
        std::thread::available_parallelism().map_or(0, usize::from),
        NODE_TIMEOUT.as_millis()
    ));
    let sequential = sequential(&baseline, (&rl, &scripts), sizes.sequential).await?;
    sequential.print(&say);
    let throughput = throughput(&baseline, (&rl, &scripts), &pids, sizes.throughput_for).await?;
    print_throughput(&throughput, sizes.throughput_for, &say);
    let other = match (against, throughput.last()) {
        (Some(bin), Some(last)) => {
            let other = other_client(bin, &urls, &pids, last.tasks, sizes.throughput_for).await?;
            other.print(last, &say);
            Some(other)
        }
        _ => None,
    };
    let round_trip = sequential.baseline_acquire.p50;
    let mut handoffs = Vec::new();
    // The tasks of one client, woken by release messages or by timed retries only; then a
    // client per task (as waiters on separate hosts: the nodes hand the lock over), without
    // and with fencing (every election, every `redquorum run --wait`: a fenced release hands
    // a fenced waiter its own lock, which it confirms).
    for (pubsub, fenced, per_task) in [
        (true, false, false),
        (false, false, false),
        (true, false, true),
        (true, true, true),
    ] {
        let clients = (0..if per_task { 8 } else { 1 })
            .map(|_| client(&urls, |b| b.wait_for_release(pubsub).fencing(fenced)))
            .collect::<Result<Vec<_>, _>>()?;
        if fenced {
            // Every slot seeded first, as in a running deployment: each client's first fenced
            // acquire then finds the masters' records and sweeps nothing (a first sweep of
            // every slot would be measured instead of the hand-off).
            clients[0].seed_fencing().await.map_err(failed)?;
        }
        let run = hand_off(&clients, (pubsub, fenced), 8, sizes.handoff_rounds).await?;
        handoffs.push(run);
    }
    print_handoff(&handoffs, sizes.handoff_rounds, round_trip, &say);
    let fencing = fencing(&rl, &urls, sizes.sequential / 2).await?;
    fencing.print(&say);
    let read_write = read_write(&rl, sizes.sequential / 2, sizes.throughput_for).await?;
    read_write.print(&say);
    let hung = hung_master(&rl, cluster, sizes.sequential).await?;
    hung.print(&say);
    Ok(json!({
        "nodes": NODES,
        "per_node_timeout_ms": ms(NODE_TIMEOUT),
        "sequential": sequential.to_json(),
        "throughput": throughput.iter().map(Throughput::to_json).collect::<Vec<_>>(),
        "against": other.as_ref().map(|o| o.to_json(throughput.last())),
        "round_trip_us": us(round_trip),
        "handoff": handoffs.iter().map(Handoff::to_json).collect::<Vec<_>>(),
        "fencing": fencing.to_json(),
        "read_write": read_write.to_json(),
        "hung_master": hung.to_json(),
    }))
}

/// `--counts`: the work per pair of the baseline, redquorum and redquorum with scripts only,
/// each counted on its own (`crate::counts`).
async fn count_all(cluster: &DevCluster, sizes: Sizes, as_json: bool) -> Result<Value, LabError> {
    use crate::counts::{Side, count, print};
    let say = sayer(as_json);
    let urls = cluster.urls();
    let pairs = sizes.sequential / 2;
    say(format!(
        "redquorum-lab bench --counts: {NODES} local {} masters (memory only), per-node timeout \
         {} ms.\n",
        cluster.kind().program(),
        NODE_TIMEOUT.as_millis()
    ));
    let baseline = Side::Baseline(Baseline::connect(&urls).await.map_err(failed)?);
    let rl = Side::RedQuorum(client(&urls, |b| b)?, "default");
    let scripts = Side::RedQuorum(client(&urls, |b| b.native_commands(false))?, "scripts");
    let mut runs = Vec::new();
    for tasks in [1, 64] {
        let pairs = if tasks == 1 { pairs } else { pairs * 4 };
        let raw = count(&baseline, &urls, pairs, tasks).await?;
        let ours = count(&rl, &urls, pairs, tasks).await?;
        let scripts_only = count(&scripts, &urls, pairs, tasks).await?;
        let pairs = pairs / tasks * tasks;
        print(
            &[
                ("raw baseline", &raw),
                ("redquorum", &ours),
                ("scripts only", &scripts_only),
            ],
            (pairs, tasks),
            &say,
        );
        runs.push(json!({
            "tasks": tasks,
            "pairs": pairs,
            "baseline": raw.to_json(),
            "redquorum": ours.to_json(),
            "scripts_only": scripts_only.to_json(),
        }));
    }
    Ok(json!({
        "nodes": NODES,
        "server": cluster.kind().program(),
        "counts": runs,
    }))
}

fn client(
    urls: &[String],
    configure: impl FnOnce(redquorum::Builder) -> redquorum::Builder,
) -> Result<RedLock, LabError> {
    configure(RedLock::builder(urls).per_node_timeout(NODE_TIMEOUT))
        .build()
        .map_err(|e| LabError::new(e.to_string()))
}

/// One uncontended acquire+release of `resource` by `rl`: the pair every measurement of
/// redquorum runs.
pub(crate) async fn pair(rl: &RedLock, resource: String) -> Result<(), redquorum::Error> {
    rl.try_acquire(resource, TTL).await?.release().await?;
    Ok(())
}

fn failed(e: impl std::fmt::Display) -> LabError {
    LabError::new(format!("bench: {e}"))
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// Uncontended acquire+release, one after the other, the three clients interleaved.
struct Sequential {
    pairs: usize,
    baseline: Spread,
    baseline_acquire: Spread,
    ours: Spread,
    /// Redquorum told to use scripts only (`Builder::native_commands(false)`).
    scripts: Spread,
}

async fn sequential(
    baseline: &Baseline,
    (rl, scripts_only): (&RedLock, &RedLock),
    pairs: usize,
) -> Result<Sequential, LabError> {
    let warm_up = pairs / 10;
    let (mut base, mut base_acquire, mut ours) = (Vec::new(), Vec::new(), Vec::new());
    let mut scripts = Vec::new();
    for i in 0..pairs + warm_up {
        let t = Instant::now();
        let acquired = baseline
            .pair("redquorum:{bench:seq:raw}")
            .await
            .map_err(failed)?;
        let b = t.elapsed();
        let t = Instant::now();
        pair(rl, "bench:seq".to_owned()).await.map_err(failed)?;
        let o = t.elapsed();
        let t = Instant::now();
        pair(scripts_only, "bench:seq:scripts".to_owned())
            .await
            .map_err(failed)?;
        let s = t.elapsed();
        if i >= warm_up {
            base.push(b);
            base_acquire.push(acquired);
            ours.push(o);
            scripts.push(s);
        }
    }
    Ok(Sequential {
        pairs,
        baseline: Spread::of(base),
        baseline_acquire: Spread::of(base_acquire),
        ours: Spread::of(ours),
        scripts: Spread::of(scripts),
    })
}

impl Sequential {
    fn print(&self, say: &impl Fn(String)) {
        let (p50, p99) = (
            ratio(self.ours.p50, self.baseline.p50),
            ratio(self.ours.p99, self.baseline.p99),
        );
        say(format!(
            "acquire+release, uncontended, {} pairs one after another     p50        p99        max",
            self.pairs
        ));
        say(self.baseline.row("raw baseline"));
        say(self.ours.row("redquorum"));
        say(format!("  {:<38} {p50:>10.2} {p99:>10.2}", "ratio"));
        say(self.scripts.row("redquorum, scripts only"));
        say(format!(
            "  {:<38} {:>10.2} {:>10.2}",
            "ratio",
            ratio(self.scripts.p50, self.baseline.p50),
            ratio(self.scripts.p99, self.baseline.p99)
        ));
        say(format!(
            "  targets: p50 ≤ 1.05 × baseline: {}; p99 ≤ 1.25 ×: {}\n",
            verdict(p50 <= 1.05),
            verdict(p99 <= 1.25)
        ));
    }

    fn to_json(&self) -> Value {
        json!({
            "pairs": self.pairs,
            "baseline": self.baseline.to_json(),
            "redquorum": self.ours.to_json(),
            "p50_ratio": ratio(self.ours.p50, self.baseline.p50),
            "p99_ratio": ratio(self.ours.p99, self.baseline.p99),
            "scripts_only": self.scripts.to_json(),
            "scripts_only_p50_ratio": ratio(self.scripts.p50, self.baseline.p50),
        })
    }
}

/// Pairs per second with some tasks on distinct resources, and where the CPU went.
struct Throughput {
    tasks: usize,
    baseline: Rate,
    ours: Rate,
    /// Redquorum told to use scripts only.
    scripts: Rate,
}

struct Rate {
    pairs_per_s: f64,
    client_us_per_pair: f64,
    servers_us_per_pair: f64,
}

impl Rate {
    fn to_json(&self) -> Value {
        json!({
            "pairs_per_s": self.pairs_per_s,
            "client_cpu_us_per_pair": self.client_us_per_pair,
            "servers_cpu_us_per_pair": self.servers_us_per_pair,
        })
    }
}

impl Throughput {
    fn ratio(&self) -> f64 {
        self.ours.pairs_per_s / self.baseline.pairs_per_s.max(f64::MIN_POSITIVE)
    }

    fn scripts_ratio(&self) -> f64 {
        self.scripts.pairs_per_s / self.baseline.pairs_per_s.max(f64::MIN_POSITIVE)
    }

    fn to_json(&self) -> Value {
        json!({
            "tasks": self.tasks,
            "baseline": self.baseline.to_json(),
            "redquorum": self.ours.to_json(),
            "ratio": self.ratio(),
            "scripts_only": self.scripts.to_json(),
            "scripts_only_ratio": self.scripts_ratio(),
        })
    }
}

async fn throughput(
    baseline: &Baseline,
    (rl, scripts_only): (&RedLock, &RedLock),
    pids: &[u32],
    duration: Duration,
) -> Result<Vec<Throughput>, LabError> {
    let mut rows = Vec::new();
    for tasks in [1usize, 16, 64] {
        let base = {
            let baseline = baseline.clone();
            rate(tasks, duration, pids, move |task| {
                let baseline = baseline.clone();
                async move {
                    baseline
                        .pair(&format!("redquorum:{{bench:raw:{task}}}"))
                        .await
                        .is_ok()
                }
            })
            .await
        };
        let ours_with = |rl: &RedLock| {
            let rl = rl.clone();
            rate(tasks, duration, pids, move |task| {
                let rl = rl.clone();
                async move { pair(&rl, format!("bench:tp:{task}")).await.is_ok() }
            })
        };
        let ours = ours_with(rl).await;
        let scripts = ours_with(scripts_only).await;
        rows.push(Throughput {
            tasks,
            baseline: base,
            ours,
            scripts,
        });
    }
    Ok(rows)
}

/// `tasks` tasks run `pair` (given the task's number) back to back for `duration`: how many
/// pairs succeeded, and how long that took.
pub(crate) async fn pairs_for<F, Fut>(tasks: usize, duration: Duration, pair: F) -> (u64, Duration)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let started = Instant::now();
    let until = started + duration;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let pair = pair.clone();
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < until {
                    if pair(task).await {
                        done += 1;
                    }
                }
                done
            })
        })
        .collect();
    let mut done = 0u64;
    for h in handles {
        done += h.await.unwrap_or(0);
    }
    (done, started.elapsed())
}

/// `tasks` tasks run `pair` back to back for `duration`.
async fn rate<F, Fut>(tasks: usize, duration: Duration, pids: &[u32], pair: F) -> Rate
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let meter = Meter::start(pids);
    let (done, elapsed) = pairs_for(tasks, duration, pair).await;
    let (client, servers) = meter.stop();
    #[allow(clippy::cast_precision_loss)]
    let pairs = (done as f64).max(1.0);
    Rate {
        pairs_per_s: pairs / elapsed.as_secs_f64(),
        client_us_per_pair: us(client) / pairs,
        servers_us_per_pair: us(servers) / pairs,
    }
}

fn print_throughput(rows: &[Throughput], each: Duration, say: &impl Fn(String)) {
    say(format!(
        "throughput, distinct resources, {:.1} s each   pairs/s: raw  redquorum  ratio  scripts only  ratio    CPU µs/pair (client + servers): raw  redquorum  scripts only",
        each.as_secs_f64()
    ));
    for row in rows {
        say(format!(
            "  {:>2} task{}                               {:>9.0} {:>10.0} {:>6.2} {:>13.0} {:>6.2}        {:>6.1} + {:<6.1}  {:>6.1} + {:<6.1}  {:>6.1} + {:<6.1}",
            row.tasks,
            if row.tasks == 1 { " " } else { "s" },
            row.baseline.pairs_per_s,
            row.ours.pairs_per_s,
            row.ratio(),
            row.scripts.pairs_per_s,
            row.scripts_ratio(),
            row.baseline.client_us_per_pair,
            row.baseline.servers_us_per_pair,
            row.ours.client_us_per_pair,
            row.ours.servers_us_per_pair,
            row.scripts.client_us_per_pair,
            row.scripts.servers_us_per_pair,
        ));
    }
    if let Some(last) = rows.last() {
        say(format!(
            "  target: ≥ 0.95 × baseline at {} tasks: {}\n",
            last.tasks,
            verdict(last.ratio() >= 0.95)
        ));
    }
}

/// Redquorum's throughput target against rslock 0.10 (issue 33): at 64 tasks, this many
/// times rslock's pairs per second on the same masters.
const AGAINST_RSLOCK: f64 = 1.3;

/// Another client's throughput row (`--against BIN`), measured right after redquorum's
/// last row on the same masters.
struct OtherClient {
    name: String,
    tasks: usize,
    rate: Rate,
}

/// Runs `bin --pairs` (`lab/rslock-contender`'s mode) for `duration` with `tasks` tasks on
/// the masters `urls`, measuring the servers' CPU meanwhile; the client's CPU is the one
/// `bin` reports for its own interval. The child is killed if this future is dropped.
///
/// # Cancel safety
/// Cancel safe: dropping it kills the child (`kill_on_drop`).
async fn other_client(
    bin: &Path,
    urls: &[String],
    pids: &[u32],
    tasks: usize,
    duration: Duration,
) -> Result<OtherClient, LabError> {
    let meter = Meter::start(pids);
    let output = tokio::process::Command::new(bin)
        .args(["--pairs", "--nodes", &urls.join(",")])
        .args(["--tasks", &tasks.to_string()])
        .args(["--millis", &duration.as_millis().to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| failed(format!("{}: {e}", bin.display())))?;
    let (_, servers) = meter.stop();
    let line: Value = serde_json::from_slice(&output.stdout).map_err(|e| {
        failed(format!(
            "{} ({}) printed no figures: {e}",
            bin.display(),
            output.status
        ))
    })?;
    let number = |field: &str| {
        line[field]
            .as_f64()
            .ok_or_else(|| failed(format!("{}: no `{field}` in {line}", bin.display())))
    };
    let (pairs, elapsed_s, cpu_s) = (number("pairs")?, number("elapsed_s")?, number("cpu_s")?);
    let pairs_done = pairs.max(1.0);
    Ok(OtherClient {
        name: bin
            .file_stem()
            .map_or_else(|| "other".to_owned(), |s| s.to_string_lossy().into_owned()),
        tasks,
        rate: Rate {
            pairs_per_s: pairs / elapsed_s.max(f64::MIN_POSITIVE),
            client_us_per_pair: cpu_s * 1e6 / pairs_done,
            servers_us_per_pair: us(servers) / pairs_done,
        },
    })
}

impl OtherClient {
    /// Redquorum's pairs per second over this client's, in `ours`'s row.
    fn ratio(&self, ours: &Throughput) -> f64 {
        ours.ours.pairs_per_s / self.rate.pairs_per_s.max(f64::MIN_POSITIVE)
    }

    fn print(&self, ours: &Throughput, say: &impl Fn(String)) {
        say(format!(
            "  {:>2} tasks, {} (after redquorum, same masters): {:.0} pairs/s, CPU µs/pair \
             {:.1} + {:.1}\n  redquorum / {}: {:.2} (raw baseline / {}: {:.2}); target: \
             ≥ {AGAINST_RSLOCK} × rslock: {}\n",
            self.tasks,
            self.name,
            self.rate.pairs_per_s,
            self.rate.client_us_per_pair,
            self.rate.servers_us_per_pair,
            self.name,
            self.ratio(ours),
            self.name,
            ours.baseline.pairs_per_s / self.rate.pairs_per_s.max(f64::MIN_POSITIVE),
            verdict(self.ratio(ours) >= AGAINST_RSLOCK)
        ));
    }

    fn to_json(&self, ours: Option<&Throughput>) -> Value {
        json!({
            "client": self.name,
            "tasks": self.tasks,
            "rate": self.rate.to_json(),
            "redquorum_ratio": ours.map(|o| self.ratio(o)),
        })
    }
}

/// What one hand-off run measured.
struct Handoff {
    pubsub: bool,
    fenced: bool,
    /// Each task had a client of its own.
    per_task: bool,
    tasks: usize,
    total: Duration,
    /// From a holder's call to release to the next holder's acquire returning.
    gap: Spread,
    wasted_rounds: f64,
    /// Jain's index over each task's total time spent waiting.
    fairness: f64,
    longest_wait: Duration,
}

impl Handoff {
    /// How its waiters waited.
    fn waiting(&self) -> &'static str {
        match (self.pubsub, self.fenced, self.per_task) {
            (true, false, false) => "release messages",
            (false, false, false) => "timed retries only",
            (true, false, true) => "clients: messages",
            (true, true, true) => "clients: fenced",
            _ => "other",
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "waiting": self.waiting(),
            "tasks": self.tasks,
            "total_ms": ms(self.total),
            "handoff": self.gap.to_json(),
            "wasted_rounds_per_acquisition": self.wasted_rounds,
            "fairness": self.fairness,
            "longest_wait_ms": ms(self.longest_wait),
        })
    }
}

/// One acquisition in a hand-off run.
struct Turn {
    task: usize,
    asked: Instant,
    acquired: Instant,
    release_called: Instant,
    rounds: u32,
}

/// `tasks` tasks each take one resource `rounds` times, with zero hold time, through
/// `clients` (task `i` through client `i` modulo their number).
async fn hand_off(
    clients: &[RedLock],
    (pubsub, fenced): (bool, bool),
    tasks: usize,
    rounds: usize,
) -> Result<Handoff, LabError> {
    let turns = Arc::new(Mutex::new(Vec::<Turn>::new()));
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (rl, turns) = (clients[task % clients.len()].clone(), turns.clone());
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let asked = Instant::now();
                    let lock = rl
                        .acquire_within("bench:handoff", TTL, Duration::from_secs(60))
                        .await?;
                    let acquired = Instant::now();
                    let rounds = lock.attempts();
                    let release_called = Instant::now();
                    lock.release().await?;
                    if let Ok(mut turns) = turns.lock() {
                        turns.push(Turn {
                            task,
                            asked,
                            acquired,
                            release_called,
                            rounds,
                        });
                    }
                }
                Ok::<_, redquorum::Error>(())
            })
        })
        .collect();
    for h in handles {
        h.await.map_err(failed)?.map_err(failed)?;
    }
    let total = started.elapsed();
    let mut turns = std::mem::take(&mut *turns.lock().map_err(failed)?);
    turns.sort_by_key(|t| t.acquired);
    let gaps = turns
        .windows(2)
        .filter_map(|w| match w {
            [before, after] => Some(
                after
                    .acquired
                    .saturating_duration_since(before.release_called),
            ),
            _ => None,
        })
        .collect();
    let count = turns.len().max(1);
    #[allow(clippy::cast_precision_loss)]
    let wasted_rounds = turns
        .iter()
        .map(|t| f64::from(t.rounds.saturating_sub(1)))
        .sum::<f64>()
        / count as f64;
    let mut per_task = vec![0.0f64; tasks];
    for t in &turns {
        if let Some(slot) = per_task.get_mut(t.task) {
            *slot += t.acquired.duration_since(t.asked).as_secs_f64();
        }
    }
    Ok(Handoff {
        pubsub,
        fenced,
        per_task: clients.len() > 1,
        tasks,
        total,
        gap: Spread::of(gaps),
        wasted_rounds,
        fairness: jain(&per_task),
        longest_wait: turns
            .iter()
            .map(|t| t.acquired.duration_since(t.asked))
            .max()
            .unwrap_or_default(),
    })
}

/// Jain's fairness index: 1 when every value is equal, 1/n when one value holds everything.
fn jain(values: &[f64]) -> f64 {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    #[allow(clippy::cast_precision_loss)]
    let n = values.len() as f64;
    if squares > 0.0 {
        sum * sum / (n * squares)
    } else {
        1.0
    }
}

fn print_handoff(runs: &[Handoff], rounds: usize, round_trip: Duration, say: &impl Fn(String)) {
    let tasks = runs.first().map_or(0, |r| r.tasks);
    say(format!(
        "hand-off: {tasks} tasks × {rounds} acquisitions of one resource, zero hold time"
    ));
    say(
        "  waiting                  total   hand-off p50   hand-off p99   wasted rounds/acq   fairness   longest wait"
            .to_owned(),
    );
    for run in runs {
        say(format!(
            "  {:<20} {:>9} {:>14} {:>14} {:>19.2} {:>10.2} {:>14}",
            run.waiting(),
            show(run.total),
            show(run.gap.p50),
            show(run.gap.p99),
            run.wasted_rounds,
            run.fairness,
            show(run.longest_wait),
        ));
    }
    say(
        "  hand-off: from the holder's call to release to the next holder's acquire returning"
            .to_owned(),
    );
    say("  fairness: Jain's index over each task's total wait (1: all waited alike; 1/8: one task did all the waiting)".to_owned());
    say("  clients: a client per task, as on separate hosts (the nodes hand the lock over; fenced: with the fencing token's confirmation)".to_owned());
    if let [messages, timed, ..] = runs {
        let speedup = ratio(timed.total, messages.total);
        say(format!(
            "  one round trip to a majority (the raw baseline's SET NX PX, p50): {}",
            show(round_trip)
        ));
        say(format!(
            "  targets: hand-off p50 within 2 round trips of the release ({} ≤ {}): {}; total ≥ 5 × faster than timed retries ({speedup:.1} ×): {}\n",
            show(messages.gap.p50),
            show(round_trip * 2),
            verdict(messages.gap.p50 <= round_trip * 2),
            verdict(speedup >= 5.0)
        ));
    }
}

/// The cost of the fencing token's second round.
struct Fencing {
    off: Spread,
    on: Spread,
}

async fn fencing(rl: &RedLock, urls: &[String], samples: usize) -> Result<Fencing, LabError> {
    let fenced = client(urls, |b| b.fencing(true))?;
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        let t = Instant::now();
        let lock = rl
            .try_acquire("bench:fence-off", TTL)
            .await
            .map_err(failed)?;
        off.push(t.elapsed());
        lock.release().await.map_err(failed)?;
        let t = Instant::now();
        let lock = fenced
            .try_acquire("bench:fence-on", TTL)
            .await
            .map_err(failed)?;
        on.push(t.elapsed());
        lock.release().await.map_err(failed)?;
    }
    Ok(Fencing {
        off: Spread::of(off),
        on: Spread::of(on),
    })
}

impl Fencing {
    fn print(&self, say: &impl Fn(String)) {
        say("acquire alone, fencing off vs on                              p50        p99        max".to_owned());
        say(self.off.row("off"));
        say(self.on.row("on (one more round trip)"));
        say(format!(
            "  the fencing token costs {} at p50\n",
            show(self.on.p50.saturating_sub(self.off.p50))
        ));
    }

    fn to_json(&self) -> Value {
        json!({"off": self.off.to_json(), "on": self.on.to_json()})
    }
}

/// A read-write lock's pairs next to the lock's, in this run: uncontended pairs one after the
/// other, then 64 tasks on one resource: readers (which must not serialise) against the lock's
/// pairs on 64 distinct resources (the same work with no contention at all) and on one
/// resource (serialised: one holder at a time).
struct ReadWrite {
    lock: Spread,
    read: Spread,
    write: Spread,
    tasks: usize,
    readers_per_s: f64,
    distinct_locks_per_s: f64,
    one_lock_per_s: f64,
}

async fn read_write(rl: &RedLock, samples: usize, each: Duration) -> Result<ReadWrite, LabError> {
    let rw = rl.rw_lock("bench:rw").map_err(failed)?;
    let (mut lock, mut read, mut write) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..samples {
        let t = Instant::now();
        pair(rl, "bench:rw-lock".to_owned()).await.map_err(failed)?;
        lock.push(t.elapsed());
        let t = Instant::now();
        rw.try_read(TTL)
            .await
            .map_err(failed)?
            .release()
            .await
            .map_err(failed)?;
        read.push(t.elapsed());
        let t = Instant::now();
        rw.try_write(TTL)
            .await
            .map_err(failed)?
            .release()
            .await
            .map_err(failed)?;
        write.push(t.elapsed());
    }
    const TASKS: usize = 64;
    let shared = rl.rw_lock("bench:rw-shared").map_err(failed)?;
    let (reads, elapsed) = pairs_for(TASKS, each, move |_| {
        let shared = shared.clone();
        async move {
            match shared.try_read(TTL).await {
                Ok(lock) => lock.release().await.is_ok(),
                Err(_) => false,
            }
        }
    })
    .await;
    let distinct = rl.clone();
    let (locks, lock_elapsed) = pairs_for(TASKS, each, move |task| {
        let rl = distinct.clone();
        async move { pair(&rl, format!("bench:rw-distinct:{task}")).await.is_ok() }
    })
    .await;
    let one = rl.clone();
    let (held, one_elapsed) = pairs_for(TASKS, each, move |_| {
        let rl = one.clone();
        async move { pair(&rl, "bench:rw-one".to_owned()).await.is_ok() }
    })
    .await;
    #[allow(clippy::cast_precision_loss)]
    Ok(ReadWrite {
        lock: Spread::of(lock),
        read: Spread::of(read),
        write: Spread::of(write),
        tasks: TASKS,
        readers_per_s: reads as f64 / elapsed.as_secs_f64(),
        distinct_locks_per_s: locks as f64 / lock_elapsed.as_secs_f64(),
        one_lock_per_s: held as f64 / one_elapsed.as_secs_f64(),
    })
}

impl ReadWrite {
    fn print(&self, say: &impl Fn(String)) {
        say("read-write lock, pairs one after the other                    p50        p99        max".to_owned());
        say(self.lock.row("lock (acquire + release)"));
        say(self.read.row("read lock"));
        say(self.write.row("write lock"));
        say(format!(
            "  a read costs {} over a lock at p50 ({:.2}×), a write {} ({:.2}×)",
            show(self.read.p50.saturating_sub(self.lock.p50)),
            ratio(self.read.p50, self.lock.p50),
            show(self.write.p50.saturating_sub(self.lock.p50)),
            ratio(self.write.p50, self.lock.p50),
        ));
        say(format!(
            "  {} tasks, pairs/s: readers of one resource {:.0}; the lock on {} distinct \
             resources {:.0} ({:.2}× of it); the lock on one resource {:.0} (serialised)\n",
            self.tasks,
            self.readers_per_s,
            self.tasks,
            self.distinct_locks_per_s,
            self.readers_per_s / self.distinct_locks_per_s.max(f64::MIN_POSITIVE),
            self.one_lock_per_s,
        ));
    }

    fn to_json(&self) -> Value {
        json!({
            "lock": self.lock.to_json(),
            "read": self.read.to_json(),
            "write": self.write.to_json(),
            "tasks": self.tasks,
            "readers_of_one_resource_per_s": self.readers_per_s,
            "locks_on_distinct_resources_per_s": self.distinct_locks_per_s,
            "locks_on_one_resource_per_s": self.one_lock_per_s,
        })
    }
}

/// Acquire latency with one master SIGSTOPped, against the same measurement healthy; then
/// acquire+release pairs, the release's latency and the pairs' total time.
struct HungMaster {
    samples: usize,
    healthy: Spread,
    hung: Spread,
    release_healthy: Spread,
    release_hung: Spread,
    pairs_healthy: Duration,
    pairs_hung: Duration,
}

/// Back to back on distinct resources, each lock dropped (released in the background), so
/// both phases run at the same pace. Releasing inline would wait out the hung master's
/// timeout after every acquire, and the idle machine between acquires then costs more than
/// the hung master does (measured: 410 µs p50 paced vs 120 µs back to back, healthy or not).
async fn hung_master(
    rl: &RedLock,
    cluster: &DevCluster,
    samples: usize,
) -> Result<HungMaster, LabError> {
    let run = |phase: &'static str| async move {
        let mut v = Vec::with_capacity(samples);
        for i in 0..samples {
            let t = Instant::now();
            let lock = rl
                .try_acquire(format!("bench:hung:{phase}:{i}"), TTL)
                .await
                .map_err(failed)?;
            v.push(t.elapsed());
            drop(lock);
        }
        Ok::<_, LabError>(Spread::of(v))
    };
    // Acquire and release inline, one pair after the other: each release's own latency, and
    // the time all pairs took.
    let pairs = |phase: &'static str| async move {
        let mut v = Vec::with_capacity(samples);
        let start = Instant::now();
        for i in 0..samples {
            let lock = rl
                .try_acquire(format!("bench:hung-pairs:{phase}:{i}"), TTL)
                .await
                .map_err(failed)?;
            let t = Instant::now();
            lock.release().await.map_err(failed)?;
            v.push(t.elapsed());
        }
        Ok::<_, LabError>((Spread::of(v), start.elapsed()))
    };
    let healthy = run("healthy").await?;
    let (release_healthy, pairs_healthy) = pairs("healthy").await?;
    cluster.pause(HUNG)?;
    let hung = run("hung").await;
    let hung_pairs = pairs("hung").await;
    cluster.resume(HUNG)?;
    // The background releases finish once the node answers again.
    tokio::time::sleep(NODE_TIMEOUT * 4).await;
    let (release_hung, pairs_hung) = hung_pairs?;
    Ok(HungMaster {
        samples,
        healthy,
        hung: hung?,
        release_healthy,
        release_hung,
        pairs_healthy,
        pairs_hung,
    })
}

impl HungMaster {
    fn print(&self, say: &impl Fn(String)) {
        let p99 = ratio(self.hung.p99, self.healthy.p99);
        say(format!(
            "acquire alone, {} back to back, master {HUNG} SIGSTOPped             p50        p99        max",
            self.samples
        ));
        say(self.healthy.row("healthy"));
        say(self.hung.row(&format!("master {HUNG} hung")));
        say(format!(
            "  targets: hung p99 ≤ 1.5 × healthy p99 ({p99:.2} ×): {}; max ≤ per-node timeout + 5 ms ({} ≤ {}): {}",
            verdict(p99 <= 1.5),
            show(self.hung.max),
            show(NODE_TIMEOUT + Duration::from_millis(5)),
            verdict(self.hung.max <= NODE_TIMEOUT + Duration::from_millis(5))
        ));
        let release_p99 = ratio(self.release_hung.p99, self.release_healthy.p99);
        say(format!(
            "release of acquire+release pairs, {} one after the other, master {HUNG} SIGSTOPped   p50        p99        max",
            self.samples
        ));
        say(self.release_healthy.row("healthy"));
        say(self.release_hung.row(&format!("master {HUNG} hung")));
        say(format!(
            "  all pairs: {:.2} s healthy, {:.2} s hung; targets: hung release p99 ≤ 2 × healthy p99 ({release_p99:.2} ×): {}; pairs as fast as healthy ({:.2} ×)",
            self.pairs_healthy.as_secs_f64(),
            self.pairs_hung.as_secs_f64(),
            verdict(release_p99 <= 2.0),
            self.pairs_hung.as_secs_f64() / self.pairs_healthy.as_secs_f64().max(f64::EPSILON),
        ));
    }

    fn to_json(&self) -> Value {
        json!({
            "samples": self.samples,
            "healthy": self.healthy.to_json(),
            "hung": self.hung.to_json(),
            "p99_ratio": ratio(self.hung.p99, self.healthy.p99),
            "release_healthy": self.release_healthy.to_json(),
            "release_hung": self.release_hung.to_json(),
            "release_p99_ratio": ratio(self.release_hung.p99, self.release_healthy.p99),
            "pairs_healthy_s": self.pairs_healthy.as_secs_f64(),
            "pairs_hung_s": self.pairs_hung.as_secs_f64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_equal_waits_and_one_over_n_for_one_waiter() {
        assert!((jain(&[2.0, 2.0, 2.0, 2.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[5.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        assert!((jain(&[0.0, 0.0]) - 1.0).abs() < 1e-12);
    }
}
