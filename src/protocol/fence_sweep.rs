//! Seeding every slot's fence counter on every master, ahead of need.
//!
//! A fenced acquire counts a master only while the marker beside its slot's counter names the
//! server's current term (`crate::protocol::reseed`). Re-seeding one slot on demand needs a marked
//! majority, or every master: on a slot no fenced lock ever used, nothing is marked anywhere,
//! so with one master down no fenced lock could be taken on it, and after a rolling restart
//! every slot is in that state. So each fencing client sweeps in the background: every slot
//! (16,384, one counter each) on every master, re-seeding each slot some master is not marked
//! for, with the same rule as the on-demand re-seed, and scripts that do for each slot what its
//! scripts do for one (several slots per request). A sweep while every master is up marks
//! every slot everywhere; one after a master restarted (with or without its data) or failed
//! over re-seeds it from the marked majority the other masters make.
//!
//! A server that was swept in its current term says so in its seeding record
//! (`resource::fence_record_key`, written by `scripts::MARK_SEEDED` once every slot on it is
//! marked for that term), so a client looks at one key per master, not 16,384, to know that
//! nothing is to be done: at its first fenced acquire, whenever an acquire met an unseeded
//! master, and every [`CHECK_EVERY`]. Records are kept on standalone and Sentinel-resolved
//! voters; a Redis Cluster voter's masters are swept with the others, but only when a record
//! elsewhere asks for a sweep (`DESIGN.md` §5).
//!
//! Safety is the re-seed's (`crate::protocol::reseed`): a sweep only ever runs it. The record is a hint
//! that saves work, never a reason to trust a counter: the fenced acquire still checks each
//! slot's own marker.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::join_all;
use rand::RngExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::core::resource::{self, FenceKeys, SLOTS};
use crate::protocol::reseed;
use crate::scripts;
use crate::voters::node::Node;

/// How often a running client looks at the masters' seeding records (one request each).
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(5);

/// The longest wait after sweeps that left a master unseeded (a master that answers but
/// cannot be seeded yet: too few others seeded, writes refused): the wait doubles from
/// [`CHECK_EVERY`] up to this, so such a master costs no sweep every few seconds.
const CHECK_AT_MOST_EVERY: Duration = Duration::from_secs(300);

/// The least time between two sweeps, however often acquires meet unseeded masters.
const SWEEP_GAP: Duration = Duration::from_secs(1);

/// How many slots a sweep works on at once: enough to keep every master busy, few enough that
/// a master fsyncing every write (`appendfsync always`) answers each within the timeout.
const SLOTS_AT_ONCE: usize = 64;

/// The least time a sweep's request is given: a sweep runs in the background, and a master
/// busy with a sweep's many writes is slower than a lock's round expects.
const SWEEP_TIMEOUT_FLOOR: Duration = Duration::from_secs(1);

/// One client's sweeper: started at the client's first fenced acquire, stopped with the
/// client (aborted when this is dropped). Not one of the client's tracked clean-ups: `settle`
/// does not wait for it, since it never ends by itself.
#[derive(Debug, Default)]
pub(crate) struct FenceSweep {
    task: Mutex<Option<JoinHandle<()>>>,
    wake: Arc<Notify>,
}

impl Drop for FenceSweep {
    fn drop(&mut self) {
        let task = self.task.get_mut().map(Option::take);
        if let Ok(Some(task)) = task {
            task.abort();
        }
    }
}

/// What a sweep works on: a client's masters, its key prefix, and the bound on each request.
#[derive(Debug, Clone)]
pub(crate) struct Scope<'a> {
    pub(crate) nodes: &'a [Node],
    pub(crate) prefix: &'a [u8],
    pub(crate) timeout: Duration,
}

impl FenceSweep {
    /// Starts the sweeper of the client whose masters are `nodes`, unless it runs (again,
    /// when the runtime it ran on has shut down). Must run inside a tokio runtime.
    pub(crate) fn start(&self, nodes: &Arc<[Node]>, prefix: &[u8], timeout: Duration) {
        let Ok(mut task) = self.task.lock() else {
            return;
        };
        if task.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let client = Arc::downgrade(nodes);
        let wake = self.wake.clone();
        crate::core::telemetry::task_spawned();
        *task = Some(tokio::spawn(sweep_while_alive(
            client,
            prefix.to_vec(),
            timeout,
            wake,
        )));
    }

