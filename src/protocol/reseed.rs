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

/// [`reseed_among`] for many slots at once (a fence sweep): each round is one request per
/// master for every slot (`scripts::SEED_READ_SLOTS`, `scripts::SEED_FENCE_SLOTS`) instead of
/// one per slot, and each slot is judged and written exactly as [`reseed_among`] judges and
/// writes one. Slot by slot with [`reseed_among`] where a master is a Redis Cluster (its
/// slots may live on different shards) or a slot has a per-resource counter (which the slot
/// scripts do not read). Returns what it did for each slot of `slots`, in order.
///
/// # Cancel safety
/// As [`reseed`].
pub(crate) async fn reseed_slots(
    nodes: &[Node],
    slots: &[&FenceKeys],
    timeout: Duration,
    asked: &[bool],
) -> Vec<Reseeded> {
    if nodes.iter().any(Node::is_cluster) || slots.iter().any(|keys| keys.legacy.is_some()) {
        return join_all(
            slots
                .iter()
                .map(|keys| reseed_among(nodes, keys, timeout, asked)),
        )
        .await;
    }
    if slots.is_empty() {
        return Vec::new();
    }
    let first = read_slots_round(nodes, slots, timeout, asked).await;
    let answered: Vec<bool> = first.iter().map(Option::is_some).collect();
    // Every slot's result, as if no master were unmarked (every master that answered is
    // marked); the slots some master was read unmarked for are re-seeded below.
    let mut done: Vec<Reseeded> = vec![
        Reseeded {
            marked_nodes: answered.clone(),
        };
        slots.len()
    ];
    let mut pending: Vec<Pending<'_>> = Vec::new();
    for (slot, keys) in slots.iter().enumerate() {
        let unmarked: Vec<bool> = first
            .iter()
            .map(|r| r.as_ref().is_some_and(|r| r.unmarked(slot)))
            .collect();
        if unmarked.contains(&true) {
            pending.push(Pending {
                slot,
                keys,
                unmarked,
                value: None,
            });
        }
    }
    if pending.is_empty() {
        return done;
    }
    // As in `reseed_among`: the value comes from a second reading, begun once the first has
    // read every master to be written, and a master is written only while its term is the
    // one the first round saw.
    let first_terms: Vec<Option<String>> = first.into_iter().map(|r| r.map(|r| r.term)).collect();
    let pending_keys: Vec<&FenceKeys> = pending.iter().map(|p| p.keys).collect();
    let second = read_slots_round(nodes, &pending_keys, timeout, &answered).await;
    for (at, slot) in pending.iter_mut().enumerate() {
        let readings: Vec<Option<Reading>> = second
            .iter()
            .map(|r| r.as_ref().and_then(|r| r.readings.get(at).copied()))
            .collect();
        slot.value = seed_value(&readings);
    }
    let pending = &pending;
    let writes = second.into_iter().zip(first_terms).enumerate().map(
        |(node, (read, first_term))| async move {
            let read = read?;
            let same_term = first_term.as_deref() == Some(read.term.as_str());
            // Per pending slot: written here (its value, when this master is to be written).
            let to_write: Vec<Option<(&FenceKeys, u64)>> = pending
                .iter()
                .enumerate()
                .map(|(at, slot)| {
                    let write = same_term
                        && read.unmarked(at)
                        && slot.unmarked.get(node).is_some_and(|u| *u);
                    slot.value.filter(|_| write).map(|value| (slot.keys, value))
                })
                .collect();
            let writes: Vec<(&FenceKeys, u64)> = to_write.iter().flatten().copied().collect();
            let written = writes.is_empty() || write_slots(&read, &writes, timeout).await;
            let marked: Vec<bool> = to_write
                .iter()
                .enumerate()
                .map(|(at, write)| !read.unmarked(at) || (written && write.is_some()))
                .collect();
            Some(marked)
        },
    );
    let per_master: Vec<Option<Vec<bool>>> = join_all(writes).await;
    for (at, slot) in pending.iter().enumerate() {
        let marked_nodes = per_master
            .iter()
            .map(|m| m.as_ref().and_then(|m| m.get(at)).is_some_and(|m| *m))
            .collect();
        if let Some(done) = done.get_mut(slot.slot) {
            *done = Reseeded { marked_nodes };
        }
    }
    tracing::debug!(
        slots = slots.len(),
        reseeded = pending.len(),
        "fence counters re-seeded"
    );
    done
}

