//! What our scripts do to one node, in Rust, for the model checker (`crate::model`): each
//! function mirrors the script it names (`src/scripts/lua/`), line for line, and answers what the script
//! answers. Keep them in step with the Lua: a change to a script is a change to its mirror.

use redis::Value;

/// What the model's clients may find in a lock key: the owner's id.
pub(crate) type Key<O> = Option<O>;

/// The remaining ttl the model's nodes report for another owner's key.
pub(crate) const FOREIGN_TTL_MS: i64 = 1000;

fn not_ours<O>(key: &Key<O>) -> i64 {
    if key.is_none() { -2 } else { FOREIGN_TTL_MS }
}

/// [`ACQUIRE_FENCED`](super::ACQUIRE_FENCED): refuse on a master not re-seeded since it
/// started, else `SET NX`, and on success `INCR` the counter.
pub(crate) fn acquire_fenced<O: Copy>(
    key: &mut Key<O>,
    fence: &mut u64,
    seeded: bool,
    epoch: u64,
    me: O,
) -> Value {
    if !seeded {
        return Value::Int(-6);
    }
    if key.is_none() {
        *key = Some(me);
        *fence += 1;
        Value::Array(vec![
            Value::Int(-1),
            Value::Int(*fence as i64),
            Value::Int(epoch as i64),
        ])
    } else {
        Value::Int(FOREIGN_TTL_MS)
    }
}

/// [`SEED_READ`](super::SEED_READ): the counter and whether it is marked for the current
/// term, moving the epoch on (marked or not).
pub(crate) fn seed_read(fence: u64, seeded: bool, epoch: &mut u64) -> (u64, bool) {
    *epoch += 1;
    (fence, seeded)
}

/// [`SEED_FENCE`](super::SEED_FENCE): raise the counter to at least `value`, mark the
/// master re-seeded.
pub(crate) fn seed_fence(fence: &mut u64, seeded: &mut bool, value: u64) {
    if *fence < value {
        *fence = value;
    }
    *seeded = true;
}

/// Which confirm rule to model. The script's effect is the same for both; what differs
/// is which answers the client counts (see `crate::model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ConfirmRule {
    /// As shipped: only masters that granted before the decision count.
    GrantorsOnly,
    /// The rule before the correction: any master holding our key counts (F1).
    AnyHolder,
}

/// [`CONFIRM_FENCE`](super::CONFIRM_FENCE): raise the counter to at least T while our key
/// is there and the master is seeded for its current term.
pub(crate) fn confirm_fence<O: PartialEq>(
    key: &Key<O>,
    fence: &mut u64,
    (seeded, epoch): (bool, u64),
    me: O,
    token: u64,
    granted_in: Option<u64>,
) -> i64 {
    if key.as_ref() != Some(&me) {
        return not_ours(key);
    }
    if !seeded || granted_in.is_some_and(|granted_in| granted_in != epoch) {
        return -7;
    }
    if *fence < token {
        *fence = token;
    }
    -1
}

/// What one master's lock key holds, for the wake-up model (`crate::model::wakeups`): every
/// token there is markable (`n-`), as a single lock's is with native commands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LockValue {
    Free,
    /// A holder's token, `marked` once a waiter turned its `n-` into `w-`.
    Token {
        owner: u8,
        marked: bool,
    },
    /// `handoff:<waiter>`.
    Reserved(u8),
}

/// Whom a script's publish wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The message on one waiter's client channel (a hand-over to it).
    One(u8),
    /// The message on the common channel: every subscribed waiter.
    All,
}

/// One master's lock key and queue (waiters' places are their ids: a lower id queued first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct QueuedLock {
    pub(crate) value: LockValue,
    /// The queue, one bit per waiter id.
    pub(crate) queue: u8,
}

