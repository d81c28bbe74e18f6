//! The restart grace's arithmetic: when a server's grace counts from, from what `INFO` says
//! of its identity, age and role, and what a supervisor keeps across reconnects.

use std::time::{Duration, Instant};

use redis::RedisError;

use crate::core::clock::Awake;
use crate::core::server_clock::ServerClock;
use redis::aio::MultiplexedConnection;

/// What `INFO server` says about the server's identity and age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ServerAge {
    pub(super) run_id: Option<String>,
    /// `uptime_in_seconds`, when it is a number of seconds at all (Redis computes it from the
    /// wall clock: a stepped clock can make it negative or absurd).
    pub(super) uptime: Option<u64>,
    /// A master promoted from replica since it started.
    pub(super) promoted: bool,
    /// The server says it is a replica (`role:slave`).
    pub(super) replica: bool,
    /// `master_replid`: changes when the server is promoted or resyncs as a replica, so the
    /// same `run_id` with another replication id is another term as this voter's master.
    pub(super) replid: Option<String>,
    /// What the server runs: `valkey 9.1.2`, `redis 7.0.15`. Valkey says `server_name:valkey`
    /// and its `valkey_version` (its `redis_version` is a compatibility figure); Redis says
    /// only `redis_version`.
    pub(super) software: Option<String>,
    /// The server's wall clock (`server_time_usec`), read with the round trip that asked for
    /// it: waiters' places in a lock's queue are read from the servers' clocks
    /// (`core::server_clock`).
    pub(super) clock: Option<ServerClock>,
}

/// The grace start a supervisor keeps for the server it last connected to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeptStart {
    pub(super) run_id: String,
    pub(super) replid: Option<String>,
    pub(super) since: Instant,
}

/// The grace start for a connection to the server `age` describes: the kept one when it is
/// the same server in the same term (same `run_id` and replication id: a reconnect must not
/// recompute it from an uptime that predates a promotion), else [`grace_starts`].
pub(super) fn grace_start(
    kept: Option<&KeptStart>,
    now: Instant,
    previous_run_id: Option<&str>,
    age: &ServerAge,
) -> Instant {
    match kept {
        Some(kept)
            if age.run_id.as_deref() == Some(kept.run_id.as_str()) && age.replid == kept.replid =>
        {
            kept.since
        }
        _ => grace_starts(now, previous_run_id, age),
    }
}

impl ServerAge {
    pub(super) fn parse(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        Self {
            run_id: field("run_id:").filter(|id| !id.is_empty()),
            uptime: field("uptime_in_seconds:").and_then(|v| v.parse::<u64>().ok()),
            // A master whose replication history has a second id was a replica once and was
            // promoted since it started (`second_repl_offset` is -1 otherwise).
            replica: field("role:").as_deref() == Some("slave"),
            promoted: field("role:").as_deref() == Some("master")
                && field("second_repl_offset:")
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|offset| offset >= 0),
            replid: field("master_replid:").filter(|id| !id.is_empty()),
            // Valkey before 8 says its name but no `valkey_version`: its `redis_version` then.
            software: match field("server_name:").as_deref() {
                Some("valkey") => field("valkey_version:")
                    .or_else(|| field("redis_version:"))
                    .map(|version| format!("valkey {version}")),
                _ => field("redis_version:").map(|version| format!("redis {version}")),
            },
            // Paired with the round trip that read it, by `server_age`.
            clock: None,
        }
    }
}

/// When the restart grace of a node counts from, on our monotonic clock.
///
/// - A `run_id` different from the one this client saw before: the server restarted under
///   our eyes; the grace starts now, whatever its uptime says (a wall-clock reading).
/// - No usable uptime (negative, unparsable, missing): the grace starts now, so the node is
///   quarantined for one grace and then votes, instead of never connecting.
/// - A master promoted from replica since it started (a failover, as inside a
///   Sentinel-resolved voter), seen by this client for the first time: its uptime says
///   nothing of when it became this voter's master, so the grace starts now (once: the
///   supervisor keeps the start while the `run_id` and the replication id stay the same,
///   see [`grace_start`]).
/// - Otherwise the uptime is a hint for a server this client never saw before: the start is
///   placed `uptime` ago (truncated to whole seconds, so at or after the real start, and a
///   grace measured from it never ends early).
pub(super) fn grace_starts(
    now: Instant,
    previous_run_id: Option<&str>,
    age: &ServerAge,
) -> Instant {
    let restarted = previous_run_id.is_some() && previous_run_id != age.run_id.as_deref();
    match age.uptime {
        Some(uptime) if !restarted && !age.promoted => {
            now.checked_sub(Duration::from_secs(uptime)).unwrap_or(now)
        }
        _ => now,
    }
}

