//! The model's state: the masters (keys, counters, markers, terms), the requests in flight,
//! the clients and the seeder, and the symmetry between the two clients.

use stateright::Representative;

use super::{CLIENTS, MASTERS, TermRule};
use crate::core::quorum::{Tally, Vote};
use crate::protocol::reseed::Reading;

/// What a master's server says about itself, as far as its fence term goes: its `run_id` and
/// its replication id (each a counter: a new one is never an old one), and whether it says
/// it was promoted since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(super) struct Server {
    pub(super) run: u8,
    pub(super) replid: u8,
    pub(super) promoted: bool,
}

/// A fence term: a `run_id`, and a replication id where the rule takes it.
pub(super) type Term = (u8, Option<u8>);

impl TermRule {
    pub(super) fn term(self, server: Server) -> Term {
        match self {
            Self::RunAndReplicationId => (server.run, Some(server.replid)),
            Self::ReplicationIdWhilePromoted => {
                (server.run, server.promoted.then_some(server.replid))
            }
        }
    }
}

/// The re-seeding of masters that started since they were seeded, by any client: one read
/// of each master at a time (`SEED_READ`), then one write to each master read unmarked, which
/// marks it only while it is still in the term the reading saw (`SEED_FENCE`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(super) struct Seeder {
    pub(super) readings: [Option<Reading>; MASTERS],
    /// The term each reading saw.
    pub(super) terms: [Option<Term>; MASTERS],
    /// Decided by the production rule once the readings are trusted.
    pub(super) value: Option<u64>,
    pub(super) written: [bool; MASTERS],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Request {
    Acquire,
    Confirm(u64),
}

/// The requests in flight on one (client, master) connection, oldest first. A client sends
/// two at most (its acquire, then its confirm), so they fit inline: a state without heap
/// parts is cheap to clone and hash, which is most of the checker's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(super) struct InFlight(pub(super) [Option<Request>; 2]);

impl InFlight {
    /// # Panics
    /// On a third request: the model's clients send two at most.
    pub(super) fn push(&mut self, request: Request) {
        let free = self.0.iter_mut().find(|slot| slot.is_none());
        *free.expect("a client sends two requests at most") = Some(request);
    }

    pub(super) fn pop(&mut self) -> Option<Request> {
        let head = self.0[0].take()?;
        self.0[0] = self.0[1].take();
        Some(head)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0[0].is_none()
    }
}

/// Confirmed holders in the order their confirm rounds were decided: (client, token). A
/// client is confirmed once at most, so they fit inline (see [`InFlight`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(super) struct Confirmed {
    pub(super) holders: [(u8, u64); CLIENTS],
    pub(super) len: u8,
}

impl Confirmed {
    /// # Panics
    /// On a third holder: the model's clients are confirmed once at most.
    pub(super) fn push(&mut self, client: u8, token: u64) {
        self.holders[usize::from(self.len)] = (client, token);
        self.len += 1;
    }

    pub(super) fn as_slice(&self) -> &[(u8, u64)] {
        &self.holders[..usize::from(self.len)]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Stage {
    Acquire,
    Confirm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Reply {
    pub(super) stage: Stage,
    /// The script's reply: an integer code, or the fenced acquire's counter and epoch.
    pub(super) code: i64,
    pub(super) grant: Option<(u64, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Phase {
    Idle,
    Acquiring,
    Confirming { token: u64 },
    Holding { token: u64 },
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Client {
    pub(super) phase: Phase,
    pub(super) tally: Tally,
    /// This round's vote per master; `None` until it answers.
    pub(super) votes: [Option<Vote>; MASTERS],
    /// The acquire round's votes at its decision (the grantors), for the confirm's verdict.
    pub(super) granted: [Vote; MASTERS],
    /// The highest counter among the grants counted before the decision.
    pub(super) fence: Option<u64>,
    /// Each master's re-seed epoch at its grant, as counted before the decision.
    pub(super) epochs: [Option<u64>; MASTERS],
    pub(super) deadline_passed: bool,
    /// How many holders had been confirmed when this client's acquire began.
    pub(super) confirmed_before_start: usize,
}

impl Client {
    pub(super) fn new() -> Self {
        Self {
            phase: Phase::Idle,
            tally: Tally::new(MASTERS),
            votes: [None; MASTERS],
            granted: [Vote::Failed; MASTERS],
            fence: None,
            epochs: [None; MASTERS],
            deadline_passed: false,
            confirmed_before_start: 0,
        }
    }

    /// Votes as the production report has them at the decision: no answer is a failed vote.
    pub(super) fn round_votes(&self) -> [Vote; MASTERS] {
        self.votes.map(|v| v.unwrap_or(Vote::Failed))
    }

    /// The round the client is waiting for answers to.
    pub(super) fn stage(&self) -> Option<Stage> {
        match self.phase {
            Phase::Acquiring => Some(Stage::Acquire),
            Phase::Confirming { .. } => Some(Stage::Confirm),
            _ => None,
        }
    }

    pub(super) fn holds_valid_lock(&self) -> bool {
        matches!(self.phase, Phase::Holding { .. }) && !self.deadline_passed
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct State {
    pub(super) keys: [Option<u8>; MASTERS],
    pub(super) fences: [u64; MASTERS],
    /// The term each master's re-seed marker names, if it has one.
    pub(super) markers: [Option<Term>; MASTERS],
    /// What each master's server says of its term.
    pub(super) servers: [Server; MASTERS],
    /// The counters at the start: the replica's copy a reverted master fails back to.
    pub(super) initial_fences: [u64; MASTERS],
    /// Each master's re-seed epoch.
    pub(super) epochs: [u64; MASTERS],
    pub(super) seeder: Seeder,
    /// `[client][master]`: requests in flight.
    pub(super) requests: [[InFlight; MASTERS]; CLIENTS],
    pub(super) clients: [Client; CLIENTS],
    pub(super) premature_left: u8,
    pub(super) increments_left: u8,
    pub(super) term_changes_left: u8,
    pub(super) restarted: bool,
    pub(super) confirmed: Confirmed,
}

impl State {
    /// The same state with the two clients' names swapped: the clients are alike, so a state
    /// and its swap have the same futures up to the names, and the checker explores one.
    pub(super) fn clients_swapped(&self) -> Self {
        let mut swapped = self.clone();
        swapped.clients.swap(0, 1);
        swapped.requests.swap(0, 1);
        for owner in swapped.keys.iter_mut().flatten() {
            *owner = 1 - *owner;
        }
        let len = usize::from(swapped.confirmed.len);
        for (client, _) in &mut swapped.confirmed.holders[..len] {
            *client = 1 - *client;
        }
        swapped
    }
}

/// Symmetry reduction over the two clients: of a state and its swap, the smaller stands for
/// both. Every property names clients only to compare them with each other, so it holds in a
/// state exactly when it holds in its swap. (An order, not a hash: hashing both was two
/// thirds of the checker's time.)
impl Representative for State {
    fn representative(&self) -> Self {
        self.clone().min(self.clients_swapped())
    }
}
