//! A live demo of redquorum on five local masters (`bash .ci/demo`).
//!
//! Starts five `redis-server` processes on free loopback ports, runs three contenders that take
//! turns holding one lock, and meanwhile kills, pauses and restarts masters: first never more
//! than two at once (the lock keeps working), then three (no majority: every acquire fails with
//! `NoQuorum`, and nobody holds the lock), then heals. Prints a timeline and a summary with the
//! number of overlapping holds, which must be 0. Ends by itself after about 25 seconds and ends
//! the servers it started.

#[path = "../tests/support/cluster.rs"]
mod cluster;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::Cluster;
use redquorum::{Error, RedLock};

const RESOURCE: &str = "demo:singleton-job";
const TTL: Duration = Duration::from_secs(2);
const WAIT: Duration = Duration::from_secs(1);
const CONTENDERS: [&str; 3] = ["A", "B", "C"];

/// One hold of the lock, on the process's monotonic clock.
#[derive(Debug, Clone, Copy)]
struct Hold {
    who: usize,
    from: Instant,
    to: Instant,
}

#[derive(Default)]
struct Shared {
    holds: Vec<Hold>,
    errors: BTreeMap<&'static str, u64>,
    acquire_micros: Vec<u64>,
    nodes: Vec<&'static str>,
    last_error: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let cluster = Arc::new(Mutex::new(Cluster::start(5)));
    let urls = lock(&cluster).urls();
    println!("five independent masters: {}", urls.join(" "));
    println!(
        "three contenders take turns on {RESOURCE:?} (ttl {TTL:?}), holding it 20–200 ms each\n"
    );
    let shared = Arc::new(Mutex::new(Shared {
        nodes: vec!["up"; 5],
        ..Shared::default()
    }));
    let stop = Arc::new(AtomicBool::new(false));

    let mut contenders = Vec::new();
    for (who, _) in CONTENDERS.iter().enumerate() {
        let rl = RedLock::builder(urls.iter())
            .per_node_timeout(Duration::from_millis(20))
            .build()?;
        contenders.push(tokio::spawn(contend(who, rl, shared.clone(), stop.clone())));
    }

    let nemesis = {
        let (cluster, shared, stop) = (cluster.clone(), shared.clone(), stop.clone());
        std::thread::spawn(move || nemesis(&cluster, &shared, &stop, started))
    };

