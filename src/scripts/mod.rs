//! The Lua scripts (`src/scripts/lua/`), each hashed once per process, and what their replies
//! mean ([`ScriptReply`]).
//!
//! Every script answers with one integer, so a reply is cheap to classify:
//!
//! | reply | meaning |
//! |---|---|
//! | `-1` | done: the key was set (fenced acquire), its ttl renewed (extend) or deleted (release) |
//! | `-2` | the key does not exist (expired, released, or never set here) |
//! | `-3` | the key belongs to another owner and has no expiry |
//! | `n ≥ 0` | the key belongs to another owner and expires in `n` ms |
//! | `-5` | extend: the key was missing and asked to be re-added, and was set again |
//! | `-6` | fenced acquire: the master's fence counter was not re-seeded since it last started |
//! | `-7` | fenced confirm: a re-seed read this master's counter after it granted |
//! | `{-1, f, e}` | fenced acquire: the key was set, the fence counter is now `f`, the re-seed epoch is `e` |
//! | `{-1, p, 0}` | permit acquire: the key of permit `p` was set |
//! | `{-8, n, 0}` | permit acquire: the semaphore is in use with `n` permits, not this client's number |
//!
//! A round sends `EVALSHA` and, on `NOSCRIPT` (a restarted node, a `SCRIPT FLUSH`), loads the
//! script and sends it once more (`encoded::EncodedRequest::send`). The plain acquire is not a script:
//! `SET NX PX` is atomic on its own, and a script would cost the server about five times the
//! CPU (measured with `redis-benchmark`; see `benches/README.md`).
//!
//! # The fence term (`lua/fence_term.lua`)
//!
//! A fenced script's term of the server it runs on is the server's `run_id`, as the client's
//! connection learned it, and its `master_replid`, read in the script: `run_id/replid`.
//!
//! The `run_id` is new at every start of the server process, and a connection never outlives
//! the process it was made to, so the connection's `run_id` is the server's. The replication
//! id changes under a live connection: at every promotion (a failover, a failback), at every
//! resync as a replica (which only a promotion ends before the server votes again), and also
//! when a replica first attaches or the backlog is freed. Each change draws a new random id,
//! or adopts a master's while a replica, so a master's term never takes a value it had before:
//! a dataset replaced by an older copy of itself (a failback, whatever the backlog did since)
//! is in a new term, and its counter counts only once re-seeded. Read in the script, not at
//! connect time, so a client that missed a failover and a failback on an idle connection still
//! sees the new term (`DESIGN.md` §5). A term of `run_id` alone (unless
//! `second_repl_offset` said "promoted") reverts once the backlog is freed; `crate::model`
//! finds a token handed out twice under it.
//!
//! A server that does not say `role:master`, or gives no replication id, answers `-6`
//! (unseeded) at once: a replica adopts its master's replication id, so its term could name
//! a marker in its (lagging) copy, and only a master's term is a term (a client behind a proxy
//! that moved it to a replica would otherwise trust the replica's copy).

use std::sync::OnceLock;

use redis::Script;

/// One of our scripts: its source, loaded on every new connection, and its [`Script`], which
/// hashes the source once per process.
pub(crate) struct LuaScript {
    code: &'static str,
    script: OnceLock<Script>,
    /// The script's last argument is the `run_id` of the server it runs on, which differs
    /// from node to node: the round appends it per node (`encoded::EncodedRequest::send`).
    takes_run_id: bool,
    /// Sent whole (`EVAL`), never by hash: a server that lost its script cache runs it all
    /// the same, so a request is never sent twice and is ordered on its connection as soon
    /// as it is queued, like a native command (`encoded::EncodedRequest::resendable`).
    sent_whole: bool,
    /// For a script sent whole: its source without its comment lines, which would otherwise
    /// travel with every call.
    wire: OnceLock<String>,
}

impl LuaScript {
    const fn made(code: &'static str, takes_run_id: bool, sent_whole: bool) -> Self {
        Self {
            code,
            script: OnceLock::new(),
            takes_run_id,
            sent_whole,
            wire: OnceLock::new(),
        }
    }

    const fn new(code: &'static str) -> Self {
        Self::made(code, false, false)
    }

    const fn with_run_id(code: &'static str) -> Self {
        Self::made(code, true, false)
    }

    const fn sent_whole(code: &'static str) -> Self {
        Self::made(code, false, true)
    }

    const fn sent_whole_with_run_id(code: &'static str) -> Self {
        Self::made(code, true, true)
    }

    pub(crate) fn is_sent_whole(&self) -> bool {
        self.sent_whole
    }

    pub(crate) fn takes_run_id(&self) -> bool {
        self.takes_run_id
    }

