//! Configuration and argument errors, found before any I/O.

use std::time::Duration;

use crate::core::node_id::NodeId;

/// A configuration or argument error, found before any I/O (but
/// [`DuplicateNode`](Self::DuplicateNode), which [`RedLock::connect`](crate::RedLock::connect)
/// also finds by the servers' `run_id`).
///
/// ```
/// let err = redquorum::RedLock::new(Vec::<&str>::new()).unwrap_err();
/// assert!(matches!(err, redquorum::Error::Config(redquorum::ConfigError::NoNodes)));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The node list is empty.
    #[error("no nodes given")]
    NoNodes,
    /// A node could not be parsed (malformed URL, unsupported scheme, TLS not compiled in).
    #[error("node {index} is invalid")]
    InvalidNode {
        /// Position in the node list.
        index: usize,
        /// The parser's error.
        #[source]
        source: redis::RedisError,
    },
    /// Two entries name the same server; one server must never count twice toward a majority.
    ///
    /// Found by address when the client is built (`localhost`, `127.0.0.1`, `::1` and
    /// `::ffff:127.0.0.1` are one host), and by `run_id` when [`RedLock::connect`] finds two
    /// nodes answering as one server process.
    ///
    /// [`RedLock::connect`]: crate::RedLock::connect
    #[error("{second} names the same server as {first}")]
    DuplicateNode {
        /// The first entry.
        first: NodeId,
        /// The entry that repeats it.
        second: NodeId,
    },
    /// The resource name is empty.
    #[error("the resource name is empty")]
    EmptyResource,
    /// The resource name is longer than [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN).
    #[error("the resource name is {len} bytes, more than the maximum of {max}")]
    ResourceTooLong {
        /// The name's length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The ttl leaves no validity once drift, the per-node timeout and the minimum validity
    /// are taken off (this includes a ttl of zero).
    #[error(
        "a ttl of {ttl:?} is too short: it must be more than {minimum:?} (drift + per-node timeout + minimum validity)"
    )]
    TtlTooShort {
        /// The ttl asked for.
        ttl: Duration,
        /// The smallest ttl that would leave any validity.
        minimum: Duration,
    },
    /// The ttl is longer than [`MAX_TTL`](crate::MAX_TTL).
    #[error("a ttl of {ttl:?} is longer than the maximum of {max:?}")]
    TtlTooLong {
        /// The ttl asked for.
        ttl: Duration,
        /// The maximum.
        max: Duration,
    },
    /// The drift factor is not in `[0, 1)`.
    #[error("the drift factor {0} is not in [0, 1)")]
    InvalidDriftFactor(f64),
    /// A timeout that must be positive is zero.
    #[error("the {0} must be greater than zero")]
    ZeroTimeout(&'static str),
    /// A timeout or interval is longer than [`MAX_TTL`](crate::MAX_TTL): no lock outlives it,
    /// and instants that far ahead overflow.
    #[error("the {what} of {value:?} is longer than the maximum of {max:?}")]
    TooLong {
        /// Which setting.
        what: &'static str,
        /// The value asked for.
        value: Duration,
        /// The maximum.
        max: Duration,
    },
    /// A semaphore of zero permits.
    #[error("a semaphore needs at least one permit")]
    NoPermits,
    /// A semaphore of more permits than [`MAX_PERMITS`](crate::MAX_PERMITS) (each acquire
    /// tries every permit on every master).
    #[error("{permits} permits are more than the maximum of {max}")]
    TooManyPermits {
        /// The permits asked for.
        permits: u32,
        /// The maximum.
        max: u32,
    },
    /// A holder description (`Builder::holder_info`) that is blank, longer than 200 bytes, or
    /// holds anything but printable ASCII, or a `:` (the leader info's separator).
    #[error("holder info {info:?}: {why}")]
    InvalidHolderInfo {
        /// The description given.
        info: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A feature that keeps keys of its own beside the lock's (fencing, elections,
    /// semaphores) asked of a client with the [`Shared`](crate::KeyLayout::Shared) key
    /// layout: other clients do not know those keys, and they could not share the lock's
    /// hash slot.
    #[error(
        "{0} need the tagged key layout; the shared layout (for other clients' locks) offers plain locks only"
    )]
    NeedsTaggedKeys(&'static str),
    /// An operation that hands out no fencing token on a client built with
    /// [`fencing(true)`](crate::Builder::fencing): its locks would let a stalled holder's
    /// token be accepted after them.
    #[error("{0} carry no fencing token, and this client is built with fencing")]
    Unfenced(&'static str),
    /// A multi-resource lock of no resources.
    #[error("a multi-resource lock needs at least one resource")]
    NoResources,
    /// The same resource twice in one multi-resource lock.
    #[error("{0} appears twice in one multi-resource lock")]
    DuplicateResource(String),
    /// More resources in one lock than
    /// [`MAX_RESOURCES_PER_LOCK`](crate::MAX_RESOURCES_PER_LOCK).
    #[error("{len} resources in one lock are more than the maximum of {max}")]
    TooManyResources {
        /// The resources asked for.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The retry policy allows no attempt at all.
    #[error("the retry policy allows no attempt")]
    NoAttempts,
    /// A multi-resource lock on a client with a Redis Cluster voter, whose resources' keys
    /// are in different hash slots: the cluster runs one script on one slot only. Names that
    /// start with one hash tag share a slot (`{order:42}:stock` and `{order:42}:invoice`).
    #[error(
        "{first} and {other} are in different hash slots, and a Redis Cluster voter locks one slot at once; start both names with one hash tag, as {{order:42}}:stock and {{order:42}}:invoice"
    )]
    CrossSlot {
        /// One resource of the set.
        first: String,
        /// A resource whose key is in another slot than `first`'s.
        other: String,
    },
}
