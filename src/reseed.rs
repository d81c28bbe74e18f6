//! Re-seeding the fence counter of a master that started since it was last seeded.
//!
//! Fencing tokens grow from one holder to the next because the next holder's majority meets
//! the last one's in a master whose counter already reached the last token (`DESIGN.md`
//! §5). A master that restarts without its counters (no `appendfsync always`, or an old snapshot)
//! breaks that: if it is the only master the two majorities share, the next token can be
//! lower. So a master's counter enters a token only while a marker next to it names the
//! server's current run (its term: `run_id`, new at every start, and `master_replid`, new at
//! every promotion, so a failed-back master is a new run too): the fenced acquire answers
//! "unseeded" otherwise (`scripts::ACQUIRE_FENCED`), and the client re-seeds it here.
//!
//! Re-seeding reads the counter and the marker from every master (`scripts::SEED_READ`),
//! and when the answers can be trusted ([`seed_value`]), raises the unseeded masters'
//! counters to the highest value read and marks them for their current run
//! (`scripts::SEED_FENCE`). Each reading also moves that master's epoch on, so a fenced
//! confirm whose grant came before the reading no longer counts there: a confirmation that
//! counts is either in the reading or belongs to a grant made after it.
//!
//! Why that is enough: a token T was confirmed on a majority W of masters (each counter ≥ T
//! there). A master marked for its current run has kept every counter value it had since it
//! was seeded, and its seed was at least every token confirmed before it (by induction).
//! A majority of marked masters therefore meets W in one whose counter is ≥ T; so does
//! reading *every* master, unless every master of W lost its counter (a majority amnesiac at
//! once, which nothing can repair). A token confirmed while the master was unseeded never
//! counted it, so the next holder's majority meets that token's majority in another master.
//! The epoch closes the one gap left: a holder that counted the restarted master's
//! confirmation from before its restart, and another master's confirmation that lands after
//! the reading (without the epoch the checker finds two holders with one token that way).
//! `crate::model` checks all of this with one master restarting, empty or not, at any moment.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use redis::aio::MultiplexedConnection;

use crate::node::Node;
use crate::quorum;
use crate::resource::FenceKeys;
use crate::scripts;

/// What one master said about its counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Reading {
    /// The fence counter (the larger of the slot's counter and an older version's
    /// per-resource counter); 0 when there is none.
    pub(crate) counter: u64,
    /// Whether the marker names the server's current run.
    pub(crate) marked: bool,
}

/// The value to seed unmarked masters with, or `None` when the readings cannot be trusted:
/// they must include a majority of marked masters, or every master (`readings` has one entry
/// per master, `None` for one that did not answer).
///
/// Reading every master is how a new deployment (no marker anywhere yet) starts; it is also
/// right when up to a minority restarted empty, since the answers then include every
/// confirmed majority.
pub(crate) fn seed_value(readings: &[Option<Reading>]) -> Option<u64> {
    let answered: Vec<&Reading> = readings.iter().flatten().collect();
    let marked = answered.iter().filter(|r| r.marked).count();
    let trusted = marked >= quorum::quorum(readings.len()) || answered.len() == readings.len();
    trusted.then(|| answered.iter().map(|r| r.counter).max().unwrap_or(0))
}

/// What a re-seed did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reseeded {
    /// The value the unmarked masters were raised to; `None` when the readings could not be
    /// trusted (see [`seed_value`]) and nothing was written.
    pub(crate) value: Option<u64>,
    /// How many masters are now marked for their current run, counting those marked before.
    pub(crate) marked: usize,
}

/// One master's reading, and the connection and run it was made on.
struct Read {
    reading: Reading,
    conn: MultiplexedConnection,
    run_id: Arc<str>,
}

