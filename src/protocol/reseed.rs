//! Re-seeding the fence counter of a master that started since it was last seeded.
//!
//! Fencing tokens grow from one holder to the next because the next holder's majority meets
//! the last one's in a master whose counter already reached the last token (`DESIGN.md`
//! §5). A master that restarts without its counters (no `appendfsync always`, or an old snapshot)
//! breaks that: if it is the only master the two majorities share, the next token can be
//! lower. So a master's counter enters a token only while a marker next to it names the
//! server's current term (`run_id`, new at every start, and `master_replid`, read by the
//! script itself and new at every promotion, so a failed-back master is in a new term too,
//! and no term ever comes back, `scripts/lua/fence_term.lua`): the fenced acquire answers
//! "unseeded" otherwise (`scripts::ACQUIRE_FENCED`), and the client re-seeds it here.
//!
//! Re-seeding reads the counter and the marker from every master (`scripts::SEED_READ`),
//! twice when a master is unmarked: the second round, begun once the first has read every
//! master to be written, gives the value, so every reading it uses is younger than the term of
//! each master it seeds. When the answers can be trusted ([`seed_value`]), it raises the
//! unseeded masters' counters to the highest value read and marks them for their current term
//! (`scripts::SEED_FENCE`), only while that is still the term the first round saw. Each
//! reading also moves that master's epoch on, marked or not, so a fenced confirm whose grant
//! came before the reading no longer counts there: a confirmation that counts is either in the
//! reading or belongs to a grant made after it.
//!
//! Why that is enough: a token T was confirmed on a majority W of masters (each counter ≥ T
//! there). A master marked for its current term has kept every counter value it had since it
//! was seeded, and its seed was at least every token confirmed before it (by induction).
//! A majority of marked masters therefore meets W in one whose counter is ≥ T; so does
//! reading *every* master, unless every master of W lost its counter (a majority amnesiac at
//! once, which nothing can repair). A token confirmed while the master was unseeded never
//! counted it, so the next holder's majority meets that token's majority in another master.
//! The epoch closes the one gap left: a holder that counted the restarted master's
//! confirmation from before its restart, and another master's confirmation that lands after
//! the reading (without the epoch the checker finds two holders with one token that way).
//! Why two rounds: with one, a marked master read before a holder's grant there and a master
//! that lost that holder's confirmation in a restart after the holder was confirmed but before
//! it was read can both be in the readings, and neither shows the token (five masters, one
//! restart, and one more master unseeded by a term change: within the contract). With the
//! second round, every reading used is after the restarted master's restart, so after that
//! holder's confirmation there, so after its grants; a confirmation elsewhere is in the
//! reading or fenced off by its epoch.
//! `crate::model` checks all of this with one master restarting, empty or not, at any moment,
//! and another's term changing; its seeder reads once, at any moment, which includes every
//! schedule of the two rounds.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use redis::aio::MultiplexedConnection;

use crate::core::quorum;
use crate::core::resource::FenceKeys;
use crate::scripts;
use crate::voters::node::Node;

/// What one master said about its counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Reading {
    /// The fence counter (the larger of the slot's counter and the per-resource counter);
    /// 0 when there is none.
    pub(crate) counter: u64,
    /// Whether the marker names the server's current term.
    pub(crate) marked: bool,
}

/// The value to seed unmarked masters with, or `None` when the readings cannot be trusted:
/// they must include a majority of marked masters, or every master (`readings` has one entry
/// per master, `None` for one that did not answer).
///
/// Reading every master is how a new deployment (no marker anywhere yet) starts, how every
/// slot starts again after an upgrade that changed the markers, and how a slot recovers when
/// a majority of masters changed term at once (a power cut restarting three of five masters
/// with their data): a token confirmed on a majority is in some master's counter, unless a
/// majority lost its counters, which nothing can repair. The readings must be younger than
/// the term of every master they seed, which the second round of [`reseed_among`] ensures:
/// with one round, a marked master read before a holder's grant, beside one that lost that
/// holder's confirmation in a restart, can say less than the token.
pub(crate) fn seed_value(readings: &[Option<Reading>]) -> Option<u64> {
    let answered: Vec<&Reading> = readings.iter().flatten().collect();
    let marked = answered.iter().filter(|r| r.marked).count();
    let trusted = marked >= quorum::quorum(readings.len()) || answered.len() == readings.len();
    trusted.then(|| answered.iter().map(|r| r.counter).max().unwrap_or(0))
}

/// What a re-seed did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reseeded {
    /// Which masters are now marked for their current term, counting those marked before
    /// (per index of `nodes`).
    pub(crate) marked_nodes: Vec<bool>,
}

impl Reseeded {
    /// How many masters are now marked for their current term.
    pub(crate) fn marked(&self) -> usize {
        self.marked_nodes.iter().filter(|m| **m).count()
    }
}

/// One master's reading, and the connection and term it was made on.
struct Read {
    reading: Reading,
    conn: MultiplexedConnection,
    run_id: Arc<str>,
    /// The server's fence term when it was read (`scripts::SEED_READ`): the write marks this
    /// term, and only while the server is still in it.
    term: String,
}