/// Which of the fixes that keep a waiter from being stranded the mirrors apply (all, as
/// shipped; the wake-up model turns each off to show the checker finds what it prevents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Marking {
    /// `join_queue` marks the holder (`mark_waited`).
    pub(crate) on_join: bool,
    /// `QUEUED_ACQUIRE` writes its token marked.
    pub(crate) on_queue_take: bool,
    /// `UNDO_AND_QUEUE` hands a lock already gone over.
    pub(crate) hand_over_on_undo: bool,
}

impl QueuedLock {
    /// `lua/ours.lua`: the value is `me`'s token, marked or not.
    fn ours(&self, me: u8) -> bool {
        matches!(self.value, LockValue::Token { owner, .. } if owner == me)
    }

    /// `lua/mark_waited.lua`.
    fn mark_waited(&mut self) {
        if let LockValue::Token { owner, .. } = self.value {
            self.value = LockValue::Token {
                owner,
                marked: true,
            };
        }
    }

    /// `lua/join_queue.lua`.
    fn join_queue(&mut self, me: u8, marking: Marking) {
        if marking.on_join {
            self.mark_waited();
        }
        self.queue |= 1 << me;
    }

    /// `lua/hand_over.lua`: to the first queued waiter (all are live here), else deleted. A
    /// lock's waiter given a reservation stays queued until its round takes it
    /// ([`queued_acquire`](Self::queued_acquire) removes it); keys never expire here, so the
    /// script's cut of its liveness has no counterpart.
    fn hand_over(&mut self) -> Wake {
        if self.queue == 0 {
            self.value = LockValue::Free;
            return Wake::All;
        }
        let head = self.queue.trailing_zeros() as u8;
        self.value = LockValue::Reserved(head);
        Wake::One(head)
    }

    /// `SET NX`: the plain acquire, and on the lock key [`ACQUIRE_FENCED`](super::ACQUIRE_FENCED)
    /// on a seeded master (it marks nothing either).
    pub(crate) fn set_if_absent(&mut self, me: u8) -> bool {
        if self.value != LockValue::Free {
            return false;
        }
        self.value = LockValue::Token {
            owner: me,
            marked: false,
        };
        true
    }

    /// `DELIFEQ key token`: deletes only the value exactly as its holder wrote it.
    pub(crate) fn native_delete(&mut self, me: u8) -> bool {
        let written = LockValue::Token {
            owner: me,
            marked: false,
        };
        if self.value != written {
            return false;
        }
        self.value = LockValue::Free;
        true
    }

    /// [`RELEASE`](super::RELEASE): our token as we wrote it (nobody marked it) is deleted as
    /// [`native_delete`](Self::native_delete) does, waking nobody; otherwise, while ours, hands
    /// over (or deletes) and publishes.
    pub(crate) fn release(&mut self, me: u8) -> Option<Wake> {
        if self.native_delete(me) {
            return None;
        }
        self.ours(me).then(|| self.hand_over())
    }

    /// [`UNDO_AND_QUEUE`](super::UNDO_AND_QUEUE).
    pub(crate) fn undo_and_queue(&mut self, me: u8, marking: Marking) -> Option<Wake> {
        let was_free = self.value == LockValue::Free;
        if self.ours(me) {
            self.value = LockValue::Free;
        } else if marking.on_join {
            self.mark_waited();
        }
        self.join_queue(me, marking);
        (was_free && marking.hand_over_on_undo).then(|| self.hand_over())
    }

    /// [`QUEUED_ACQUIRE`](super::QUEUED_ACQUIRE): whether `me` took the lock. On the lock key
    /// and the queue, [`QUEUED_ACQUIRE_FENCED`](super::QUEUED_ACQUIRE_FENCED) on a seeded
    /// master does the same.
    pub(crate) fn queued_acquire(&mut self, me: u8, marking: Marking) -> bool {
        if self.value == LockValue::Free || self.value == LockValue::Reserved(me) {
            self.queue &= !(1 << me);
            self.value = LockValue::Token {
                owner: me,
                marked: marking.on_queue_take,
            };
            return true;
        }
        self.join_queue(me, marking);
        false
    }
}