    /// Asks the sweeper to look at the records now (an acquire met an unseeded master).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }
}

/// The sweeper's loop: holds its client's masters only while it works, so dropping the
/// client ends it.
async fn sweep_while_alive(
    client: Weak<[Node]>,
    prefix: Vec<u8>,
    timeout: Duration,
    wake: Arc<Notify>,
) {
    let mut wait = CHECK_EVERY;
    let mut woken = false;
    loop {
        let Some(nodes) = client.upgrade() else {
            return;
        };
        let scope = Scope {
            nodes: &nodes,
            prefix: &prefix,
            timeout,
        };
        // A Cluster voter keeps no record: sweep it when an acquire met an unseeded master.
        let force = woken && nodes.iter().any(Node::is_cluster);
        let swept = sweep(&scope, force).await;
        drop(nodes);
        let unseeded = swept.records.iter().any(|r| matches!(r, Record::Stale(_)));
        wait = if unseeded {
            (wait * 2).min(CHECK_AT_MOST_EVERY)
        } else {
            CHECK_EVERY
        };
        // Jittered, so clients started together do not sweep together.
        let jitter = rand::rng().random_range(0..=wait.as_millis() / 4);
        let wait_now = wait + Duration::from_millis(u64::try_from(jitter).unwrap_or(0));
        tokio::select! {
            () = wake.notified() => {
                woken = true;
                tokio::time::sleep(SWEEP_GAP).await;
            }
            () = tokio::time::sleep(wait_now) => woken = false,
        }
    }
}

/// What one master's seeding record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    /// Every slot on it is seeded for its current term.
    Seeded,
    /// Not for its current term (it restarted, failed over, or was never swept): the term.
    Stale(String),
    /// A Redis Cluster voter: no record is kept.
    NotKept,
    /// It did not answer in time, or refused.
    Unknown,
}

/// What a sweep found and did, per master.
#[derive(Debug, Clone)]
pub(crate) struct Swept {
    /// Each master's record after the sweep.
    pub(crate) records: Vec<Record>,
    /// Slots some answering master was not seeded for at the end (0: all done).
    pub(crate) slots_left: usize,
}

/// Reads each master's seeding record; with `force`, or when some record is stale, sweeps
/// every slot and then records the masters that are seeded on every slot.
///
/// # Cancel safety
/// Cancel safe: every write only raises a counter and sets a marker or a record for a term
/// the server is in; a sweep stopped half-way leaves slots seeded or as they were.
pub(crate) async fn sweep(scope: &Scope<'_>, force: bool) -> Swept {
    let Scope {
        nodes,
        prefix,
        timeout,
    } = *scope;
    let timeout = timeout.max(SWEEP_TIMEOUT_FLOOR);
    let record_key = resource::fence_record_key(prefix);
    let records = read_records(nodes, &record_key, timeout).await;
    let stale = records.iter().any(|r| matches!(r, Record::Stale(_)));
    if !stale && !force {
        return Swept {
            records,
            slots_left: 0,
        };
    }
    // Masters asked for the rest of the sweep: one that failed to answer once is left out
    // (its slots stay as they are), so a hung master costs one timeout, not one per slot.
    let mut asked: Vec<bool> = records.iter().map(|r| *r != Record::Unknown).collect();
    let mut complete = asked.clone();
    let mut slots_left = 0;
    let mut slots: Vec<FenceKeys> = (0..SLOTS)
        .filter_map(|slot| resource::slot_fence_keys(prefix, slot))
        .collect();
    // From a random slot on, so sweeps of several clients meet few of the same slots at once.
    if !slots.is_empty() {
        let start = rand::rng().random_range(0..slots.len());
        slots.rotate_left(start);
    }
    for chunk in slots.chunks(SLOTS_AT_ONCE) {
        for (marked, answered, still_asked) in sweep_chunk(nodes, chunk, &asked, timeout).await {
            if marked.iter().zip(&answered).any(|(m, a)| *a && !m) {
                slots_left += 1;
            }
            let per_master = complete.iter_mut().zip(asked.iter_mut());
            for ((complete, asked), (marked, still_asked)) in
                per_master.zip(marked.into_iter().zip(still_asked))
            {
                *complete &= marked;
                *asked &= still_asked;
            }
        }
    }
    let records = record_seeded(nodes, records, &complete, &record_key, timeout).await;
    let seeded = records.iter().filter(|r| **r == Record::Seeded).count();
    tracing::info!(
        seeded,
        masters = nodes.len(),
        slots_left,
        "fence counters swept"
    );
    Swept {
        records,
        slots_left,
    }
}