    /// The source as sent: whole, or, for a script sent whole with every call, without its
    /// comment lines (every comment of our Lua is a line of its own).
    pub(crate) fn code(&'static self) -> &'static str {
        if !self.sent_whole {
            return self.code;
        }
        self.wire.get_or_init(|| {
            self.code
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    pub(crate) fn script(&self) -> &Script {
        self.script.get_or_init(|| Script::new(self.code))
    }
}

impl std::fmt::Debug for LuaScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LuaScript")
            .field(&self.script().get_hash())
            .finish()
    }
}

/// Every script sent by hash, for loading them all on a new connection (`QUEUED_ACQUIRE` is
/// sent whole).
pub(crate) fn all() -> [&'static LuaScript; 28] {
    [
        &DELETE_IF_EQUAL,
        &ACQUIRE_READ,
        &ACQUIRE_READ_FENCED,
        &CONFIRM_FENCE_READ,
        &RELEASE_READ,
        &EXTEND_READ,
        &GIVE_BACK_AND_QUEUE,
        &DEQUEUE_PERMIT,
        &ACQUIRE_MANY,
        &EXTEND_MANY,
        &RELEASE_MANY,
        &ACQUIRE_PERMIT,
        &GIVE_BACK_PERMITS,
        &RELEASE_PERMIT,
        &RELEASE,
        &UNDO_AND_QUEUE,
        &DEQUEUE,
        &EXTEND,
        &EXTEND_PERMIT,
        &ACQUIRE_FENCED,
        &CONFIRM_FENCE,
        &WRITE_LEADER_INFO,
        &SEED_READ,
        &SEED_FENCE,
        &SEED_READ_SLOTS,
        &SEED_FENCE_SLOTS,
        &FENCE_STATE,
        &MARK_SEEDED,
    ]
}

/// The script made of these files of `src/scripts/lua/`, in order: the functions it shares
/// with other scripts first (`not_ours`, `hand_over`, `join_queue`, `fence_term`,
/// `delete_ours`, `forget_permit_count`, `permit_count`), then its own code. Each file is plain Lua; the docs below say what
/// each script's arguments are and why it does what it does. The scripts sent whole with every
/// call (`QUEUED_ACQUIRE`, `QUEUED_ACQUIRE_FENCED`) are sent without their comment lines
/// ([`LuaScript::code`]).
macro_rules! lua {
    ($($file:literal),+) => {
        concat!($(include_str!(concat!("lua/", $file, ".lua"))),+)
    };
}

/// `KEYS[1]` lock key, `ARGV[1]` token: deletes the key only while it holds the token, `1`,
/// else `0`. What the server's own `DELIFEQ` does (`core::native`), for a server without it:
/// the release of a token nobody marked (`DESIGN.md` §3), with one key and one argument.
pub(crate) static DELETE_IF_EQUAL: LuaScript = LuaScript::new(lua!("delete_if_equal"));

/// `KEYS[1]` lock key, optional `KEYS[2]` its waiters' queue and `KEYS[3]` their liveness
/// (`resource::QueueKeys`), and, for a fenced lock, `KEYS[4]` the slot's fence counter,
/// `KEYS[5]` its re-seed marker and optional `KEYS[6]` the per-resource counter
/// (`resource::FenceKeys`); `ARGV[1]` token, `ARGV[2]` release channel or empty, `ARGV[3]`
/// release id, `ARGV[4]` (with the queue) how long a hand-off reservation lasts, in ms,
/// optional `ARGV[5]` the waiter id of a lock that came through the queue.
///
/// Our token as we wrote it with `n-` (nobody marked it: nobody waited) is deleted at once,
/// with no look at the queue and nothing published, as the server's own `DELIFEQ` does
/// (`DESIGN.md` §3). Otherwise, only if the key holds our token (`lua/ours.lua`: as written,
/// marked by a waiter, or handed to us): with a queue, drops the waiters at its head that are
/// no longer live and **hands the lock to the first live one** (first queued, first served;
/// `lua/hand_over.lua`), which leaves the queue there when handed its own lock and stays
/// queued when reserved the lock, until its round takes it:
/// - a waiter that registered its token (an unfenced one, see `QUEUED_ACQUIRE`) gets its own
///   lock: the key holds `h-<its token>|<waiter id>` for its ttl, and the message names the
///   nonce it registered (`<release id>:<waiter id>:<nonce>`), from which the waiter counts
///   its lock without a round of its own (`DESIGN.md` §7);
/// - a fenced waiter that registered (`QUEUED_ACQUIRE_FENCED`) gets its own lock the same way
///   from a fenced release (the fence keys given), where the master is seeded for its
///   current term (read by the script from `INFO server`): the counter rises as the key is
///   set, as for any fenced grant, and the message also names the counter and the marker's
///   epoch (`…:<nonce>:<counter>:<epoch>`), from which the waiter makes its token and
///   confirms it (`DESIGN.md` §7);
/// - any other gets a reservation: `handoff:<waiter id>` (never a token: tokens are hex
///   digits) for `ARGV[4]` ms, which only that waiter's queued round may turn into its lock,
///   and the message is `<release id>:<waiter id>`.
///
/// Either message goes to the waiter's client's own channel (`<channel>:<client>`, the id's
/// part before the dot), so only its process hears it. A
/// waiter whose liveness passed (it gave up or died) is dropped on the way. With no live waiter, the key is deleted and the message names nobody: each
/// process wakes its longest waiter. Between two holders the key is never free, so a
/// releaser's own next acquire, or a passer-by, cannot take the lock from the waiter that
/// queued first; and a reservation is no lock (no token, no validity), so exclusion rests
/// on the tokens alone.
/// The publish and every queue command are `pcall`s: an ACL without `+publish` costs waiters a
/// delay, one without the queue's commands (`+exists +time +zadd +zrange +zrem +hdel`) their
/// turn, never the release itself. The cleanup of a
/// failed acquire passes no channel and no queue: waking or handing
/// to waiters there would have them retry, fail and clean up in turn, waking each other for
/// ever while the holder holds.
pub(crate) static RELEASE: LuaScript = LuaScript::new(lua!(
    "ours",
    "not_ours",
    "handed",
    "hand_over",
    "fence_term",
    "fence_take",
    "fence_hand_over",
    "release"
));

/// `KEYS[1]` lock key, `KEYS[2]` its waiters' queue, `KEYS[3]` their liveness; `ARGV[1]`
/// token, `ARGV[2]` ttl in ms, `ARGV[3]` the waiter's id, `ARGV[4]` how long this
/// registration stays live without another round, in ms, `ARGV[5]` its place in the queue,
/// `ARGV[6]` the round's nonce.
///
/// The acquire of a waiter (an acquire that found the lock taken, or whose client already has
/// waiters for it): when the key is free, reserved for this waiter (`handoff:<id>`, see
/// `RELEASE`) or handed to it (`h-<token>|<id>`, with a token of an earlier round), sets it to our token for the ttl, marked as waited for (`lua/mark_waited.lua`:
/// a lock that came through the queue was contended, so its release runs the script), and
/// leaves the queue (`-1`). Otherwise joins
/// the queue or keeps its place in it, renews its liveness, and answers like any refused
/// acquire: the holder's remaining ttl (`-3` without expiry). The place is when the waiter
/// first queued, in µs of the servers' clocks as its client follows them
/// (`core::server_clock`): the same number on every node, so every node orders the waiters
/// alike and a release hands the lock to the same waiter everywhere. The queue's keys
/// expire with the longest liveness, so an abandoned queue does not stay. With the nonce, the
/// waiter also registers its token, ttl and nonce for a hand-off (`<id>:h`, beside its
/// liveness; dropped when it takes its turn, is handed its own lock or leaves; a waiter only
/// reserved the lock keeps it, and stays queued with its liveness cut, `lua/hand_over.lua`).
///
/// Sent whole (`EVAL`): a release behind it on the same node is then sent at once rather than
/// after its answer (a script sent by hash might come back `NOSCRIPT` and be sent again, after
/// the release). Held back, that release could let the next waiter's round overtake it there:
/// refused by the key the release was about to hand over, that waiter would stay queued on
/// the node and be handed the lock it already holds elsewhere, reserving the key for nobody.
pub(crate) static QUEUED_ACQUIRE: LuaScript = LuaScript::sent_whole(lua!(
    "mark_waited",
    "join_queue",
    "handed",
    "take_turn",
    "queued_acquire"
));

/// `KEYS[1..]` the lock keys of a multi-resource lock; `ARGV[1]` token, `ARGV[2]` ttl in ms.
///
/// All or nothing on this master: when any key exists (held, or reserved for a waiter), sets
/// none and answers that key's remaining ttl (`-3` without expiry); else sets every key to the
/// token and answers `-1`. A client never holds part of a set on a master, so two clients
/// asking for overlapping sets in any order cannot deadlock: each round either takes all of a
/// master's keys or none, and a failed round gives back what it took elsewhere.
pub(crate) static ACQUIRE_MANY: LuaScript = LuaScript::new(lua!("acquire_many"));

/// `KEYS[1..]` the lock keys of a multi-resource lock; `ARGV[1]` token, `ARGV[2]` new ttl in
/// ms. Renews the set only when *every* key holds the token, and answers `-1`; else renews
/// nothing and answers for the first key that is not ours as `not_ours` does (`-2`
/// missing, else its holder's ttl): a master where one key of the set expired or belongs to
/// someone else does not hold the set, and renewing the others there would extend another
/// client's key.
pub(crate) static EXTEND_MANY: LuaScript = LuaScript::new(lua!("extend_many"));

/// `KEYS[1..]` the lock keys of a multi-resource lock; `ARGV[1]` token, `ARGV[2]` release id,
/// `ARGV[2 + i]` the release channel of `KEYS[i]` (`resource::release_channel`). The release
/// of the whole set: deletes every key that holds the token and publishes the release on its
/// channel, so waiters for any of them wake; answers `-1` when every key was ours, else for
/// the first key that was not, as `not_ours` does. Nothing is handed over.
pub(crate) static RELEASE_MANY: LuaScript = LuaScript::new(lua!("release_many"));

/// `KEYS[1..P]` the keys of a semaphore's permits, in the order this acquire tries them,
/// `KEYS[P + 1]` the semaphore's record of its number of permits
/// (`resource::permit_count_key`); `ARGV[1]` token, `ARGV[2]` ttl in ms, `ARGV[2 + i]` the
/// number of the permit `KEYS[i]`.
///
/// - When the record says another number than P, answers `{-8, that number, 0}` and takes
///   nothing: clients that count different permits would admit more holders than one of
///   them expects (the permits are numbered keys).
/// - Else takes the first free permit in that order (`SET NX PX`), sets the record to P for
///   at least the ttl (never shortening it, so it outlives every holder's permit), and
///   answers `{-1, its number, 0}`.
/// - When every permit is held, answers the shortest remaining ttl among them (`-3` when
///   none expires).
///
/// Each permit is a lock of its own: the client trusts a permit only when a majority of
/// masters granted *that* permit, never by adding grants of different ones (see
/// `crate::protocol::permit`). O(P) per call; the number of permits is bounded (`MAX_PERMITS`).
pub(crate) static ACQUIRE_PERMIT: LuaScript =
    LuaScript::new(lua!("permit_count", "acquire_permit"));

/// `KEYS[1..]` permit keys, then (with `ARGV[4]` = `1`) the semaphore's record of its number
/// of permits; `ARGV[1]` token, `ARGV[2]` the semaphore's release channel, `ARGV[3]` a
/// release id. Deletes each permit key that holds the token (the permits a failed or split
/// permit round was granted, or all but the one it keeps) and, when it deleted any,
/// publishes, since a permit came free; answers `-1`. The record goes once none of the
/// permits is held: the client passes it only with every permit's key (a failed round), and
/// a key sent alone (a half-moved cluster slot, `request::InParts`) is never taken for it.
pub(crate) static GIVE_BACK_PERMITS: LuaScript = LuaScript::new(lua!(
    "delete_ours",
    "forget_permit_count",
    "give_back_permits"
));

/// `KEYS[1]` a permit's key, `KEYS[2]` the semaphore's record of its number of permits,
/// `KEYS[3..]` every permit's key; `ARGV[1]` token, `ARGV[2]` the semaphore's release channel,
/// `ARGV[3]` release id.
///
/// The release of a permit: only if the key holds our token, deletes it, publishes, and
/// answers `-1`; else answers as `not_ours`. Either way:
/// - deletes every other permit key that holds our token (the round's grants of other
///   permits, whose give-back may still be on its way behind this release);
/// - deletes the record once no permit is held (a semaphore leaves nothing behind, also on a
///   master that granted this round another permit and never held ours).
///
/// With the semaphore's queue (`ARGV[4]` the reservation in ms, and the queue's two keys after
/// every permit's, `resource::queue_keys` of the record), the released permit is handed to the
/// first live waiter (`lua/hand_over.lua`: reserved for it, `handoff:<id>`, and the message on
/// its client's channel), as a lock's release hands the lock; only with nobody live is it
/// deleted and the release published to all. With `KEYS[1]` alone (a half-moved cluster
/// slot), it is deleted and published, and the record is left to its ttl.
pub(crate) static RELEASE_PERMIT: LuaScript = LuaScript::new(lua!(
    "not_ours",
    "delete_ours",
    "forget_permit_count",
    "hand_over",
    "release_permit"
));

/// `KEYS[1..P]` the keys of a semaphore's permits, in the order this round tries them,
/// `KEYS[P + 1]` its record of its number of permits, `KEYS[P + 2]` and `KEYS[P + 3]` its
/// queue and its waiters' liveness (`resource::queue_keys` of the record); `ARGV[1]` token,
/// `ARGV[2]` ttl in ms, `ARGV[2 + i]` the number of the permit `KEYS[i]`, then the waiter's
/// id, liveness in ms and place (as `QUEUED_ACQUIRE`'s), then the release channel, a release
/// id and the reservation in ms (as `RELEASE`'s).
///
/// The acquire of a semaphore's waiter (an acquire whose earlier round found every permit
/// held): the permits' queue is the lock's (`DESIGN.md` §7a), one per semaphore. Refuses a
/// record of another number as `ACQUIRE_PERMIT` does. Else takes, in this round's order, the
/// first permit that is free, reserved for this waiter by a release (`handoff:<id>`), or, when
/// a release reserved one here for this waiter, reserved for another waiter; it leaves the
/// queue, passes its other reservations on (the first to the waiter whose reservation it took,
/// with that one's ttl; the rest to the next live waiter, as a release would), sets the record
/// as `ACQUIRE_PERMIT` does and answers `{-1, its number, 0}`. Why take another's
/// reservation: concurrent releases of two permits reach the masters in different orders, so
/// one master reserves permit 1 for waiter A and 2 for B, another the other way round; each
/// waiter taking the first in its round's order on every master where it has one makes its
/// grants agree on one permit. A reservation holds no token, so swapping two is no grant.
/// Otherwise joins the queue or keeps its place and answers the shortest ttl among the
/// permits (`-3` when none expires). Sent whole (`EVAL`), as `QUEUED_ACQUIRE` is and for its
/// reason.
pub(crate) static QUEUED_ACQUIRE_PERMIT: LuaScript = LuaScript::sent_whole(lua!(
    "permit_count",
    "mark_waited",
    "join_queue",
    "hand_over",
    "queued_acquire_permit"
));

/// `KEYS[1..P]` every permit key of a semaphore, `KEYS[P + 1]` its record, `KEYS[P + 2]` and
/// `KEYS[P + 3]` its queue and liveness; `ARGV[1]` token, `ARGV[2]` the waiter's id,
/// `ARGV[3]` liveness in ms, `ARGV[4]` its place.
///
/// The cleanup of a failed permit round whose acquire will wait, as `UNDO_AND_QUEUE` is a
/// lock's: joins the queue (or keeps its place) and silently deletes each permit that holds
/// the token, handing nothing over and publishing nothing. Handing a round's own grant over
/// (to itself, when first in the queue) and waking its waiter would have a waiter whose
/// rounds find a permit free on a minority of masters take it, fail, give it back to itself
/// and wake again, for as long as the majority is held. The record goes once no permit is
/// held. `-1`. Never sent in parts (a half-moved slot refuses it; the waiter's grants there
/// lapse by their ttl).
pub(crate) static GIVE_BACK_AND_QUEUE: LuaScript = LuaScript::new(lua!(
    "mark_waited",
    "join_queue",
    "delete_ours",
    "forget_permit_count",
    "give_back_and_queue"
));

/// `KEYS[1..P]` every permit key of a semaphore, `KEYS[P + 1]` and `KEYS[P + 2]` its queue and
/// liveness; `ARGV[1]` the waiter's id, then as `RELEASE`: `ARGV[2]` release channel, `ARGV[3]`
/// a release id, `ARGV[4]` the reservation in ms. Leaves the semaphore's queue (as `DEQUEUE`
/// leaves a lock's) and passes on every permit reserved here for this waiter, as the release
/// that reserved it would have. `-1`. Never sent in parts (a half-moved slot refuses it; the
/// waiter's entry lapses with its liveness).
pub(crate) static DEQUEUE_PERMIT: LuaScript = LuaScript::new(lua!("hand_over", "dequeue_permit"));

/// `KEYS[1]` lock key, `KEYS[2]` its waiters' queue, `KEYS[3]` their liveness; `ARGV[1]`
/// token, `ARGV[2]` the waiter's id, `ARGV[3]` liveness in ms, `ARGV[4]` its place.
///
/// `ARGV[5]` the release channel, `ARGV[6]` a release id, `ARGV[7]` the reservation in ms
/// (as `RELEASE`'s); a waiter's `ARGV[8]` ttl (`f<ttl>` for a fenced waiter's, see
/// `QUEUED_ACQUIRE_FENCED`) and `ARGV[9]` nonce, its registration for a hand-off (as
/// `QUEUED_ACQUIRE`'s). Its own hand-over names no fence keys: a fenced waiter gets a
/// reservation there.
///
/// Where the key was handed to this waiter (`h-…|<id>`) since its round, answers `-2` and
/// does nothing else: that is the waiter's lock, which it may be counting from the release
/// messages, and it is no longer queued there.
///
/// The cleanup of a failed round whose acquire will wait: the silent compare-and-delete of
/// `RELEASE` (no hand-off, no message), answering as it does, and, in the same round, joins
/// the queue (or keeps its place), so a waiter is queued from its first refusal on without a
/// round of its own; it marks the holder's value (`lua/mark_waited.lua`), with the queue's
/// keys or without them. Where the key was already gone (its holder released it, perhaps with the server's own compare-and-delete,
/// which hands nothing over, between this waiter's refused `SET NX` and this cleanup; or it
/// expired), it is handed over as a release would (`hand_over`): to the first live waiter,
/// perhaps this one. Never where the key was ours: a cleanup that deleted its own grant and
/// woke a waiter would have it retry, fail and clean up in turn, waking each other while the
/// holder holds. With `KEYS[1]` alone (a half-moved cluster slot, see `request::InParts`),
/// undoes, marks and, where the key was gone, publishes the release on the common channel
/// (no queue to hand it to), but does not queue.
pub(crate) static UNDO_AND_QUEUE: LuaScript = LuaScript::new(lua!(
    "ours",
    "handed",
    "mark_waited",
    "join_queue",
    "hand_over",
    "undo_and_queue"
));

/// `KEYS[1]` the lock key (a read-write lock's writer holds it as any lock's holder does),
/// `KEYS[2]` its readers (`resource::readers_key`: a sorted set of reader tokens scored by the
/// server's millisecond each share expires at), `KEYS[3]` and `KEYS[4]` the lock's queue and
/// its waiters' liveness; `ARGV[1]` token, `ARGV[2]` ttl in ms; for a reader that joined the
/// queue, `ARGV[3]` its waiter id, `ARGV[4]` its liveness in ms, `ARGV[5]` its place, then as
/// `RELEASE`: `ARGV[6]` release channel, `ARGV[7]` a release id, `ARGV[8]` the reservation.
///
/// A read (`DESIGN.md` §7c): refused while the lock key holds anything but the readers' mark
/// (a holder's token, or a reservation or hand-off for a queued waiter), answering its ttl and
/// marking a markable token as waited for (`lua/mark_waited.lua`: its release then publishes,
/// waking the readers, where the server's own compare-and-delete would wake nobody); refused
/// while a writer is queued and live (before the reader's place, for a queued reader),
/// answering how long it stays live (a waiting writer blocks new readers, so a stream of
/// overlapping readers cannot starve it; readers that began to wait first go first). A queued
/// reader leaves the queue as it takes its share and joins again when refused; refused over
/// a readers' mark with no share left and no reader queued before that writer, it passes the
/// mark on to the writer (`lua/take_share.lua`). Else
/// drops expired shares, adds ours with its own expiry, and keeps the lock key held for the
/// readers (`readers`, `lua/readers_live.lua`'s `hold_for_readers`) for at least as long as
/// any share: a write, which is any acquire of the lock, then finds the key taken, the
/// server's own `SET NX` included. Answers `-1`. Many readers hold at once; each share expires
/// by itself, and the mark with the last of them.
pub(crate) static ACQUIRE_READ: LuaScript = LuaScript::new(lua!(
    "mark_waited",
    "readers_live",
    "writer_waits",
    "join_queue",
    "hand_over",
    "bare_mark",
    "take_share",
    "acquire_read"
));

/// `KEYS[1]` lock key, `KEYS[2]` readers, `KEYS[3]` and `KEYS[4]` the lock's queue and
/// liveness, `KEYS[5]` fence counter, `KEYS[6]` its marker, optional `KEYS[7]` the
/// per-resource counter; `ARGV[1]` token, `ARGV[2]` ttl, for a queued reader `ARGV[3..8]`
/// as `ACQUIRE_READ`'s, and last the server's `run_id`.
/// `ACQUIRE_READ` with a reader's token: first the term check of `ACQUIRE_FENCED` (`-6`);
/// a granted read answers `{-1, counter, epoch}` with the counter as it stands (the larger
/// of the slot's and the per-resource one), raising nothing. The reader's token is the
/// largest such counter of its majority, confirmed as a writer's is (`CONFIRM_FENCE_READ`).
pub(crate) static ACQUIRE_READ_FENCED: LuaScript = LuaScript::with_run_id(lua!(
    "fence_term",
    "fence_take",
    "mark_waited",
    "readers_live",
    "writer_waits",
    "join_queue",
    "hand_over",
    "bare_mark",
    "take_share",
    "acquire_read_fenced"
));

/// `KEYS[1]` lock key, `KEYS[2]` readers, `KEYS[3]` and `KEYS[4]` the lock's queue and
/// liveness; `ARGV[1]` the reader's token, `ARGV[2]` the release channel or empty (a failed
/// round's silent cleanup), `ARGV[3]` release id, `ARGV[4]` the reservation in ms (as
/// `RELEASE`'s); for a cleanup, `ARGV[5]` the release channel its hand-overs publish on, and
/// for the cleanup of a failed round whose acquire waits on, `ARGV[6]` the reader's waiter
/// id, `ARGV[7]` its liveness, `ARGV[8]` its place. Removes our share: `-1` when it was live,
/// `-2` when it had expired or was never here. When no live share is left and the lock key
/// still holds the readers' mark, the lock is free here as after a holder's release: a
/// release hands it to the first live queued waiter or deletes it and publishes
/// (`lua/hand_over.lua`). A cleanup leaves such a bare mark to a run of queued readers at the
/// head of the queue, passes it on to a writer there, and deletes it with nobody waiting
/// (`lua/bare_mark.lua`); one whose acquire waits on joins the queue as a reader first, and
/// hands over a lock it finds free, as `UNDO_AND_QUEUE` does. Another reader's release wakes
/// nobody: readers are never held up by readers.
pub(crate) static RELEASE_READ: LuaScript = LuaScript::new(lua!(
    "mark_waited",
    "join_queue",
    "readers_live",
    "writer_waits",
    "hand_over",
    "bare_mark",
    "release_read"
));

/// `KEYS[1]` lock key, `KEYS[2]` readers; `ARGV[1]` token, `ARGV[2]` new ttl in ms, `ARGV[3]`
/// `1` to re-add a missing share. Where the lock key holds anything but the readers' mark,
/// answers its ttl and touches nothing. Else renews our share (`-1`) or, asked, re-adds it
/// (`-5`), keeping the mark for at least the ttl; else `-2`. Never touches another reader's
/// share.
pub(crate) static EXTEND_READ: LuaScript = LuaScript::new(lua!("readers_live", "extend_read"));

/// `KEYS[1]` lock key, `KEYS[2]` its waiters' queue, `KEYS[3]` their liveness; `ARGV[1]` the
/// waiter's id, then as `RELEASE`: `ARGV[2]` release channel, `ARGV[3]` a release id, `ARGV[4]`
/// the reservation in ms; `ARGV[5]`, for a waiter that holds the lock, the token it holds.
/// Leaves the queue (a waiter that got the lock elsewhere, gave up or was cancelled), and if a
/// release had already reserved the lock for this waiter here, or handed it to it with a token
/// other than the one it holds, passes it on as that release would have (`hand_over`): a
/// reservation (or a lock) for a waiter that no longer waits would idle the lock until it
/// lapses, and its lapse wakes nobody. A lock handed with the token it holds is its lock here
/// too, and stays. A reader of a read-write lock (optional `KEYS[4]`, its readers' set) that
/// leaves where the lock key is the readers' mark with no live share under it leaves the mark
/// to the readers queued first, passes it on to a writer first, or deletes it with nobody
/// waiting (`lua/bare_mark.lua`). `-1`. With `KEYS[1]`
/// alone (a half-moved cluster slot, see `request::InParts`), only passes a reservation on,
/// to nobody: the client leaves the queue's keys with one command each.
pub(crate) static DEQUEUE: LuaScript = LuaScript::new(lua!(
    "handed",
    "hand_over",
    "readers_live",
    "writer_waits",
    "bare_mark",
    "dequeue"
));

/// `KEYS[1]` lock key, optional `KEYS[2..]` keys that live as long as the lock (an election's
/// leader info, the other keys of a multi-resource lock), `ARGV[1]` token, `ARGV[2]` new ttl in ms, `ARGV[3]` `1` to re-add a missing
/// key. Renews the key's ttl (and the companion's) only if it holds our token; with `ARGV[3]`
/// = `1` and no key at all, sets ours again (`-5`). Never deletes a key, never touches another
/// owner's.
///
/// The client asks for the re-add only on nodes that did not hold our key at the last acquire
/// or extend, and only while the lock is valid on its clock: a lease on a bare majority then
/// spreads to nodes that come back and survives losing one of the first. A granting node that
/// lost our key is not re-added: that loss is evidence the verdict must see
/// (`crate::core::verdict`).
pub(crate) static EXTEND: LuaScript = LuaScript::new(lua!("ours", "extend"));

/// `KEYS[1]` a permit's key, `KEYS[2]` the semaphore's record of its number of permits;
/// `ARGV[1]` token, `ARGV[2]` new ttl in ms, `ARGV[3]` the number of permits, `ARGV[4]` `1`
/// to re-add a missing key.
///
/// `EXTEND` for a permit, which keeps the record beside every key it renews or re-adds: where
/// the record names another number, answers `{-8, that number, 0}` and touches nothing (a
/// client of that number holds there now); else renews the key (`-1`) or re-adds it (`-5`)
/// as `EXTEND` does, and sets the record for at least the ttl. A re-added permit without its
/// record would be a master of the holder's majority where a client of another number is
/// granted (re-added after an outage, then the first masters lost).
pub(crate) static EXTEND_PERMIT: LuaScript = LuaScript::new(lua!("permit_count", "extend_permit"));

/// `KEYS[1]` lock key, `KEYS[2]` fence counter (one per hash slot, see
/// `resource::fence_key`), `KEYS[3]` its re-seed marker (`resource::FenceKeys::marker`),
/// optional `KEYS[4]` the per-resource counter; `ARGV[1]` token, `ARGV[2]`
/// ttl in ms, `ARGV[3]` the `run_id` of the server as the client's connection learned it.
///
/// First, a master whose marker does not name its current term (the fence term) answers `-6`
/// and sets nothing: it started, or its dataset was replaced, since its counter was last
/// re-seeded, so the counter may have gone back (no `appendfsync always`, an old snapshot, a
/// failback) and must not enter a token (`crate::protocol::reseed`).
/// Then `SET NX PX`, and when the key is set, also `INCR`s the fence counter and answers
/// `{-1, counter, epoch}`; when it is taken (or reserved for a queued waiter), the holder's
/// remaining ttl, marking nothing: an acquire that waits on joins the queue in its cleanup,
/// which marks (`UNDO_AND_QUEUE`, `DESIGN.md` §3). A per-resource counter
/// (`legacy`) is folded into the slot's counter first (the larger wins) and deleted, so
/// tokens never go back. (The plain acquire is no script: one native `SET NX PX`, see
/// `request::Command`.)
pub(crate) static ACQUIRE_FENCED: LuaScript =
    LuaScript::with_run_id(lua!("fence_term", "fence_take", "acquire_fenced"));

/// `KEYS[1]` lock key, `KEYS[2]` its waiters' queue, `KEYS[3]` their liveness, `KEYS[4]` the
/// fence counter, `KEYS[5]` its re-seed marker, optional `KEYS[6]` the per-resource counter;
/// `ARGV[1]` token, `ARGV[2]` ttl in ms, `ARGV[3]` the waiter's id, `ARGV[4]` how long this
/// registration stays live, in ms, `ARGV[5]` its place, `ARGV[6]` the round's nonce (or
/// empty), `ARGV[7]` the server's `run_id`.
///
/// The fenced acquire of a waiter: [`QUEUED_ACQUIRE`] with the fence of [`ACQUIRE_FENCED`].
/// On a master not re-seeded in its current term, `-6` and nothing else. Then, when the key
/// is free or reserved for this waiter, sets it to the token (marked), leaves the queue and
/// raises the slot's counter as `ACQUIRE_FENCED` does (`{-1, counter, epoch}`); otherwise
/// joins the queue or keeps its place and answers the holder's remaining ttl, registering the
/// token with the nonce as a fenced waiter's (its ttl written `f<ttl>`: only a fenced
/// release hands it its lock, `RELEASE`). A reservation never touches a counter: the counter
/// rises only where a token is set, as for every fenced grant (`DESIGN.md` §7).
///
/// Sent whole, for the reason [`QUEUED_ACQUIRE`] is.
pub(crate) static QUEUED_ACQUIRE_FENCED: LuaScript = LuaScript::sent_whole_with_run_id(lua!(
    "fence_term",
    "mark_waited",
    "join_queue",
    "handed",
    "take_turn",
    "fence_take",
    "queued_acquire_fenced"
));

/// `KEYS[1]` fence counter, `KEYS[2]` its re-seed marker, optional `KEYS[3]` the
/// per-resource counter; `ARGV[1]` the server's `run_id`. Answers
/// `{counter, run, legacy, term}` (the first three nil where there is none; `term` the
/// server's fence term now, the fence term) and moves the marker's epoch on: a fenced confirm
/// whose grant came before this reading no longer counts on this master (`CONFIRM_FENCE`), so
/// every confirmation that counts here is in the reading or comes after a grant that did.
/// On every master read, marked or not: a master whose term changed without a restart (a
/// first replica attaching, its backlog freed) is unmarked but keeps the keys and epochs of
/// grants from its last term, and a confirm of one landing after the reading must not count
/// (with the epoch moved on only where marked, a holder confirmed on such a
/// master after the reading, plus one whose confirmation an empty restart lost, could share
/// a majority with a later holder's lower token).
pub(crate) static SEED_READ: LuaScript = LuaScript::new(lua!("fence_term", "seed_read"));

/// `KEYS[1]` fence counter, `KEYS[2]` its re-seed marker, `ARGV[1]` the counter learned from
/// the other masters, `ARGV[2]` the server's `run_id`, `ARGV[3]` the term `SEED_READ` found
/// it in. Only while the server is still in that term (else `-6`, and nothing changes): raises
/// the counter to at least `ARGV[1]` (never lowers it) and marks it re-seeded for that term.
/// Should the server have restarted, or its dataset been replaced, since the reading, nothing
/// is trusted that was learned about an earlier term.
pub(crate) static SEED_FENCE: LuaScript = LuaScript::new(lua!("fence_term", "seed_fence"));

/// [`SEED_READ`] for many slots at once, on a server that is no Redis Cluster (a fence sweep):
/// `KEYS` pairs of a slot's fence counter and its re-seed marker, `ARGV[1]` the server's
/// `run_id`. Answers `{term, counter1, run1, counter2, run2, …}` (nil where there is none), or
/// `-6` on a server that is no master; moves every marker's epoch on, as `SEED_READ` does.
/// Each slot's part is `SEED_READ`'s without a per-resource counter (a slot's keys have
/// none), so the re-seed's argument holds slot by slot; the one script only reads them all at
/// one instant, and the sweep sends one request per master for many slots instead of one each.
pub(crate) static SEED_READ_SLOTS: LuaScript =
    LuaScript::new(lua!("fence_term", "seed_read_slots"));

/// [`SEED_FENCE`] for many slots at once, on a server that is no Redis Cluster: `KEYS` pairs of
/// a slot's fence counter and its re-seed marker, `ARGV[1]` the server's `run_id`, `ARGV[2]`
/// the term `SEED_READ_SLOTS` found it in, `ARGV[3…]` the value for each pair. Only while the
/// server is still in that term (else `-6`, and nothing changes): raises each counter to at
/// least its value and marks it for that term.
pub(crate) static SEED_FENCE_SLOTS: LuaScript =
    LuaScript::new(lua!("fence_term", "seed_fence_slots"));

/// `KEYS` re-seed markers (slots', `resource::FenceKeys::marker`, or a server's seeding
/// record, `resource::fence_record_key`; several only where they may share a script, on a
/// server that is no Redis Cluster), optional `ARGV[1]` the server's `run_id` (when absent or
/// empty, the script reads it from `INFO server`: for `redquorum status`, which sends one
/// request to every server). Answers `{term, m1, m2, …}`: the server's current term
/// (the fence term), and for each key 1 when it names that term, else 0. Changes nothing.
pub(crate) static FENCE_STATE: LuaScript = LuaScript::new(lua!("fence_term", "fence_state"));

/// `KEYS[1]` a server's seeding record (`resource::fence_record_key`), `ARGV[1]` the server's
/// `run_id`, `ARGV[2]` the term a sweep found it in (`FENCE_STATE`). Only while the server is
/// still in that term (else `-6`): records that every slot's counter on this server is seeded
/// for it (`crate::protocol::fence_sweep`), so clients need not look again until the term changes.
pub(crate) static MARK_SEEDED: LuaScript = LuaScript::new(lua!("fence_term", "mark_seeded"));

/// `KEYS[1]` lock key, `KEYS[2]` fence counter, `KEYS[3]` its re-seed marker, `ARGV[1]`
/// token, `ARGV[2]` fencing token T, `ARGV[3]` the marker's epoch at this master's grant
/// (empty for a master whose grant came after the decision: its confirmation never counts,
/// `confirm::confirm_fence`, and raising its counter does no harm), `ARGV[4]` the server's
/// `run_id`.
/// Only while the lock key holds our token, the marker names the server's current term and no
/// re-seed has read this master since the grant (else `-7`, and nothing changes; `-6` on a
/// server that is no master): raises the counter to at least T. Never lowers it, never
/// touches the lock key.
///
/// The epoch check closes a race with re-seeding: a master that confirmed T and then
/// restarted empty must not leave T known only to a confirmation that lands after the
/// re-seed read the other masters (`crate::model` finds that schedule without the check).
/// The term check closes it for a master whose term changed since the grant (a failback to an
/// older copy of its data, which can bring back the key and the epoch of the grant; a first
/// replica attaching): its counter does not count in its new term until re-seeded, so neither
/// does a confirmation there.
///
/// Which answers confirm the token is the client's rule, not the script's: only masters that
/// granted the lock before the acquire was decided count (`confirm::confirm_fence`). A master
/// whose grant landed after the decision holds our key too, but its counter never entered T;
/// counting it would let two holders share a token, or a later one get a lower token (`DESIGN.md`
/// §5; `crate::model` finds it with the old rule).
pub(crate) static CONFIRM_FENCE: LuaScript = LuaScript::with_run_id(lua!(
    "ours",
    "not_ours",
    "fence_term",
    "raise_fence",
    "confirm_fence"
));

/// `KEYS[1]` a read-write lock's readers, `KEYS[2]` fence counter, `KEYS[3]` its marker;
/// `ARGV` as `CONFIRM_FENCE`'s, `ARGV[1]` the reader's token. `CONFIRM_FENCE` for a reader:
/// only while our share is live (else `-2`), raises the counter to at least the reader's
/// token, so every later write's token is above it (`DESIGN.md` §7c).
pub(crate) static CONFIRM_FENCE_READ: LuaScript = LuaScript::with_run_id(lua!(
    "fence_term",
    "readers_live",
    "raise_fence",
    "confirm_fence_read"
));

/// `KEYS[1]` lock key, `KEYS[2]` leader-info key, `ARGV[1]` token, `ARGV[2]` info.
/// Only while the lock key holds our token: stores the leader's info, expiring with the lock
/// key (the leader's renewals extend both, see `EXTEND`), so a crashed leader's info does not
/// stay for ever: one per election name at most, and only while someone leads. It is trusted
/// only while it names the token in the lock key.
///
/// A script sees its keys as of its start, but `PTTL` reads the clock: in the lock key's last
/// millisecond the `GET` still finds it and `PTTL` says 0. Nothing is written then, and the
/// answer is `-2`, the key's expiry (a `SET` without `PX` there would leave the info without
/// any expiry). Only a lock key without an expiry, which we never make, gives an info
/// without one.
pub(crate) static WRITE_LEADER_INFO: LuaScript =
    LuaScript::new(lua!("ours", "not_ours", "write_leader_info"));

#[cfg(test)]
pub(crate) mod effects;
mod reply;

pub(crate) use reply::ScriptReply;

#[cfg(test)]
mod tests {
    use super::*;

    /// The scripts sent whole with every call travel without their comment lines (the
    /// on-server tests below run what is sent).
    ///
    /// Mutation: `code` returning the source as written sends the comments of
    /// `fence_take.lua`, `fence_term.lua` and `mark_waited.lua` with every queued fenced round.
    #[test]
    fn scripts_sent_whole_travel_without_their_comments() {
        for lua in [
            &QUEUED_ACQUIRE,
            &QUEUED_ACQUIRE_FENCED,
            &QUEUED_ACQUIRE_PERMIT,
        ] {
            let sent = lua.code();
            assert!(!sent.lines().any(|l| l.trim_start().starts_with("--")));
            assert!(
                sent.len() < lua.code.len(),
                "{} of {}",
                sent.len(),
                lua.code.len()
            );
        }
        assert_eq!(
            ACQUIRE_FENCED.code(),
            ACQUIRE_FENCED.code,
            "sent by hash: as written"
        );
    }

    #[test]
    fn scripts_hash_to_distinct_shas() {
        let shas = all().map(|lua| lua.script().get_hash());
        let distinct: std::collections::HashSet<_> = shas.iter().collect();
        assert_eq!(distinct.len(), shas.len());
        assert!(shas.iter().all(|s| s.len() == 40));
    }

    /// The queue scripts on a real server (`redis-server`, one master), with the queue written
    /// by hand: what each leaves in the key and the queue.
    mod on_a_server {
        use redquorum_testkit::{Cluster, Persistence, ServerKind};

        use super::super::{DEQUEUE, EXTEND, QUEUED_ACQUIRE, RELEASE, UNDO_AND_QUEUE};

        const KEY: &str = "q:{r}";
        const QUEUE: &str = "q:{r}:queue";
        const WAITERS: &str = "q:{r}:waiters";
        const FOREVER: u64 = u64::MAX / 4;

        fn eval(cluster: &Cluster, code: &str, argv: &[&str]) -> i64 {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(code).arg(3).arg(KEY).arg(QUEUE).arg(WAITERS);
            for a in argv {
                cmd.arg(*a);
            }
            cluster.run(0, &cmd)
        }

        fn queue(cluster: &Cluster, waiter: &str, place: u64, live_until: u64) {
            let _: i64 = cluster.run(0, redis::cmd("ZADD").arg(QUEUE).arg(place).arg(waiter));
            let _: i64 = cluster.run(
                0,
                redis::cmd("HSET").arg(WAITERS).arg(waiter).arg(live_until),
            );
        }

        fn get(cluster: &Cluster) -> Option<String> {
            cluster.run(0, redis::cmd("GET").arg(KEY))
        }

        fn queued(cluster: &Cluster) -> Vec<String> {
            cluster.run(0, redis::cmd("ZRANGE").arg(QUEUE).arg(0).arg(-1))
        }

        /// Mutation: `DEQUEUE` without its hand-over leaves the reservation for the waiter
        /// that left (`handoff:c.w`) until it lapses.
        #[test]
        fn a_waiter_leaving_passes_on_a_reservation_made_for_it() {
            let cluster = Cluster::start(1);
            let _: () = cluster.run(
                0,
                redis::cmd("SET").arg(KEY).arg("tok").arg("PX").arg(60_000),
            );
            queue(&cluster, "c.w", 1, FOREVER);
            queue(&cluster, "c.v", 2, FOREVER);
            // The holder releases: the lock is reserved for the first waiter.
            assert_eq!(
                eval(&cluster, RELEASE.code(), &["tok", "ch", "r1", "5000"]),
                -1
            );
            assert_eq!(get(&cluster).as_deref(), Some("handoff:c.w"));
            // Reserved, c.w waits on until its round takes the reservation.
            assert_eq!(queued(&cluster), ["c.w", "c.v"]);
            // That waiter leaves (it got the lock elsewhere, gave up or was cancelled): the
            // reservation goes to the next one, as the release would have done.
            assert_eq!(
                eval(&cluster, DEQUEUE.code(), &["c.w", "ch", "r2", "5000"]),
                -1
            );
            assert_eq!(get(&cluster).as_deref(), Some("handoff:c.v"));
            assert_eq!(queued(&cluster), ["c.v"]);
            // The last one leaves: the key is deleted, nothing is left.
            assert_eq!(
                eval(&cluster, DEQUEUE.code(), &["c.v", "ch", "r3", "5000"]),
                -1
            );
            let keys: Vec<String> = cluster.run(0, redis::cmd("KEYS").arg("*"));
            assert!(keys.is_empty(), "{keys:?}");
        }

        /// `script` with `KEY` alone, as a Cluster voter sends it on a half-moved slot
        /// (`request::InParts`).
        fn eval_alone(cluster: &Cluster, code: &str, argv: &[&str]) -> i64 {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(code).arg(1).arg(KEY);
            for a in argv {
                cmd.arg(*a);
            }
            cluster.run(0, &cmd)
        }

        /// With the lock key alone (a half-moved slot), `DEQUEUE` passes a reservation for
        /// its waiter on to nobody and touches nothing else; `UNDO_AND_QUEUE` undoes and joins
        /// no queue. Neither touches the queue's keys, which the client leaves with one
        /// command each.
        ///
        /// Mutation (run, not caught, equivalent): either script without its `if KEYS[2]`
        /// guard. The queue commands are `pcall`s, and on a missing key they fail and do
        /// nothing; the guards say so rather than rely on it.
        #[test]
        fn with_the_lock_key_alone_leaving_and_undoing_touch_only_that_key() {
            let cluster = Cluster::start(1);
            queue(&cluster, "c.v", 1, FOREVER);
            let _: () = cluster.run(
                0,
                redis::cmd("SET")
                    .arg(KEY)
                    .arg("handoff:c.w")
                    .arg("PX")
                    .arg(60_000),
            );
            assert_eq!(
                eval_alone(&cluster, DEQUEUE.code(), &["c.w", "ch", "r", "5000"]),
                -1
            );
            assert_eq!(get(&cluster), None, "the reservation passed to nobody");
            assert_eq!(queued(&cluster), ["c.v"], "the queue untouched");

            let _: () = cluster.run(
                0,
                redis::cmd("SET").arg(KEY).arg("tok").arg("PX").arg(60_000),
            );
            assert_eq!(
                eval_alone(&cluster, DEQUEUE.code(), &["c.w", "ch", "r", "5000"]),
                -1
            );
            assert_eq!(
                get(&cluster).as_deref(),
                Some("tok"),
                "a held lock untouched"
            );
            assert_eq!(
                eval_alone(
                    &cluster,
                    UNDO_AND_QUEUE.code(),
                    &["tok", "c.u", "5000", "3"]
                ),
                -1
            );
            assert_eq!(get(&cluster), None, "undone");
            assert_eq!(queued(&cluster), ["c.v"], "not queued");
            // Without its queue, the cleanup still marks the holder it met: the holder's
            // release on this master then runs the script and publishes.
            //
            // Mutation: `mark_waited` only in `join_queue` (behind the guard): the value stays
            // `n-tok` and the holder's `DELIFEQ` would publish nothing (run, caught).
            let _: () = cluster.run(
                0,
                redis::cmd("SET")
                    .arg(KEY)
                    .arg("n-tok")
                    .arg("PX")
                    .arg(60_000),
            );
            eval_alone(
                &cluster,
                UNDO_AND_QUEUE.code(),
                &["n-tw", "c.u", "5000", "3", "ch", "r", "500"],
            );
            assert_eq!(get(&cluster).as_deref(), Some("w-tok"));
            assert_eq!(queued(&cluster), ["c.v"], "not queued");
        }

        /// A waiter leaving touches no lock but a reservation for itself.
        #[test]
        fn a_waiter_leaving_never_touches_a_held_lock_or_another_reservation() {
            let cluster = Cluster::start(1);
            for held in ["tok", "handoff:c.other"] {
                let _: () = cluster.run(
                    0,
                    redis::cmd("SET").arg(KEY).arg(held).arg("PX").arg(60_000),
                );
                queue(&cluster, "c.w", 1, FOREVER);
                assert_eq!(
                    eval(&cluster, DEQUEUE.code(), &["c.w", "ch", "r", "5000"]),
                    -1
                );
                assert_eq!(get(&cluster).as_deref(), Some(held));
                assert!(queued(&cluster).is_empty());
            }
        }

        /// A queued acquire takes a free key or one reserved for it, never another's, and joins
        /// the queue in its place (the same place on every node) when refused.
        ///
        /// Mutation: `ZADD` without `NX` moves a waiter to its newest place; scoring by the
        /// server's time orders waiters per node.
        #[test]
        fn a_queued_acquire_takes_only_its_reservation_and_keeps_its_place() {
            let cluster = Cluster::start(1);
            set_for_a_minute(&cluster, KEY, "handoff:c.v");
            // c.w is refused (reserved for c.v) and joins at place 7.
            let answer = eval(
                &cluster,
                QUEUED_ACQUIRE.code(),
                &["tw", "10000", "c.w", "60000", "7"],
            );
            assert!(answer >= 0, "refused with the reservation's ttl: {answer}");
            // c.u joins at place 3: before c.w, as its place says.
            eval(
                &cluster,
                QUEUED_ACQUIRE.code(),
                &["tu", "10000", "c.u", "60000", "3"],
            );
            // c.w asks again with a later place: it keeps its first.
            eval(
                &cluster,
                QUEUED_ACQUIRE.code(),
                &["tw", "10000", "c.w", "60000", "9"],
            );
            assert_eq!(queued(&cluster), ["c.u", "c.w"]);
            let score: f64 = cluster.run(0, redis::cmd("ZSCORE").arg(QUEUE).arg("c.w"));
            assert!((score - 7.0).abs() < f64::EPSILON);
            // c.v takes its reservation and leaves the queue it was never in; the key is its.
            assert_eq!(
                eval(
                    &cluster,
                    QUEUED_ACQUIRE.code(),
                    &["tv", "10000", "c.v", "60000", "1"]
                ),
                -1
            );
            assert_eq!(get(&cluster).as_deref(), Some("tv"));
            let pttl: i64 = cluster.run(0, redis::cmd("PTTL").arg(KEY));
            assert!(pttl > 9_000, "the full ttl, not the reservation's: {pttl}");
        }

        /// A waiter marks the holder's markable value (`n-` becomes `w-`, the ttl kept): a
        /// server's own compare-and-delete with the holder's token then deletes nothing, and
        /// the release script, which accepts both forms, hands the lock to the waiter. A value
        /// that is not markable (an older client's, a reservation) is never changed.
        ///
        /// Mutation: `join_queue` without `mark_waited`: `DELIFEQ` deletes the lock with a
        /// waiter queued (the first assert on its answer); `ours` comparing the value as
        /// written only: the release answers "not ours".
        #[test]
        fn a_waiter_marks_the_holder_so_only_the_script_releases_it() {
            let cluster = Cluster::start_kinds(&[ServerKind::Valkey], Persistence::None, &[]);
            let _: () = cluster.run(
                0,
                redis::cmd("SET")
                    .arg(KEY)
                    .arg("n-tok")
                    .arg("PX")
                    .arg(60_000),
            );
            // c.w's round was refused; its cleanup joins the queue and marks the holder.
            let answer = eval(
                &cluster,
                UNDO_AND_QUEUE.code(),
                &["n-tw", "c.w", "60000", "1", "ch", "r0", "500"],
            );
            assert!(answer > 59_000, "the holder's ttl: {answer}");
            assert_eq!(get(&cluster).as_deref(), Some("w-tok"));
            let pttl: i64 = cluster.run(0, redis::cmd("PTTL").arg(KEY));
            assert!(pttl > 59_000, "the ttl kept: {pttl}");
            let deleted: i64 = cluster.run(0, redis::cmd("DELIFEQ").arg(KEY).arg("n-tok"));
            assert_eq!(deleted, 0, "the native delete no longer matches");
            assert_eq!(
                eval(&cluster, EXTEND.code(), &["n-tok", "60000", "0"]),
                -1,
                "the holder still renews"
            );
            assert_eq!(get(&cluster).as_deref(), Some("w-tok"), "still marked");
            assert_eq!(
                eval(&cluster, RELEASE.code(), &["n-tok", "ch", "r1", "500"]),
                -1
            );
            assert_eq!(get(&cluster).as_deref(), Some("handoff:c.w"));
            // Another token never matches the marked form.
            let _: () = cluster.run(
                0,
                redis::cmd("SET")
                    .arg(KEY)
                    .arg("w-tok")
                    .arg("PX")
                    .arg(60_000),
            );
            assert!(eval(&cluster, RELEASE.code(), &["n-other", "ch", "r2", "500"]) > 0);
            assert!(eval(&cluster, RELEASE.code(), &["tok", "ch", "r2", "500"]) > 0);
            // Values that are not markable stay as they are.
            for value in ["tok", "handoff:c.v"] {
                let _: () = cluster.run(
                    0,
                    redis::cmd("SET").arg(KEY).arg(value).arg("PX").arg(60_000),
                );
                eval(
                    &cluster,
                    UNDO_AND_QUEUE.code(),
                    &["n-tw", "c.w", "60000", "1", "ch", "r3", "500"],
                );
                assert_eq!(get(&cluster).as_deref(), Some(value));
            }
        }

        /// A waiter that takes the lock through the queue writes its token marked: the lock
        /// was contended, so its release runs the script.
        ///
        /// Mutation: `QUEUED_ACQUIRE` writing the token as given: the value is `n-tv`.
        #[test]
        fn a_lock_taken_through_the_queue_is_marked() {
            let cluster = Cluster::start(1);
            assert_eq!(
                eval(
                    &cluster,
                    QUEUED_ACQUIRE.code(),
                    &["n-tv", "10000", "c.v", "60000", "1"]
                ),
                -1
            );
            assert_eq!(get(&cluster).as_deref(), Some("w-tv"));
            // (A token that is not markable is written as it is: the test above.)
        }

        /// A waiter's cleanup that finds the lock already gone (its holder released it with
        /// the server's own delete between the waiter's refused `SET NX` and the cleanup)
        /// hands it to the first live waiter and publishes, as the release would have; one
        /// that deletes its own grant hands nothing over (else waiters would wake each other
        /// while the holder holds elsewhere).
        ///
        /// Mutation: no hand-over in `UNDO_AND_QUEUE`: the key stays free (the first assert);
        /// the hand-over also after deleting our own grant: the key is reserved (the last).
        #[test]
        fn a_cleanup_hands_over_a_lock_released_before_it_but_never_its_own() {
            let cluster = Cluster::start(1);
            queue(&cluster, "c.v", 1, FOREVER);
            assert_eq!(
                eval(
                    &cluster,
                    UNDO_AND_QUEUE.code(),
                    &["n-tw", "c.w", "60000", "2", "ch", "r1", "500"],
                ),
                -2
            );
            assert_eq!(get(&cluster).as_deref(), Some("handoff:c.v"));
            // Reserved, c.v waits on until its round takes the reservation.
            assert_eq!(queued(&cluster), ["c.v", "c.w"]);
            // c.v's round takes it (and leaves the queue), c.v releases; c.w's own grant
            // elsewhere, undone, wakes nobody.
            assert_eq!(
                eval(
                    &cluster,
                    QUEUED_ACQUIRE.code(),
                    &["n-tv", "10000", "c.v", "60000", "1"]
                ),
                -1
            );
            assert_eq!(queued(&cluster), ["c.w"]);
            let _: i64 = cluster.run(0, redis::cmd("DEL").arg(KEY));
            let _: () = cluster.run(
                0,
                redis::cmd("SET").arg(KEY).arg("n-tw").arg("PX").arg(60_000),
            );
            assert_eq!(
                eval(
                    &cluster,
                    UNDO_AND_QUEUE.code(),
                    &["n-tw", "c.w", "60000", "2", "ch", "r2", "500"],
                ),
                -1
            );
            assert_eq!(get(&cluster), None);
            assert_eq!(queued(&cluster), ["c.w"]);
        }

        fn set(cluster: &Cluster, value: &str) {
            let _: () = cluster.run(
                0,
                redis::cmd("SET").arg(KEY).arg(value).arg("PX").arg(60_000),
            );
        }

        fn pttl(cluster: &Cluster) -> i64 {
            cluster.run(0, redis::cmd("PTTL").arg(KEY))
        }

        /// A waiter whose request registered its token (the last two arguments of
        /// `UNDO_AND_QUEUE`, the last of `QUEUED_ACQUIRE`) is handed its own lock: the release
        /// sets `h-<token>|<id>` for the waiter's ttl (not a reservation's few ms) and its
        /// message names the request's nonce, never the token. That key is then the waiter's
        /// lock: the round's cleanup keeps it and does not queue the waiter again, leaving
        /// while holding it keeps it, its token extends and releases it (handing it on), no
        /// other token does, and a leaving waiter that does not hold it passes it on.
        ///
        /// Mutations (run, caught): `hand_over` ignoring the registration (`handoff:c.w`, the
        /// second assert); `UNDO_AND_QUEUE` without its handed check (deletes the waiter's lock:
        /// `ours` accepts it); `DEQUEUE` without the `held` comparison (passes on the lock it
        /// holds); `ours` without the `h-` case (its release answers "not ours").
        #[test]
        fn a_registered_waiter_is_handed_its_own_lock_with_its_ttl() {
            let cluster = Cluster::start(1);
            let client = redis::Client::open(cluster.urls()[0].as_str()).expect("url");
            let mut connection = client.get_connection().expect("connect");
            let mut messages = connection.as_pubsub();
            messages.subscribe("ch:c").expect("subscribe");
            messages
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .expect("timeout");
            set(&cluster, "n-tok");
            let queued_acquire = QUEUED_ACQUIRE.code();
            let refused = eval(
                &cluster,
                queued_acquire,
                &["n-mine", "30000", "c.w", "5000", "1", "nonce1"],
            );
            assert!(refused > 0, "refused by the holder: {refused}");
            assert_eq!(
                eval(&cluster, RELEASE.code(), &["n-tok", "ch", "r1", "500"]),
                -1
            );
            assert_eq!(get(&cluster).as_deref(), Some("h-n-mine|c.w"));
            assert!(
                pttl(&cluster) > 20_000,
                "the waiter's ttl: {}",
                pttl(&cluster)
            );
            let message = messages.get_message().expect("hand-off message");
            let payload: String = message.get_payload().expect("payload");
            assert_eq!(payload, "r1:c.w:nonce1");
            assert!(queued(&cluster).is_empty());
            let registration: Option<String> =
                cluster.run(0, redis::cmd("HGET").arg(WAITERS).arg("c.w:h"));
            assert_eq!(registration, None, "dropped with the waiter's turn");

            let undo = &[
                "n-mine", "c.w", "5000", "1", "ch", "r2", "500", "30000", "nonce1",
            ];
            assert_eq!(eval(&cluster, UNDO_AND_QUEUE.code(), undo), -2);
            assert_eq!(get(&cluster).as_deref(), Some("h-n-mine|c.w"), "kept");
            assert!(queued(&cluster).is_empty(), "not queued again");
            let leave_holding = &["c.w", "ch", "r3", "500", "n-mine"];
            assert_eq!(eval(&cluster, DEQUEUE.code(), leave_holding), -1);
            assert_eq!(get(&cluster).as_deref(), Some("h-n-mine|c.w"), "kept");
            assert_eq!(eval(&cluster, EXTEND.code(), &["n-mine", "40000", "0"]), -1);
            assert!(pttl(&cluster) > 30_000);
            let other = eval(&cluster, RELEASE.code(), &["n-other", "ch", "r4", "500"]);
            assert!(other > 0, "not another token's: {other}");

            queue(&cluster, "c.v", 2, FOREVER);
            assert_eq!(
                eval(&cluster, RELEASE.code(), &["n-mine", "ch", "r5", "500"]),
                -1
            );
            assert_eq!(get(&cluster).as_deref(), Some("handoff:c.v"), "handed on");

            // Handed to c.w again; c.w gives up (holding nothing): passed on to c.v, which,
            // reserved the lock before, waits on; once c.v leaves too, to nobody.
            set(&cluster, "h-n-mine|c.w");
            assert_eq!(
                eval(&cluster, DEQUEUE.code(), &["c.w", "ch", "r6", "500"]),
                -1
            );
            assert_eq!(get(&cluster).as_deref(), Some("handoff:c.v"), "passed on");
            assert_eq!(
                eval(&cluster, DEQUEUE.code(), &["c.v", "ch", "r7", "500"]),
                -1
            );
            assert_eq!(get(&cluster), None, "passed on to nobody");
        }

        /// A silent delete (a failed round's cleanup, no channel) never takes a lock handed to
        /// a waiter, though its token is the round's: the waiter may be counting it. The
        /// release of a lock that came through the queue (its waiter's id last) takes that
        /// waiter out of the queue even where the lock is not its own, and passes on what a
        /// release had handed it there with another token or reserved for it: no later
        /// release hands the lock to a waiter that waits no more.
        ///
        /// Mutations (run, caught): `RELEASE` without the silent check (the first assert);
        /// without the `ZREM`/`HDEL` of its waiter (still queued); without the pass-on (the
        /// stale reservation stays).
        #[test]
        fn a_release_through_the_queue_leaves_it_and_a_silent_delete_keeps_a_handed_lock() {
            let cluster = Cluster::start(1);
            set(&cluster, "h-n-mine|c.w");
            let silent = eval(&cluster, RELEASE.code(), &["n-mine", "", ""]);
            assert!(silent > 0, "refused: {silent}");
            assert_eq!(get(&cluster).as_deref(), Some("h-n-mine|c.w"));

            // c.w holds elsewhere with `n-new`; here another holder still holds, and c.w is
            // still queued (its hand-off here has not come).
            set(&cluster, "n-theirs");
            queue(&cluster, "c.w", 1, FOREVER);
            let _: i64 = cluster.run(
                0,
                redis::cmd("HSET")
                    .arg(WAITERS)
                    .arg("c.w:h")
                    .arg("30000 x n-new"),
            );
            let release = &["n-new", "ch", "r1", "500", "c.w"];
            assert!(eval(&cluster, RELEASE.code(), release) > 0, "not ours here");
            assert!(queued(&cluster).is_empty(), "left the queue");
            let fields: Vec<String> = cluster.run(0, redis::cmd("HKEYS").arg(WAITERS));
            assert!(fields.is_empty(), "{fields:?}");
            assert_eq!(get(&cluster).as_deref(), Some("n-theirs"), "untouched");

            queue(&cluster, "c.v", 2, FOREVER);
            for stale in ["handoff:c.w", "h-n-old|c.w"] {
                set(&cluster, stale);
                let release = &["n-new", "ch", "r2", "500", "c.w"];
                assert!(eval(&cluster, RELEASE.code(), release) > 0);
                assert_eq!(
                    get(&cluster).as_deref(),
                    Some("handoff:c.v"),
                    "{stale} passed on"
                );
                queue(&cluster, "c.v", 2, FOREVER);
            }
        }

        /// A waiter's queued round takes a lock handed to it with an earlier request's token
        /// as its own grant, with a fresh ttl; another waiter's round is refused by it.
        ///
        /// Mutation (run, caught): `take_turn` without `handed_to`: the waiter's own round is
        /// refused by its own lock, which then idles for its whole ttl.
        #[test]
        fn a_queued_round_takes_a_lock_handed_to_its_waiter() {
            let cluster = Cluster::start(1);
            set(&cluster, "h-n-old|c.w");
            let code = QUEUED_ACQUIRE.code();
            let refused = eval(&cluster, code, &["n-v", "30000", "c.v", "5000", "1", "n1"]);
            assert!(refused > 0, "another waiter's round: {refused}");
            assert_eq!(get(&cluster).as_deref(), Some("h-n-old|c.w"));
            let taken = eval(
                &cluster,
                code,
                &["n-new", "30000", "c.w", "5000", "2", "n2"],
            );
            assert_eq!(taken, -1);
            assert_eq!(get(&cluster).as_deref(), Some("w-new"));
            assert!(pttl(&cluster) > 20_000);
        }

        /// The leader info is never left without an expiry: written in the lock key's last
        /// millisecond (the script sees the key, `PTTL` says 0), it is not written at all.
        /// 200 trials against a key set with `PX 2`, each followed in the same pipeline by a
        /// script that spins the server for a growing count of Lua steps (160,000 to 1.75
        /// million: about 0.5 to 5.5 ms on the development machine, 3.1 ms per million), so
        /// some land in that millisecond. Counted in steps, not timed with `TIME`: Valkey
        /// freezes `TIME` for the length of a script, so a timed spin never ends there (the
        /// test hung on every all-Valkey run; mixed runs give it Redis).
        ///
        /// Mutation: `else SET` without an expiry for every `PTTL` but a positive one (the
        /// script before issue 29): the info is left with `PTTL` -1 (run, caught).
        #[test]
        fn leader_info_is_never_left_without_an_expiry() {
            let cluster = Cluster::start(1);
            let mut conn = cluster.server(0).inspect();
            let (lock, info) = ("e:{lead}", "e:{lead}:leader");
            const SPIN: &str = "local x = 0 \
                for i = 1, tonumber(ARGV[1]) do x = x + i end \
                return 0";
            let (mut written, mut refused) = (0, 0);
            for trial in 0..200u64 {
                let mut pipeline = redis::pipe();
                pipeline
                    .cmd("SET")
                    .arg(lock)
                    .arg("t")
                    .arg("PX")
                    .arg(2)
                    .ignore();
                pipeline
                    .cmd("EVAL")
                    .arg(SPIN)
                    .arg(0)
                    .arg(160_000 + trial * 8_000)
                    .ignore();
                pipeline
                    .cmd("EVAL")
                    .arg(super::super::WRITE_LEADER_INFO.code())
                    .arg(2)
                    .arg(lock)
                    .arg(info)
                    .arg("t")
                    .arg("leader");
                pipeline.cmd("PTTL").arg(info);
                let (answer, pttl): (i64, i64) = pipeline.query(&mut conn).expect("pipeline");
                match answer {
                    -1 => written += 1,
                    -2 => refused += 1,
                    _ => {}
                }
                assert_ne!(
                    pttl, -1,
                    "leader info left without an expiry (trial {trial})"
                );
                let _: i64 = cluster.run(0, redis::cmd("DEL").arg(info));
            }
            // The trials span the key's life: some write the info, some find the key gone.
            assert!(
                written > 0 && refused > 0,
                "{written} written, {refused} refused"
            );
        }

        /// `ACQUIRE_PERMIT` with permits tried in the order 1, 2, 0.
        fn acquire_permit(cluster: &Cluster, token: &str) -> redis::Value {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(super::super::ACQUIRE_PERMIT.code()).arg(4);
            cmd.arg("s:{p}:permit:1")
                .arg("s:{p}:permit:2")
                .arg("s:{p}:permit:0")
                .arg("s:{p}:permits");
            cmd.arg(token).arg(10_000).arg(1).arg(2).arg(0);
            cluster.run(0, &cmd)
        }

        /// Each call takes the first free permit in its order and names it; a full semaphore
        /// answers the shortest remaining ttl; giving back deletes only the caller's own.
        ///
        /// Mutation: `SET` without `NX` in `ACQUIRE_PERMIT` takes a held permit (the second
        /// call is granted permit 1 again).
        #[test]
        fn a_permit_round_takes_the_first_free_permit_and_gives_back_only_its_own() {
            use redis::Value;
            let cluster = Cluster::start(1);
            let _: () = cluster.run(
                0,
                redis::cmd("SET")
                    .arg("s:{p}:permit:0")
                    .arg("x")
                    .arg("PX")
                    .arg(5_000),
            );
            let granted = |n| Value::Array(vec![Value::Int(-1), Value::Int(n), Value::Int(0)]);
            assert_eq!(acquire_permit(&cluster, "a"), granted(1));
            assert_eq!(acquire_permit(&cluster, "b"), granted(2));
            match acquire_permit(&cluster, "c") {
                Value::Int(ttl) => assert!((1..=5_000).contains(&ttl), "{ttl}"),
                other => panic!("a full semaphore answers a ttl, not {other:?}"),
            }
            let mut give_back = redis::cmd("EVAL");
            give_back
                .arg(super::super::GIVE_BACK_PERMITS.code())
                .arg(3)
                .arg("s:{p}:permit:0")
                .arg("s:{p}:permit:1")
                .arg("s:{p}:permit:2")
                .arg("a")
                .arg("s:{p}:permit:released")
                .arg("r1");
            assert_eq!(cluster.run::<i64>(0, &give_back), -1);
            let left: Vec<Option<String>> = cluster.run(
                0,
                redis::cmd("MGET")
                    .arg("s:{p}:permit:0")
                    .arg("s:{p}:permit:1")
                    .arg("s:{p}:permit:2"),
            );
            assert_eq!(left, [Some("x".into()), None, Some("b".into())]);
            // The record of the number of permits stays while permits are held.
            let record: Option<String> = cluster.run(0, redis::cmd("GET").arg("s:{p}:permits"));
            assert_eq!(record.as_deref(), Some("3"));
        }

        /// The keys of the two-permit semaphore `s:{p}` the queue tests use.
        const PERMIT_0: &str = "s:{p}:permit:0";
        const PERMIT_1: &str = "s:{p}:permit:1";
        const RECORD: &str = "s:{p}:permits";
        const PERMITS_QUEUE: &str = "s:{p}:permits:queue";
        const PERMITS_WAITERS: &str = "s:{p}:permits:waiters";

        /// `lua` with `keys` and `argv` on server 0.
        fn run_script<T: redis::FromRedisValue>(
            cluster: &Cluster,
            lua: &'static super::super::LuaScript,
            keys: &[&str],
            argv: &[&str],
        ) -> T {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(lua.code()).arg(keys.len());
            for k in keys {
                cmd.arg(*k);
            }
            for a in argv {
                cmd.arg(*a);
            }
            cluster.run(0, &cmd)
        }

        /// Waiter `id` (place `place`, live for long) queues for the semaphore `s:{p}`.
        fn queue_for_permits(cluster: &Cluster, id: &str, place: u64) {
            let _: i64 = cluster.run(0, redis::cmd("ZADD").arg(PERMITS_QUEUE).arg(place).arg(id));
            let _: i64 = cluster.run(
                0,
                redis::cmd("HSET").arg(PERMITS_WAITERS).arg(id).arg(FOREVER),
            );
        }

        /// Waiter `id`'s queued permit round with `token`, trying permit `first` first.
        fn queued_permit_round(
            cluster: &Cluster,
            token: &str,
            id: &str,
            first: u32,
        ) -> redis::Value {
            let (a, b) = if first == 0 {
                ((PERMIT_0, "0"), (PERMIT_1, "1"))
            } else {
                ((PERMIT_1, "1"), (PERMIT_0, "0"))
            };
            run_script(
                cluster,
                &super::super::QUEUED_ACQUIRE_PERMIT,
                &[a.0, b.0, RECORD, PERMITS_QUEUE, PERMITS_WAITERS],
                &[
                    token, "10000", a.1, b.1, id, "60000", "1", "ch", "r", "5000",
                ],
            )
        }

        /// The release (`RELEASE`) of the read-write lock's writer `t1`, publishing on `ch`.
        fn release_t1(cluster: &Cluster) -> i64 {
            run_script(
                cluster,
                &super::super::RELEASE,
                &[RW_KEY, RW_QUEUE, RW_WAITERS],
                &["t1", "ch", "r", "5000"],
            )
        }

        /// Sets `key` to `value` on server 0 for a minute: a holder, a reservation.
        fn set_for_a_minute(cluster: &Cluster, key: &str, value: &str) {
            let _: () = cluster.run(
                0,
                redis::cmd("SET").arg(key).arg(value).arg("PX").arg(60_000),
            );
        }

        fn value_of(cluster: &Cluster, key: &str) -> Option<String> {
            cluster.run(0, redis::cmd("GET").arg(key))
        }

        fn permit_waiters(cluster: &Cluster) -> Vec<String> {
            cluster.run(0, redis::cmd("ZRANGE").arg(PERMITS_QUEUE).arg(0).arg(-1))
        }

        fn granted(permit: i64) -> redis::Value {
            use redis::Value;
            Value::Array(vec![Value::Int(-1), Value::Int(permit), Value::Int(0)])
        }

        /// A released permit is reserved for the first live waiter of the semaphore's queue;
        /// another waiter's round does not take it; that waiter's round does, and leaves the
        /// queue.
        ///
        /// Mutation: `RELEASE_PERMIT` deleting the permit instead of handing it over (the
        /// `hand_over` call replaced by a `DEL`): the permit is free, not reserved, and the
        /// later waiter takes it.
        #[test]
        fn a_released_permit_is_reserved_for_the_first_waiter_in_the_semaphores_queue() {
            let cluster = Cluster::start(1);
            for (key, holder) in [(PERMIT_0, "a"), (PERMIT_1, "b"), (RECORD, "2")] {
                let _: () = cluster.run(
                    0,
                    redis::cmd("SET").arg(key).arg(holder).arg("PX").arg(60_000),
                );
            }
            queue_for_permits(&cluster, "c.w", 1);
            queue_for_permits(&cluster, "c.v", 2);
            let released: i64 = run_script(
                &cluster,
                &super::super::RELEASE_PERMIT,
                &[
                    PERMIT_0,
                    RECORD,
                    PERMIT_0,
                    PERMIT_1,
                    PERMITS_QUEUE,
                    PERMITS_WAITERS,
                ],
                &["a", "ch", "r1", "5000"],
            );
            assert_eq!(released, -1);
            assert_eq!(value_of(&cluster, PERMIT_0).as_deref(), Some("handoff:c.w"));
            assert_eq!(permit_waiters(&cluster), ["c.v"]);
            // The later waiter is refused (the shortest ttl) and keeps its place.
            match queued_permit_round(&cluster, "tv", "c.v", 0) {
                redis::Value::Int(ttl) => assert!((1..=5_000).contains(&ttl), "{ttl}"),
                other => panic!("the later waiter took {other:?}"),
            }
            assert_eq!(permit_waiters(&cluster), ["c.v"]);
            // The first waiter takes its permit, whatever its round's order.
            assert_eq!(queued_permit_round(&cluster, "tw", "c.w", 1), granted(0));
            assert_eq!(value_of(&cluster, PERMIT_0).as_deref(), Some("tw"));
            assert_eq!(permit_waiters(&cluster), ["c.v"]);
        }

        /// Releases of two permits reached this master in the other order than elsewhere:
        /// permit 0 is reserved for `c.w`, permit 1 for `c.v`. `c.v`'s round, trying permit 0
        /// first as on every master, takes permit 0 and leaves `c.w` its own reservation on
        /// permit 1, so each waiter's grants agree across masters.
        ///
        /// Mutation: no swap (a waiter takes only a free permit or its own reservation): `c.v`
        /// is granted permit 1 on this master and permit 0 where the order was the other.
        #[test]
        fn crossed_reservations_follow_the_rounds_order() {
            let cluster = Cluster::start(1);
            let _: () = cluster.run(
                0,
                redis::cmd("SET").arg(RECORD).arg("2").arg("PX").arg(60_000),
            );
            for (key, value) in [(PERMIT_0, "handoff:c.w"), (PERMIT_1, "handoff:c.v")] {
                let _: () = cluster.run(
                    0,
                    redis::cmd("SET").arg(key).arg(value).arg("PX").arg(5_000),
                );
            }
            assert_eq!(queued_permit_round(&cluster, "tv", "c.v", 0), granted(0));
            assert_eq!(value_of(&cluster, PERMIT_1).as_deref(), Some("handoff:c.w"));
            let ttl: i64 = cluster.run(0, redis::cmd("PTTL").arg(PERMIT_1));
            assert!(
                (1..=5_000).contains(&ttl),
                "the swapped reservation keeps its ttl: {ttl}"
            );
            assert_eq!(queued_permit_round(&cluster, "tw", "c.w", 0), granted(1));
        }

        /// The cleanup of a failed round gives its grant back silently and queues its waiter at
        /// its place, ahead of a later one; a release then reserves a permit for that waiter,
        /// which, leaving (it got a permit elsewhere), passes it on to the next.
        ///
        /// Mutations: `GIVE_BACK_AND_QUEUE` without its join (`c.w` is not queued, and the
        /// release reserves the permit for `c.v`); `DEQUEUE_PERMIT` without its hand-over (the
        /// reservation stays `handoff:c.w`).
        #[test]
        fn a_failed_round_keeps_its_place_and_leaving_passes_a_reserved_permit_on() {
            let cluster = Cluster::start(1);
            let set = |key: &str, value: &str| {
                let _: () = cluster.run(
                    0,
                    redis::cmd("SET").arg(key).arg(value).arg("PX").arg(60_000),
                );
            };
            set(RECORD, "2");
            set(PERMIT_0, "x");
            // `c.w`'s split round was granted permit 1 here; `c.v` queued after `c.w` did.
            set(PERMIT_1, "tw");
            queue_for_permits(&cluster, "c.v", 2);
            let undone: i64 = run_script(
                &cluster,
                &super::super::GIVE_BACK_AND_QUEUE,
                &[PERMIT_0, PERMIT_1, RECORD, PERMITS_QUEUE, PERMITS_WAITERS],
                &["tw", "c.w", "60000", "1"],
            );
            assert_eq!(undone, -1);
            assert_eq!(value_of(&cluster, PERMIT_1), None);
            assert_eq!(value_of(&cluster, PERMIT_0).as_deref(), Some("x"));
            assert_eq!(permit_waiters(&cluster), ["c.w", "c.v"]);
            let released: i64 = run_script(
                &cluster,
                &super::super::RELEASE_PERMIT,
                &[
                    PERMIT_0,
                    RECORD,
                    PERMIT_0,
                    PERMIT_1,
                    PERMITS_QUEUE,
                    PERMITS_WAITERS,
                ],
                &["x", "ch", "r1", "5000"],
            );
            assert_eq!(released, -1);
            assert_eq!(value_of(&cluster, PERMIT_0).as_deref(), Some("handoff:c.w"));
            // `c.w` got its permit elsewhere and leaves: the reservation goes to `c.v`.
            let left: i64 = run_script(
                &cluster,
                &super::super::DEQUEUE_PERMIT,
                &[PERMIT_0, PERMIT_1, PERMITS_QUEUE, PERMITS_WAITERS],
                &["c.w", "ch", "r2", "5000"],
            );
            assert_eq!(left, -1);
            assert_eq!(value_of(&cluster, PERMIT_0).as_deref(), Some("handoff:c.v"));
            assert!(permit_waiters(&cluster).is_empty());
        }

        /// A read-write lock on server 0: its lock key (the writer's), the lock's queue, and
        /// its readers' set.
        const RW_KEY: &str = "w:{c}";
        const RW_QUEUE: &str = "w:{c}:queue";
        const RW_WAITERS: &str = "w:{c}:waiters";
        const RW_READERS: &str = "w:{c}:readers";

        fn read(cluster: &Cluster, token: &str, ttl: &str) -> i64 {
            run_script(
                cluster,
                &super::super::ACQUIRE_READ,
                &[RW_KEY, RW_READERS, RW_QUEUE, RW_WAITERS],
                &[token, ttl],
            )
        }

        /// Queues the writer `c.w` at `place`, live for good, with `registration` (`<id>:h`).
        fn queue_writer(cluster: &Cluster, place: u64, registration: &str) {
            let _: i64 = cluster.run(0, redis::cmd("ZADD").arg(RW_QUEUE).arg(place).arg("c.w"));
            let _: i64 = cluster.run(
                0,
                redis::cmd("HSET")
                    .arg(RW_WAITERS)
                    .arg("c.w")
                    .arg(FOREVER)
                    .arg("c.w:h")
                    .arg(registration),
            );
        }

        fn release_read(cluster: &Cluster, token: &str) -> i64 {
            run_script(
                cluster,
                &super::super::RELEASE_READ,
                &[RW_KEY, RW_READERS, RW_QUEUE, RW_WAITERS],
                &[token, "ch", "r", "5000"],
            )
        }

        /// While any reader's share is live the lock key holds the readers' mark, for as long
        /// as the longest share, so a write (any acquire of the lock, the server's own `SET NX`
        /// included) is refused there; a queued writer blocks new readers; the last reader's
        /// release hands the lock to that writer with its own token, as a release does.
        ///
        /// Mutations: `hold_for_readers` not setting the mark (the `SET NX` is granted beside
        /// live shares); `RELEASE_READ` deleting the mark without handing it over (the writer
        /// is not handed the lock).
        #[test]
        fn readers_hold_the_lock_key_and_the_last_one_hands_it_over() {
            let cluster = Cluster::start(1);
            assert_eq!(read(&cluster, "r1", "60000"), -1);
            assert_eq!(read(&cluster, "r2", "20000"), -1);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("readers"));
            let left: i64 = cluster.run(0, redis::cmd("PTTL").arg(RW_KEY));
            assert!(
                left > 20_000,
                "the mark shortened by a shorter share: {left}"
            );
            let write: Option<String> = cluster.run(
                0,
                redis::cmd("SET")
                    .arg(RW_KEY)
                    .arg("w")
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000),
            );
            assert_eq!(write, None, "a write granted beside live shares");
            // A registered writer queues (as `UNDO_AND_QUEUE` queues it): new readers wait.
            queue_writer(&cluster, 1, "10000 n1 tw");
            assert!(
                read(&cluster, "r3", "60000") > 0,
                "a reader beside a waiting writer"
            );
            assert_eq!(release_read(&cluster, "r1"), -1);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("readers"));
            assert_eq!(release_read(&cluster, "r2"), -1);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("h-tw|c.w"));
            let shares: i64 = cluster.run(0, redis::cmd("ZCARD").arg(RW_READERS));
            assert_eq!(shares, 0);
            // Handed its own lock, the writer holds it here: it is no longer queued.
            let place: Option<f64> = cluster.run(0, redis::cmd("ZSCORE").arg(RW_QUEUE).arg("c.w"));
            assert_eq!(place, None, "a writer handed its lock is still queued");
        }

        /// A queued reader's round (`ACQUIRE_READ` with its id, liveness, place and what a
        /// hand-over needs), refused by the lock's holder, joins the queue as a reader.
        fn queued_read(cluster: &Cluster, token: &str, id: &str, place: &str) -> i64 {
            run_script(
                cluster,
                &super::super::ACQUIRE_READ,
                &[RW_KEY, RW_READERS, RW_QUEUE, RW_WAITERS],
                &[token, "60000", id, "60000", place, "ch", "r", "5000"],
            )
        }

        /// How many `PUBLISH` calls server 0 has run, scripts' included.
        fn publishes(cluster: &Cluster) -> u64 {
            let info: String = cluster.run(0, redis::cmd("INFO").arg("commandstats"));
            info.lines()
                .find_map(|line| line.strip_prefix("cmdstat_publish:calls="))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |calls| calls.parse().expect("a count"))
        }

        /// Readers queue (`DESIGN.md` §7c): a failed read round's cleanup joins the queue as a
        /// reader (`r`), as does a queued read refused. A release with a reader at the head
        /// hands the lock to the run of readers it heads: the key becomes the readers' mark,
        /// for the reservation only, and every reader stays queued until its round takes its
        /// share; a reader queued behind a writer is refused. The last reader's release then
        /// hands the lock to that writer. And a queued reader refused by a writer that joined
        /// behind a hand-over to readers with an earlier place passes the bare mark on to it.
        /// A cleanup that finds a bare mark leaves it to the readers, waking nobody; one whose
        /// own share was the last hands the lock over.
        ///
        /// Mutations (run, each caught): `hand_over` freeing the key for a reader at the head
        /// (`DEL` for the mark); `writer_waits` ignoring the place (the first reader is
        /// refused); the bare mark not passed on (`take_share` without its `hand_over`); the
        /// bare mark passed on whoever heads the queue (`pass_on_bare_mark` always calling
        /// `hand_over`: the refused reader publishes); a cleanup handing over a bare mark it
        /// found (the helper's review: it publishes); a cleanup whose share was the last
        /// leaving the mark (not `h-tw|c.w`); a failed round's cleanup not joining.
        #[test]
        fn queued_readers_are_handed_the_lock_together_in_their_turn() {
            let cluster = Cluster::start(1);
            set_for_a_minute(&cluster, RW_KEY, "t1");
            // The first reader's failed round: its cleanup joins, at place 10.
            assert_eq!(cleanup_read(&cluster, "x1", Some(("c.r1", "10"))), -2);
            let registration: Option<String> =
                cluster.run(0, redis::cmd("HGET").arg(RW_WAITERS).arg("c.r1:h"));
            assert_eq!(registration.as_deref(), Some("r"));
            queue_writer(&cluster, 20, "10000 n1 tw");
            assert!(queued_read(&cluster, "x2", "c.r2", "30") > 0);
            assert!(queued_read(&cluster, "x3", "c.r3", "15") > 0);
            let released = release_t1(&cluster);
            assert_eq!(released, -1);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("readers"));
            let left: i64 = cluster.run(0, redis::cmd("PTTL").arg(RW_KEY));
            assert!(
                (1..=5000).contains(&left),
                "the readers' mark for {left} ms"
            );
            let queued: Vec<String> =
                cluster.run(0, redis::cmd("ZRANGE").arg(RW_QUEUE).arg(0).arg(-1));
            assert_eq!(
                queued,
                ["c.r1", "c.r3", "c.w", "c.r2"],
                "everyone still queued"
            );
            // The reader behind the writer is refused, and leaves the mark to the run, waking
            // nobody (passed on again, it would wake every reader, each refused again).
            let published = publishes(&cluster);
            assert!(queued_read(&cluster, "x2", "c.r2", "30") > 0);
            // So do its round's cleanup, and a one-attempt reader's silent one.
            let _: i64 = cleanup_read(&cluster, "x2", Some(("c.r2", "30")));
            let _: i64 = cleanup_read(&cluster, "x9", None);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("readers"));
            assert_eq!(publishes(&cluster), published, "a refused reader published");
            assert_eq!(queued_read(&cluster, "x1", "c.r1", "10"), -1);
            assert_eq!(queued_read(&cluster, "x3", "c.r3", "15"), -1);
            let queued: Vec<String> =
                cluster.run(0, redis::cmd("ZRANGE").arg(RW_QUEUE).arg(0).arg(-1));
            assert_eq!(
                queued,
                ["c.w", "c.r2"],
                "the run left the queue with its shares"
            );
            assert_eq!(release_read(&cluster, "x1"), -1);
            assert_eq!(release_read(&cluster, "x3"), -1);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("h-tw|c.w"));

            // A hand-over to a reader, and a writer with an earlier place joining after it.
            let _: () = cluster.run(0, &redis::cmd("FLUSHALL"));
            set_for_a_minute(&cluster, RW_KEY, "t1");
            assert!(queued_read(&cluster, "x1", "c.r1", "10") > 0);
            let _ = release_t1(&cluster);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("readers"));
            queue_writer(&cluster, 5, "10000 n1 tw");
            assert!(queued_read(&cluster, "x1", "c.r1", "10") > 0);
            assert_eq!(
                value_of(&cluster, RW_KEY).as_deref(),
                Some("h-tw|c.w"),
                "the bare mark passed on to the writer before the reader"
            );

            // A failed round's cleanup whose share was the last hands the lock over as a
            // release would, nobody else knowing it is free: to a reader at the head (the
            // mark for a reservation, and a message), or a writer.
            let _: () = cluster.run(0, &redis::cmd("FLUSHALL"));
            assert_eq!(read(&cluster, "x5", "60000"), -1);
            assert_eq!(cleanup_read(&cluster, "x1", Some(("c.r1", "5"))), -2);
            let published = publishes(&cluster);
            assert_eq!(cleanup_read(&cluster, "x5", None), -1);
            assert_eq!(
                publishes(&cluster),
                published + 1,
                "the hand-over was not published"
            );
            let left: i64 = cluster.run(0, redis::cmd("PTTL").arg(RW_KEY));
            assert!(
                (1..=5000).contains(&left),
                "the readers' mark for {left} ms"
            );
            let _: () = cluster.run(0, &redis::cmd("FLUSHALL"));
            assert_eq!(read(&cluster, "x5", "60000"), -1);
            queue_writer(&cluster, 20, "10000 n1 tw");
            assert_eq!(cleanup_read(&cluster, "x5", None), -1);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("h-tw|c.w"));
        }

        /// A reader that leaves the queue (`DEQUEUE` with its readers' set) where the lock
        /// was handed to the run it heads leaves the bare readers' mark to the readers queued
        /// after it, passes it on to a writer next, and deletes it with nobody waiting.
        ///
        /// Mutation (run, caught): `DEQUEUE` without its reader's branch (the mark stays
        /// with nobody waiting, and the writer is not handed the lock).
        #[test]
        fn a_reader_leaving_passes_a_bare_mark_on() {
            let cluster = Cluster::start(1);
            let leave = |id: &str| -> i64 {
                run_script(
                    &cluster,
                    &super::super::DEQUEUE,
                    &[RW_KEY, RW_QUEUE, RW_WAITERS, RW_READERS],
                    &[id, "ch", "r", "5000"],
                )
            };
            let hand_to_the_run = || {
                set_for_a_minute(&cluster, RW_KEY, "t1");
                let _ = release_t1(&cluster);
                assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("readers"));
            };
            // Readers c.r1 and c.r2 queued; the run is handed over; c.r1 leaves: the mark
            // stays for c.r2.
            assert_eq!(cleanup_read(&cluster, "x1", Some(("c.r1", "10"))), -2);
            assert_eq!(cleanup_read(&cluster, "x2", Some(("c.r2", "20"))), -2);
            hand_to_the_run();
            assert_eq!(leave("c.r1"), -1);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("readers"));
            // c.r2 leaves too, with a writer behind: the writer is handed the lock.
            queue_writer(&cluster, 30, "10000 n1 tw");
            assert_eq!(leave("c.r2"), -1);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("h-tw|c.w"));
            // A lone reader leaves a run handed to it: nothing is left.
            let _: () = cluster.run(0, &redis::cmd("FLUSHALL"));
            assert_eq!(cleanup_read(&cluster, "x1", Some(("c.r1", "10"))), -2);
            hand_to_the_run();
            assert_eq!(leave("c.r1"), -1);
            let keys: Vec<String> = cluster.run(0, redis::cmd("KEYS").arg("*"));
            assert!(keys.is_empty(), "left behind: {keys:?}");
        }

        /// A failed read round's cleanup (`RELEASE_READ` with an empty release channel, its
        /// hand-overs publishing on `ch`), joining the queue as `waiter` at its place when its
        /// acquire waits on.
        fn cleanup_read(cluster: &Cluster, token: &str, waiter: Option<(&str, &str)>) -> i64 {
            let mut argv = vec![token, "", "r", "5000", "ch"];
            if let Some((id, place)) = waiter {
                argv.extend([id, "60000", place]);
            }
            run_script(
                cluster,
                &super::super::RELEASE_READ,
                &[RW_KEY, RW_READERS, RW_QUEUE, RW_WAITERS],
                &argv,
            )
        }

        /// A fenced writer that the last reader's release can only reserve the lock for stays
        /// queued until its round takes the reservation: should the reservation lapse first,
        /// a new reader still finds it waiting and is refused, instead of passing it.
        ///
        /// Mutations: `hand_over` taking every waiter it hands anything to out of the queue
        /// (`keep_reserved` ignored): the new reader is granted (run, caught); the reserved
        /// waiter's liveness not cut: it stays `FOREVER` (run, caught).
        #[test]
        fn a_writer_reserved_the_lock_still_holds_new_readers_back() {
            let cluster = Cluster::start(1);
            assert_eq!(read(&cluster, "r1", "60000"), -1);
            queue_writer(&cluster, 1, "f10000 n1 tw");
            // A reader's release names no fence keys: a fenced writer gets a reservation.
            assert_eq!(release_read(&cluster, "r1"), -1);
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("handoff:c.w"));
            let place: Option<f64> = cluster.run(0, redis::cmd("ZSCORE").arg(RW_QUEUE).arg("c.w"));
            assert_eq!(place, Some(1.0), "the reserved writer left the queue");
            // Its liveness is cut to two reservations (2 × 5000 ms) from now: a writer that
            // never comes is not reserved the lock for the rest of it.
            let (seconds, micros): (u64, u64) = cluster.run(0, &redis::cmd("TIME"));
            let now_ms = seconds * 1000 + micros / 1000;
            let live: u64 = cluster.run(0, redis::cmd("HGET").arg(RW_WAITERS).arg("c.w"));
            assert!(
                (now_ms..=now_ms + 10_000).contains(&live),
                "liveness {live} ms, not cut to two reservations from {now_ms}"
            );
            // The reservation lapses before the writer's round comes (a slow master).
            let _: i64 = cluster.run(0, redis::cmd("DEL").arg(RW_KEY));
            assert!(
                read(&cluster, "r2", "60000") > 0,
                "a reader passed a writer whose reservation lapsed"
            );
        }

        /// A reader that renews for less than it had shortens the readers' mark with its share
        /// (the mark lasts as long as the longest live share, no longer), so writers are not
        /// kept out after every share expired.
        ///
        /// Mutation: `EXTEND_READ` only raising the mark (`hold_for_readers`, as an acquire
        /// does): the mark stays for the old 60 s.
        #[test]
        fn a_shorter_renewal_shortens_the_readers_mark() {
            let cluster = Cluster::start(1);
            assert_eq!(read(&cluster, "r", "60000"), -1);
            let renewed: i64 = run_script(
                &cluster,
                &super::super::EXTEND_READ,
                &[RW_KEY, RW_READERS],
                &["r", "5000", "0"],
            );
            assert_eq!(renewed, -1);
            for key in [RW_KEY, RW_READERS] {
                let left: i64 = cluster.run(0, redis::cmd("PTTL").arg(key));
                assert!((1..=5_001).contains(&left), "{key} left for {left} ms");
            }
        }

        /// A renewal re-adds a missing entry only where the other side is absent: a reader's
        /// share not beside a writer's key, a writer's key (a lock's re-add) not beside the
        /// readers' mark.
        ///
        /// Mutation: `EXTEND_READ` without its check of the lock key (the share is re-added,
        /// and the mark written, over the writer's key).
        #[test]
        fn renewals_re_add_only_where_the_other_side_is_absent() {
            let cluster = Cluster::start(1);
            let _: () = cluster.run(
                0,
                redis::cmd("SET").arg(RW_KEY).arg("x").arg("PX").arg(60_000),
            );
            let renewed: i64 = run_script(
                &cluster,
                &super::super::EXTEND_READ,
                &[RW_KEY, RW_READERS],
                &["r", "10000", "1"],
            );
            assert!((1..=60_000).contains(&renewed), "{renewed}");
            let shares: i64 = cluster.run(0, redis::cmd("ZCARD").arg(RW_READERS));
            assert_eq!(shares, 0, "a share re-added beside the writer's key");
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("x"));
            let _: () = cluster.run(0, redis::cmd("DEL").arg(RW_KEY));
            assert_eq!(read(&cluster, "s", "60000"), -1);
            let rewritten: i64 = run_script(
                &cluster,
                &super::super::EXTEND,
                &[RW_KEY],
                &["w", "10000", "1"],
            );
            assert!(
                rewritten > 0,
                "a writer's re-add beside the readers: {rewritten}"
            );
            assert_eq!(value_of(&cluster, RW_KEY).as_deref(), Some("readers"));
            // Where the other side is absent, a reader re-adds.
            let readded: i64 = run_script(
                &cluster,
                &super::super::EXTEND_READ,
                &[RW_KEY, RW_READERS],
                &["r", "10000", "1"],
            );
            assert_eq!(readded, -5);
        }

        /// The run id and the fence term (`run_id/master_replid`) of server 0.
        /// The slot's fence counter and re-seed marker of the tests' lock key.
        const COUNTER: &str = "q:{r}:fence";
        const MARKER: &str = "q:{r}:seeded";

        /// `QUEUED_ACQUIRE_FENCED` of waiter `c.w` with `token` (its place 7, live 60 s), with
        /// `nonce` (empty: not registered for a hand-off), on a server whose `run_id` is `run`.
        fn queued_acquire_fenced(
            cluster: &Cluster,
            token: &str,
            nonce: &str,
            run: &str,
        ) -> redis::Value {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(super::super::QUEUED_ACQUIRE_FENCED.code())
                .arg(5)
                .arg(KEY)
                .arg(QUEUE)
                .arg(WAITERS)
                .arg(COUNTER)
                .arg(MARKER);
            cmd.arg(token).arg(30_000).arg("c.w").arg(60_000).arg(7);
            cmd.arg(nonce).arg(run);
            cluster.run(0, &cmd)
        }

        fn fence_counter(cluster: &Cluster) -> Option<i64> {
            cluster.run(0, redis::cmd("GET").arg(COUNTER))
        }

        fn run_and_term(cluster: &Cluster) -> (String, String) {
            let info: String = cluster.run(0, &redis::cmd("INFO"));
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_owned())
                    .expect("INFO has it")
            };
            let run = field("run_id:");
            let term = format!("{run}/{}", field("master_replid:"));
            (run, term)
        }

        /// A fenced waiter registered by its refused `QUEUED_ACQUIRE_FENCED` (`f<ttl>`): a
        /// release without the fence keys reserves the lock for it and raises nothing; a
        /// fenced release on a master seeded for its term hands it its own lock for its ttl,
        /// raises the counter once and names it with the marker's epoch, and the waiter's
        /// confirmation finds the handed key its own; on a master not seeded for its term the
        /// fenced release reserves and raises nothing.
        ///
        /// Mutations (run, each caught): `fence_hand_over.lua` without its term check (`local
        /// epoch = seeded_epoch(…) or 0`: the unseeded master hands over and raises the
        /// counter); `raise_counter(4)` left out of it (the counter stays 5); `hand_over.lua`
        /// handing a fenced registration its lock without `fenced` (the unfenced release hands
        /// over, the counter untouched).
        #[test]
        fn a_fenced_waiter_is_handed_its_own_lock_only_by_a_fenced_release_on_a_seeded_master() {
            use super::super::CONFIRM_FENCE;
            let cluster = Cluster::start(1);
            let (run, term) = run_and_term(&cluster);
            let client = redis::Client::open(cluster.urls()[0].as_str()).expect("url");
            let mut connection = client.get_connection().expect("connect");
            let mut messages = connection.as_pubsub();
            messages.subscribe("ch:c").expect("subscribe");
            messages
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .expect("timeout");
            let mark = |cluster: &Cluster, term: &str| {
                let _: i64 = cluster.run(
                    0,
                    redis::cmd("HSET")
                        .arg(MARKER)
                        .arg("run")
                        .arg(term)
                        .arg("epoch")
                        .arg(3),
                );
            };
            mark(&cluster, &term);
            let _: () = cluster.run(0, redis::cmd("SET").arg(COUNTER).arg(5));
            let counter = fence_counter;
            // Held by `n-tok`: the fenced waiter's round is refused and registers it.
            let wait = |cluster: &Cluster| {
                set(cluster, "n-tok");
                let refused = queued_acquire_fenced(cluster, "n-mine", "nonce1", &run);
                assert!(
                    matches!(refused, redis::Value::Int(ttl) if ttl > 0),
                    "refused by the holder: {refused:?}"
                );
                let registration: Option<String> =
                    cluster.run(0, redis::cmd("HGET").arg(WAITERS).arg("c.w:h"));
                assert_eq!(registration.as_deref(), Some("f30000 nonce1 n-mine"));
            };
            let release = |cluster: &Cluster, fenced: bool, id: &str| -> i64 {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(RELEASE.code());
                if fenced {
                    cmd.arg(5)
                        .arg(KEY)
                        .arg(QUEUE)
                        .arg(WAITERS)
                        .arg(COUNTER)
                        .arg(MARKER);
                } else {
                    cmd.arg(3).arg(KEY).arg(QUEUE).arg(WAITERS);
                }
                cmd.arg("n-tok").arg("ch").arg(id).arg(500);
                cluster.run(0, &cmd)
            };
            let message = |messages: &mut redis::PubSub<'_>| -> String {
                let message = messages.get_message().expect("hand-off message");
                message.get_payload().expect("payload")
            };

            // A release without the fence keys: a reservation, the counter untouched.
            wait(&cluster);
            assert_eq!(release(&cluster, false, "r1"), -1);
            assert_eq!(get(&cluster).as_deref(), Some("handoff:c.w"));
            assert_eq!(message(&mut messages), "r1:c.w");
            assert_eq!(counter(&cluster), Some(5));

            // A fenced release: its own lock, for its ttl, the counter raised and named with
            // the marker's epoch.
            wait(&cluster);
            assert_eq!(release(&cluster, true, "r2"), -1);
            assert_eq!(get(&cluster).as_deref(), Some("h-n-mine|c.w"));
            assert!(pttl(&cluster) > 20_000, "the waiter's ttl");
            assert_eq!(counter(&cluster), Some(6));
            assert_eq!(message(&mut messages), "r2:c.w:nonce1:6:3");
            assert!(queued(&cluster).is_empty());
            // Its confirmation (token 9, from another master) finds the handed key its own.
            let mut confirm = redis::cmd("EVAL");
            confirm
                .arg(CONFIRM_FENCE.code())
                .arg(3)
                .arg(KEY)
                .arg(COUNTER)
                .arg(MARKER)
                .arg("n-mine")
                .arg(9)
                .arg(3)
                .arg(&run);
            assert_eq!(cluster.run::<i64>(0, &confirm), -1);
            assert_eq!(counter(&cluster), Some(9));

            // No longer seeded in this term (say it failed over and back since the waiter
            // queued): a fenced release reserves, and raises nothing.
            wait(&cluster);
            mark(&cluster, "another/term");
            assert_eq!(release(&cluster, true, "r3"), -1);
            assert_eq!(get(&cluster).as_deref(), Some("handoff:c.w"));
            assert_eq!(message(&mut messages), "r3:c.w");
            assert_eq!(counter(&cluster), Some(9));
        }

        /// `QUEUED_ACQUIRE_FENCED` on one master: on a master not re-seeded in its term it
        /// answers `-6` and changes nothing; refused by a holder, it joins the queue and marks
        /// the holder without raising the counter; it never takes a reservation made for
        /// another waiter; it takes its own, writing its token marked, leaving the queue and
        /// raising the counter once.
        ///
        /// Mutations (run, each caught): taking any reservation (`lua/take_turn.lua` comparing
        /// `string.sub(value, 1, 8)` with `'handoff:'`, not the waiter's own) takes `c.v`'s (and
        /// fails the plain queued acquire's test too); the term check dropped (`local epoch =
        /// seeded_epoch(…) or 0`, no `-6`) queues the waiter on the unseeded master.
        #[test]
        fn a_fenced_waiter_takes_only_its_own_reservation_and_raises_the_counter_once() {
            let cluster = Cluster::start(1);
            let (run, term) = run_and_term(&cluster);
            // No nonce: not registered for a hand-off.
            let acquire = |cluster: &Cluster| queued_acquire_fenced(cluster, "n-me", "", &run);
            let counter = fence_counter;
            let set = |cluster: &Cluster, value: &str| {
                let _: () = cluster.run(
                    0,
                    redis::cmd("SET").arg(KEY).arg(value).arg("PX").arg(60_000),
                );
            };
            // Not seeded in this term: nothing happens, to a held key or a reservation for it.
            for value in ["n-hold", "handoff:c.w"] {
                set(&cluster, value);
                assert_eq!(acquire(&cluster), redis::Value::Int(-6));
                assert_eq!(get(&cluster).as_deref(), Some(value));
                assert!(queued(&cluster).is_empty());
                assert_eq!(counter(&cluster), None);
            }
            set(&cluster, "n-hold");
            let _: i64 = cluster.run(
                0,
                redis::cmd("HSET")
                    .arg(MARKER)
                    .arg("run")
                    .arg(&term)
                    .arg("epoch")
                    .arg(3),
            );
            // Held: queued, the holder marked, no counter.
            assert!(matches!(acquire(&cluster), redis::Value::Int(ttl) if ttl > 0));
            assert_eq!(get(&cluster).as_deref(), Some("w-hold"));
            assert_eq!(queued(&cluster), ["c.w"]);
            assert_eq!(counter(&cluster), None);
            // Reserved for another waiter: refused, still queued.
            set(&cluster, "handoff:c.v");
            assert!(matches!(acquire(&cluster), redis::Value::Int(ttl) if ttl > 0));
            assert_eq!(get(&cluster).as_deref(), Some("handoff:c.v"));
            assert_eq!(queued(&cluster), ["c.w"]);
            assert_eq!(counter(&cluster), None);
            // Reserved for it: taken, marked, off the queue, the counter raised once.
            set(&cluster, "handoff:c.w");
            assert_eq!(
                acquire(&cluster),
                redis::Value::Array(vec![
                    redis::Value::Int(-1),
                    redis::Value::Int(1),
                    redis::Value::Int(3)
                ])
            );
            assert_eq!(get(&cluster).as_deref(), Some("w-me"));
            assert!(queued(&cluster).is_empty());
            assert_eq!(counter(&cluster), Some(1));
            let ttl: i64 = cluster.run(0, redis::cmd("PTTL").arg(KEY));
            assert!((1..=30_000).contains(&ttl), "the lock's own ttl: {ttl}");
            // A free key is taken too, the counter raised again.
            let _: i64 = cluster.run(0, redis::cmd("DEL").arg(KEY));
            assert!(
                matches!(acquire(&cluster), redis::Value::Array(ref grant) if grant.get(1) == Some(&redis::Value::Int(2)))
            );
            assert_eq!(get(&cluster).as_deref(), Some("w-me"));
        }

        /// The sweep's scripts do for each slot what the one-slot re-seed scripts do: the same
        /// readings (counter, marker), the same epochs moved on, the same counters raised
        /// (never lowered) and markers written, and nothing at all in another term.
        ///
        /// Mutation: `SEED_FENCE_SLOTS` setting every counter to its value (no `fence <`
        /// check) lowers slot b's counter (run, caught).
        #[test]
        fn the_slot_scripts_do_slot_by_slot_what_the_one_slot_scripts_do() {
            use super::super::{SEED_FENCE, SEED_FENCE_SLOTS, SEED_READ, SEED_READ_SLOTS};
            let cluster = Cluster::start(1);
            let (run, term) = run_and_term(&cluster);
            // Slot a: no counter, no marker; b: counter 9 marked for this term; c: counter
            // 4 marked for an older term. The same three again under other names, for the
            // one-slot scripts.
            let set = |key: &str, value: &str| {
                let _: () = cluster.run(0, redis::cmd("SET").arg(key).arg(value));
            };
            let mark = |key: &str, run: &str| {
                let _: i64 = cluster.run(0, redis::cmd("HSET").arg(key).arg("run").arg(run));
            };
            for side in ["many", "one"] {
                set(&format!("{side}:{{b}}:fence"), "9");
                mark(&format!("{side}:{{b}}:seeded"), &term);
                set(&format!("{side}:{{c}}:fence"), "4");
                mark(&format!("{side}:{{c}}:seeded"), "old/run");
            }
            let slots = ["a", "b", "c"];
            let keys = |side: &str, slot: &str| {
                (
                    format!("{side}:{{{slot}}}:fence"),
                    format!("{side}:{{{slot}}}:seeded"),
                )
            };
            let mut read = redis::cmd("EVAL");
            read.arg(SEED_READ_SLOTS.code()).arg(2 * slots.len());
            for slot in slots {
                let (counter, marker) = keys("many", slot);
                read.arg(counter).arg(marker);
            }
            read.arg(&run);
            let many: Vec<Option<String>> = cluster.run(0, &read);
            assert_eq!(
                many.first().cloned().flatten().as_deref(),
                Some(term.as_str())
            );
            for (i, slot) in slots.iter().enumerate() {
                let (counter, marker) = keys("one", slot);
                let one: Vec<Option<String>> = cluster.run(
                    0,
                    redis::cmd("EVAL")
                        .arg(SEED_READ.code())
                        .arg(2)
                        .arg(counter)
                        .arg(marker)
                        .arg(&run),
                );
                assert_eq!(
                    one.get(3).cloned().flatten().as_deref(),
                    Some(term.as_str())
                );
                assert_eq!(many.get(1 + 2 * i), one.first(), "slot {slot}'s counter");
                assert_eq!(many.get(2 + 2 * i), one.get(1), "slot {slot}'s marker");
            }
            let values = ["5", "7", "6"];
            let mut write = redis::cmd("EVAL");
            write.arg(SEED_FENCE_SLOTS.code()).arg(2 * slots.len());
            for slot in slots {
                let (counter, marker) = keys("many", slot);
                write.arg(counter).arg(marker);
            }
            write.arg(&run).arg(&term).arg(&values[..]);
            assert_eq!(cluster.run::<i64>(0, &write), -1);
            for (slot, value) in slots.iter().zip(values) {
                let (counter, marker) = keys("one", slot);
                let one: i64 = cluster.run(
                    0,
                    redis::cmd("EVAL")
                        .arg(SEED_FENCE.code())
                        .arg(2)
                        .arg(counter)
                        .arg(marker)
                        .arg(value)
                        .arg(&run)
                        .arg(&term),
                );
                assert_eq!(one, -1);
            }
            for slot in slots {
                let state = |side: &str| {
                    let (counter, marker) = keys(side, slot);
                    let counter: Option<String> = cluster.run(0, redis::cmd("GET").arg(counter));
                    let marker: Vec<String> = cluster.run(0, redis::cmd("HGETALL").arg(marker));
                    (counter, marker)
                };
                assert_eq!(state("many"), state("one"), "slot {slot}");
            }
            let (counter, _) = keys("many", "b");
            let b: Option<String> = cluster.run(0, redis::cmd("GET").arg(&counter));
            assert_eq!(b.as_deref(), Some("9"), "never lowered");
            // In another term: nothing changes.
            let mut stale = redis::cmd("EVAL");
            stale
                .arg(SEED_FENCE_SLOTS.code())
                .arg(2)
                .arg(&counter)
                .arg(keys("many", "b").1)
                .arg(&run)
                .arg("old/run")
                .arg(100);
            assert_eq!(cluster.run::<i64>(0, &stale), -6);
            let b: Option<String> = cluster.run(0, redis::cmd("GET").arg(&counter));
            assert_eq!(b.as_deref(), Some("9"));
        }
    }
}
