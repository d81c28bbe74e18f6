//! The raw baseline: the minimum any Redlock client must do, written directly on the `redis`
//! crate. `SET key token NX PX ttl` fanned out to all masters, decided at a majority; then the
//! compare-and-delete script fanned out to all, waiting for every answer. Shared by the bench
//! entry point (`examples/bench.rs`) and the criterion benches (`benches/`).
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;

pub const TTL: Duration = Duration::from_secs(10);
pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The raw baseline client.
#[derive(Clone)]
pub struct Raw {
    conns: Vec<MultiplexedConnection>,
    release: Arc<redis::Script>,
}

impl Raw {
    pub async fn new(urls: &[String]) -> Res<Self> {
        let mut conns = Vec::new();
        for url in urls {
            conns.push(
                redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            );
        }
        let release = redis::Script::new(
            "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
        );
        Ok(Self {
            conns,
            release: Arc::new(release),
        })
    }

    /// SET NX PX on all, decided at a majority; then compare-and-delete on all.
    pub async fn pair(&self, key: &str, token: &str) -> Res<()> {
        let mut sets: FuturesUnordered<_> = self
            .conns
            .iter()
            .map(|c| {
                let mut c = c.clone();
                async move {
                    redis::cmd("SET")
                        .arg(key)
                        .arg(token)
                        .arg("NX")
                        .arg("PX")
                        .arg(TTL.as_millis() as u64)
                        .query_async::<Option<String>>(&mut c)
                        .await
                }
            })
            .collect();
        let mut granted = 0;
        while let Some(r) = sets.next().await {
            if matches!(r, Ok(Some(_))) {
                granted += 1;
                if granted == self.conns.len() / 2 + 1 {
                    break;
                }
            }
        }
        drop(sets);
        if granted <= self.conns.len() / 2 {
            return Err("baseline: no majority".into());
        }
        let deletes = self.conns.iter().map(|c| {
            let mut c = c.clone();
            let script = self.release.clone();
            async move { script.key(key).arg(token).invoke_async::<i64>(&mut c).await }
        });
        futures::future::join_all(deletes).await;
        Ok(())
    }
}
