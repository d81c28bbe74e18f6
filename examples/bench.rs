//! redquorum's benchmark table, every figure next to a baseline measured in the same run on the
//! same five local masters.
//!
//! ```text
//! cargo run --release --example bench            # about a minute
//! cargo run --release --example bench -- quick   # a few seconds, smaller samples
//! ```
//!
//! The raw baseline is the minimum any Redlock must do, written directly on the `redis` crate:
//! fan out `SET key token NX PX ttl` to all five masters and wait for three, then fan out the
//! compare-and-delete script and wait for all five.

#[path = "../tests/support/cluster.rs"]
mod cluster;
#[path = "../tests/support/raw.rs"]
mod raw;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use raw::{Raw, Res, TTL};
use redquorum::RedLock;

fn quantiles(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (
        at(0.5),
        at(0.99),
        *samples.last().unwrap_or(&Duration::ZERO),
    )
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Res<()> {
    let quick = std::env::args().any(|a| a == "quick");
    let (sequential_n, throughput_for, handoff_rounds) = if quick {
        (300, Duration::from_millis(700), 15)
    } else {
        (2000, Duration::from_secs(3), 50)
    };
    let mut cluster = cluster::Cluster::start(5);
    let urls = cluster.urls();
    let raw = Raw::new(&urls).await?;
    let rl = RedLock::builder(&urls)
        .per_node_timeout(Duration::from_millis(50))
        .build()?;
    rl.connect().await?;
    println!(
        "5 local redis-server masters, 2 cores; every ratio is against the raw baseline of the same run\n"
    );

    // Sequential, uncontended, interleaved so both see the same load.
    let (mut base, mut ours) = (Vec::new(), Vec::new());
    for i in 0..sequential_n + sequential_n / 10 {
        let t = Instant::now();
        raw.pair("bench:raw", &format!("t{i}")).await?;
        let b = t.elapsed();
        let t = Instant::now();
        rl.try_acquire("bench:seq", TTL).await?.release().await?;
        let o = t.elapsed();
        if i >= sequential_n / 10 {
            base.push(b);
            ours.push(o);
        }
    }
    let (b50, b99, bmax) = quantiles(base);
    let (o50, o99, omax) = quantiles(ours);
    println!("acquire+release, sequential ({sequential_n} pairs)      p50        p99        max");
    println!(
        "  raw baseline                              {:>10} {:>10} {:>10}",
        us(b50),
        us(b99),
        us(bmax)
    );
    println!(
        "  redquorum                                 {:>10} {:>10} {:>10}",
        us(o50),
        us(o99),
        us(omax)
    );
    println!(
        "  ratio                                     {:>10.2} {:>10.2}",
        o50.as_secs_f64() / b50.as_secs_f64(),
        o99.as_secs_f64() / b99.as_secs_f64()
    );

    // Throughput on distinct resources.
    println!(
        "\nthroughput, distinct resources ({:?} each)    raw pairs/s   redquorum pairs/s   ratio",
        throughput_for
    );
    for tasks in [1usize, 16, 64] {
        let raw_rate = throughput(tasks, throughput_for, {
            let raw = raw.clone();
            move |task, n| {
                let raw = raw.clone();
                async move {
                    raw.pair(&format!("bench:raw:{task}"), &format!("{n}"))
                        .await
                        .is_ok()
                }
            }
        })
        .await;
        let our_rate = throughput(tasks, throughput_for, {
            let rl = rl.clone();
            move |task, _| {
                let rl = rl.clone();
                async move {
                    match rl.try_acquire(format!("bench:tp:{task}"), TTL).await {
                        Ok(lock) => lock.release().await.is_ok(),
                        Err(_) => false,
                    }
                }
            }
        })
        .await;
        println!(
            "  {tasks:>2} tasks                                 {raw_rate:>9.0}   {our_rate:>17.0}   {:>5.2}",
            our_rate / raw_rate
        );
    }

    // Hand-off under contention: 8 tasks on one resource, zero hold time.
    println!("\nhand-off, 8 tasks x {handoff_rounds} acquisitions of one resource, zero hold");
    println!(
        "  waiting                   total      hand-off p50   hand-off p99   wasted rounds/acq   fairness   longest wait"
    );
    for (label, pubsub) in [("release messages", true), ("timed retries only", false)] {
        let waiter = RedLock::builder(&urls)
            .per_node_timeout(Duration::from_millis(50))
            .wait_for_release(pubsub)
            .build()?;
        waiter.connect().await?;
        let h = handoff(&waiter, 8, handoff_rounds).await?;
        println!(
            "  {label:<22} {:>8.0} ms   {:>12}   {:>12}   {:>17.2}   {:>8.2}   {:>9.1} ms",
            h.total.as_secs_f64() * 1e3,
            us(h.p50),
            us(h.p99),
            h.wasted,
            h.fairness,
            h.longest_wait.as_secs_f64() * 1e3,
        );
    }
    println!(
        "  fairness: Jain's index over each task's total wait (1 = all waited alike, 1/8 = one task did all the waiting)"
    );

    // Fencing on vs off.
    let fenced = RedLock::builder(&urls)
        .per_node_timeout(Duration::from_millis(50))
        .fencing(true)
        .build()?;
    fenced.connect().await?;
    let (mut plain, mut with_fence) = (Vec::new(), Vec::new());
    for _ in 0..sequential_n / 2 {
        let t = Instant::now();
        let lock = rl.try_acquire("bench:fence-off", TTL).await?;
        plain.push(t.elapsed());
        lock.release().await?;
        let t = Instant::now();
        let lock = fenced.try_acquire("bench:fence-on", TTL).await?;
        with_fence.push(t.elapsed());
        lock.release().await?;
    }
    let (p50, p99, _) = quantiles(plain);
    let (f50, f99, _) = quantiles(with_fence);
    println!("\nacquire, fencing off vs on          p50        p99");
    println!(
        "  off                        {:>10} {:>10}",
        us(p50),
        us(p99)
    );
    println!(
        "  on (one more round trip)   {:>10} {:>10}   (+{} at p50)",
        us(f50),
        us(f99),
        us(f50.saturating_sub(p50))
    );

    // One master hung (SIGSTOP) vs healthy.
    let measure = |rl: RedLock, n: usize| async move {
        let mut v = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let lock = rl.try_acquire("bench:hung", TTL).await?;
            v.push(t.elapsed());
            lock.release().await?;
        }
        Ok::<_, redquorum::Error>(quantiles(v))
    };
    let (h50, h99, hmax) = measure(rl.clone(), sequential_n / 2).await?;
    cluster.pause(4);
    let (s50, s99, smax) = measure(rl.clone(), sequential_n / 2).await?;
    cluster.resume(4);
    println!(
        "\nacquire (the pair's acquire half), one master SIGSTOPped      p50        p99        max"
    );
    println!(
        "  healthy                                          {:>10} {:>10} {:>10}",
        us(h50),
        us(h99),
        us(hmax)
    );
    println!(
        "  master 4 hung                                    {:>10} {:>10} {:>10}",
        us(s50),
        us(s99),
        us(smax)
    );
    println!(
        "  hung p99 / healthy p99: {:.2}; per-node timeout 50 ms",
        s99.as_secs_f64() / h99.as_secs_f64()
    );
    Ok(())
}

