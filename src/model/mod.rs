//! A model of the fenced Redlock protocol, checked exhaustively with `stateright` (and, in
//! `wakeups`, a model of one master's waiters and the servers' own compare-and-delete).
//!
//! Compiled only into the crate's unit tests, so it uses the production decision code rather
//! than a copy: the fenced acquire's and the confirm's replies are decoded by
//! `classify::classify`/`classify::classify_code`, counted in [`Tally`], and judged by
//! [`verdict::judge`]; the scripts' effects on a node are `scripts::effects`, the Rust mirrors
//! kept next to the Lua.
//!
//! # What is modelled
//! - 3 masters, each with one lock key and one fence counter, and 2 clients, each making one
//!   fenced acquire: the acquire round (`SET NX` + `INCR`), the decision at the majority with
//!   T = the highest counter among the grants counted before the decision, the confirm round
//!   (counting only masters that granted before the decision, as `confirm::confirm_fence`
//!   does),
//!   and the hold. Releases are not sent: a key may expire once its owner's deadline has
//!   passed, and a deadline may pass at any moment, so every state a compare-and-delete
//!   reaches is reached (a release only ever deletes its sender's own key, and a holder's
//!   window closes with its deadline just as with its release).
//! - The network: each (client, master) connection is FIFO, and any request on any connection
//!   may be delayed arbitrarily (the checker tries every interleaving). A reply reaches its
//!   client as its request runs: a reply delayed on its own is not modelled, which keeps the
//!   state space small enough for CI. (A late decision is covered where it only delays the
//!   client's next requests, which the checker delays anyway; not covered is a node running
//!   a request long before its client learns of it.) Replies that arrive after a round was
//!   decided are ignored, as the stragglers are.
//! - Time, abstracted: a client's local deadline may pass at any moment after its acquire
//!   starts (a paused client is one whose deadline passes while it takes no step). A key may
//!   expire once its owner's deadline has passed (the servers' expiry is never earlier than
//!   the holder's deadline; that timing is the drift argument, tested against real servers,
//!   not here). A *premature* expiry (a server clock step, a failover) removes a key while
//!   its owner's deadline is still ahead, up to a bounded count.
//! - Each master's term, made by a [`TermRule`] from what its server says (`run_id`,
//!   replication id, "promoted"), and the term its marker names; a master is seeded while the
//!   two agree.
//! - Optionally, one master restart, empty (amnesia: no `appendfsync always`) or with its data
//!   (a new `run_id`: a new term), or one master's dataset replaced by an older copy of itself
//!   with its `run_id` unchanged (a failback, [`Restart::Reverted`]); the fenced acquire then
//!   refuses there (`-6`), and a seeder re-seeds it (`crate::protocol::reseed`): one reading of each
//!   master at any moment, marked or not (each moving that master's epoch on), the production
//!   trust rule `reseed::seed_value`, and one write to each master read unmarked, which marks
//!   it only while it is in the term the reading saw. Confirms carry the epoch of their grant
//!   and count only on a master seeded for its current term (`-7` otherwise).
//! - Optionally, a change of one master's term with its data kept (a first replica attaching,
//!   its backlog freed).
//! - Optionally, increments of a master's counter by other resources of the same hash slot
//!   (counters are per slot, see `resource::fence_key`).
//! - Optionally, the second client a reader of the first's read-write lock ([`Reader`]):
//!   its grant raises no counter, its token is the largest counter its majority named, and
//!   its confirmation raises that majority's counters to it. The properties below then
//!   judge a reader's token as the token of the last write it may observe: at least every
//!   write confirmed before it began, below every write begun after its confirmation.
//! - A state in which both clients hold or gave up has no successor: nothing after it can
//!   confirm a token or make a second valid holder.
//!
//! # Properties
//! - **Mutual exclusion**: two clients never hold the lock inside their validity at the same
//!   time. Holds without premature expiry and amnesia; the checker finds the overlap with one
//!   (a master restarted empty breaks it too: that is the restart grace's business, tested
//!   against real servers, not here).
//! - **Unique tokens** (always): two confirmed holders never share a fencing token.
//! - **Tokens follow holders** (always): a holder whose acquire began after another holder was
//!   confirmed gets a higher token.
//!
//! Not modelled: extend and the re-adding of keys, leader info, more than one attempt per
//! client, more than two clients, the validity arithmetic (see `quorum`'s tests and the
//! integration test that catches validity counted from the decision), and connection loss
//! other than a restart.
//!
//! A stronger order, "tokens increase in the order the holders' confirm rounds were
//! *decided*", cannot hold under premature expiry with any rule that only looks at the
//! nodes: the checker finds a schedule in which B's confirm has touched every node it needs
//! before A even starts, yet B learns of it after A's decision. What fencing needs, and what
//! holds, is uniqueness plus order between holders one after another.

use crate::scripts::effects::ConfirmRule;

/// The client that reads, when a check has a reader ([`Reader`]).
const READER: usize = 1;

const MASTERS: usize = 3;
const CLIENTS: usize = 2;

