//! One rslock worker of `redquorum-lab contend --against`: the same loop as redquorum's worker
//! (`lab/src/contend.rs`), with rslock's own waiting (`LockManager::acquire`, which retries
//! until it gets the lock), and the same one-line JSON output.
//!
//! Arguments (as `contend` passes them): `--nodes URL,URL,… --process N --start-ns NS
//! --seconds S --hold-max-us US`. Parsed by hand: a few flags from two known callers do not
//! need an argument parser in this standalone tool.
//!
//! With `--pairs --nodes URL,… --tasks T --millis MS` (as `redquorum-lab bench --against`
//! passes them) it is instead the bench's throughput row: `T` tasks each lock and unlock
//! resources of their own (no contention) back to back for `MS` milliseconds, and it prints
//! `{"pairs": N, "elapsed_s": F, "cpu_s": F}`, its own CPU time over that interval included so
//! the bench can set rslock's CPU per pair beside the client's it measures in-process.

use std::time::Duration;

use rand::RngExt;
use rslock::LockManager;

const TTL: Duration = Duration::from_secs(1);
const RESOURCE: &str = "contend:one";

fn arg(args: &[String], name: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| panic!("missing {name}"))
}

fn number(args: &[String], name: &str) -> u64 {
    arg(args, name)
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn monotonic_ns() -> u64 {
    let now =
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    u64::try_from(now.tv_sec()).unwrap_or(0) * 1_000_000_000
        + u64::try_from(now.tv_nsec()).unwrap_or(0)
}

/// This process's user plus system CPU time so far, from `/proc/self/stat` (utime and stime,
/// in the kernel's 100 ticks per second); zero where `/proc` is unreadable.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map_or_else(Vec::new, |(_, rest)| rest.split(' ').collect());
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u32>().ok()).unwrap_or(0);
    f64::from(ticks(11) + ticks(12)) / 100.0
}

/// The bench's uncontended throughput row on rslock: `--tasks` tasks, each on resources of
/// its own, lock then unlock back to back for `--millis`.
async fn pairs(args: &[String], nodes: Vec<String>) {
    let tasks = number(args, "--tasks");
    let millis = number(args, "--millis");
    let rl = std::sync::Arc::new(LockManager::new(nodes));
    // One pair per task first, outside the interval: the connections are made there.
    for task in 0..tasks {
        let lock = rl
            .lock(format!("bench:rslock:{task}").as_bytes(), TTL)
            .await
            .expect("warm-up");
        rl.unlock(&lock).await;
    }
    let cpu = cpu_s();
    let started = std::time::Instant::now();
    let until = started + Duration::from_millis(millis);
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let rl = rl.clone();
            tokio::spawn(async move {
                let resource = format!("bench:rslock:{task}");
                let mut done = 0u64;
                while std::time::Instant::now() < until {
                    // One attempt (`lock`, not `acquire`, which retries): nobody else
                    // holds this resource, as in redquorum's and the baseline's rows.
                    if let Ok(lock) = rl.lock(resource.as_bytes(), TTL).await {
                        rl.unlock(&lock).await;
                        done += 1;
                    }
                }
                done
            })
        })
        .collect();
    let mut done = 0u64;
    for handle in handles {
        done += handle.await.unwrap_or(0);
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({ "pairs": done, "elapsed_s": elapsed, "cpu_s": cpu_s() - cpu })
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let nodes: Vec<String> = arg(&args, "--nodes")
        .split(',')
        .map(str::to_owned)
        .collect();
    if args.iter().any(|a| a == "--pairs") {
        return pairs(&args, nodes).await;
    }
    let process = number(&args, "--process");
    let start_ns = number(&args, "--start-ns");
    let end_ns = start_ns + number(&args, "--seconds") * 1_000_000_000;
    let hold_max_us = number(&args, "--hold-max-us");
    let rl = LockManager::new(nodes);
    let warm_up = format!("contend:warm-up:{process}");
    let guard = rl.acquire(warm_up.as_bytes(), TTL).await.expect("warm-up");
    rl.unlock(&guard.lock).await;
    tokio::time::sleep(Duration::from_nanos(
        start_ns.saturating_sub(monotonic_ns()),
    ))
    .await;
    let mut turns = Vec::new();
    loop {
        let asked = monotonic_ns();
        if asked >= end_ns {
            break;
        }
        let Ok(guard) = tokio::time::timeout(
            Duration::from_nanos(end_ns - asked),
            rl.acquire(RESOURCE.as_bytes(), TTL),
        )
        .await
        else {
            break;
        };
        let guard = guard.expect("acquire");
        let acquired = monotonic_ns();
        let hold = rand::rng().random_range(0..=hold_max_us);
        tokio::time::sleep(Duration::from_micros(hold)).await;
        let released = monotonic_ns();
        rl.unlock(&guard.lock).await;
        turns.push([asked, acquired, released]);
    }
    println!("{}", serde_json::json!({ "turns": turns, "rounds": null }));
}