    let mut seen = 0usize;
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = lock(&shared);
        let new = &s.holds[seen..];
        let mut per: [usize; 3] = [0; 3];
        for h in new {
            per[h.who] += 1;
        }
        seen = s.holds.len();
        let errors: Vec<String> = s.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!(
            "[{:>5.1}s] nodes {} | holds in the last second: {:>2} (A {}, B {}, C {}) | errors so far: {}",
            started.elapsed().as_secs_f64(),
            s.nodes.join(" "),
            new.len(),
            per[0],
            per[1],
            per[2],
            if errors.is_empty() {
                "none".to_owned()
            } else {
                errors.join(", ")
            },
        );
    }
    for c in contenders {
        c.await?;
    }
    nemesis.join().map_err(|_| "nemesis thread panicked")?;

    let s = lock(&shared);
    let mut holds = s.holds.clone();
    holds.sort_by_key(|h| h.from);
    let mut overlaps = 0;
    let mut longest_gap = Duration::ZERO;
    for pair in holds.windows(2) {
        if pair[1].from < pair[0].to {
            overlaps += 1;
        }
        longest_gap = longest_gap.max(pair[1].from.saturating_duration_since(pair[0].to));
    }
    let mut micros = s.acquire_micros.clone();
    micros.sort_unstable();
    let p = |q: f64| {
        micros
            .get(((micros.len().max(1) - 1) as f64 * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    let keys_left = lock(&cluster)
        .keys()
        .into_iter()
        .filter(|(_, k)| k.starts_with(b"redquorum:"))
        .count();
    println!("\nsummary after {:.1}s", started.elapsed().as_secs_f64());
    for (who, name) in CONTENDERS.iter().enumerate() {
        println!(
            "  {name}: {} holds",
            holds.iter().filter(|h| h.who == who).count()
        );
    }
    println!(
        "  holds: {}   overlapping holds: {overlaps}   longest time without a holder: {longest_gap:.1?}",
        holds.len()
    );
    println!(
        "  time to acquire, including waiting for the holder: p50 {} µs, p99 {} µs",
        p(0.5),
        p(0.99)
    );
    println!("  errors by kind: {:?}", s.errors);
    if let Some(e) = &s.last_error {
        println!("  last error seen: {e}");
    }
    println!("  keys left on the masters: {keys_left}");
    if overlaps > 0 || keys_left > 0 {
        return Err("the lock was held twice, or keys were left behind".into());
    }
    Ok(())
}

async fn contend(who: usize, rl: RedLock, shared: Arc<Mutex<Shared>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        match rl.acquire_within(RESOURCE, TTL, WAIT).await {
            Ok(lock) => {
                let from = Instant::now();
                lock_micros(&shared, from - t);
                let hold = Duration::from_millis(rand::random_range(20..200));
                tokio::time::sleep(hold.min(lock.remaining())).await;
                let to = Instant::now().min(lock.valid_until());
                let released = lock.release().await;
                let mut s = self::lock(&shared);
                s.holds.push(Hold { who, from, to });
                if let Err(e) = released {
                    count(&mut s, &e);
                }
            }
            Err(e) => count(&mut lock(&shared), &e),
        }
        // Give the others a chance, as a real worker would between jobs.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn lock_micros(shared: &Mutex<Shared>, d: Duration) {
    lock(shared).acquire_micros.push(d.as_micros() as u64);
}

fn count(s: &mut Shared, e: &Error) {
    let kind = match e {
        Error::Conflict(_) => "busy (conflict)",
        Error::NoQuorum(_) => "no quorum",
        Error::ValidityExhausted(_) => "validity exhausted",
        Error::Expired(_) => "expired before release",
        _ => "other",
    };
    *s.errors.entry(kind).or_default() += 1;
    if !e.is_conflict() {
        s.last_error = Some(e.to_string());
    }
}

fn nemesis(cluster: &Mutex<Cluster>, shared: &Mutex<Shared>, stop: &AtomicBool, t0: Instant) {
    let at = |secs: f64| {
        let when = t0 + Duration::from_secs_f64(secs);
        std::thread::sleep(when.saturating_duration_since(Instant::now()));
    };
    let event = |what: &str, node: usize, state: &'static str| {
        lock(shared).nodes[node] = state;
        println!(
            "[{:>5.1}s] nemesis: {what} node {node}",
            t0.elapsed().as_secs_f64()
        );
    };
    at(3.0);
    lock(cluster).kill(4);
    event("SIGKILL", 4, "DOWN");
    at(6.0);
    lock(cluster).pause(3);
    event("SIGSTOP", 3, "HUNG");
    at(9.0);
    lock(cluster).resume(3);
    event("SIGCONT", 3, "up");
    at(11.0);
    // Down for 8 s, longer than the 2 s ttl: an empty restart is safe.
    lock(cluster).restart(4);
    event("restarted (empty, after more than the ttl)", 4, "up");
    at(14.0);
    println!(
        "[{:>5.1}s] nemesis: killing three of five: no majority is possible now",
        t0.elapsed().as_secs_f64()
    );
    for node in 0..3 {
        lock(cluster).kill(node);
        event("SIGKILL", node, "DOWN");
    }
    at(18.0);
    for node in 0..3 {
        lock(cluster).restart(node);
        event("restarted (empty, after more than the ttl)", node, "up");
    }
    at(23.0);
    stop.store(true, Ordering::Relaxed);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