/// Sweeps one chunk of slots on the masters `asked`: per slot, which masters are marked for
/// their current term at the end, which answered, and which are still worth asking (one the
/// trusted re-seed could not mark refused the write, or left its term).
async fn sweep_chunk(
    nodes: &[Node],
    chunk: &[FenceKeys],
    asked: &[bool],
    timeout: Duration,
) -> Vec<(Vec<bool>, Vec<bool>, Vec<bool>)> {
    let quorum = crate::core::quorum::quorum(nodes.len());
    let markers: Vec<&[u8]> = chunk.iter().map(|keys| keys.marker.as_slice()).collect();
    // Per master, per slot of the chunk: whether its marker names the master's term.
    let states: Vec<Vec<Option<bool>>> = join_all(nodes.iter().zip(asked).map(|(node, asked)| {
        let markers = &markers;
        async move {
            if *asked {
                markers_state(node, markers, timeout).await
            } else {
                vec![None; markers.len()]
            }
        }
    }))
    .await;
    let mut swept = Vec::with_capacity(chunk.len());
    // The slots to re-seed (their place in the chunk and their keys), by the masters that
    // answered for them: one group unless a voter is a Redis Cluster, one of whose shards
    // may have answered for some slots and not others.
    let mut to_reseed: Vec<Group<'_>> = Vec::new();
    for (j, keys) in chunk.iter().enumerate() {
        let state = |s: &Vec<Option<bool>>| s.get(j).copied().flatten();
        let answered: Vec<bool> = states.iter().map(|s| state(s).is_some()).collect();
        let marked: Vec<bool> = states.iter().map(|s| state(s) == Some(true)).collect();
        // Some master that answered is not seeded for this slot: re-seed it (which also
        // moves the marked masters' epochs on, so only here), unless neither a marked
        // majority nor every master answered: the re-seed could not trust its readings
        // (`reseed::seed_value`), and they would move epochs on for nothing, fencing off
        // others' confirmations.
        let marked_now = marked.iter().filter(|m| **m).count();
        let trusted = marked_now >= quorum || !answered.contains(&false);
        if marked != answered && trusted {
            match to_reseed
                .iter_mut()
                .find(|group| group.answered == answered)
            {
                Some(group) => group.slots.push((j, keys)),
                None => to_reseed.push(Group {
                    answered: answered.clone(),
                    slots: vec![(j, keys)],
                }),
            }
        }
        swept.push((marked, answered.clone(), answered));
    }
    let groups = join_all(
        to_reseed
            .into_iter()
            .map(|Group { answered, slots }| async move {
                let keys: Vec<&FenceKeys> = slots.iter().map(|(_, keys)| *keys).collect();
                let reseeded = reseed::reseed_slots(nodes, &keys, timeout, &answered).await;
                (answered, slots, reseeded)
            }),
    )
    .await;
    for (answered, slots, reseeded) in groups {
        for ((j, _), reseeded) in slots.into_iter().zip(reseeded) {
            // A master the trusted re-seed could not mark refused the write (or left its
            // term): it is not asked again in this sweep, as one that did not answer.
            let still_asked = answered
                .iter()
                .zip(&reseeded.marked_nodes)
                .map(|(answered, marked)| *answered && *marked)
                .collect();
            if let Some(slot) = swept.get_mut(j) {
                *slot = (reseeded.marked_nodes, answered.clone(), still_asked);
            }
        }
    }
    swept
}

/// Slots of a chunk to re-seed together: those the same masters answered for.
struct Group<'a> {
    answered: Vec<bool>,
    /// Each slot's place in the chunk, and its keys.
    slots: Vec<(usize, &'a FenceKeys)>,
}