/// A slot [`reseed_slots`] reads a second time: some master was read unmarked for it.
struct Pending<'a> {
    /// Its index in the slots asked for.
    slot: usize,
    keys: &'a FenceKeys,
    /// Per master: read unmarked by the first round.
    unmarked: Vec<bool>,
    /// The value to seed, when the second round's readings can be trusted.
    value: Option<u64>,
}

/// Many slots' readings on one master, and the connection and term they were made on.
struct SlotsRead {
    /// One per slot read, in order.
    readings: Vec<Reading>,
    conn: MultiplexedConnection,
    run_id: Arc<str>,
    term: String,
}

impl SlotsRead {
    /// Whether the `slot`-th slot read is not marked for the term it was read in.
    fn unmarked(&self, slot: usize) -> bool {
        self.readings.get(slot).is_some_and(|r| !r.marked)
    }
}

async fn read_slots_round(
    nodes: &[Node],
    slots: &[&FenceKeys],
    timeout: Duration,
    asked: &[bool],
) -> Vec<Option<SlotsRead>> {
    each_asked(nodes, timeout, asked, |node| read_slots(node, slots)).await
}

async fn read_slots(node: &Node, slots: &[&FenceKeys]) -> Result<SlotsRead, ReadError> {
    let first = slots.first().ok_or(ReadError::NoSlot)?;
    let ready = node.connection(&first.counter).await?;
    let run_id = ready.run_id.clone().ok_or(ReadError::Unidentified)?;
    let mut conn = ready.conn.clone();
    let mut invocation = scripts::SEED_READ_SLOTS.script().prepare_invoke();
    for keys in slots {
        invocation
            .key(keys.counter.as_slice())
            .key(keys.marker.as_slice());
    }
    invocation.arg(&*run_id);
    let values: Vec<Option<String>> = invocation
        .invoke_async(&mut conn)
        .await
        .inspect_err(|err| node.learn_from_error(err, &ready))?;
    let mut values = values.into_iter();
    let term = values.next().flatten().ok_or(ReadError::Unidentified)?;
    let mut readings = Vec::with_capacity(slots.len());
    for _ in slots {
        let counter = match values.next().ok_or(ReadError::TooFewAnswers)? {
            Some(text) => text.parse::<u64>().map_err(|_| ReadError::NotANumber)?,
            None => 0,
        };
        let marked =
            values.next().ok_or(ReadError::TooFewAnswers)?.as_deref() == Some(term.as_str());
        readings.push(Reading { counter, marked });
    }
    Ok(SlotsRead {
        readings,
        conn,
        run_id,
        term,
    })
}

/// Raises each counter of `writes` to at least its value and marks it, on the master `read`
/// was made on, in one request; whether it did.
async fn write_slots(read: &SlotsRead, writes: &[(&FenceKeys, u64)], timeout: Duration) -> bool {
    let mut invocation = scripts::SEED_FENCE_SLOTS.script().prepare_invoke();
    for (keys, _) in writes {
        invocation
            .key(keys.counter.as_slice())
            .key(keys.marker.as_slice());
    }
    invocation.arg(&*read.run_id).arg(read.term.as_str());
    for (_, value) in writes {
        invocation.arg(*value);
    }
    let mut conn = read.conn.clone();
    let write = invocation.invoke_async::<i64>(&mut conn);
    matches!(tokio::time::timeout(timeout, write).await, Ok(Ok(-1)))
}

/// One reading of each master `asked` names, all at once, each bounded by `timeout`.
async fn read_round(
    nodes: &[Node],
    keys: &FenceKeys,
    timeout: Duration,
    asked: &[bool],
) -> Vec<Option<Read>> {
    each_asked(nodes, timeout, asked, |node| read(node, keys)).await
}

/// `reading` of each master `asked` names, all at once, each bounded by `timeout`; `None`
/// for the others and for those that failed (logged) or did not answer in time.
async fn each_asked<'a, T, F, Fut>(
    nodes: &'a [Node],
    timeout: Duration,
    asked: &[bool],
    reading: F,
) -> Vec<Option<T>>
where
    F: Fn(&'a Node) -> Fut,
    Fut: std::future::Future<Output = Result<T, ReadError>>,
{
    let reading = &reading;
    join_all(nodes.iter().zip(asked).map(|(node, asked)| async move {
        if !asked {
            return None;
        }
        match tokio::time::timeout(timeout, reading(node)).await {
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
    #[error("no slot to read")]
    NoSlot,
    #[error("fewer answers than slots")]
    TooFewAnswers,
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
