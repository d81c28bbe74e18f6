//! The builder: collects a client's settings and validates them before any I/O.

use std::time::Duration;

use crate::core::config::{Config, MAX_TTL};
use crate::core::retry::{Jitter, RetryPolicy};
use crate::errors::config_error::ConfigError;
use crate::errors::error::Error;
use crate::protocol::shared::Shared;
use crate::voters::node::Node;
use crate::voters::server_identity::ServerIdentities;
use crate::voters::source::{IntoNode, NodeSource};

/// Configures a [`RedLock`](crate::RedLock); start from [`RedLock::builder`](crate::RedLock::builder).
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | [`drift_factor`](Self::drift_factor) | [`DEFAULT_DRIFT_FACTOR`](crate::DEFAULT_DRIFT_FACTOR) (0.01) |
/// | [`per_node_timeout`](Self::per_node_timeout) | ttl / 100, clamped to [10 ms, 50 ms] (50 ms for a 10 s ttl) |
/// | [`connect_timeout`](Self::connect_timeout) | [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT) (1 s) |
/// | [`min_validity`](Self::min_validity) | zero: any validity left is enough |
/// | [`key_prefix`](Self::key_prefix) | [`DEFAULT_KEY_PREFIX`](crate::DEFAULT_KEY_PREFIX) (`redquorum:`) |
/// | [`retry`](Self::retry) | [`RetryPolicy::default()`] |
/// | [`retry_seed`](Self::retry_seed) | none: delays drawn from the thread RNG |
/// | [`restart_grace`](Self::restart_grace) | none: a restarted master votes at once |
/// | [`fencing`](Self::fencing) | off |
/// | [`wait_for_release`](Self::wait_for_release) | on: waiters wake on release (pub/sub) |
/// | [`native_commands`](Self::native_commands) | on: a server's own compare commands where it has them |
///
/// ```
/// # fn main() -> Result<(), redquorum::Error> {
/// use std::time::Duration;
/// let rl = redquorum::RedLock::builder(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .per_node_timeout(Duration::from_millis(20))
///     .drift_factor(0.02)
///     .key_prefix("locks:")
///     .retry(redquorum::RetryPolicy::default().max_attempts(Some(5)))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until build() is called"]
pub struct Builder {
    nodes: Result<Vec<NodeSource>, ConfigError>,
    config: Config,
    retry_seed: Option<u64>,
}

impl Builder {
    pub(crate) fn new<I>(nodes: I) -> Self
    where
        I: IntoIterator,
        I::Item: IntoNode,
    {
        let nodes = nodes
            .into_iter()
            .enumerate()
            .map(|(index, node)| {
                node.into_node()
                    .map_err(|source| ConfigError::InvalidNode { index, source })
            })
            .collect();
        Self {
            nodes,
            config: Config::default(),
            retry_seed: None,
        }
    }

