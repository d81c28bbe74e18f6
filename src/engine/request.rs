//! What a round sends: the typed request (a command on a key with its arguments) and its wire
//! form, built once per round (the replies are classified by `crate::engine::classify`).

use crate::core::report::NodeOutcome;
use crate::core::token::Token;
use crate::errors::error::Operation;
use crate::scripts::LuaScript;

/// The command a round runs on every node.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Command {
    /// One of our scripts (`EVALSHA`, loaded on `NOSCRIPT` and sent again).
    Script(&'static LuaScript),
    /// The plain acquire: `SET key token NX PX ttl`, one native command. A refusal does not
    /// say when the holder's key expires; the cleanup after a failed round does (its
    /// compare-and-delete answers with the holder's ttl, see `Report::learn_expiries`).
    SetIfAbsent,
}

impl Command {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Script(lua) => lua.script().get_hash(),
            Self::SetIfAbsent => "SET NX PX",
        }
    }
}

/// A server's own command that can do a request's whole job where the server has it
/// (`crate::core::native`); the script does it elsewhere, and wherever the command did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Native {
    /// `DELIFEQ key token` or `DELEX key IFEQ token`: a release nobody waits for (the token
    /// is markable and unmarked, `DESIGN.md` §3).
    Release,
    /// `SET key token IFEQ token PX ttl`: an extend of the lock key alone.
    Renew,
}

/// What to send to every node.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) command: Command,
    pub(crate) key: Vec<u8>,
    /// `KEYS[2]…`, for the scripts that take them: the fence counter (and the per-resource
    /// counter), or the leader info.
    pub(crate) extra_keys: Vec<Vec<u8>>,
    pub(crate) token: String,
    /// The numeric argument (`ARGV[2]`): the ttl in ms, or the fencing token to confirm.
    pub(crate) number: Option<u64>,
    /// Bytes arguments after the others (leader info; release channel and release id).
    pub(crate) payload: Vec<Vec<u8>>,
    /// What a node that did what we asked is reported as.
    pub(crate) done: NodeOutcome,
    /// Skip nodes still within their restart grace (acquire only: they must not vote).
    pub(crate) settled_nodes_only: bool,
    /// The nodes whose "done" counts toward the majority (the fencing confirm: the masters
    /// that granted before the acquire was decided); a "done" from any other node is reported
    /// as [`NodeOutcome::LateGrant`] and counts as no vote. `None`: every node counts.
    pub(crate) counted: Option<Vec<bool>>,
    /// Extend: the nodes to re-add a missing key on (`ARGV[3]` = `1`; `0` elsewhere). `None`:
    /// no such argument.
    pub(crate) readd_on: Option<Vec<bool>>,
    /// Fenced confirm: each master's re-seed epoch at its grant, sent as the last argument to
    /// that master (empty where unknown, which the script never counts). `None`: no such
    /// argument.
    pub(crate) epochs: Option<Vec<Option<u64>>>,
    /// How a Cluster voter sends the script when the cluster refuses its keys with `TRYAGAIN`
    /// (see [`InParts`]).
    pub(crate) in_parts: InParts,
    /// The server's own command to try first, where the server has it.
    pub(crate) native: Option<Native>,
    /// For metrics.
    pub(crate) operation: Operation,
}

