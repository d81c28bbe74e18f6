//! A model of one master's read-write lock queue, checked exhaustively with `stateright`:
//! readers and writers take their turns in the order they began to wait, a run of readers
//! holds together, and nobody is left waiting for a release that will wake nobody
//! (`DESIGN.md` §7c).
//!
//! Turns are per master (each master orders its queue by the places every waiter sends it
//! alike, and a majority's turns follow), so one master is modelled, with every
//! interleaving of:
//! - a writer (client 0) that holds the lock at the start, its token unmarked, and releases
//!   it: the server's own `DELIFEQ` first, the release script where that missed;
//! - a reader (client 1), a writer (client 2) and a second reader (client 3), each arriving
//!   at any moment: a first round (a read's `ACQUIRE_READ`, a write's `SET NX`), and when it
//!   is refused, its place (drawn as it subscribes: the order in which they began to wait),
//!   its cleanup, which joins the queue (`UNDO_AND_QUEUE`; a reader's `RELEASE_READ` with its
//!   queue arguments), and its queued rounds, each when a message woke it (`QUEUED_ACQUIRE`,
//!   a queued reader's `ACQUIRE_READ`), each refused one followed by its cleanup; then its
//!   release;
//! - once per reader, a round granted here that loses elsewhere: its cleanup, then its next
//!   round, which the other masters' releases or its timer bring.
//!
//! Keys do not expire and every waiter stays live (a timer covers an expiry, and a lapsed
//! waiter leaves the queue as any does); a writer's round granted here and lost elsewhere,
//! one-attempt rounds, `DEQUEUE`, several clients per `RedLock` and fenced hand-offs are not
//! modelled (a fenced writer's turn is its reservation or its own lock, a writer's turn all
//! the same). The scripts' effects are `scripts::effects::ReadWriteQueue`, mirrored next to
//! the Lua.
//!
//! # Properties
//! - **A writer is never with a reader** (always), on the master.
//! - **Turns in arrival order** (always): nobody comes to hold while someone of the other
//!   kind who began to wait before it still waits (a reader passing a writer would starve
//!   writers; a writer passing a reader, readers).
//! - **Everyone finishes** (eventually): no waiter is left waiting with no message to come.
//! - **No waiter loses round after round** (always): at most [`LOST_ROUNDS`] refused queued
//!   rounds each, so that a livelock is a finding, not a cycle the search folds away.
//! - Two readers hold at once (sometimes: the run of readers is handed over together).
//!
//! Wrong rules caught by the tests below: readers that do not queue (the rule before this
//! model: a read is refused while any writer is queued, so a writer that began to wait after
//! a reader takes the lock first); a hand-over to a run of readers that frees the key instead
//! of setting the readers' mark (the queued writer behind them takes it first); a bare mark
//! kept from the writer before the readers; a bare mark passed on whoever heads the queue.
//! Run by hand (`tests/MUTATIONS.md`): a cleanup passing on every bare mark it finds, and one
//! whose share was the last leaving the mark.

use stateright::{Checker, Model, Property};

use super::waiter::{Phase, deliver};
use crate::scripts::effects::{BareMark, LockValue, ReadDelete, ReadWriteQueue, Wake};

/// Clients: 0 the first holder, 1 a reader, 2 a writer, 3 a reader.
const CLIENTS: usize = 4;
const READERS: u8 = 0b1010;
/// More refused queued rounds than this for one waiter is a finding: each refusal follows a
/// message, and a release hands over once.
const LOST_ROUNDS: u8 = 4;

