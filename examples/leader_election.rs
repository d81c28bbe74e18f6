//! Leader election: three candidates, each change of leader printed with its term. Leaders
//! resign after a while, or just drop their leadership (renewals stop and a best-effort release
//! follows). The observer polls a majority every quarter ttl, so a very short leadership can
//! pass unseen.
//!
//! Runs against the masters named in `REDQUORUM_NODES` (comma-separated URLs), for example a
//! local dev cluster:
//!
//! ```text
//! redquorum dev up                      # prints REDQUORUM_NODES=redis://127.0.0.1:7101,…
//! export REDQUORUM_NODES=redis://127.0.0.1:7101,redis://127.0.0.1:7102,redis://127.0.0.1:7103,redis://127.0.0.1:7104,redis://127.0.0.1:7105
//! cargo run --example leader_election
//! ```
//!
//! Break a master while it runs (`redquorum dev kill 4`, `redquorum dev pause 0`): with three
//! of five left, elections go on.

use std::time::{Duration, Instant};

use redquorum::RedLock;

const TTL: Duration = Duration::from_secs(1);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let urls: Vec<String> = std::env::var("REDQUORUM_NODES")
        .map_err(|_| "set REDQUORUM_NODES to the masters' URLs (see `redquorum dev up`)")?
        .split(',')
        .map(str::to_owned)
        .collect();
    let observer = RedLock::new(&urls)?.election("example:leader", TTL)?;
    let mut leaders = observer.observe();

    let mut candidates = Vec::new();
    for name in ["alpha", "bravo", "charlie"] {
        let election = RedLock::new(&urls)?.election("example:leader", TTL)?;
        candidates.push(tokio::spawn(async move {
            for turn in 0..2 {
                let leading = election.campaign(name).await?;
                let hold = Duration::from_millis(rand::random_range(600..1400));
                tokio::select! {
                    reason = leading.lost() => println!("[{:>5.2}s] {name}: lost leadership: {reason}", t0.elapsed().as_secs_f64()),
                    _ = tokio::time::sleep(hold) => {
                        if turn == 0 {
                            leading.resign().await?;
                        } else {
                            // No resignation: dropping stops the renewals and schedules a release.
                            println!("[{:>5.2}s] {name}: drops its leadership", t0.elapsed().as_secs_f64());
                            drop(leading);
                        }
                    }
                }
            }
            Ok::<_, redquorum::Error>(())
        }));
    }

    let watcher = tokio::spawn(async move {
        let mut last_change = Instant::now();
        while leaders.changed().await.is_ok() {
            let now = Instant::now();
            match &*leaders.borrow() {
                Some(l) => println!(
                    "[{:>5.2}s] leader: {} (term {}), {:.0?} after the previous change",
                    t0.elapsed().as_secs_f64(),
                    String::from_utf8_lossy(l.value()),
                    l.term(),
                    now - last_change
                ),
                None => println!("[{:>5.2}s] no leader", t0.elapsed().as_secs_f64()),
            }
            last_change = now;
        }
    });

    for c in candidates {
        c.await??;
    }
    tokio::time::sleep(TTL).await;
    watcher.abort();
    println!("[{:>5.2}s] done", t0.elapsed().as_secs_f64());
    Ok(())
}
