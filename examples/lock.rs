//! A plain lock: acquire a resource on a majority of masters, work, release, and print what
//! every master said.
//!
//! Runs against the masters named in `REDQUORUM_NODES` (comma-separated URLs), for example a
//! local dev cluster:
//!
//! ```text
//! redquorum dev up                      # prints REDQUORUM_NODES=redis://127.0.0.1:7101,…
//! export REDQUORUM_NODES=redis://127.0.0.1:7101,redis://127.0.0.1:7102,redis://127.0.0.1:7103,redis://127.0.0.1:7104,redis://127.0.0.1:7105
//! cargo run --example lock
//! ```
//!
//! Run two at once: the second waits for the first's release. Kill a master
//! (`redquorum dev kill 0`) and it still works; kill three and it says which masters failed.

use std::time::Duration;

use redquorum::RedLock;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = std::env::var("REDQUORUM_NODES")
        .map_err(|_| "set REDQUORUM_NODES to the masters' URLs (see `redquorum dev up`)")?
        .split(',')
        .map(str::to_owned)
        .collect();
    let rl = RedLock::builder(&urls).fencing(true).build()?;

    let lock = rl
        .acquire("example:report", Duration::from_secs(10))
        .await?;
    println!(
        "holding {} with fencing token {:?}, {:.1} s of validity left",
        lock.resource_display(),
        lock.fencing_token(),
        lock.remaining().as_secs_f64()
    );
    // The work: finished well before the lock's deadline (`lock.valid_until()`). A store that
    // the work writes to should reject writes with a fencing token lower than one it has seen.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let report = lock.release().await?;
    println!("released: {report}");
    // The deletes still on their way (the release returns at the majority) finish before
    // exit: dropping `rl`, the client's last handle, waits for them.
    Ok(())
}