/// The knobs of one check.
#[derive(Debug, Clone)]
pub(crate) struct LockModel {
    pub(crate) rule: ConfirmRule,
    /// How many keys may expire before their owner's deadline.
    pub(crate) premature_expiries: u8,
    /// How many times another resource of the same hash slot may increment a master's
    /// counter (counters are per slot, shared by the resources that hash to it).
    pub(crate) foreign_increments: u8,
    /// Whether one master may restart, and with what it keeps, or have its dataset replaced
    /// by an older copy of itself.
    pub(crate) restart: Restart,
    /// How a master's fence term, which its marker must name for its counter to count, is made.
    pub(crate) term_rule: TermRule,
    /// How many times a master's term may change with its data kept (a first replica
    /// attaching, its backlog freed: a new replication id), on any master, at any moment.
    pub(crate) term_changes: u8,
    /// Which master's term may change; `None`: any.
    pub(crate) term_changing: Option<usize>,
    /// Re-seeding starts only once the restart happened (not when a term change alone made a
    /// master unseeded): a re-seed that began before a restart and reads after it is not
    /// explored (`DESIGN.md` §10: with five masters it can seed from a reading older than a
    /// token, which the production re-seed's second reading rules out and this model's
    /// single-reading seeder does not).
    pub(crate) seeding_waits_for_the_restart: bool,
    /// The fixes of the review of issue 29: a re-seed reading moves the epoch on every
    /// master it reads, marked or not, and a confirm counts only on a master seeded for its
    /// current term. Off: the scripts before them.
    pub(crate) review_fixes: bool,
    /// Which master may restart; `None`: any.
    pub(crate) restarting: Option<usize>,
    /// Whether the fenced acquire refuses a master not re-seeded since it started, and the
    /// client re-seeds it (`crate::protocol::reseed`); off, the protocol before re-seeding.
    pub(crate) reseed: bool,
    /// Whether the confirm refuses on a master re-seeded since its grant (the epoch); off,
    /// the first version of re-seeding, which the checker breaks.
    pub(crate) epoch_check: bool,
    /// The masters' fence counters at the start (one initial state each).
    pub(crate) initial_fences: Vec<[u64; MASTERS]>,
    /// Whether the second client is a reader of a read-write lock whose write lock the first
    /// takes (`DESIGN.md` §7c), and how its token is made.
    pub(crate) reader: Reader,
}

/// The second client of a check, as a reader: its share and the writer's key exclude each
/// other on a master as two lock keys do (the per-master rules `rwlock` checks), but its
/// grant raises no counter (`ACQUIRE_READ_FENCED`: it names the counter as it stands), its
/// token is the largest counter its majority named, and its confirmation raises its
/// majority's counters to at least that (`CONFIRM_FENCE_READ`, only while its share is
/// live). Its token must be at least every write's confirmed before it began, and below
/// every write begun after its confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Reader {
    /// Both clients write.
    None,
    /// A reader, as shipped.
    Confirmed,
    /// Wrong: a reader that trusts the largest counter without its confirm round.
    Unconfirmed,
}

/// The restart a check allows (at most one, of one master, at any moment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Restart {
    None,
    /// The master comes back empty: keys and counters lost (no persistence).
    Empty,
    /// The master comes back with its data (`appendfsync always`), as a new run.
    Persisted,
    /// The master's dataset is replaced by an older copy of itself, `run_id` unchanged: a
    /// replica copied it before either client of the check started (as in issue 29's
    /// schedule: the holders before it are the starting counters), was promoted, and at any
    /// moment the master fails back to it (everything it did since the copy is lost), is
    /// promoted again, and frees its backlog (or a first replica attaches): two new
    /// replication ids, and `second_repl_offset` back to -1. One step, since the rule before
    /// issue 29 went wrong at its end; the term between the two (promoted, not yet freed) is
    /// a term change of a master that keeps its data, which `Restart::Persisted` explores.
    ///
    /// Why the copy is the starting state: a copy made at any moment multiplied the states
    /// past what a CI machine holds (over 15 GiB). Under the shipped rule a reverted master's
    /// marker never names its term, whatever the copy holds; what a later copy would add is a
    /// key and an epoch a confirm could meet, which the restart with data explores.
    Reverted,
}

/// How a master's fence term, which its marker must name for its counter to count, is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TermRule {
    /// As shipped (`scripts/lua/fence_term.lua`): the `run_id` and the replication id, always.
    RunAndReplicationId,
    /// The rule before it: the `run_id`, and the replication id only while the server says
    /// it was promoted since it started (`second_repl_offset` ≥ 0). A master that freed its
    /// backlog after a failback is back in the term its old copy was marked for.
    ReplicationIdWhilePromoted,
}

mod checks;
mod handoff;
mod rwlock;
mod rwqueue;

/// Runs the check `check` makes and says what it found: the names of the properties it
/// discovered (broken, or reached for a `sometimes`), sorted, and how many states it saw;
/// printed with `what` it checked and how long that took.
fn findings<M>(
    what: impl std::fmt::Debug,
    check: impl FnOnce() -> Box<dyn stateright::Checker<M>>,
) -> (Vec<&'static str>, usize)
where
    M: stateright::Model,
    M::State: Clone + PartialEq,
    M::Action: Clone + PartialEq,
{
    let started = std::time::Instant::now();
    let checker = check();
    let mut found: Vec<&'static str> = checker.discoveries().into_keys().collect();
    found.sort_unstable();
    let states = checker.unique_state_count();
    println!(
        "{what:?}: {states} states in {:.1?}, found {found:?}",
        started.elapsed()
    );
    (found, states)
}
mod state;
mod steps;
mod waiter;
mod wakeups;