/// Reads every master's counter and marker, then raises and marks the unmarked ones (see the
/// module docs). Each step on each master is bounded by `timeout`; a master that does not
/// answer, or will not say its `run_id`, is left as it is.
///
/// # Cancel safety
/// Cancel-safe: every write only raises a counter and sets a marker, so a re-seed stopped
/// half-way leaves masters either seeded correctly or still unseeded.
pub(crate) async fn reseed(nodes: &[Node], keys: &FenceKeys, timeout: Duration) -> Reseeded {
    let reads: Vec<Option<Read>> = join_all(nodes.iter().map(|node| async move {
        let read = tokio::time::timeout(timeout, read(node, keys)).await;
        match read {
            Ok(Ok(read)) => Some(read),
            Ok(Err(err)) => {
                tracing::debug!(node = %node.id(), error = %err, "re-seed: no reading");
                None
            }
            Err(_) => {
                tracing::debug!(node = %node.id(), "re-seed: no reading in time");
                None
            }
        }
    }))
    .await;
    let readings: Vec<Option<Reading>> = reads
        .iter()
        .map(|r| r.as_ref().map(|r| r.reading))
        .collect();
    let Some(value) = seed_value(&readings) else {
        let marked = readings.iter().flatten().filter(|r| r.marked).count();
        tracing::debug!(
            marked,
            answered = readings.iter().flatten().count(),
            "re-seed: too few trusted readings"
        );
        return Reseeded {
            value: None,
            marked,
        };
    };
    let written = join_all(reads.into_iter().flatten().map(|read| async move {
        if read.reading.marked {
            return true;
        }
        let Read {
            mut conn, run_id, ..
        } = read;
        let mut invocation = scripts::SEED_FENCE.script().prepare_invoke();
        invocation
            .key(keys.counter.as_slice())
            .key(keys.marker.as_slice())
            .arg(value)
            .arg(&*run_id);
        let write = invocation.invoke_async::<i64>(&mut conn);
        matches!(tokio::time::timeout(timeout, write).await, Ok(Ok(-1)))
    }))
    .await;
    let marked = written.into_iter().filter(|ok| *ok).count();
    tracing::info!(value, marked, "fence counter re-seeded");
    Reseeded {
        value: Some(value),
        marked,
    }
}

/// Errors of one reading, for the logs.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error(transparent)]
    Node(#[from] crate::node_error::NodeError),
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    #[error("the server would not say its run_id")]
    Unidentified,
    #[error("a fence counter that is not a number")]
    NotANumber,
}

async fn read(node: &Node, keys: &FenceKeys) -> Result<Read, ReadError> {
    let ready = node.connection(&keys.counter).await?;
    let run_id = ready.run_id.clone().ok_or(ReadError::Unidentified)?;
    let mut conn = ready.conn.clone();
    let mut invocation = scripts::SEED_READ.script().prepare_invoke();
    invocation
        .key(keys.counter.as_slice())
        .key(keys.marker.as_slice());
    if let Some(legacy) = &keys.legacy {
        invocation.key(legacy.as_slice());
    }
    invocation.arg(&*run_id);
    let values: Vec<Option<String>> = invocation
        .invoke_async(&mut conn)
        .await
        .inspect_err(|err| node.learn(err, &ready))?;
    let number = |value: Option<&Option<String>>| match value {
        Some(Some(text)) => text.parse::<u64>().map_err(|_| ReadError::NotANumber),
        _ => Ok(0),
    };
    let counter = number(values.first())?.max(number(values.get(2))?);
    let marked = values.get(1).and_then(Option::as_deref) == Some(&*run_id);
    Ok(Read {
        reading: Reading { counter, marked },
        conn,
        run_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(counter: u64, marked: bool) -> Option<Reading> {
        Some(Reading { counter, marked })
    }

    #[test]
    fn a_marked_majority_or_every_master_is_trusted() {
        // Three masters, one restarted (unmarked, 0): the two marked ones are a majority.
        assert_eq!(seed_value(&[r(0, false), r(7, true), r(5, true)]), Some(7));
        // One marked master does not make a majority: wait.
        assert_eq!(seed_value(&[r(0, false), None, r(5, true)]), None);
        // Every master answered (a new deployment, nothing marked yet): the highest.
        assert_eq!(
            seed_value(&[r(3, false), r(9, false), r(0, false)]),
            Some(9)
        );
        // Two unmarked of three, one silent: the silent one may be the only one that knows.
        assert_eq!(seed_value(&[r(0, false), r(4, false), None]), None);
        // Unmarked answers count toward the maximum, never against it.
        assert_eq!(
            seed_value(&[r(12, false), r(7, true), r(5, true), None, r(1, true)]),
            Some(12)
        );
        assert_eq!(seed_value(&[None, None, None]), None);
        assert_eq!(seed_value(&[r(0, false)]), Some(0));
    }
}
