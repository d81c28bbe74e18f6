//! A model of one master's waiters and the servers' own compare-and-delete, checked
//! exhaustively with `stateright`: no waiter is left waiting for a release that will wake
//! nobody (`DESIGN.md` §3).
//!
//! A holder's release tries the server's own `DELIFEQ` first and runs the release script
//! (hand-over and publish) only where it did not delete: the `DELIFEQ` deletes only the value
//! exactly as its holder wrote it, so a waiter that marked the value gets the script. The
//! wake-ups are per master, so one master is modelled, with every interleaving of:
//! - a holder (client 0) that holds the lock at the start;
//! - a waiter (client 1) that queues: its first round refused (a plain `SET NX`, or a fenced
//!   `ACQUIRE_FENCED`, which on the lock key is the same and marks nothing either), then it
//!   subscribes, then its cleanup `UNDO_AND_QUEUE` joins the queue; its later rounds are
//!   `QUEUED_ACQUIRE` (or `QUEUED_ACQUIRE_FENCED`, the same on the lock key and the queue);
//! - optionally a second queued waiter (client 2), and a passer-by (client 3) that takes the
//!   lock with one `SET NX` whenever it finds it free;
//! - a woken waiter's `QUEUED_ACQUIRE`, and every holder's release (native, then the script if
//!   the native command missed; a holder is assumed never to know it was marked, the worst
//!   case: a lock that knows goes to the script at once).
//!
//! Keys do not expire (a waiter's timer covers an expiry, as before native commands), and all
//! waiters stay live. Not modelled either: several masters (a waiter needs one wake-up from any
//! master; a queued waiter whose cleanup deleted its own grant on this master faces a free key
//! here and is woken by the others), `DEQUEUE`, scripts sent in parts on a half-moved cluster
//! slot, an extend's re-add (it writes its token unmarked where it never took the key), and
//! waiters of one client waiting behind each other without a round. The scripts' effects are `scripts::effects::QueuedLock`, mirrored next
//! to the Lua.
//!
//! Property, **no waiter stranded** (always): a waiter that waits (subscribed, its cleanup
//! done) and has no wake-up pending never faces a key whose release would wake nobody: a free
//! key, or an unmarked token (its release would be the silent native delete).

use stateright::{Checker, Model, Property};

use super::waiter::{Phase, deliver};
use crate::scripts::effects::{LockValue, Marking, QueuedLock, Wake};

/// Clients: 0 the holder, 1 the waiter, 2 the second waiter, 3 the passer-by.
const CLIENTS: usize = 4;

