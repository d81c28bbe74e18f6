//! The validated settings of a client and the numbers one call derives from them: pure values,
//! no I/O.

use std::time::Duration;

use crate::core::quorum;
use crate::core::resource::{DEFAULT_KEY_PREFIX, KeyLayout};
use crate::core::retry::RetryPolicy;
use crate::errors::config_error::ConfigError;

/// The default drift factor: 1 % of the ttl (plus 2 ms) is allowed for clock drift.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// The default time allowed to establish a connection to a node, in the background.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The smallest per-node timeout derived from a ttl when none is configured.
pub const MIN_DERIVED_NODE_TIMEOUT: Duration = Duration::from_millis(10);
/// The largest per-node timeout derived from a ttl when none is configured.
pub const MAX_DERIVED_NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// The per-node timeout a call with `ttl` uses when none is configured: 1/100 of the ttl (in
/// whole milliseconds), within [`MIN_DERIVED_NODE_TIMEOUT`]..=[`MAX_DERIVED_NODE_TIMEOUT`].
///
/// ```
/// use std::time::Duration;
/// assert_eq!(redquorum::derived_node_timeout(Duration::from_secs(3)), Duration::from_millis(30));
/// assert_eq!(redquorum::derived_node_timeout(Duration::from_secs(60)), redquorum::MAX_DERIVED_NODE_TIMEOUT);
/// ```
pub fn derived_node_timeout(ttl: Duration) -> Duration {
    let whole_ms = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    (whole_ms / 100).clamp(MIN_DERIVED_NODE_TIMEOUT, MAX_DERIVED_NODE_TIMEOUT)
}

/// The longest ttl accepted: one year. Redis' millisecond expiry range is far larger; a lock
/// meant to outlive this should be a lease that renews itself.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// The validated settings of a [`RedLock`](crate::RedLock).
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) drift_factor: f64,
    pub(crate) per_node_timeout: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) min_validity: Duration,
    pub(crate) key_prefix: Vec<u8>,
    pub(crate) key_layout: KeyLayout,
    pub(crate) retry: RetryPolicy,
    pub(crate) restart_grace: Option<Duration>,
    pub(crate) fencing: bool,
    pub(crate) wait_for_release: bool,
    /// Releases and extends with the servers' own compare commands where they have them
    /// (`Builder::native_commands`); a single lock's token is then markable.
    pub(crate) native_commands: bool,
    /// Who holds this client's locks, in every lock's value (`Builder::holder_info`).
    pub(crate) holder_info: Option<String>,
    /// How long dropping the client's last handle waits for its clean-ups (`Builder::settle_on_drop`).
    pub(crate) settle_on_drop: Duration,
}

/// The numbers one call works with, checked before any I/O.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// The ttl, truncated to whole milliseconds (what the servers are told).
    pub(crate) ttl: Duration,
    pub(crate) ttl_ms: u64,
    pub(crate) drift: Duration,
    pub(crate) per_node_timeout: Duration,
    pub(crate) min_validity: Duration,
}

impl Timing {
    /// The validity left after a round that took `elapsed`, if it is at least the minimum.
    pub(crate) fn validity_after(&self, elapsed: Duration) -> Option<Duration> {
        quorum::validity(self.ttl, elapsed, self.drift).filter(|left| *left >= self.min_validity)
    }

    /// How long after the start of a round its lock stays valid: `ttl − drift`.
    pub(crate) fn validity_span(&self) -> Duration {
        self.ttl.saturating_sub(self.drift)
    }
}

impl Config {
    /// The lock key of `resource` in this client's layout.
    pub(crate) fn lock_key(&self, resource: &[u8]) -> Vec<u8> {
        crate::core::resource::lock_key_in(self.key_layout, &self.key_prefix, resource)
    }

    /// [`ConfigError::NeedsTaggedKeys`] for `feature` unless the layout is tagged.
    pub(crate) fn needs_tagged_keys(&self, feature: &'static str) -> Result<(), ConfigError> {
        match self.key_layout {
            KeyLayout::Tagged => Ok(()),
            KeyLayout::Shared => Err(ConfigError::NeedsTaggedKeys(feature)),
        }
    }

    /// The per-node timeout where no ttl derives it (connecting, reading): the one set, or the
    /// derived one's ceiling.
    pub(crate) fn node_timeout_without_ttl(&self) -> Duration {
        self.per_node_timeout.unwrap_or(MAX_DERIVED_NODE_TIMEOUT)
    }

    /// Checks a ttl against this configuration and derives the per-call numbers.
    pub(crate) fn timing(&self, ttl: Duration) -> Result<Timing, ConfigError> {
        if ttl > MAX_TTL {
            return Err(ConfigError::TtlTooLong { ttl, max: MAX_TTL });
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let whole_ms = Duration::from_millis(ttl_ms);
        let drift = quorum::drift(whole_ms, self.drift_factor);
        let per_node_timeout = self
            .per_node_timeout
            .unwrap_or_else(|| derived_node_timeout(whole_ms));
        let minimum = drift
            .saturating_add(per_node_timeout)
            .saturating_add(self.min_validity);
        if ttl_ms == 0 || whole_ms <= minimum {
            return Err(ConfigError::TtlTooShort { ttl, minimum });
        }
        Ok(Timing {
            ttl: whole_ms,
            ttl_ms,
            drift,
            per_node_timeout,
            min_validity: self.min_validity,
        })
    }
}

impl Default for Config {
    /// The defaults the [`Builder`](crate::Builder) documents.
    fn default() -> Self {
        Self {
            drift_factor: DEFAULT_DRIFT_FACTOR,
            per_node_timeout: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            min_validity: Duration::ZERO,
            key_prefix: DEFAULT_KEY_PREFIX.as_bytes().to_vec(),
            key_layout: KeyLayout::Tagged,
            retry: RetryPolicy::default(),
            restart_grace: None,
            fencing: false,
            wait_for_release: true,
            native_commands: true,
            holder_info: None,
            settle_on_drop: Duration::from_secs(1),
        }
    }
}
