//! The model's steps: what each action does to the state, through the production decoding,
//! tally, verdict and script mirrors, and the properties checked in every state.

use redis::Value;
use stateright::{Model, Property};

use super::state::{Client, Confirmed, Phase, Reply, Request, Seeder, Server, Stage, State};
use super::{LockModel, MASTERS, READER, Reader, Restart};
use crate::core::quorum::{Decision, Tally, Vote};
use crate::core::report::NodeOutcome;
use crate::core::verdict::{self, RoundKind};
use crate::engine::classify::{classify, classify_code};
use crate::protocol::reseed::{self, Reading};
use crate::scripts::effects::{self, ConfirmRule};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    Start(u8),
    Deliver(u8, u8),
    DeadlinePasses(u8),
    Expire(u8),
    Restart(u8),
    Revert(u8),
    TermChange(u8),
    ForeignIncrement(u8),
    SeedRead(u8),
    SeedWrite(u8),
}

impl LockModel {
    /// Whether master `m`'s marker names its current term.
    fn seeded(&self, state: &State, m: usize) -> bool {
        state.markers[m] == Some(self.term_rule.term(state.servers[m]))
    }

    /// Sends `request` to every master.
    fn broadcast(state: &mut State, client: usize, request: Request) {
        if let Some(queues) = state.requests.get_mut(client) {
            for queue in queues.iter_mut() {
                queue.push(request);
            }
        }
    }

    /// A client's reply from `master`, through the production decoding, tally and verdict.
    fn receive(&self, state: &mut State, c: usize, master: usize, reply: Reply) {
        let client = &mut state.clients[c];
        if client.stage() != Some(reply.stage) {
            return;
        }
        let stage = reply.stage;
        let (outcome, grant) = match (stage, reply.grant) {
            (Stage::Acquire, Some((fence, epoch))) => classify(
                Value::Array(vec![
                    Value::Int(-1),
                    Value::Int(fence as i64),
                    Value::Int(epoch as i64),
                ]),
                &NodeOutcome::Granted,
            ),
            (Stage::Acquire, None) => classify(Value::Int(reply.code), &NodeOutcome::Granted),
            (Stage::Confirm, _) => (
                classify_code(reply.code, &NodeOutcome::FenceConfirmed),
                None,
            ),
        };
        let mut vote = outcome.vote();
        // As production counts a confirm: only from a master that granted before the decision
        // (`round`'s `counts_only`).
        if stage == Stage::Confirm
            && self.rule == ConfirmRule::GrantorsOnly
            && client.granted[master] != Vote::Yes
            && vote == Vote::Yes
        {
            vote = Vote::Failed;
        }
        client.votes[master] = Some(vote);
        client.tally.record(vote);
        if let (Vote::Yes, Some(grant)) = (vote, grant) {
            client.fence = client.fence.max(Some(grant.counter));
            client.epochs[master] = Some(grant.epoch);
        }
        if client.tally.decision() == Decision::Open {
            return;
        }

        let now = client.round_votes();
        let validity_left = !client.deadline_passed;
        match client.phase {
            Phase::Acquiring => {
                let verdict =
                    verdict::judge(RoundKind::Acquire, &client.tally, validity_left, None, &now);
                match (verdict, client.fence) {
                    (Ok(()), Some(token)) if c == READER && self.reader == Reader::Unconfirmed => {
                        client.phase = Phase::Holding { token };
                        state.confirmed.push(c as u8, token);
                    }
                    (Ok(()), Some(token)) => {
                        client.granted = now;
                        client.phase = Phase::Confirming { token };
                        client.tally = Tally::new(MASTERS);
                        client.votes = [None; MASTERS];
                        Self::broadcast(state, c, Request::Confirm(token));
                    }
                    _ => client.phase = Phase::Done,
                }
            }
            Phase::Confirming { token } => {
                let granted = client.granted;
                let verdict = verdict::judge(
                    RoundKind::Renew,
                    &client.tally,
                    validity_left,
                    Some(&granted),
                    &now,
                );
                if verdict.is_ok() {
                    client.phase = Phase::Holding { token };
                    state.confirmed.push(c as u8, token);
                } else {
                    client.phase = Phase::Done;
                }
            }
            _ => {}
        }
    }