/// The knobs of one check.
#[derive(Debug, Clone)]
pub(crate) struct WakeupModel {
    pub(crate) marking: Marking,
    pub(crate) second_waiter: bool,
    pub(crate) passer_by: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct WakeupState {
    master: QueuedLock,
    phases: [Phase; CLIENTS],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Step {
    /// The client's next request runs on the master.
    Run(u8),
}

impl WakeupState {
    fn deliver(&mut self, wake: Option<Wake>) {
        deliver(&mut self.phases, wake);
    }
}

impl WakeupModel {
    fn waiters(&self) -> impl Iterator<Item = u8> {
        std::iter::once(1).chain(self.second_waiter.then_some(2))
    }

    pub(crate) fn check(self) -> impl Checker<Self> {
        self.checker().spawn_bfs().join()
    }
}

impl Model for WakeupModel {
    type State = WakeupState;
    type Action = Step;

    fn init_states(&self) -> Vec<WakeupState> {
        let mut phases = [Phase::Idle; CLIENTS];
        phases[0] = Phase::Holding;
        vec![WakeupState {
            master: QueuedLock {
                value: LockValue::Token {
                    owner: 0,
                    marked: false,
                },
                queue: 0,
            },
            phases,
        }]
    }

    fn actions(&self, state: &WakeupState, actions: &mut Vec<Step>) {
        for (c, phase) in state.phases.iter().enumerate() {
            let c = c as u8;
            let active = match phase {
                Phase::Idle => self.waiters().any(|w| w == c) || (c == 3 && self.passer_by),
                Phase::Waiting { woken } => *woken,
                Phase::Done => false,
                _ => true,
            };
            if active {
                actions.push(Step::Run(c));
            }
        }
    }

    fn next_state(&self, last: &WakeupState, step: Step) -> Option<WakeupState> {
        let Step::Run(c) = step;
        let mut state = last.clone();
        let me = usize::from(c);
        let marking = self.marking;
        let master = &mut state.master;
        let (next, wake) = match last.phases[me] {
            Phase::Idle if c == 3 => {
                let took = master.value.set_if_absent(c);
                (if took { Phase::Holding } else { Phase::Done }, None)
            }
            Phase::Idle => {
                if master.value.set_if_absent(c) {
                    (Phase::Holding, None)
                } else {
                    (Phase::Refused, None)
                }
            }
            Phase::Refused => (Phase::Subscribed { woken: false }, None),
            Phase::Subscribed { woken } => {
                let wake = master.undo_and_queue(c, marking);
                (Phase::Waiting { woken }, wake)
            }
            Phase::Waiting { .. } => {
                if master.queued_acquire(c, marking) {
                    (Phase::Holding, None)
                } else {
                    (Phase::Waiting { woken: false }, None)
                }
            }
            Phase::Holding => {
                if master.value.native_delete(c) {
                    (Phase::Done, None)
                } else {
                    (Phase::ReleasingByScript, None)
                }
            }
            Phase::ReleasingByScript => {
                let wake = master.release(c);
                (Phase::Done, wake)
            }
            Phase::Done => return None,
        };
        state.phases[me] = next;
        state.deliver(wake);
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no waiter stranded", |_, state: &WakeupState| {
                state.phases.iter().enumerate().all(|(c, phase)| {
                    *phase != Phase::Waiting { woken: false }
                        || match state.master.value {
                            LockValue::Free => false,
                            LockValue::Token { marked, .. } => marked,
                            LockValue::Reserved(w) => usize::from(w) != c,
                            // Not in this model (no readers).
                            LockValue::Readers => false,
                        }
                })
            }),
            Property::sometimes("a waiter gets the lock", |_, state: &WakeupState| {
                state.phases[1] == Phase::Holding
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIPPED: Marking = Marking {
        on_join: true,
        on_queue_take: true,
        hand_over_on_undo: true,
    };

    fn model(marking: Marking) -> WakeupModel {
        WakeupModel {
            marking,
            second_waiter: true,
            passer_by: true,
        }
    }

    /// Runs the check; the names of the properties it found broken.
    fn broken(model: WakeupModel) -> Vec<&'static str> {
        let checker = model.check();
        let mut found: Vec<&'static str> = checker.discoveries().into_keys().collect();
        found.retain(|name| *name != "a waiter gets the lock");
        assert!(
            checker.discovery("a waiter gets the lock").is_some(),
            "the waiter can get the lock at all"
        );
        found
    }

    #[test]
    fn as_shipped_no_waiter_is_stranded() {
        assert_eq!(broken(model(SHIPPED)), Vec::<&str>::new());
    }

    /// Each fix is needed: without it the checker finds a waiter left waiting on a lock whose
    /// release (the silent native delete) or absence wakes nobody.
    #[test]
    fn without_each_mark_a_waiter_is_stranded() {
        let stranded = vec!["no waiter stranded"];
        let without = |change: fn(&mut Marking)| {
            let mut marking = SHIPPED;
            change(&mut marking);
            marking
        };
        assert_eq!(broken(model(without(|m| m.on_join = false))), stranded);
        assert_eq!(
            broken(model(without(|m| m.hand_over_on_undo = false))),
            stranded
        );
        assert_eq!(
            broken(model(without(|m| m.on_queue_take = false))),
            stranded
        );
    }
}
