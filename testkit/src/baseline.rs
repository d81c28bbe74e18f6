//! The raw baseline: the minimum any Redlock client must do, written directly on the `redis`
//! crate, with nothing of redquorum in it. `SET key token NX PX ttl` fanned out to every master
//! and decided at a majority, then the compare-and-delete script fanned out to every master,
//! waiting for all of them. The token is 20 random bytes in hex, as the Redlock page asks and
//! as redquorum's is. No timeouts, no report, no cleanup of a lost round, no waiting: a floor,
//! not a client.
//!
//! Shared by `redquorum-lab bench`, `redquorum-lab scale` and the criterion benches (`benches/redlock.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rand::Rng;
use redis::aio::MultiplexedConnection;

/// The ttl every benchmark lock is taken for.
pub const TTL: Duration = Duration::from_secs(10);

/// The compare-and-delete every Redlock sends to release.
const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// An error of the baseline client.
pub type BaselineError = Box<dyn std::error::Error + Send + Sync>;

/// The raw baseline client: one multiplexed connection per master.
#[derive(Clone, Debug)]
pub struct Baseline {
    conns: Vec<MultiplexedConnection>,
    release: Arc<redis::Script>,
}

impl Baseline {
    /// Connects to every master.
    pub async fn connect(urls: &[String]) -> Result<Self, BaselineError> {
        let mut conns = Vec::new();
        for url in urls {
            conns.push(
                redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            );
        }
        let release = Arc::new(redis::Script::new(RELEASE));
        // Loaded on every node before the first timed pair.
        for conn in &conns {
            release.load_async(&mut conn.clone()).await?;
        }
        Ok(Self { conns, release })
    }

    /// One acquire and release of `key`. Returns how long the acquire half took (the `SET`s
    /// until a majority granted): one round trip to the majority-th fastest master.
    pub async fn pair(&self, key: &str) -> Result<Duration, BaselineError> {
        let start = Instant::now();
        let token = random_token();
        let ttl_ms = u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX);
        let mut sets: FuturesUnordered<_> = self
            .conns
            .iter()
            .map(|c| {
                let mut c = c.clone();
                let token = token.as_str();
                async move {
                    redis::cmd("SET")
                        .arg(key)
                        .arg(token)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl_ms)
                        .query_async::<Option<String>>(&mut c)
                        .await
                }
            })
            .collect();
        let majority = self.conns.len() / 2 + 1;
        let mut granted = 0;
        while let Some(reply) = sets.next().await {
            if matches!(reply, Ok(Some(_))) {
                granted += 1;
                if granted == majority {
                    break;
                }
            }
        }
        drop(sets);
        let acquired = start.elapsed();
        if granted < majority {
            return Err("baseline: no majority".into());
        }
        let deletes = self.conns.iter().map(|c| {
            let mut c = c.clone();
            let script = self.release.clone();
            let token = token.as_str();
            async move { script.key(key).arg(token).invoke_async::<i64>(&mut c).await }
        });
        futures::future::join_all(deletes).await;
        Ok(acquired)
    }
}

/// 20 random bytes in lower-case hex.
fn random_token() -> String {
    let mut bytes = [0u8; 20];
    rand::rng().fill_bytes(&mut bytes);
    bytes
        .iter()
        .flat_map(|b| [b >> 4, b & 0x0f])
        .map(|nibble| char::from_digit(u32::from(nibble), 16).unwrap_or('0'))
        .collect()
}