    /// Whether client `c` is the reader.
    pub(super) fn is_reader(&self, c: usize) -> bool {
        self.reader != Reader::None && c == READER
    }

    /// Client `c`'s acquire on one master: a write's, or the reader's.
    fn acquire(
        &self,
        c: usize,
        key: &mut Option<u8>,
        fence: &mut u64,
        seeded: bool,
        epoch: u64,
    ) -> Value {
        let raise = !self.is_reader(c);
        effects::acquire_fenced(key, fence, (seeded, epoch), c as u8, raise)
    }

    /// Whether `later`'s token may follow `earlier` (a holder confirmed before `later` began,
    /// or decided before it): a write's must be above, a read's at least as high (the token
    /// of the last write it may observe).
    fn follows(&self, later: u8, earlier: u64, token: u64) -> bool {
        if self.is_reader(usize::from(later)) {
            earlier <= token
        } else {
            earlier < token
        }
    }

    /// A master runs the request at the head of one connection.
    fn deliver(&self, state: &mut State, c: usize, m: usize, request: Request) {
        let me = c as u8;
        let seeded = self.seeded(state, m) || !self.reseed;
        let (key, fence) = (&mut state.keys[m], &mut state.fences[m]);
        let epoch = state.epochs[m];
        let reply = match request {
            Request::Acquire => match self.acquire(c, key, fence, seeded, epoch) {
                Value::Array(items) => match items.as_slice() {
                    [Value::Int(-1), Value::Int(f), Value::Int(e)] => Some(Reply {
                        stage: Stage::Acquire,
                        code: -1,
                        grant: u64::try_from(*f).ok().zip(u64::try_from(*e).ok()),
                    }),
                    _ => None,
                },
                Value::Int(code) => Some(Reply {
                    stage: Stage::Acquire,
                    code,
                    grant: None,
                }),
                _ => None,
            },
            Request::Confirm(token) => {
                // The epoch the client sent this master: its grant's, or none (a grant after
                // the decision: no check, and the client does not count it).
                let granted_in = state.clients[c].epochs[m];
                let sent = granted_in.filter(|_| self.epoch_check);
                let counts_here = seeded || !self.review_fixes;
                let code =
                    effects::confirm_fence(key, fence, (counts_here, epoch), me, token, sent);
                Some(Reply {
                    stage: Stage::Confirm,
                    code,
                    grant: None,
                })
            }
        };
        if let Some(reply) = reply {
            self.receive(state, c, m, reply);
        }
    }

    /// Checks every state reachable under these knobs; returns the checker for inspection.
    ///
    /// Depth-first, with the two clients' symmetry: a breadth-first search kept every
    /// pending state in memory (11 GiB and more for the larger checks), depth-first keeps
    /// one fingerprint per state (under 1 GiB for all of them), and the symmetry halves the
    /// states. A counterexample's path is not the shortest one. One thread: two checks side
    /// by side (the test harness runs two tests at a time on two cores) take a fifth less CPU
    /// than one check on two threads, which contend for the checker's shared set of seen
    /// states (59 s against 75 s of CPU for the restart with data).
    pub(crate) fn check(self) -> impl stateright::Checker<Self> {
        use stateright::Checker;
        // A reader and a writer are not alike: no symmetry then.
        let symmetric = self.reader == Reader::None;
        let checker = self.checker();
        let checker = if symmetric {
            checker.symmetry()
        } else {
            checker
        };
        checker.spawn_dfs().join()
    }

