//! A lease: a lock renewed in the background while long work runs, and the work stopped the
//! moment the lease is lost — before any other client could take the lock.
//!
//! Runs against the masters named in `REDQUORUM_NODES` (comma-separated URLs), for example a
//! local dev cluster:
//!
//! ```text
//! redquorum dev up                      # prints REDQUORUM_NODES=redis://127.0.0.1:7101,…
//! export REDQUORUM_NODES=redis://127.0.0.1:7101,redis://127.0.0.1:7102,redis://127.0.0.1:7103,redis://127.0.0.1:7104,redis://127.0.0.1:7105
//! cargo run --example lease
//! ```
//!
//! While it runs, pause three masters (`redquorum dev pause 0`, `… 1`, `… 2`): the renewals
//! fail, and `lost()` fires by the lease's deadline; `redquorum dev resume N` afterwards.

use std::time::{Duration, Instant};

use redquorum::{LeaseOptions, RedLock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = std::env::var("REDQUORUM_NODES")
        .map_err(|_| "set REDQUORUM_NODES to the masters' URLs (see `redquorum dev up`)")?
        .split(',')
        .map(str::to_owned)
        .collect();
    let rl = RedLock::new(&urls)?;

    // A short ttl, renewed every second: a lost lease is noticed within three seconds.
    let lock = rl.acquire("example:job", Duration::from_secs(3)).await?;
    let lease = lock.into_lease(LeaseOptions::default().renew_every(Duration::from_secs(1))?);
    let start = Instant::now();
    let work = async {
        for step in 1..=30 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            println!(
                "[{:>4.1} s] step {step} of 30",
                start.elapsed().as_secs_f64()
            );
        }
    };
    tokio::select! {
        reason = lease.lost() => {
            // The work future is dropped here: nothing more is done without the lock.
            println!("[{:>4.1} s] lease lost, work stopped: {reason}", start.elapsed().as_secs_f64());
        }
        () = work => {
            lease.release().await?;
            println!("[{:>4.1} s] done and released", start.elapsed().as_secs_f64());
        }
    }
    Ok(())
}
