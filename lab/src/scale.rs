//! `redquorum-lab scale`: what Redis Cluster voters buy. Distinct-resource throughput and the
//! CPU each pair (acquire + release) costs the client and the servers, with three standalone
//! voters and with three Cluster voters, in one run, next to the raw baseline on the
//! standalone masters.
//!
//! A 2-core machine cannot show the throughput grow: the client and every server share the two
//! cores. What it can show is where the servers' work goes: with standalone voters every
//! master sees every pair; with Cluster voters a voter's pairs spread over its masters, so the
//! busiest server's CPU per pair falls, and with it the ceiling one core per server would put
//! on throughput. The table prints that ceiling; `benches/README.md` does the arithmetic for
//! larger deployments.

use std::time::Duration;

use redquorum::RedLock;
use serde_json::{Value, json};

use crate::bench::pairs_for;
use crate::cpu::Meter;
use crate::error::LabError;
use crate::report::{sayer, us};
use crate::stop::{StopSignals, exit_code};
use redquorum_testkit::baseline::{Baseline, TTL};
use redquorum_testkit::{Cluster, RedisCluster};

/// Voters in every configuration (a majority of 2).
const VOTERS: usize = 3;
/// Concurrent tasks, each on a resource of its own.
const TASKS: usize = 64;
/// The per-node timeout of every client.
const NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// One configuration's figures.
#[derive(Debug)]
struct Row {
    label: &'static str,
    processes: usize,
    pairs_per_s: f64,
    client_us_per_pair: f64,
    servers_us_per_pair: f64,
    /// The server that did the most work, per pair: the one that saturates first.
    busiest_us_per_pair: f64,
    /// The client's allocations per pair (the binary's counting allocator; `None` where it
    /// is not installed, as in the lab's tests): a count that does not move with the noise,
    /// to tell what a Cluster voter's routing costs.
    allocations_per_pair: Option<f64>,
    /// The tasks redquorum spawned per pair (`redquorum::telemetry::tasks_spawned`).
    tasks_per_pair: f64,
}

impl Row {
    /// The pairs per second at which the busiest server would fill one core of its own.
    fn ceiling(&self) -> f64 {
        1e6 / self.busiest_us_per_pair.max(f64::MIN_POSITIVE)
    }

    fn to_json(&self) -> Value {
        json!({
            "configuration": self.label,
            "server_processes": self.processes,
            "pairs_per_s": self.pairs_per_s,
            "client_us_per_pair": self.client_us_per_pair,
            "servers_us_per_pair": self.servers_us_per_pair,
            "busiest_server_us_per_pair": self.busiest_us_per_pair,
            "client_allocations_per_pair": self.allocations_per_pair,
            "tasks_spawned_per_pair": self.tasks_per_pair,
            "one_core_per_server_ceiling_pairs_per_s": self.ceiling(),
        })
    }
}

/// Runs the four measurements and prints the table (`--json`: the figures as JSON on stdout,
/// the table on stderr). SIGINT, SIGTERM or SIGHUP stop it early; its servers are stopped on
/// every way out (they end with the values that own them).
///
/// Returns the exit code: 0, or 128 + N when stopped by signal N.
///
/// # Errors
/// When a measurement fails.
pub async fn scale(quick: bool, as_json: bool) -> Result<u8, LabError> {
    let mut signals = StopSignals::listen()?;
    let each = if quick {
        Duration::from_millis(700)
    } else {
        Duration::from_secs(3)
    };
    let result = tokio::select! {
        result = measure(each, as_json) => result,
        signal = signals.recv() => return Ok(exit_code(signal)),
    };
    let figures = result?;
    if as_json {
        println!("{figures:#}");
    }
    Ok(0)
}