    /// Checks until one of `properties` is broken (a mutation's check: the first
    /// counterexample is the answer, not the whole state space), breadth-first: it finds
    /// the shortest counterexample, and finds it sooner than a depth-first search, which
    /// wanders deep first (84 s against 30 s for the slowest, in 4.3 GiB).
    pub(crate) fn check_until_broken(
        self,
        properties: &[&'static str],
    ) -> impl stateright::Checker<Self> {
        use stateright::Checker;
        let any = properties.iter().copied().collect();
        let symmetric = self.reader == Reader::None;
        let checker = self
            .checker()
            .finish_when(stateright::HasDiscoveries::AnyOf(any));
        let checker = if symmetric {
            checker.symmetry()
        } else {
            checker
        };
        checker.spawn_bfs().join()
    }
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.initial_fences
            .iter()
            .map(|fences| State {
                keys: [None; MASTERS],
                fences: *fences,
                markers: [Some(self.term_rule.term(Server::default())); MASTERS],
                servers: [Server::default(); MASTERS],
                initial_fences: *fences,
                epochs: [0; MASTERS],
                seeder: Seeder::default(),
                requests: Default::default(),
                clients: [Client::new(), Client::new()],
                premature_left: self.premature_expiries,
                increments_left: self.foreign_increments,
                term_changes_left: self.term_changes,
                restarted: false,
                confirmed: Confirmed::default(),
            })
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        // Once both clients hold or are done, no step can confirm another token or make a
        // second valid holder (deadlines only pass): the state is final for every property.
        if state
            .clients
            .iter()
            .all(|c| matches!(c.phase, Phase::Holding { .. } | Phase::Done))
        {
            return;
        }
        for (c, client) in state.clients.iter().enumerate() {
            let c8 = c as u8;
            if client.phase == Phase::Idle {
                actions.push(Action::Start(c8));
            }
            // A deadline matters while the client is in a round or holds, or a key is its.
            let relevant = client.phase != Phase::Done || state.keys.contains(&Some(c8));
            if client.phase != Phase::Idle && !client.deadline_passed && relevant {
                actions.push(Action::DeadlinePasses(c8));
            }
            for m in 0..MASTERS {
                if !state.requests[c][m].is_empty() {
                    actions.push(Action::Deliver(c8, m as u8));
                }
            }
        }
        for (m, key) in state.keys.iter().enumerate() {
            if let Some(owner) = key {
                let owner_done = state.clients[usize::from(*owner)].deadline_passed;
                if owner_done || state.premature_left > 0 {
                    actions.push(Action::Expire(m as u8));
                }
            }
            let may_restart = self.restarting.is_none_or(|r| r == m);
            if self.restart != Restart::None && !state.restarted && may_restart {
                actions.push(match self.restart {
                    Restart::Reverted => Action::Revert(m as u8),
                    _ => Action::Restart(m as u8),
                });
            }
            // Re-seeding starts once a master is unseeded (production: when an acquire meets
            // one, or a sweep); the checker tries each step at every moment from then on. The
            // seeder reads every master, marked or not, as production does: an unmarked
            // reading raises the value (a max), and a reading of every master is trusted.
            let seeding = self.reseed
                && (0..MASTERS).any(|other| !self.seeded(state, other))
                && (state.restarted || !self.seeding_waits_for_the_restart);
            let unread = state.seeder.readings[m].is_none();
            if seeding && state.seeder.value.is_none() && unread {
                actions.push(Action::SeedRead(m as u8));
            }
            let read_unmarked = state.seeder.readings[m].is_some_and(|r| !r.marked);
            if state.seeder.value.is_some() && read_unmarked && !state.seeder.written[m] {
                actions.push(Action::SeedWrite(m as u8));
            }
            if state.term_changes_left > 0 && self.term_changing.is_none_or(|t| t == m) {
                actions.push(Action::TermChange(m as u8));
            }
            if state.increments_left > 0 {
                actions.push(Action::ForeignIncrement(m as u8));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Start(c) => {
                let c = usize::from(c);
                state.clients[c].phase = Phase::Acquiring;
                state.clients[c].confirmed_before_start = state.confirmed.as_slice().len();
                Self::broadcast(&mut state, c, Request::Acquire);
            }
            Action::Deliver(c, m) => {
                let (c, m) = (usize::from(c), usize::from(m));
                let request = state.requests[c][m].pop()?;
                self.deliver(&mut state, c, m, request);
            }
            Action::DeadlinePasses(c) => state.clients[usize::from(c)].deadline_passed = true,
            Action::Expire(m) => {
                let m = usize::from(m);
                let owner = usize::from(state.keys[m]?);
                if !state.clients[owner].deadline_passed {
                    state.premature_left = state.premature_left.checked_sub(1)?;
                }
                state.keys[m] = None;
            }
            Action::ForeignIncrement(m) => {
                state.increments_left = state.increments_left.checked_sub(1)?;
                state.fences[usize::from(m)] += 1;
            }
            Action::Restart(m) => {
                let m = usize::from(m);
                if self.restart == Restart::Empty {
                    state.keys[m] = None;
                    state.fences[m] = 0;
                    state.markers[m] = None;
                }
                // A new process: a new `run_id` and a new replication id.
                let server = &mut state.servers[m];
                *server = Server {
                    run: server.run + 1,
                    replid: server.replid + 1,
                    promoted: false,
                };
                state.restarted = true;
            }
            Action::Revert(m) => {
                let m = usize::from(m);
                // The copy: the starting state, marked for the term the master was in then.
                state.keys[m] = None;
                state.fences[m] = state.initial_fences[m];
                state.markers[m] = Some(self.term_rule.term(Server {
                    run: state.servers[m].run,
                    ..Server::default()
                }));
                state.epochs[m] = 0;
                // Promoted (a new replication id), then the backlog freed (another).
                let server = &mut state.servers[m];
                server.replid += 2;
                server.promoted = false;
                state.restarted = true;
            }
            Action::TermChange(m) => {
                state.term_changes_left = state.term_changes_left.checked_sub(1)?;
                state.servers[usize::from(m)].replid += 1;
            }
            Action::SeedRead(m) => {
                let m = usize::from(m);
                let seeded = self.seeded(&state, m);
                let (counter, marked) = if self.review_fixes || seeded {
                    effects::seed_read(state.fences[m], seeded, &mut state.epochs[m])
                } else {
                    // Before the review: the epoch moved on only where marked.
                    (state.fences[m], seeded)
                };
                state.seeder.readings[m] = Some(Reading { counter, marked });
                state.seeder.terms[m] = Some(self.term_rule.term(state.servers[m]));
                state.seeder.value = reseed::seed_value(&state.seeder.readings);
                if state.seeder.value.is_some() {
                    // Decided: only which masters to write to matters from here on (fewer
                    // distinct states for the checker).
                    for reading in state.seeder.readings.iter_mut().flatten() {
                        reading.counter = 0;
                    }
                }
            }
            Action::SeedWrite(m) => {
                let m = usize::from(m);
                let value = state.seeder.value?;
                let term = self.term_rule.term(state.servers[m]);
                // `SEED_FENCE` refuses when the server left the term the reading saw.
                if state.seeder.terms[m] == Some(term) {
                    let mut seeded = false;
                    effects::seed_fence(&mut state.fences[m], &mut seeded, value);
                    state.markers[m] = Some(term);
                }
                state.seeder.written[m] = true;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, state: &State| {
                state
                    .clients
                    .iter()
                    .filter(|c| c.holds_valid_lock())
                    .count()
                    <= 1
            }),
            // A reader's token is a write's: only writes' tokens are unique.
            Property::always("unique tokens", |model: &Self, state: &State| {
                let writes: Vec<u64> = (state.confirmed.as_slice().iter())
                    .filter(|(c, _)| !model.is_reader(usize::from(*c)))
                    .map(|(_, t)| *t)
                    .collect();
                writes
                    .iter()
                    .enumerate()
                    .all(|(i, t)| writes[..i].iter().all(|earlier| earlier != t))
            }),
            Property::always("tokens follow holders", |model: &Self, state: &State| {
                let holders = state.confirmed.as_slice();
                holders.iter().all(|(later, token)| {
                    let before = state.clients[usize::from(*later)].confirmed_before_start;
                    (holders[..before].iter()).all(|(_, t)| model.follows(*later, *t, *token))
                })
            }),
            Property::always(
                "tokens follow confirm decisions",
                |model: &Self, state: &State| {
                    let holders = state.confirmed.as_slice();
                    holders
                        .windows(2)
                        .all(|w| model.follows(w[1].0, w[0].1, w[1].1))
                },
            ),
        ]
    }
}
