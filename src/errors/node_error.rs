//! Why one node did not answer usefully.

use std::time::Duration;

use crate::core::node_id::NodeId;

/// Why one node did not answer usefully. Kept in the node's line of the [`Report`](crate::Report).
///
/// ```
/// # fn demo(err: &redquorum::NodeError) {
/// if let redquorum::NodeError::Redis(e) = err { println!("server said: {e}"); }
/// # }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// No reply within the per-node timeout.
    #[error("no reply within {0:?}")]
    TimedOut(Duration),
    /// The node is known to be unreachable; it was not asked, and a background task is
    /// reconnecting. The source is the last connection error.
    #[error("unreachable, reconnecting in the background")]
    Unreachable(#[source] redis::RedisError),
    /// The node answered with an error, or the connection failed during the request.
    #[error("redis error")]
    Redis(#[source] redis::RedisError),
    /// With a restart grace configured: the server has been up for less than the grace, so it
    /// may have come back empty while another client's lock was still valid. It does not vote
    /// on acquire until the grace has passed.
    #[error("restarted {up_for:?} ago, less than the restart grace of {grace:?}")]
    RecentlyRestarted {
        /// How long the server has been up (at least).
        up_for: Duration,
        /// The configured grace.
        grace: Duration,
    },
    /// Fenced acquire: the server's fence counter for this slot is not seeded for the server's
    /// current term: the server restarted, failed over or failed back since (the counter may
    /// have gone back and must not enter a token), or no seeding with a majority of the other
    /// masters, or every master, up has reached it yet. The client re-seeds it and tries again
    /// at once; [`RedLock::fence_seeding`](crate::RedLock::fence_seeding) (`redquorum fence`)
    /// shows which masters are seeded (see `DESIGN.md` §6, "Restarted masters").
    #[error(
        "fence counter not seeded for the server's current term (restarted, failed over, or not \
         seeded yet): seeding it needs the other masters up; `redquorum fence` shows which are \
         seeded"
    )]
    Unseeded,
    /// Fenced acquire, confirm round: a re-seed read this master's counter after it granted
    /// our lock, so its confirmation does not count (it proves nothing about the lock).
    #[error("fence counter re-seeded since it granted the lock; the confirmation does not count")]
    SeededSinceGrant,
    /// Fenced acquire: the server would not say its `run_id` (`INFO server`; an ACL without
    /// `+info`), so the client cannot tell whether its fence counter survived restarts. Plain
    /// locks are unaffected.
    #[error("INFO server refused: cannot tell whether the fence counter survived a restart")]
    Unidentified,
    /// The node reached a server that another configured node already speaks for: the same
    /// `run_id`, so one server under two names (`127.1` and `127.0.0.1`, a second bind
    /// address, a Unix socket, a port forward, a DNS name that moved). It does not vote, so the
    /// server counts once; it looks again at each reconnect (every 250 ms at most), and votes
    /// once it reaches a server of its own.
    #[error("reaches the same server as {other} (run_id {run_id}); it does not vote twice")]
    SameServer {
        /// The node that speaks for that server.
        other: NodeId,
        /// The server's `run_id`.
        run_id: String,
    },
    /// A Cluster voter: the server that serves the resource's slot was a replica when the
    /// client connected to it (a failover moved the slot to it, or back to it). It does not
    /// vote on that connection; the client reconnects to read its role and term again, and its
    /// restart grace starts with its promotion.
    #[error("connected while the server was a replica; reading its role again")]
    NotMaster,
    /// A Cluster voter: no master of the cluster serves the resource's hash slot (the slot map
    /// read from its nodes leaves it out, as while the cluster is being formed or after its
    /// only master for the slot was removed).
    #[error("no master of the cluster serves hash slot {slot}")]
    SlotUnserved {
        /// The hash slot of the resource's keys.
        slot: u16,
    },
    /// The node answered with a value none of redquorum's scripts returns (shown, truncated).
    #[error("unexpected reply {0}")]
    UnexpectedReply(String),
    /// The server refused the node's credentials (a wrong user or password, or none where one
    /// is required: `WRONGPASS`, `NOAUTH`). Unlike an outage this does not heal by itself: the
    /// node's URL needs the right credentials.
    #[error("authentication failed: check the user and password in the node's URL")]
    AuthenticationFailed(#[source] redis::RedisError),
    /// Something answers at the node's address, but not in the Redis protocol (an HTTP
    /// server, a TLS port reached without TLS, another service): the address is wrong.
    #[error("not a Redis server: what it answered is not the Redis protocol")]
    NotRedis(#[source] redis::RedisError),
}

impl NodeError {
    /// A failed connection (or a failed first command on it): refused credentials and a peer
    /// that does not speak Redis are errors of their own, every other failure an outage the
    /// background reconnect may heal.
    pub(crate) fn connecting(err: redis::RedisError) -> Self {
        if is_refused_credentials(&err) {
            Self::AuthenticationFailed(err)
        } else if err.kind() == redis::ErrorKind::Parse {
            Self::NotRedis(err)
        } else {
            Self::Unreachable(err)
        }
    }

    /// An error answer to a request: refused credentials are their own error, any other
    /// answer the server's.
    pub(crate) fn answered(err: redis::RedisError) -> Self {
        if is_refused_credentials(&err) {
            Self::AuthenticationFailed(err)
        } else {
            Self::Redis(err)
        }
    }
}

/// Whether the server refused who we said we are (or that we said nothing).
pub(crate) fn is_refused_credentials(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("NOAUTH" | "WRONGPASS"))
}