async fn measure(each: Duration, as_json: bool) -> Result<Value, LabError> {
    let say = sayer(as_json);
    say(format!(
        "redquorum-lab scale: {VOTERS} voters, {TASKS} tasks on distinct resources, {:.1} s each, \
         {} CPUs shared by the client and every server, per-node timeout {} ms.\n",
        each.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, usize::from),
        NODE_TIMEOUT.as_millis()
    ));
    let mut rows = Vec::new();

    let standalone = blocking(|| Cluster::start(VOTERS)).await?;
    let pids = pids_of(&[&standalone]);
    let urls = standalone.urls();
    let baseline = Baseline::connect(&urls).await.map_err(failed)?;
    rows.push(
        rate(
            "raw baseline, standalone masters",
            &pids,
            each,
            move |task| {
                let baseline = baseline.clone();
                async move {
                    baseline
                        .pair(&format!("redquorum:{{scale:raw:{task}}}"))
                        .await
                        .is_ok()
                }
            },
        )
        .await,
    );
    let rl = client(urls)?;
    rows.push(redquorum_rate("redquorum, standalone masters", &rl, &pids, each).await?);
    drop(standalone);

    let single: Vec<RedisCluster> =
        blocking(|| (0..VOTERS).map(|_| RedisCluster::start(1)).collect()).await?;
    rows.push(cluster_rate("redquorum, 1-master Cluster voters", &single, each).await?);
    drop(single);

    let sharded: Vec<RedisCluster> =
        blocking(|| (0..VOTERS).map(|_| RedisCluster::start(3)).collect()).await?;
    rows.push(cluster_rate("redquorum, 3-master Cluster voters", &sharded, each).await?);
    drop(sharded);

    say(format!(
        "{:<38} {:>9} {:>10}   {:>22}   {:>16}   {:>18}   {:>12} {:>7}",
        "",
        "servers",
        "pairs/s",
        "CPU µs/pair: client",
        "servers (sum)",
        "busiest server",
        "allocs/pair",
        "tasks"
    ));
    for row in &rows {
        say(format!(
            "{:<38} {:>9} {:>10.0}   {:>22.1}   {:>16.1}   {:>11.1} → {:>6.0}/s   {:>12} {:>7.2}",
            row.label,
            row.processes,
            row.pairs_per_s,
            row.client_us_per_pair,
            row.servers_us_per_pair,
            row.busiest_us_per_pair,
            row.ceiling(),
            row.allocations_per_pair
                .map_or_else(|| "-".to_owned(), |n| format!("{n:.1}")),
            row.tasks_per_pair,
        ));
    }
    say(
        "busiest server → the pairs/s at which it would fill one core of its own: the ceiling \
         that more shards per voter raise (each master sees only its slots' pairs)."
            .to_owned(),
    );
    Ok(json!({
        "voters": VOTERS,
        "tasks": TASKS,
        "seconds_each": each.as_secs_f64(),
        "rows": rows.iter().map(Row::to_json).collect::<Vec<_>>(),
    }))
}

async fn cluster_rate(
    label: &'static str,
    clusters: &[RedisCluster],
    each: Duration,
) -> Result<Row, LabError> {
    let servers: Vec<&Cluster> = clusters.iter().map(RedisCluster::servers).collect();
    let pids = pids_of(&servers);
    let rl = client(clusters.iter().map(RedisCluster::url).collect())?;
    redquorum_rate(label, &rl, &pids, each).await
}

async fn redquorum_rate(
    label: &'static str,
    rl: &RedLock,
    pids: &[u32],
    each: Duration,
) -> Result<Row, LabError> {
    rl.connect_all().await.map_err(failed)?;
    // Warm: every task's resource routed and its master's connection made.
    for task in 0..TASKS {
        let lock = rl
            .try_acquire(format!("scale:{task}"), TTL)
            .await
            .map_err(failed)?;
        lock.release().await.map_err(failed)?;
    }
    let rl = rl.clone();
    Ok(rate(label, pids, each, move |task| {
        let rl = rl.clone();
        async move {
            match rl.try_acquire(format!("scale:{task}"), TTL).await {
                Ok(lock) => lock.release().await.is_ok(),
                Err(_) => false,
            }
        }
    })
    .await)
}

/// [`TASKS`] tasks run `pair` back to back for `each`; the CPU of this process and of each
/// server in `pids` is measured over the run.
async fn rate<F, Fut>(label: &'static str, pids: &[u32], each: Duration, pair: F) -> Row
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let allocated = allocations();
    let spawned = redquorum::telemetry::tasks_spawned();
    let meter = Meter::start(pids);
    let (done, elapsed) = pairs_for(TASKS, each, pair).await;
    let (client, servers) = meter.stop_each();
    let allocated = allocations() - allocated;
    let spawned = redquorum::telemetry::tasks_spawned() - spawned;
    #[allow(clippy::cast_precision_loss)]
    let pairs = (done as f64).max(1.0);
    Row {
        label,
        processes: pids.len(),
        pairs_per_s: pairs / elapsed.as_secs_f64(),
        client_us_per_pair: us(client) / pairs,
        servers_us_per_pair: us(servers.iter().sum()) / pairs,
        busiest_us_per_pair: us(servers.iter().max().copied().unwrap_or_default()) / pairs,
        #[allow(clippy::cast_precision_loss)]
        allocations_per_pair: (allocated > 0).then(|| allocated as f64 / pairs),
        #[allow(clippy::cast_precision_loss)]
        tasks_per_pair: spawned as f64 / pairs,
    }
}

/// Allocations and reallocations so far, by the binary's counting allocator (0 without it).
fn allocations() -> usize {
    let stats = stats_alloc::INSTRUMENTED_SYSTEM.stats();
    stats.allocations + stats.reallocations
}

fn client(urls: Vec<String>) -> Result<RedLock, LabError> {
    RedLock::builder(urls)
        .per_node_timeout(NODE_TIMEOUT)
        .build()
        .map_err(failed)
}

fn pids_of(clusters: &[&Cluster]) -> Vec<u32> {
    clusters
        .iter()
        .flat_map(|c| (0..c.len()).filter_map(|i| c.server(i).process_id()))
        .collect()
}

/// Starts servers off the runtime's threads (the test kit waits for them synchronously).
async fn blocking<T: Send + 'static>(
    start: impl FnOnce() -> T + Send + 'static,
) -> Result<T, LabError> {
    tokio::task::spawn_blocking(start)
        .await
        .map_err(|e| LabError::new(format!("scale: starting the servers failed: {e}")))
}

fn failed(e: impl std::fmt::Display) -> LabError {
    LabError::new(format!("scale: {e}"))
}
