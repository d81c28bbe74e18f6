//! Uncontended acquire+release latency, next to a single `SET NX PX` round trip to the first
//! master, and the fenced acquire (one more round trip), all measured in the same run on the
//! same servers: the masters named in `REDQUORUM_NODES` (comma-separated URLs).
//!
//! ```text
//! redquorum dev up                      # prints REDQUORUM_NODES=redis://127.0.0.1:7101,…
//! export REDQUORUM_NODES=redis://127.0.0.1:7101,redis://127.0.0.1:7102,redis://127.0.0.1:7103,redis://127.0.0.1:7104,redis://127.0.0.1:7105
//! cargo run --release --example latency [-- ITERATIONS]
//! ```

use std::time::{Duration, Instant};

use redquorum::RedLock;

const TTL: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iterations: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(2000);
    let urls: Vec<String> = std::env::var("REDQUORUM_NODES")
        .map_err(|_| "set REDQUORUM_NODES to the masters' URLs (see `redquorum dev up`)")?
        .split(',')
        .map(str::to_owned)
        .collect();
    let rl = RedLock::new(&urls)?;
    rl.connect_all().await?;
    let fenced = RedLock::builder(&urls).fencing(true).build()?;
    fenced.connect_all().await?;

    let single = redis::Client::open(urls[0].as_str())?;
    let mut conn = single.get_multiplexed_async_connection().await?;

    let mut set_nx = Vec::with_capacity(iterations);
    let mut acquire = Vec::with_capacity(iterations);
    let mut pair = Vec::with_capacity(iterations);
    let mut fenced_acquire = Vec::with_capacity(iterations);
    let warmup = iterations / 10;
    // Interleaved, so both series see the same machine load.
    for i in 0..warmup + iterations {
        let t = Instant::now();
        let ok: Option<String> = redis::cmd("SET")
            .arg("baseline")
            .arg("v")
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .query_async(&mut conn)
            .await?;
        let set_time = t.elapsed();
        assert!(ok.is_some(), "baseline key should have been free");
        let _: i64 = redis::cmd("DEL")
            .arg("baseline")
            .query_async(&mut conn)
            .await?;

        let t = Instant::now();
        let lock = rl.try_acquire("latency", TTL).await?;
        let acquired = t.elapsed();
        lock.release().await?;
        let both = t.elapsed();

        let t = Instant::now();
        let lock = fenced.try_acquire("latency-fenced", TTL).await?;
        let fenced_time = t.elapsed();
        lock.release().await?;
        if i >= warmup {
            set_nx.push(set_time);
            acquire.push(acquired);
            pair.push(both);
            fenced_acquire.push(fenced_time);
        }
    }
    println!(
        "{iterations} iterations, {} masters, uncontended, sequential",
        urls.len()
    );
    println!("{:<38} {:>9} {:>9} {:>9}", "", "p50", "p99", "max");
    row("single SET NX PX round trip (1 node)", &mut set_nx);
    row("redquorum acquire (all nodes)", &mut acquire);
    row("redquorum acquire+release (all nodes)", &mut pair);
    row("redquorum fenced acquire (all nodes)", &mut fenced_acquire);
    // The releases still out finish before the process exits.
    rl.settle(Duration::from_secs(2)).await;
    fenced.settle(Duration::from_secs(2)).await;
    Ok(())
}

fn row(name: &str, samples: &mut [Duration]) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name:<38} {:>7.0}µs {:>7.0}µs {:>7.0}µs",
        at(0.50).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        at(1.0).as_secs_f64() * 1e6
    );
}
