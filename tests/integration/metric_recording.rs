//! The `metrics` feature: counters, histograms and the held-locks gauge, recorded for real.
#![cfg(feature = "metrics")]

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};
use redquorum::telemetry;

use crate::{client, eventually};
use redquorum_testkit::Cluster;

fn labels(key: &CompositeKey) -> Vec<(String, String)> {
    let mut l: Vec<_> = key
        .key()
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    l.sort();
    l
}

#[test]
fn operations_rounds_latencies_and_held_locks_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let cluster = Cluster::start(3);
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let rl = client(&cluster, Duration::from_millis(250));
            let ttl = Duration::from_secs(10);
            let mut lock = rl.try_acquire("m", ttl).await.expect("acquire");
            assert!(
                rl.try_acquire("m", ttl)
                    .await
                    .expect_err("busy")
                    .is_conflict()
            );
            assert!(
                rl.try_acquire("", ttl)
                    .await
                    .expect_err("empty")
                    .is_config()
            );
            lock.extend(ttl).await.expect("extend");
            lock.release().await.expect("release");
            let dropped = rl.try_acquire("m", ttl).await.expect("acquire");
            drop(dropped);
            assert!(eventually(Duration::from_secs(2), || cluster.keys().is_empty()).await);
        });
    });

    let snapshot = snapshotter.snapshot().into_vec();
    let counter = |name: &str, want: &[(&str, &str)]| -> u64 {
        let mut want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        want.sort();
        snapshot
            .iter()
            .filter(|(k, ..)| {
                k.kind() == MetricKind::Counter && k.key().name() == name && labels(k) == want
            })
            .map(|(.., v)| match v {
                DebugValue::Counter(n) => *n,
                _ => 0,
            })
            .sum()
    };
    let ops = telemetry::OPERATIONS_TOTAL;
    assert_eq!(
        counter(ops, &[("operation", "acquire"), ("outcome", "ok")]),
        2
    );
    assert_eq!(
        counter(ops, &[("operation", "acquire"), ("outcome", "conflict")]),
        1
    );
    assert_eq!(
        counter(ops, &[("operation", "acquire"), ("outcome", "config")]),
        1
    );
    assert_eq!(
        counter(ops, &[("operation", "extend"), ("outcome", "ok")]),
        1
    );
    assert_eq!(
        counter(ops, &[("operation", "release"), ("outcome", "ok")]),
        1
    );
    assert_eq!(
        counter(
            telemetry::ROUNDS_TOTAL,
            &[("decision", "won"), ("operation", "acquire")]
        ),
        2
    );
    assert_eq!(
        counter(
            telemetry::ROUNDS_TOTAL,
            &[("decision", "lost"), ("operation", "acquire")]
        ),
        1
    );

    let gauge = snapshot
        .iter()
        .find(|(k, ..)| k.kind() == MetricKind::Gauge && k.key().name() == telemetry::LOCKS_HELD)
        .map(|(.., v)| match v {
            DebugValue::Gauge(g) => g.into_inner(),
            _ => f64::NAN,
        });
    assert_eq!(
        gauge,
        Some(0.0),
        "two locks taken, one released, one dropped"
    );

    let nodes_with_latency: std::collections::BTreeSet<String> = snapshot
        .iter()
        .filter(|(k, ..)| {
            k.kind() == MetricKind::Histogram && k.key().name() == telemetry::NODE_LATENCY_SECONDS
        })
        .flat_map(|(k, ..)| {
            labels(k)
                .into_iter()
                .filter(|(l, _)| l == "node")
                .map(|(_, v)| v)
        })
        .collect();
    assert_eq!(nodes_with_latency.len(), 3, "{nodes_with_latency:?}");
    assert!(
        snapshot
            .iter()
            .any(|(k, ..)| k.key().name() == telemetry::OPERATION_DURATION_SECONDS)
    );
}