/// Records, on each master whose record was stale and that is now seeded on every slot
/// (`complete`), that it is seeded for its term; the records after that.
async fn record_seeded(
    nodes: &[Node],
    records: Vec<Record>,
    complete: &[bool],
    record_key: &[u8],
    timeout: Duration,
) -> Vec<Record> {
    join_all(records.into_iter().zip(nodes.iter()).zip(complete).map(
        |((record, node), complete)| async move {
            match record {
                Record::Stale(term) if *complete => {
                    mark_seeded(node, record_key, &term, timeout).await
                }
                // No record on a Cluster voter: what this sweep saw of every slot.
                Record::NotKept if *complete => Record::Seeded,
                Record::NotKept => Record::Stale(String::new()),
                other => other,
            }
        },
    ))
    .await
}

/// Whether each of `markers` names `node`'s current term: one request on a server that is no
/// Redis Cluster, one per marker (each in its own slot) on a cluster voter; `None` for those
/// not answered in time.
async fn markers_state(node: &Node, markers: &[&[u8]], timeout: Duration) -> Vec<Option<bool>> {
    if node.is_cluster() {
        return join_all(
            markers
                .iter()
                .map(|marker| async move { fence_state(node, &[marker], timeout).await }),
        )
        .await
        .into_iter()
        .map(|state| state.and_then(|(_, marked)| marked.first().copied()))
        .collect();
    }
    match fence_state(node, markers, timeout).await {
        Some((_, marked)) if marked.len() == markers.len() => {
            marked.into_iter().map(Some).collect()
        }
        _ => vec![None; markers.len()],
    }
}

/// Each master's seeding record, read only.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub(crate) async fn records(scope: &Scope<'_>) -> Vec<Record> {
    let key = resource::fence_record_key(scope.prefix);
    read_records(scope.nodes, &key, scope.timeout).await
}

async fn read_records(nodes: &[Node], key: &[u8], timeout: Duration) -> Vec<Record> {
    join_all(nodes.iter().map(|node| async move {
        if node.is_cluster() {
            return Record::NotKept;
        }
        match fence_state(node, &[key], timeout).await {
            Some((_, marked)) if marked == [true] => Record::Seeded,
            Some((term, _)) => Record::Stale(term),
            None => Record::Unknown,
        }
    }))
    .await
}

/// The server's current term and whether each of `keys` (markers) names it
/// (`scripts::FENCE_STATE`); `None` when the server did not answer in time or refused.
async fn fence_state(
    node: &Node,
    keys: &[&[u8]],
    timeout: Duration,
) -> Option<(String, Vec<bool>)> {
    let answer: Vec<redis::Value> =
        run_script(node, &scripts::FENCE_STATE, keys, &[], timeout).await?;
    let mut answer = answer.into_iter();
    let term: String = redis::from_redis_value(answer.next()?).ok()?;
    let marked = answer.map(|m| matches!(m, redis::Value::Int(1))).collect();
    Some((term, marked))
}

async fn mark_seeded(node: &Node, key: &[u8], term: &str, timeout: Duration) -> Record {
    match run_script::<i64>(node, &scripts::MARK_SEEDED, &[key], &[term], timeout).await {
        Some(-1) => Record::Seeded,
        Some(_) => Record::Stale(term.to_owned()),
        None => Record::Unknown,
    }
}

/// Runs `lua` on the server that serves `keys` (all in one slot on a Cluster voter), with the
/// server's `run_id` and then `args` as its arguments, bounded by `timeout`; `None` when it did
/// not answer in time, refused, or would not say its `run_id`.
async fn run_script<T: redis::FromRedisValue>(
    node: &Node,
    lua: &scripts::LuaScript,
    keys: &[&[u8]],
    args: &[&str],
    timeout: Duration,
) -> Option<T> {
    let run = async {
        let ready = node.connection(keys.first()?).await.ok()?;
        let run_id = ready.run_id.clone()?;
        let mut conn = ready.conn.clone();
        let mut invocation = lua.script().prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        invocation.arg(&*run_id);
        for arg in args {
            invocation.arg(*arg);
        }
        invocation
            .invoke_async(&mut conn)
            .await
            .inspect_err(|err| node.learn_from_error(err, &ready))
            .ok()
    };
    tokio::time::timeout(timeout, run).await.ok().flatten()
}