    /// The share of the ttl allowed for clock drift between client and servers, in `[0, 1)`.
    /// The allowance is `ttl × factor + 2 ms`. (The `redquorum` command takes less than 0.5:
    /// its lease renews every third of the ttl, and needs validity left well past that.)
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.config.drift_factor = factor;
        self
    }

    /// How long to wait for any one node's reply before counting it as failed. The default is
    /// derived from each call's ttl (see the table above); it must leave room in the ttl.
    pub fn per_node_timeout(mut self, timeout: Duration) -> Self {
        self.config.per_node_timeout = Some(timeout);
        self
    }

    /// How long one background connection attempt may take. Callers never wait for longer than
    /// their per-node timeout; this only bounds the background task.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Never return a lock with less validity than this (the default, zero, accepts any
    /// positive validity). Raising it makes a slow round fail rather than hand out a lock too
    /// short to use.
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.config.min_validity = min;
        self
    }

    /// The prefix of every key redquorum writes (binary-safe): a lock's key is
    /// `prefix{resource}`, the braces a Redis Cluster hash tag, so every key of one resource
    /// shares its slot ([`KeyLayout::Tagged`](crate::KeyLayout)).
    pub fn key_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.config.key_prefix = prefix.as_ref().to_vec();
        self
    }

    /// How a resource name becomes its key: [`KeyLayout::Tagged`](crate::KeyLayout) (the
    /// default, `prefix{resource}`) or [`KeyLayout::Shared`](crate::KeyLayout) (`prefix` +
    /// `resource`, to share locks with other languages' Redlock clients; plain locks only).
    pub fn key_layout(mut self, layout: crate::KeyLayout) -> Self {
        self.config.key_layout = layout;
        self
    }

    /// The retry policy of [`RedLock::acquire`](crate::RedLock::acquire).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// Do not let a master vote on acquire until it has been up for `grace`; set it to the
    /// longest ttl you use (with Sentinel voters, plus the groups' `min-replicas-max-lag`:
    /// a failover is a restart of that vote, see [`SentinelNode`](crate::SentinelNode)).
    ///
    /// A master that crashed and came back **empty** (no `appendfsync always`) before the ttl
    /// of a lock it had granted ran out can grant that lock again. Operators should delay such
    /// restarts; this lets the client enforce it. redquorum reads the server's
    /// `uptime_in_seconds` (`INFO server`, and `INFO replication` for a promotion) on every
    /// (re)connect; a master up for less than
    /// `grace` is reported as [`NodeError::RecentlyRestarted`](crate::NodeError::RecentlyRestarted)
    /// for acquire (extend and release still go to it). A new `run_id`, or a promotion, counts
    /// as a start:
    /// - a master whose `run_id` changed under the client is held out for `grace` on the
    ///   client's monotonic clock;
    /// - `uptime_in_seconds`, a wall-clock reading, is only a hint for a master the client never
    ///   saw, and an unusable one starts the grace now.
    ///
    /// The price: after restarts, fewer masters vote for up to `grace`, and the ACL user needs
    /// `+info`.
    pub fn restart_grace(mut self, grace: Duration) -> Self {
        self.config.restart_grace = Some(grace);
        self
    }

    /// Give every lock a fencing token ([`Lock::fencing_token`](crate::Lock::fencing_token)).
    ///
    /// Each master keeps one counter per hash slot (`prefix{TAG}:slot:fence`, no expiry), next
    /// to a marker of the server term it was seeded for. The acquire script increments it where
    /// it sets the key; the token is the highest counter among the granting majority, written
    /// back (never lowered) on every master that still holds our key, and usable only once a
    /// majority of the masters that granted confirmed it. Any later holder's majority shares a
    /// master with ours, whose counter is already at our token, so its token is higher: no
    /// clock is involved.
    ///
    /// A master that restarted or failed over does not count until its counters are re-seeded
    /// from the others: in the background for every slot, and at once for a slot an acquire
    /// needs ([`RedLock::fence_seeding`](crate::RedLock::fence_seeding)). A majority that
    /// loses its counters at once cannot be recovered: run the masters with
    /// `appendfsync always`. The argument: `DESIGN.md` §5.
    ///
    /// Costs one more round trip per acquire, and the ACL user needs `+incr`.
    ///
    /// Off by default here, on in the `redquorum` command: a library caller decides whether
    /// the store it protects can check a token, and pays the round trip only then; a command
    /// run under the lock gets its token in `REDQUORUM_FENCING_TOKEN` for free, and its
    /// operator may not know yet that the store will want it.
    pub fn fencing(mut self, enabled: bool) -> Self {
        self.config.fencing = enabled;
        self
    }

    /// Wake waiting acquires when the lock is released (on by default).
    ///
    /// Every release publishes on the resource's channel (`prefix{resource}:released`) on
    /// every node. An acquire that retries subscribes there on every node (one shared pub/sub
    /// connection per node) and retries as soon as a message arrives from any node, instead
    /// of sleeping out its retry delay; it also never sleeps past the holder's remaining ttl
    /// as the nodes reported it. Timed retries remain the fallback, so a lost message only
    /// costs a delay. The ACL user needs `+publish +subscribe +unsubscribe` and the channel
    /// pattern; without them waiting degrades to timed retries.
    ///
    /// Waiters also queue on the masters (`prefix{resource}:queue` and `:waiters`), and a
    /// release hands the lock to the first live one, so they take turns in arrival order
    /// (`DESIGN.md` §7); the queue needs `+exists +time +zadd +zrange +zrem +hdel`, without
    /// which waiters race instead. Fenced acquires queue too. A waiter's turn comes from the
    /// servers' clocks, never its host's. Off: timed retries only.
    pub fn wait_for_release(mut self, enabled: bool) -> Self {
        self.config.wait_for_release = enabled;
        self
    }

    /// Whether a lock's release and extend use the server's own compare commands where the
    /// server has them (`DELIFEQ` on Valkey 9.0 and later, `DELEX … IFEQ` on Redis 8.4, `SET
    /// … IFEQ … PX` on Valkey 8.1 and Redis 8.4), instead of a Lua script: one plain command
    /// does the job for a fifth of a script's server CPU. Read from each server's `INFO` at
    /// every connection, so a failover to an older server uses scripts again; a server that
    /// refuses one (an ACL without `+delifeq`, a renamed command) uses scripts on that
    /// connection from then on, and the round goes on.
    ///
    /// A release goes native only while nobody waits for it: a waiter the holder refuses marks
    /// the lock's value (`n-` becomes `w-`), so the server's compare-and-delete no longer
    /// matches and the release script hands the lock over and publishes (`DESIGN.md` §3).
    /// Lock values written with this on begin with `n-`, a form that earlier redquorum
    /// releases do not accept as their own: clients of one lock must all run a release with
    /// this setting (on or off), not an earlier one. Off: scripts for every job, and lock
    /// values as before (no waiter marks them). Semaphores, multi-resource locks, fencing and the
    /// queue always use scripts.
    pub fn native_commands(mut self, enabled: bool) -> Self {
        self.config.native_commands = enabled;
        self
    }

    /// Describes who holds this client's locks (a host, a process, a job: at most 200 bytes of
    /// printable ASCII, no `:`), for people looking: every lock, permit and leadership this client
    /// takes carries it in its value, after the token and the time it was taken, and
    /// [`Holding::holder_about`](crate::Holding::holder_about) and `redquorum status` show it.
    ///
    /// Never trusted for anything: the token alone decides who holds. It lives and goes with
    /// the lock (no key of its own, nothing left after a release), and costs only its bytes
    /// in each request. Off by default.
    pub fn holder_info(mut self, about: impl Into<String>) -> Self {
        self.config.holder_info = Some(about.into());
        self
    }

    /// How long dropping the client's last handle waits for the clean-ups its locks left
    /// running (a release's deletes beyond the majority, a dropped lock's release), when it is
    /// dropped at the end of `#[tokio::main]` (see [`RedLock::settle`](crate::RedLock::settle)
    /// for where else): 1 s by default, so a program that returns from `main` leaves nothing
    /// behind. Zero: not at all, for a program that calls
    /// [`RedLock::settle`](crate::RedLock::settle) with a bound of its own (a hung master's
    /// delete can take the whole wait).
    pub fn settle_on_drop(mut self, within: Duration) -> Self {
        self.config.settle_on_drop = within;
        self
    }

    /// Seeds the random retry delays, so a test run can be replayed exactly.
    pub fn retry_seed(mut self, seed: u64) -> Self {
        self.retry_seed = Some(seed);
        self
    }

    /// Validates the configuration and creates the state the client's handles share
    /// ([`build`](Self::build) wraps it in a [`RedLock`]).
    pub(crate) fn into_shared(self) -> Result<Shared, Error> {
        let clients = self.nodes?;
        if clients.is_empty() {
            return Err(ConfigError::NoNodes.into());
        }
        let config = self.config;
        if !(0.0..1.0).contains(&config.drift_factor) {
            return Err(ConfigError::InvalidDriftFactor(config.drift_factor).into());
        }
        if config.per_node_timeout == Some(Duration::ZERO) {
            return Err(ConfigError::ZeroTimeout("per-node timeout").into());
        }
        if let Some(info) = &config.holder_info {
            holder_info_is_valid(info)?;
        }
        if config.connect_timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout("connect timeout").into());
        }
        for (what, value) in [
            ("connect timeout", Some(config.connect_timeout)),
            ("per-node timeout", config.per_node_timeout),
        ] {
            if let Some(value) = value.filter(|v| *v > MAX_TTL) {
                return Err(ConfigError::TooLong {
                    what,
                    value,
                    max: MAX_TTL,
                }
                .into());
            }
        }
        if !config.retry.allows_any_attempt() {
            return Err(ConfigError::NoAttempts.into());
        }
        if config.fencing {
            config.needs_tagged_keys("fencing tokens")?;
        }
        let watch = crate::voters::release_watch::ReleaseWatch::new(clients.clone());
        let servers = ServerIdentities::new();
        let nodes: Vec<Node> = clients
            .into_iter()
            .enumerate()
            .map(|(index, client)| {
                Node::new(
                    index,
                    client,
                    config.connect_timeout,
                    config.restart_grace,
                    servers.clone(),
                )
            })
            .collect();
        for (i, later) in nodes.iter().enumerate() {
            if let Some(earlier) = nodes.iter().take(i).find(|n| n.same_server(later)) {
                return Err(ConfigError::DuplicateNode {
                    first: earlier.id().clone(),
                    second: later.id().clone(),
                }
                .into());
            }
        }
        if nodes.len().is_multiple_of(2) || nodes.len() == 1 {
            tracing::warn!(
                nodes = nodes.len(),
                "an even number of nodes, or a single node, tolerates no more failures than one node fewer; an odd N >= 3 is recommended"
            );
        }
        Ok(Shared::new(
            nodes.into(),
            config,
            Jitter::new(self.retry_seed),
            watch,
        ))
    }
}

