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

/// [`ACQUIRE_FENCED`](super::ACQUIRE_FENCED) (`raise`), or, for one reader and one writer,
/// [`ACQUIRE_READ_FENCED`](super::ACQUIRE_READ_FENCED) (the reader's share and the writer's
/// key exclude each other as two keys do): refuse on a master not re-seeded since it started,
/// else `SET NX`, and on success `INCR` the counter (a read raises nothing) and answer it.
pub(crate) fn acquire_fenced<O: Copy>(
    key: &mut Key<O>,
    fence: &mut u64,
    (seeded, epoch): (bool, u64),
    me: O,
    raise: bool,
) -> Value {
    if !seeded {
        return Value::Int(-6);
    }
    if key.is_none() {
        *key = Some(me);
        if raise {
            *fence += 1;
        }
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

/// What one master's lock key holds, for the one-master models (`crate::model::wakeups`,
/// `crate::model::rwqueue`): every token there is markable (`n-`), as a single lock's is with
/// native commands on.
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
    /// The readers' mark, `readers` (the read-write queue model only): with live shares, or
    /// set by a hand-over to a run of queued readers.
    Readers,
}

impl LockValue {
    /// `lua/ours.lua`: `me`'s token, marked or not.
    fn ours(&self, me: u8) -> bool {
        matches!(*self, LockValue::Token { owner, .. } if owner == me)
    }

    /// `lua/mark_waited.lua`.
    fn mark_waited(&mut self) {
        if let LockValue::Token { owner, .. } = *self {
            *self = LockValue::Token {
                owner,
                marked: true,
            };
        }
    }

    /// `SET NX`: the plain acquire, and on the lock key [`ACQUIRE_FENCED`](super::ACQUIRE_FENCED)
    /// on a seeded master (it marks nothing either).
    pub(crate) fn set_if_absent(&mut self, me: u8) -> bool {
        if *self != LockValue::Free {
            return false;
        }
        *self = LockValue::Token {
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
        if *self != written {
            return false;
        }
        *self = LockValue::Free;
        true
    }
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
    /// `lua/join_queue.lua`.
    fn join_queue(&mut self, me: u8, marking: Marking) {
        if marking.on_join {
            self.value.mark_waited();
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

    /// [`RELEASE`](super::RELEASE): our token as we wrote it (nobody marked it) is deleted as
    /// [`native_delete`](Self::native_delete) does, waking nobody; otherwise, while ours, hands
    /// over (or deletes) and publishes.
    pub(crate) fn release(&mut self, me: u8) -> Option<Wake> {
        if self.value.native_delete(me) {
            return None;
        }
        self.value.ours(me).then(|| self.hand_over())
    }

    /// [`UNDO_AND_QUEUE`](super::UNDO_AND_QUEUE).
    pub(crate) fn undo_and_queue(&mut self, me: u8, marking: Marking) -> Option<Wake> {
        let was_free = self.value == LockValue::Free;
        if self.value.ours(me) {
            self.value = LockValue::Free;
        } else if marking.on_join {
            self.value.mark_waited();
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

/// How a reader's share is deleted ([`RELEASE_READ`](super::RELEASE_READ)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ReadDelete {
    /// A reader's release: the last share hands the lock over.
    Release,
    /// A failed round's cleanup whose acquire gives up: a bare readers' mark is left to
    /// queued readers at the head, passed on to a writer there, deleted with nobody waiting.
    Silent,
    /// A failed round's cleanup whose acquire waits on: joins the queue as a reader, then as
    /// [`Silent`](Self::Silent), and a key it finds free is handed over.
    SilentAndQueue,
}

/// One master's read-write lock for the readers' queue model (`crate::model::rwqueue`): the
/// lock key, the readers' shares, and the queue, ordered by each waiter's place (drawn when it
/// first waited). Keys never expire here: a waiter's timer covers an expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ReadWriteQueue {
    pub(crate) value: LockValue,
    /// One bit per client holding a share.
    pub(crate) shares: u8,
    /// One bit per queued client.
    pub(crate) queue: u8,
    /// Which clients are readers (their registration in the queue says `r`).
    pub(crate) readers: u8,
    /// Each client's place, `u8::MAX` before it waits.
    pub(crate) places: [u8; 4],
    /// Whether readers queue (as shipped) or only wait (the rule before: refused while any
    /// writer is queued, woken by releases that name nobody).
    pub(crate) readers_queue: bool,
    /// Whether a hand-over to a run of readers sets the readers' mark (as shipped) or only
    /// frees the key (wrong: a queued writer behind them takes it first).
    pub(crate) mark_for_readers: bool,
    /// What a queued reader refused by an earlier writer does with a bare readers' mark.
    pub(crate) bare_mark: BareMark,
}

/// What a queued reader refused by an earlier writer does with the readers' mark when no
/// share is left under it (`lua/take_share.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum BareMark {
    /// As shipped: passes it on when a writer heads the queue.
    PassedToAWriterAtTheHead,
    /// Wrong: keeps it; the writer before it waits for the mark to lapse.
    Kept,
    /// Wrong: passes it on whoever heads the queue; with a reader there, the mark goes to
    /// that reader's run again, and the message wakes every reader, refused again, for as
    /// long as that reader's round takes to come.
    AlwaysPassed,
}

impl ReadWriteQueue {
    fn is_reader(&self, c: u8) -> bool {
        self.readers & (1 << c) != 0
    }

    /// `lua/writer_waits.lua`'s `first_live_waiter`: the queued client with the earliest
    /// place (all are live here), and whether it is a reader.
    fn first_live_waiter(&self) -> Option<bool> {
        self.head().map(|head| self.is_reader(head))
    }

    /// `lua/bare_mark.lua`: the readers' mark with no share under it stays for a reader at
    /// the head, goes to a writer there, and goes with nobody waiting.
    fn pass_on_bare_mark(&mut self) -> Option<Wake> {
        match (self.bare_mark, self.first_live_waiter()) {
            (BareMark::AlwaysPassed, _) | (BareMark::PassedToAWriterAtTheHead, Some(false)) => {
                Some(self.hand_over())
            }
            (_, None) => {
                self.value = LockValue::Free;
                None
            }
            _ => None,
        }
    }

    /// The queued client with the earliest place.
    fn head(&self) -> Option<u8> {
        (0..4u8)
            .filter(|c| self.queue & (1 << c) != 0)
            .min_by_key(|c| self.places[usize::from(*c)])
    }

    /// `lua/join_queue.lua` (all waiters are live here).
    fn join_queue(&mut self, me: u8) {
        self.value.mark_waited();
        self.queue |= 1 << me;
    }

    /// `lua/writer_waits.lua`: a writer queued before `place` (anywhere, with none).
    fn writer_waits(&self, place: Option<u8>) -> bool {
        (0..4u8).any(|c| {
            self.queue & (1 << c) != 0
                && !self.is_reader(c)
                && place.is_none_or(|p| self.places[usize::from(c)] < p)
        })
    }

    /// `lua/hand_over.lua`: to the first queued waiter, else deleted and published. A writer
    /// is reserved the lock, and stays queued until its round takes it; a reader at the head
    /// makes the key the readers' mark, and the message names nobody, so every queued
    /// reader's round comes (those before the first queued writer take their shares).
    fn hand_over(&mut self) -> Wake {
        match self.head() {
            None => {
                self.value = LockValue::Free;
                Wake::All
            }
            Some(head) if self.is_reader(head) => {
                self.value = if self.mark_for_readers {
                    LockValue::Readers
                } else {
                    LockValue::Free
                };
                Wake::All
            }
            Some(head) => {
                self.value = LockValue::Reserved(head);
                Wake::One(head)
            }
        }
    }

    /// [`RELEASE`](super::RELEASE), after the native delete missed.
    pub(crate) fn release(&mut self, me: u8) -> Option<Wake> {
        self.value.ours(me).then(|| self.hand_over())
    }

    /// [`UNDO_AND_QUEUE`](super::UNDO_AND_QUEUE), for a writer whose first round was refused
    /// (it holds nothing here).
    pub(crate) fn undo_and_queue(&mut self, me: u8) -> Option<Wake> {
        let was_free = self.value == LockValue::Free;
        self.value.mark_waited();
        self.join_queue(me);
        was_free.then(|| self.hand_over())
    }

    /// [`QUEUED_ACQUIRE`](super::QUEUED_ACQUIRE): whether the writer `me` took the lock.
    pub(crate) fn queued_acquire(&mut self, me: u8) -> bool {
        if self.value == LockValue::Free || self.value == LockValue::Reserved(me) {
            self.queue &= !(1 << me);
            self.value = LockValue::Token {
                owner: me,
                marked: true,
            };
            return true;
        }
        self.join_queue(me);
        false
    }

    /// [`ACQUIRE_READ`](super::ACQUIRE_READ) (`lua/take_share.lua`): whether the reader `me`
    /// took its share, and whom it woke; `queued`, a round of a reader that joined the queue
    /// (it carries its place, leaves the queue as it takes its share, and joins again when
    /// refused). Refused by a writer queued before it where the key is the readers' mark with
    /// no share, it passes the mark on to that writer if it heads the queue (a hand-over to
    /// readers that this writer joined behind, with an earlier place), as a release would.
    /// (With a reader at the head, the mark waits for that reader's round: passed on again,
    /// it would wake every reader, each refused again, for as long.)
    pub(crate) fn take_share(&mut self, me: u8, queued: bool) -> (bool, Option<Wake>) {
        let queued = queued && self.readers_queue;
        if !matches!(self.value, LockValue::Free | LockValue::Readers) {
            self.value.mark_waited();
            if queued {
                self.join_queue(me);
            }
            return (false, None);
        }
        let place = queued.then(|| self.places[usize::from(me)]);
        if self.writer_waits(place) {
            if !queued {
                return (false, None);
            }
            self.join_queue(me);
            let bare_mark = self.value == LockValue::Readers && self.shares == 0;
            let wake = if bare_mark {
                self.pass_on_bare_mark()
            } else {
                None
            };
            return (false, wake);
        }
        self.queue &= !(1 << me);
        self.shares |= 1 << me;
        self.value = LockValue::Readers;
        (true, None)
    }

    /// [`RELEASE_READ`](super::RELEASE_READ): removes `me`'s share; the last one's release
    /// hands the lock over, as does a cleanup's whose share was the last; a cleanup that
    /// finds a bare mark leaves it to queued readers at the head, passes it on to a writer
    /// there, deletes it with nobody waiting, and, joining, hands over a free key.
    pub(crate) fn release_read(&mut self, me: u8, how: ReadDelete) -> Option<Wake> {
        let how = match how {
            ReadDelete::SilentAndQueue if !self.readers_queue => ReadDelete::Silent,
            other => other,
        };
        let had_share = self.shares & (1 << me) != 0;
        self.shares &= !(1 << me);
        if how == ReadDelete::SilentAndQueue {
            self.join_queue(me);
        }
        let bare_mark = self.value == LockValue::Readers && self.shares == 0;
        match how {
            ReadDelete::Release => bare_mark.then(|| self.hand_over()),
            // The rule before readers queued: a cleanup deleted a bare mark.
            ReadDelete::Silent if bare_mark && !self.readers_queue => {
                self.value = LockValue::Free;
                None
            }
            // Its own share was the last: free here, as after a release.
            _ if bare_mark && had_share => Some(self.hand_over()),
            _ if bare_mark => self.pass_on_bare_mark(),
            ReadDelete::SilentAndQueue if self.value == LockValue::Free => Some(self.hand_over()),
            _ => None,
        }
    }
}