/// The knobs of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RwQueueModel {
    /// Readers queue, as shipped (`false`: the rule before).
    pub(crate) readers_queue: bool,
    /// A hand-over to readers sets the readers' mark, as shipped (`false`: it frees the key).
    pub(crate) mark_for_readers: bool,
    /// What a queued reader refused by an earlier writer does with a bare readers' mark.
    pub(crate) bare_mark: BareMark,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RwQueueState {
    master: ReadWriteQueue,
    phases: [Phase; CLIENTS],
    /// The next place to draw.
    next_place: u8,
    /// Who has begun to wait (its first cleanup ran: queued, or under the rule before, a
    /// reader the master saw refused).
    waited: u8,
    /// Which readers had a round lose elsewhere (once each: every such round is its own
    /// retry, paced by its timer).
    lost_elsewhere: u8,
    /// Each client's queued rounds that were refused.
    lost: [u8; CLIENTS],
    /// Someone came to hold while someone of the other kind that began to wait before it
    /// still waited.
    overtaken: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Step {
    /// The client's next request runs on the master (or it subscribes).
    Run(u8),
    /// A reader's round is granted its share here, but loses elsewhere: its cleanup comes
    /// next (a first round's subscribes and draws its place first), and its next round
    /// after that, brought by the other masters or its timer.
    LoseElsewhere(u8),
}

fn is_reader(c: usize) -> bool {
    READERS & (1 << c) != 0
}

impl RwQueueState {
    fn deliver(&mut self, wake: Option<Wake>) {
        deliver(&mut self.phases, wake);
    }

    /// `c` is given its turn (comes to hold, or is reserved the lock): whether someone of the
    /// other kind that began to wait before it still waits, known to the master (queued
    /// there; under the rule before, a reader whose refused round the master saw, as it kept
    /// no place for it).
    fn passes_someone(&self, c: usize, readers_queue: bool) -> bool {
        let mine = self.master.places[c];
        (0..CLIENTS).any(|other| {
            let known =
                self.master.queue & (1 << other) != 0 || (is_reader(other) && !readers_queue);
            is_reader(other) != is_reader(c)
                && self.master.places[other] < mine
                && self.waited & (1 << other) != 0
                && matches!(
                    self.phases[other],
                    Phase::Subscribed { .. } | Phase::Waiting { .. }
                )
                && known
        })
    }
}

impl RwQueueModel {
    pub(crate) fn check(self) -> impl Checker<Self> {
        self.checker().spawn_bfs().join()
    }
}

impl Model for RwQueueModel {
    type State = RwQueueState;
    type Action = Step;

    fn init_states(&self) -> Vec<RwQueueState> {
        let mut phases = [Phase::Idle; CLIENTS];
        phases[0] = Phase::Holding;
        vec![RwQueueState {
            master: ReadWriteQueue {
                value: LockValue::Token {
                    owner: 0,
                    marked: false,
                },
                shares: 0,
                queue: 0,
                readers: READERS,
                places: [u8::MAX; CLIENTS],
                readers_queue: self.readers_queue,
                mark_for_readers: self.mark_for_readers,
                bare_mark: self.bare_mark,
            },
            phases,
            next_place: 0,
            lost: [0; CLIENTS],
            waited: 0,
            lost_elsewhere: 0,
            overtaken: false,
        }]
    }

    fn actions(&self, state: &RwQueueState, actions: &mut Vec<Step>) {
        for (c, phase) in state.phases.iter().enumerate() {
            let active = match phase {
                Phase::Waiting { woken } => *woken && state.lost[c] <= LOST_ROUNDS,
                Phase::Done => false,
                _ => true,
            };
            if active {
                actions.push(Step::Run(c as u8));
                let once = state.lost_elsewhere & (1 << c) == 0;
                if once && is_reader(c) && matches!(phase, Phase::Idle | Phase::Waiting { .. }) {
                    actions.push(Step::LoseElsewhere(c as u8));
                }
            }
        }
    }

    fn next_state(&self, last: &RwQueueState, step: Step) -> Option<RwQueueState> {
        let mut state = last.clone();
        if let Step::LoseElsewhere(c) = step {
            // Granted here, lost elsewhere: refused rounds are `Run`'s.
            let me = usize::from(c);
            let queued = matches!(last.phases[me], Phase::Waiting { .. });
            let (took, wake) = state.master.take_share(c, queued);
            if !took {
                return None;
            }
            state.lost_elsewhere |= 1 << c;
            if !queued {
                state.master.places[me] = state.next_place;
                state.next_place += 1;
            }
            // Its next round comes without a message from this master: the other masters'
            // releases or its timer bring it (this master keeps no key of its for them).
            state.phases[me] = Phase::Subscribed { woken: true };
            state.deliver(wake);
            return Some(state);
        }
        let Step::Run(c) = step else { return None };
        let me = usize::from(c);
        let reader = is_reader(me);
        let master = &mut state.master;
        let (next, wake) = match last.phases[me] {
            Phase::Idle => {
                let took = if reader {
                    master.take_share(c, false).0
                } else {
                    master.value.set_if_absent(c)
                };
                let next = if took { Phase::Holding } else { Phase::Refused };
                (next, None)
            }
            Phase::Refused => {
                master.places[me] = state.next_place;
                state.next_place += 1;
                (Phase::Subscribed { woken: false }, None)
            }
            Phase::Subscribed { woken } => {
                let wake = if reader {
                    master.release_read(c, ReadDelete::SilentAndQueue)
                } else {
                    master.undo_and_queue(c)
                };
                state.waited |= 1 << c;
                (Phase::Waiting { woken }, wake)
            }
            Phase::Waiting { .. } => {
                let (took, wake) = if reader {
                    master.take_share(c, true)
                } else {
                    (master.queued_acquire(c), None)
                };
                let next = if took {
                    Phase::Holding
                } else {
                    // Bounded, so that a livelock (a waiter woken and refused for ever) is a
                    // finding, not a cycle the search folds away.
                    state.lost[me] = state.lost[me].checked_add(1)?.min(LOST_ROUNDS + 1);
                    // The lost round's cleanup comes next.
                    Phase::Subscribed { woken: false }
                };
                (next, wake)
            }
            Phase::Holding if reader => (Phase::Done, master.release_read(c, ReadDelete::Release)),
            Phase::Holding => {
                if master.value.native_delete(c) {
                    (Phase::Done, None)
                } else {
                    (Phase::ReleasingByScript, None)
                }
            }
            Phase::ReleasingByScript => (Phase::Done, master.release(c)),
            Phase::Done => return None,
        };
        // A writer reserved the lock is judged as the reservation is made (a waiter with an
        // earlier place may join after it, as the master cannot know of it before).
        let before = last.master.value;
        if let LockValue::Reserved(w) = state.master.value
            && before != state.master.value
        {
            state.overtaken |= state.passes_someone(usize::from(w), self.readers_queue);
        }
        if next == Phase::Holding && before != LockValue::Reserved(c) {
            state.overtaken |= state.passes_someone(me, self.readers_queue);
        }
        state.phases[me] = next;
        state.deliver(wake);
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("a writer is never with a reader", |_, s: &RwQueueState| {
                let holding = |c: usize| s.phases[c] == Phase::Holding;
                let writer = (0..CLIENTS).any(|c| !is_reader(c) && holding(c));
                let reader = (0..CLIENTS).any(|c| is_reader(c) && holding(c));
                !(writer && reader)
            }),
            Property::always("turns in arrival order", |_, s: &RwQueueState| !s.overtaken),
            Property::always(
                "no waiter loses round after round",
                |_, s: &RwQueueState| s.lost.iter().all(|lost| *lost <= LOST_ROUNDS),
            ),
            Property::eventually("everyone finishes", |_, s: &RwQueueState| {
                s.phases.iter().all(|p| *p == Phase::Done)
            }),
            Property::sometimes("two readers hold at once", |_, s: &RwQueueState| {
                s.phases[1] == Phase::Holding && s.phases[3] == Phase::Holding
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: RwQueueModel = RwQueueModel {
        readers_queue: true,
        mark_for_readers: true,
        bare_mark: BareMark::PassedToAWriterAtTheHead,
    };

    /// What the check found (broken, or reached for a `sometimes`), and its states.
    fn found(model: RwQueueModel) -> (Vec<&'static str>, usize) {
        crate::model::findings(model, || Box::new(model.check()))
    }

    /// As shipped: a writer is never with a reader, turns follow arrival, nobody is
    /// stranded, and two readers hold together.
    #[test]
    fn queued_readers_take_their_turns_in_arrival_order() {
        let (found, states) = found(SHIPPED);
        assert_eq!(found, ["two readers hold at once"], "{states} states");
    }

    /// Readers that do not queue (the rule before): a writer that began to wait after a
    /// reader takes the lock first.
    #[test]
    fn unqueued_readers_are_passed_by_later_writers() {
        let (found, _) = found(RwQueueModel {
            readers_queue: false,
            ..SHIPPED
        });
        assert!(found.contains(&"turns in arrival order"), "{found:?}");
        assert!(
            !found.contains(&"a writer is never with a reader"),
            "{found:?}"
        );
    }

    /// A hand-over to readers that frees the key instead of setting the readers' mark: the
    /// queued writer behind them takes it first.
    #[test]
    fn a_hand_over_to_readers_without_the_mark_is_caught() {
        let (found, _) = found(RwQueueModel {
            mark_for_readers: false,
            ..SHIPPED
        });
        assert!(found.contains(&"turns in arrival order"), "{found:?}");
    }

    /// A queued reader refused by an earlier writer that leaves a bare readers' mark in
    /// place: that writer joined behind a hand-over to readers with an earlier place, and
    /// waits for the mark to lapse (a timer in production, never here).
    #[test]
    fn a_bare_mark_left_in_place_strands_the_writer_before_it() {
        let (found, _) = found(RwQueueModel {
            bare_mark: BareMark::Kept,
            ..SHIPPED
        });
        assert!(found.contains(&"everyone finishes"), "{found:?}");
    }

    /// A bare readers' mark passed on whoever heads the queue: with a reader there, the mark
    /// goes back to that reader's run and wakes every reader, refused again, round after
    /// round.
    #[test]
    fn a_bare_mark_passed_to_a_reader_at_the_head_is_caught() {
        let (found, _) = found(RwQueueModel {
            bare_mark: BareMark::AlwaysPassed,
            ..SHIPPED
        });
        assert!(
            found.contains(&"no waiter loses round after round"),
            "{found:?}"
        );
    }
}