/// Reads every master's counter and marker, then raises and marks the unmarked ones (see the
/// module docs). Each step on each master is bounded by `timeout`; a master that does not
/// answer, or will not say its `run_id`, is left as it is.
///
/// # Cancel safety
/// Cancel-safe: every write only raises a counter and sets a marker, so a re-seed stopped
/// half-way leaves masters either seeded correctly or still unseeded.
pub(crate) async fn reseed(nodes: &[Node], keys: &FenceKeys, timeout: Duration) -> Reseeded {
    reseed_among(nodes, keys, timeout, &vec![true; nodes.len()]).await
}

/// [`reseed`], asking only the masters `asked` names (by index of `nodes`): the others count
/// as masters that did not answer (a fence sweep leaves out those that did not answer it
/// before, rather than waiting out their timeout on every slot).
///
/// # Cancel safety
/// As [`reseed`].
pub(crate) async fn reseed_among(
    nodes: &[Node],
    keys: &FenceKeys,
    timeout: Duration,
    asked: &[bool],
) -> Reseeded {
    let first = read_round(nodes, keys, timeout, asked).await;
    let unmarked: Vec<bool> = first
        .iter()
        .map(|r| r.as_ref().is_some_and(|r| !r.reading.marked))
        .collect();
    if !unmarked.contains(&true) {
        return Reseeded {
            marked_nodes: first.iter().map(Option::is_some).collect(),
        };
    }
    // The value comes from a second reading, begun once the first has read every master to
    // be written: so every reading it uses was taken after each of them entered the term it
    // will be marked for. One reading round alone can pair a marked master read before a
    // holder's grant there with a master that lost that holder's confirmation in a restart
    // before it was read; neither then shows the token, and the restarted master would be
    // seeded below it (`DESIGN.md` §5). A master is written only while its term is the one
    // the first round saw.
    let answered: Vec<bool> = first.iter().map(Option::is_some).collect();
    let first_terms: Vec<Option<String>> = first.into_iter().map(|r| r.map(|r| r.term)).collect();
    let reads = read_round(nodes, keys, timeout, &answered).await;
    let readings: Vec<Option<Reading>> = reads
        .iter()
        .map(|r| r.as_ref().map(|r| r.reading))
        .collect();
    let Some(value) = seed_value(&readings) else {
        let untrusted = Reseeded {
            marked_nodes: readings
                .iter()
                .map(|r| r.is_some_and(|r| r.marked))
                .collect(),
        };
        tracing::debug!(
            marked = untrusted.marked(),
            answered = readings.iter().flatten().count(),
            "re-seed: too few trusted readings"
        );
        return untrusted;
    };
    let writes = reads.into_iter().zip(unmarked).zip(first_terms);
    let marked_nodes = join_all(writes.map(|((read, unmarked), first_term)| async move {
        let Some(read) = read else {
            return false;
        };
        if read.reading.marked {
            return true;
        }
        if !unmarked || first_term.as_deref() != Some(read.term.as_str()) {
            return false;
        }
        let Read {
            mut conn,
            run_id,
            term,
            ..
        } = read;
        let mut invocation = scripts::SEED_FENCE.script().prepare_invoke();
        invocation
            .key(keys.counter.as_slice())
            .key(keys.marker.as_slice())
            .arg(value)
            .arg(&*run_id)
            .arg(term);
        let write = invocation.invoke_async::<i64>(&mut conn);
        matches!(tokio::time::timeout(timeout, write).await, Ok(Ok(-1)))
    }))
    .await;
    let reseeded = Reseeded { marked_nodes };
    tracing::debug!(value, marked = reseeded.marked(), "fence counter re-seeded");
    reseeded
}

/// One reading of each master `asked` names, all at once, each bounded by `timeout`.
async fn read_round(
    nodes: &[Node],
    keys: &FenceKeys,
    timeout: Duration,
    asked: &[bool],
) -> Vec<Option<Read>> {
    join_all(nodes.iter().zip(asked).map(|(node, asked)| async move {
        if !asked {
            return None;
        }
        match tokio::time::timeout(timeout, read(node, keys)).await {
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
    .await
}

/// Errors of one reading, for the logs.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error(transparent)]
    Node(#[from] crate::errors::node_error::NodeError),
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
        .inspect_err(|err| node.learn_from_error(err, &ready))?;
    let number = |value: Option<&Option<String>>| match value {
        Some(Some(text)) => text.parse::<u64>().map_err(|_| ReadError::NotANumber),
        _ => Ok(0),
    };
    let counter = number(values.first())?.max(number(values.get(2))?);
    let term = values
        .get(3)
        .cloned()
        .flatten()
        .ok_or(ReadError::Unidentified)?;
    let marked = values.get(1).and_then(Option::as_deref) == Some(term.as_str());
    Ok(Read {
        reading: Reading { counter, marked },
        conn,
        run_id,
        term,
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
        // Every master answered, one marked and the others not (a majority restarted with
        // their data at once): the highest.
        assert_eq!(seed_value(&[r(3, false), r(9, true), r(0, false)]), Some(9));
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