/// Pairs per second over `tasks` concurrent tasks for `duration`.
async fn throughput<F, Fut>(tasks: usize, duration: Duration, pair: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + duration;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (pair, done) = (pair.clone(), done.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    n += 1;
                    if pair(task, n).await {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.await;
    }
    done.load(Ordering::Relaxed) as f64 / duration.as_secs_f64()
}

/// What the hand-off run measured.
struct Handoff {
    total: Duration,
    /// A release's end to the next holder's acquire.
    p50: Duration,
    p99: Duration,
    wasted: f64,
    /// Jain's fairness index over each task's total time spent waiting to acquire.
    fairness: f64,
    longest_wait: Duration,
}

/// `tasks` tasks each take one resource `rounds` times with zero hold time.
async fn handoff(rl: &RedLock, tasks: usize, rounds: usize) -> Res<Handoff> {
    let events = Arc::new(std::sync::Mutex::new(Vec::<(Instant, Instant, u32)>::new()));
    let waits = Arc::new(std::sync::Mutex::new(vec![Vec::<Duration>::new(); tasks]));
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (rl, events, waits) = (rl.clone(), events.clone(), waits.clone());
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let asked = Instant::now();
                    let lock = rl
                        .acquire_within("bench:handoff", TTL, Duration::from_secs(60))
                        .await?;
                    let acquired = Instant::now();
                    waits.lock().map_err(|_| "poisoned")?[task].push(acquired - asked);
                    let attempts = lock.attempts();
                    lock.release().await?;
                    events.lock().map_err(|_| "poisoned")?.push((
                        acquired,
                        Instant::now(),
                        attempts,
                    ));
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
        })
        .collect();
    for h in handles {
        h.await??;
    }
    let total = started.elapsed();
    let mut events = events.lock().map_err(|_| "poisoned")?.clone();
    events.sort_by_key(|e| e.0);
    let gaps: Vec<Duration> = events
        .windows(2)
        .map(|w| w[1].0.saturating_duration_since(w[0].1))
        .collect();
    let (p50, p99, _) = quantiles(gaps);
    let wasted = events.iter().map(|e| f64::from(e.2 - 1)).sum::<f64>() / events.len() as f64;
    let waits = waits.lock().map_err(|_| "poisoned")?.clone();
    let per_task: Vec<f64> = waits
        .iter()
        .map(|w| w.iter().map(Duration::as_secs_f64).sum())
        .collect();
    let sum: f64 = per_task.iter().sum();
    let squares: f64 = per_task.iter().map(|x| x * x).sum();
    let fairness = if squares > 0.0 {
        sum * sum / (per_task.len() as f64 * squares)
    } else {
        1.0
    };
    let longest_wait = waits.iter().flatten().copied().max().unwrap_or_default();
    Ok(Handoff {
        total,
        p50,
        p99,
        wasted,
        fairness,
        longest_wait,
    })
}