/// How a Cluster voter sends a multi-key script when the cluster refuses its keys with
/// `TRYAGAIN`. That answer means the slot the keys share is half moved: some of them are on
/// the master the slot leaves, some on the one it goes to (or nowhere), and the script stays
/// refused until the whole slot has moved, which can outlast any wait. A command on one key is
/// never refused that way, so the script is sent again in parts of one key each, each routed
/// and redirected on its own (`Part::send`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InParts {
    /// Never: sent whole again a few times. For acquires and renewals, where a vote not had
    /// this time does no harm.
    Never,
    /// The script with `KEYS[1]` alone; it runs without its other keys (`if KEYS[2]`).
    /// `RELEASE` then releases the lock key alone: its waiters there are woken by the release
    /// message instead of handed the lock. `UNDO_AND_QUEUE` undoes the grant without queueing
    /// the waiter on this voter this round.
    LockKeyAlone,
    /// `DEQUEUE`: the waiter is taken off the queue's keys (`KEYS[2]`, `KEYS[3]`) by `ZREM`
    /// and `HDEL` (its liveness and its registration for a hand-off), then the script runs on the lock key alone and passes a reservation for
    /// the leaving waiter on to nobody (deleted, the release published).
    LeaveQueue,
    /// The script once for each key (`RELEASE_MANY`, `GIVE_BACK_PERMITS`: every key is handled
    /// alike), with the same arguments, except that the payload's entries from
    /// `per_key_payload` on are one per key and each part takes its own (`RELEASE_MANY`'s
    /// channels). The request's answer is the first part's that is not `-1`, as the whole
    /// script answers for the first key that was not ours.
    EachKey { per_key_payload: Option<usize> },
}

impl Request {
    /// `command` on `key` for `operation`, with `token` as the first argument; a node that did
    /// what was asked is reported as `done`. Every other part is empty until set below.
    pub(crate) fn new(
        operation: Operation,
        command: Command,
        key: &[u8],
        token: &Token,
        done: NodeOutcome,
    ) -> Self {
        Self::with_first_argument(operation, command, key, token.expose().to_owned(), done)
    }

    fn with_first_argument(
        operation: Operation,
        command: Command,
        key: &[u8],
        first: String,
        done: NodeOutcome,
    ) -> Self {
        Self {
            command,
            key: key.to_vec(),
            extra_keys: Vec::new(),
            token: first,
            number: None,
            payload: Vec::new(),
            done,
            settled_nodes_only: false,
            counted: None,
            readd_on: None,
            epochs: None,
            in_parts: InParts::Never,
            native: None,
            operation,
        }
    }

    /// `script` on `key` for `operation` with a waiter's id as the first argument in place of
    /// a token (`scripts::DEQUEUE`).
    pub(crate) fn for_waiter(
        operation: Operation,
        script: &'static LuaScript,
        key: &[u8],
        waiter: &str,
        done: NodeOutcome,
    ) -> Self {
        Self::with_first_argument(
            operation,
            Command::Script(script),
            key,
            waiter.to_owned(),
            done,
        )
    }

    /// Sets the `extra_keys` field (see there).
    pub(crate) fn with_extra_keys(mut self, keys: Vec<Vec<u8>>) -> Self {
        self.extra_keys = keys;
        self
    }

    /// Sets the `in_parts` field (see there).
    pub(crate) fn in_parts(mut self, in_parts: InParts) -> Self {
        self.in_parts = in_parts;
        self
    }

    /// Sets the `number` field (see there).
    pub(crate) fn with_number(mut self, number: u64) -> Self {
        self.number = Some(number);
        self
    }

    /// Sets the `payload` field (see there).
    pub(crate) fn with_payload(mut self, payload: Vec<Vec<u8>>) -> Self {
        self.payload = payload;
        self
    }

    /// Acquire: nodes within their restart grace are not asked (they must not vote).
    pub(crate) fn settled_nodes_only(mut self) -> Self {
        self.settled_nodes_only = true;
        self
    }

    /// Sets the `counted` field (see there).
    pub(crate) fn counting_only(mut self, counted: Vec<bool>) -> Self {
        self.counted = Some(counted);
        self
    }

    /// Sets the `readd_on` field (see there).
    pub(crate) fn readding_on(mut self, nodes: Vec<bool>) -> Self {
        self.readd_on = Some(nodes);
        self
    }

    /// Sets the `native` field (see there).
    pub(crate) fn natively(mut self, native: Native) -> Self {
        self.native = Some(native);
        self
    }

    /// Sets the `epochs` field (see there).
    pub(crate) fn with_epochs(mut self, epochs: Vec<Option<u64>>) -> Self {
        self.epochs = Some(epochs);
        self
    }
}