/// The longest holder description [`Builder::holder_info`] takes, in bytes.
pub const MAX_HOLDER_INFO: usize = 200;

/// A holder description is shown to people and stored inside each lock's value: printable,
/// bounded, and without the leader info's separator.
fn holder_info_is_valid(info: &str) -> Result<(), ConfigError> {
    let why = if info.is_empty() {
        "empty"
    } else if info.len() > MAX_HOLDER_INFO {
        "longer than 200 bytes"
    } else if info.trim().is_empty() {
        "blank"
    } else if !info.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
        "holds a character other than printable ASCII (it is shown on one line, in terminals)"
    } else if info.contains(':') {
        "holds a ':' (the leader info's separator)"
    } else {
        return Ok(());
    };
    Err(ConfigError::InvalidHolderInfo {
        info: info.chars().take(MAX_HOLDER_INFO).collect(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedLock;

    fn config() -> Config {
        Builder::new(["redis://127.0.0.1:1"]).config
    }

    #[test]
    fn derived_node_timeout_follows_the_ttl() {
        let c = config();
        let t = |s| {
            c.timing(Duration::from_millis(s))
                .expect("valid")
                .per_node_timeout
        };
        assert_eq!(t(10_000), Duration::from_millis(50));
        assert_eq!(t(2_000), Duration::from_millis(20));
        assert_eq!(t(100), Duration::from_millis(10));
    }

    #[test]
    fn ttls_that_leave_no_validity_are_rejected() {
        let c = config();
        for ttl in [0u64, 1, 5, 12] {
            assert!(
                matches!(
                    c.timing(Duration::from_millis(ttl)),
                    Err(ConfigError::TtlTooShort { .. })
                ),
                "{ttl} ms"
            );
        }
        // 10 ms node timeout + 2.x ms drift: 13 ms is the first that fits.
        assert!(c.timing(Duration::from_millis(13)).is_ok());
        assert!(matches!(
            c.timing(Duration::from_micros(900)),
            Err(ConfigError::TtlTooShort { .. })
        ));
        assert!(matches!(
            c.timing(MAX_TTL + Duration::from_millis(1)),
            Err(ConfigError::TtlTooLong { .. })
        ));
        assert!(matches!(
            c.timing(Duration::MAX),
            Err(ConfigError::TtlTooLong { .. })
        ));
        assert!(c.timing(MAX_TTL).is_ok());
    }

    #[test]
    fn a_node_timeout_not_below_the_ttl_is_rejected() {
        let mut c = config();
        c.per_node_timeout = Some(Duration::from_secs(5));
        for ttl in [Duration::from_secs(2), Duration::from_secs(5)] {
            assert!(
                matches!(c.timing(ttl), Err(ConfigError::TtlTooShort { minimum, .. }) if minimum > Duration::from_secs(5)),
                "{ttl:?}"
            );
        }
        assert!(c.timing(Duration::from_secs(6)).is_ok());
    }

    #[test]
    fn sub_millisecond_ttl_is_truncated_not_rounded_up() {
        let t = config()
            .timing(Duration::from_micros(1_999_999))
            .expect("valid");
        assert_eq!(t.ttl_ms, 1999);
        assert_eq!(t.ttl, Duration::from_millis(1999));
    }

    #[test]
    fn build_rejects_bad_settings_before_io() {
        let one = ["redis://127.0.0.1:1"];
        let is_config = |r: Result<RedLock, Error>| matches!(r, Err(Error::Config(_)));
        assert!(is_config(Builder::new(Vec::<&str>::new()).build()));
        assert!(is_config(Builder::new(["not a url"]).build()));
        assert!(is_config(
            Builder::new(["redis://127.0.0.1:1", "redis://localhost:1"]).build()
        ));
        assert!(is_config(Builder::new(one).drift_factor(1.0).build()));
        assert!(is_config(Builder::new(one).drift_factor(-0.1).build()));
        assert!(is_config(Builder::new(one).drift_factor(f64::NAN).build()));
        assert!(is_config(
            Builder::new(one).per_node_timeout(Duration::ZERO).build()
        ));
        // Past MAX_TTL: a typed error, not a panic inside a task or inspect().
        for too_long in [Duration::MAX, MAX_TTL + Duration::from_secs(1)] {
            assert!(matches!(
                Builder::new(one).connect_timeout(too_long).build(),
                Err(Error::Config(ConfigError::TooLong {
                    what: "connect timeout",
                    ..
                }))
            ));
            assert!(matches!(
                Builder::new(one).per_node_timeout(too_long).build(),
                Err(Error::Config(ConfigError::TooLong {
                    what: "per-node timeout",
                    ..
                }))
            ));
        }
        assert!(is_config(
            Builder::new(one).connect_timeout(Duration::ZERO).build()
        ));
        assert!(is_config(
            Builder::new(one)
                .retry(RetryPolicy::default().max_attempts(Some(0)))
                .build()
        ));
        for bad in [
            "",
            "  ",
            "a:b",
            "line\nbreak",
            "rtl\u{202e}",
            &"x".repeat(201),
        ] {
            assert!(matches!(
                Builder::new(one).holder_info(bad).build(),
                Err(Error::Config(ConfigError::InvalidHolderInfo { .. }))
            ));
        }
        assert!(
            Builder::new(one)
                .holder_info("web1 pid 42 backup.sh")
                .build()
                .is_ok()
        );
        assert!(Builder::new(one).build().is_ok());
    }

    #[cfg(not(any(feature = "tls", feature = "tls-aws-lc-rs")))]
    #[test]
    fn rediss_without_tls_compiled_in_is_a_config_error() {
        let err = Builder::new(["redis://127.0.0.1:1", "rediss://127.0.0.1:2"]).build();
        assert!(
            matches!(
                err,
                Err(Error::Config(ConfigError::InvalidNode { index: 1, .. }))
            ),
            "{err:?}"
        );
    }

    #[cfg(any(feature = "tls", feature = "tls-aws-lc-rs"))]
    #[test]
    fn rediss_with_tls_compiled_in_is_accepted() {
        assert!(Builder::new(["rediss://127.0.0.1:2"]).build().is_ok());
    }

    #[test]
    fn malformed_node_error_names_its_position() {
        let err = Builder::new(["redis://127.0.0.1:1", "redis://127.0.0.1:x"]).build();
        assert!(
            matches!(
                err,
                Err(Error::Config(ConfigError::InvalidNode { index: 1, .. }))
            ),
            "{err:?}"
        );
    }
}
