//! One rslock worker of `redquorum-lab contend --against`: the same loop as redquorum's worker
//! (`lab/src/contend.rs`), with rslock's own waiting (`LockManager::acquire`, which retries
//! until it gets the lock), and the same one-line JSON output.
//!
//! Arguments (as `contend` passes them): `--nodes URL,URL,… --process N --start-ns NS
//! --seconds S --hold-max-us US`. Parsed by hand: five flags from one known caller do not
//! need an argument parser in this standalone tool.

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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let nodes: Vec<String> = arg(&args, "--nodes")
        .split(',')
        .map(str::to_owned)
        .collect();
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