/// `INFO server` and `INFO replication` (asked apart: a server before Redis 7 takes one
/// section per `INFO`).
pub(super) async fn server_age(conn: &mut MultiplexedConnection) -> Result<ServerAge, RedisError> {
    let sent = Instant::now();
    let mut info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    let received = Awake::now();
    let clock = info
        .lines()
        .find_map(|line| line.strip_prefix("server_time_usec:"))
        .and_then(|usec| usec.trim().parse::<u64>().ok())
        .map(|usec| ServerClock::read(usec, sent, received));
    let more: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await?;
    info.push_str(&more);
    Ok(ServerAge {
        clock,
        ..ServerAge::parse(&info)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn age(run_id: &str, uptime: Option<u64>) -> ServerAge {
        ServerAge {
            run_id: Some(run_id.to_owned()),
            uptime,
            promoted: false,
            replica: false,
            replid: None,
            software: None,
            clock: None,
        }
    }

    #[test]
    fn info_parses_run_id_and_only_a_sane_uptime() {
        let info = "# Server\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
        assert_eq!(ServerAge::parse(info), age("abc123", Some(42)));
        let stepped = "run_id:abc123\r\nuptime_in_seconds:-17\r\n";
        assert_eq!(ServerAge::parse(stepped).uptime, None);
        assert_eq!(ServerAge::parse("uptime_in_seconds:soon").uptime, None);
        assert_eq!(
            ServerAge::parse(""),
            ServerAge {
                run_id: None,
                uptime: None,
                promoted: false,
                replica: false,
                replid: None,
                software: None,
                clock: None,
            }
        );
    }

    /// Valkey names itself and its version; its `redis_version` is a compatibility figure.
    /// Redis gives only `redis_version`.
    #[test]
    fn info_says_which_server_runs() {
        let valkey = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        assert_eq!(
            ServerAge::parse(valkey).software.as_deref(),
            Some("valkey 9.1.2")
        );
        let redis = "redis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(
            ServerAge::parse(redis).software.as_deref(),
            Some("redis 7.0.15")
        );
        let early_valkey = "redis_version:7.2.4\r\nserver_name:valkey\r\n";
        assert_eq!(
            ServerAge::parse(early_valkey).software.as_deref(),
            Some("valkey 7.2.4")
        );
        assert_eq!(ServerAge::parse("run_id:x\r\n").software, None);
    }

    /// Mutation: `promoted` ignored in `grace_starts`: a promoted master first seen votes at
    /// once, on the strength of an uptime from before it was this voter's master.
    #[test]
    fn a_master_promoted_since_it_started_starts_the_grace_now() {
        let promoted =
            "run_id:b\r\nuptime_in_seconds:3600\r\nrole:master\r\nsecond_repl_offset:1234\r\n";
        assert!(ServerAge::parse(promoted).promoted);
        let never = "role:master\r\nsecond_repl_offset:-1\r\n";
        assert!(!ServerAge::parse(never).promoted);
        let replica = "role:slave\r\nsecond_repl_offset:99\r\n";
        assert!(!ServerAge::parse(replica).promoted);
        let now = Instant::now();
        assert_eq!(grace_starts(now, None, &ServerAge::parse(promoted)), now);
    }

    /// A failback: this client saw X as master, missed Y's term, and meets X again, promoted
    /// anew (same `run_id`, another replication id). Mutation: the kept start reused on the
    /// `run_id` alone lets X vote at once, though it may lack keys Y
    /// granted.
    #[test]
    fn a_failback_to_a_known_server_starts_the_grace_again() {
        let now = Instant::now();
        let earlier = now
            .checked_sub(Duration::from_secs(600))
            .expect("ten minutes");
        let kept = KeptStart {
            run_id: "x".to_owned(),
            replid: Some("r1".to_owned()),
            since: earlier,
        };
        let term = |replid: &str| {
            ServerAge::parse(&format!(
                "run_id:x\r\nuptime_in_seconds:3600\r\nrole:master\r\nsecond_repl_offset:7\r\nmaster_replid:{replid}\r\n"
            ))
        };
        assert_eq!(
            grace_start(Some(&kept), now, Some("x"), &term("r1")),
            earlier
        );
        assert_eq!(grace_start(Some(&kept), now, Some("x"), &term("r2")), now);
    }

    #[test]
    fn a_new_run_id_starts_the_grace_now_whatever_the_uptime() {
        let now = Instant::now();
        let five_ago = now.checked_sub(Duration::from_secs(5)).expect("up for 5 s");
        // First sight: the uptime is the hint.
        assert_eq!(grace_starts(now, None, &age("a", Some(5))), five_ago);
        // Same server again: still the hint.
        assert_eq!(grace_starts(now, Some("a"), &age("a", Some(5))), five_ago);
        // Restarted (new run_id), even claiming a long uptime (a stepped clock): now.
        assert_eq!(grace_starts(now, Some("a"), &age("b", Some(3600))), now);
    }

    #[test]
    fn no_usable_uptime_starts_the_grace_now_instead_of_never() {
        let now = Instant::now();
        assert_eq!(grace_starts(now, None, &age("a", None)), now);
    }
}
