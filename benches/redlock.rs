//! Criterion benches on five real local `redis-server` masters, each redquorum figure in a
//! group with the raw baseline (`redquorum_testkit::baseline`, the one `redquorum-lab bench`
//! uses) measured on the same servers:
//!
//! - `acquire_release`: one uncontended acquire + release, sequential;
//! - `fencing`: the same with fencing on (one more round trip) against off;
//! - `throughput_64_tasks`: 64 acquire + release pairs at once on distinct resources.
//!
//! `cargo bench --bench redlock`; `cargo test --benches` runs each once as a smoke test.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::future::join_all;
use redquorum::RedLock;
use redquorum_testkit::baseline::{Baseline, TTL};

const TASKS: usize = 64;

fn benches(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = redquorum_testkit::Cluster::start(5);
    let urls = cluster.urls();
    let raw = runtime
        .block_on(Baseline::connect(&urls))
        .expect("baseline connects");
    let client = |fencing: bool| {
        let rl = RedLock::builder(&urls)
            .per_node_timeout(Duration::from_millis(50))
            .fencing(fencing)
            .build()
            .expect("config");
        runtime.block_on(rl.connect()).expect("connect");
        rl
    };
    let (plain, fenced) = (client(false), client(true));
    let pair = async |rl: &RedLock, resource: &str| {
        let lock = rl.try_acquire(resource, TTL).await.expect("uncontended");
        lock.release().await.expect("release");
    };

    let mut group = c.benchmark_group("acquire_release");
    group.bench_function("raw_baseline", |b| {
        b.to_async(&runtime)
            .iter(|| async { raw.pair("redquorum:{bench:raw}").await.expect("baseline") });
    });
    group.bench_function("redquorum", |b| {
        b.to_async(&runtime).iter(|| pair(&plain, "bench:plain"));
    });
    group.finish();

    let mut group = c.benchmark_group("fencing");
    group.bench_function("off", |b| {
        b.to_async(&runtime).iter(|| pair(&plain, "bench:off"));
    });
    group.bench_function("on", |b| {
        b.to_async(&runtime).iter(|| pair(&fenced, "bench:on"));
    });
    group.finish();

    let names: Vec<String> = (0..TASKS).map(|i| format!("bench:t{i}")).collect();
    let raw_keys: Vec<String> = (0..TASKS)
        .map(|i| format!("redquorum:{{bench:raw:{i}}}"))
        .collect();
    let mut group = c.benchmark_group("throughput_64_tasks");
    group.throughput(Throughput::Elements(TASKS as u64));
    group.bench_function("raw_baseline", |b| {
        b.to_async(&runtime).iter(|| {
            join_all(raw_keys.iter().map(|k| {
                let raw = raw.clone();
                async move { raw.pair(k).await.expect("baseline") }
            }))
        });
    });
    group.bench_function("redquorum", |b| {
        b.to_async(&runtime)
            .iter(|| join_all(names.iter().map(|n| pair(&plain, n))));
    });
    group.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group! {
    name = redlock;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = benches
    }
}
criterion_main!(group::redlock);
