//! The leader info of an election: `token:term:value` beside the lock key, written by the
//! leader under its lock and read back by anyone, trusted only when a majority agrees.

use std::time::Duration;

use crate::core::quorum;
use crate::core::report::{NodeOutcome, NodeReport, Report};
use crate::core::token::{Token, unmarked};
use crate::core::verdict::{Rejection, RoundKind};
use crate::engine::query::query_everywhere;
use crate::engine::request::{Command, Request};
use crate::engine::round::{Round, Wait};
use crate::errors::error::Operation;
use crate::protocol::shared::Shared;
use crate::scripts;

/// The current leader of an election: its advertised value and its term.
///
/// The term is the leader's fencing token: it strictly increases from one leader to the next,
/// so a resource that remembers the highest term it has seen can refuse a deposed leader.
///
/// ```no_run
/// # async fn demo(election: redquorum::Election) -> Result<(), redquorum::Error> {
/// let leader = election.leader().await?;
/// println!("term {}: {}", leader.term(), String::from_utf8_lossy(leader.value()));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    value: Vec<u8>,
    term: u64,
}

impl Leader {
    /// The value the leader advertises (its address, its name…), as given to
    /// [`Election::campaign`](crate::Election::campaign) or [`Leadership::proclaim`](crate::Leadership::proclaim).
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The leader's term (its fencing token).
    pub fn term(&self) -> u64 {
        self.term
    }
}

/// What a majority says about who leads.
#[derive(Debug)]
pub(crate) enum LeaderReading {
    /// A majority holds the same leader's lock and info.
    Leader(Leader),
    /// A majority answered, and no leader is on a majority of them.
    NoLeader,
    /// Too few nodes answered to tell; the report says why.
    NoQuorum(Report),
}

/// Writes `info` beside the lock `lock_key` on every node where `token` still holds it,
/// decided at the majority. The round comes back with the rejection, for its report and time.
///
/// # Cancel safety
/// Dropping the future stops waiting; a write that still lands is the leader's own info.
pub(crate) async fn write(
    shared: &Shared,
    lock_key: &[u8],
    info_key: &[u8],
    token: &Token,
    info: &[u8],
    per_node_timeout: Duration,
) -> Result<(), (Rejection, Round)> {
    let request = Request::new(
        Operation::Extend,
        Command::Script(&scripts::WRITE_LEADER_INFO),
        lock_key,
        token,
        NodeOutcome::Granted,
    )
    .with_extra_keys(vec![info_key.to_vec()])
    .with_payload(vec![info.to_vec()]);
    let round = shared
        .fanout()
        .run(request, per_node_timeout, Wait::UntilDecided)
        .await;
    // Which nodes granted the lock is not known here (the lease keeps it): every node counts as
    // a grantor, so a refusal is evidence and a timeout is not. Validity is the lease's
    // business; the write only needs a majority.
    match round.judge(RoundKind::Renew, true, None) {
        Ok(()) => Ok(()),
        Err(rejection) => Err((rejection, round)),
    }
}

/// Reads the lock and the info on every node (each bounded by `timeout`) and counts the
/// leaders whose info matches the lock's token.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub(crate) async fn read(
    shared: &Shared,
    lock_key: &[u8],
    info_key: &[u8],
    timeout: Duration,
) -> LeaderReading {
    let mut mget = redis::pipe();
    mget.cmd("MGET").arg(lock_key).arg(info_key);
    let answers = query_everywhere::<((Option<Vec<u8>>, Option<Vec<u8>>),)>(
        &shared.nodes,
        lock_key,
        &mget,
        timeout,
        |_| false,
        Duration::ZERO,
    )
    .await;
    let mut votes: Vec<(Leader, Vec<u8>, usize)> = Vec::new();
    let mut answered = 0;
    let mut report = Vec::new();
    for (id, answer, latency) in answers {
        match answer {
            Ok(((lock, info),)) => {
                answered += 1;
                report.push(NodeReport::new(id, NodeOutcome::Connected, latency));
                let (Some(lock), Some(info)) = (lock, info) else {
                    continue;
                };
                let Some((token, leader)) = decode(&info) else {
                    continue;
                };
                // The lock's value as its holder wrote it: a waiter may have marked it.
                if token != &*unmarked(&lock) {
                    continue;
                }
                match votes.iter_mut().find(|(_, t, _)| t.as_slice() == token) {
                    Some((_, _, count)) => *count += 1,
                    None => votes.push((leader, token.to_vec(), 1)),
                }
            }
            Err(e) => report.push(NodeReport::new(id, NodeOutcome::Failed(e), latency)),
        }
    }
    let quorum = quorum::quorum(shared.nodes.len());
    if let Some((leader, _, _)) = votes.into_iter().find(|(_, _, count)| *count >= quorum) {
        return LeaderReading::Leader(leader);
    }
    if answered < quorum {
        return LeaderReading::NoQuorum(Report::new(report));
    }
    LeaderReading::NoLeader
}

/// `token:term:value`; the token is 40 hex digits.
pub(crate) fn encode(token: &Token, term: u64, value: &[u8]) -> Vec<u8> {
    let mut info = format!("{}:{term}:", token.expose()).into_bytes();
    info.extend_from_slice(value);
    info
}

/// The owner's token (everything before the first `:`: a token never holds one, described or
/// not, see `Builder::holder_info`) and the leader.
pub(crate) fn decode(info: &[u8]) -> Option<(&[u8], Leader)> {
    let end = info.iter().position(|b| *b == b':')?;
    let token = info.get(..end)?;
    let rest = info.get(end + 1..)?;
    let colon = rest.iter().position(|b| *b == b':')?;
    let term = std::str::from_utf8(rest.get(..colon)?).ok()?.parse().ok()?;
    let value = rest.get(colon + 1..)?.to_vec();
    Some((token, Leader { value, term }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_info_round_trips_any_value() {
        let described = Token::generate_about(Some("web1 pid 42 redquorum elect"));
        for token in [Token::generate(), described] {
            for value in [&b""[..], b"worker-7", b"a:b:c", b"\0\xff\n"] {
                let info = encode(&token, 42, value);
                let (t, leader) = decode(&info).expect("decodes");
                assert_eq!(t, token.expose().as_bytes());
                assert_eq!(leader.term(), 42);
                assert_eq!(leader.value(), value);
            }
        }
    }

    #[test]
    fn malformed_info_is_ignored() {
        for info in [
            &b""[..],
            b"short",
            &[b'a'; 40],
            &[b'a'; 41],
            b"0123456789012345678901234567890123456789:x:v",
        ] {
            assert!(decode(info).is_none(), "{}", info.escape_ascii());
        }
    }
}
