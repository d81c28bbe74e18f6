//! A request's wire form, built once per round ([`EncodedRequest`]), and how it is sent to
//! one node: by hash with a fallback to the whole script, in parts on a half-moved cluster
//! slot, after `ASKING` when redirected.

use redis::aio::MultiplexedConnection;
use redis::{Script, ServerErrorKind, Value};

use std::sync::OnceLock;

use crate::core::native::{DeleteIfEqual, NativeCommands};
use crate::core::report::NodeOutcome;
use crate::engine::classify::{Grant, classify, classify_set_if_absent};
use crate::engine::request::{Command, InParts, Native, Request};
use crate::errors::error::Operation;
use crate::scripts::{self, LuaScript};
use crate::voters::supervisor::NativeLink;

/// `cmd` on `conn`, after `ASKING` in one pipeline when `asking`.
async fn query(
    cmd: &redis::Cmd,
    conn: &mut MultiplexedConnection,
    asking: bool,
) -> redis::RedisResult<Value> {
    if !asking {
        return cmd.query_async(conn).await;
    }
    // Boxed: asking is a cluster's rare case, and its pipeline would size every request.
    Box::pin(async move {
        let mut pipeline = redis::pipe();
        // Errors kept as values, so the command's error comes back with its own kind
        // (`NOSCRIPT`, `TRYAGAIN`…) rather than as the pipeline's.
        pipeline
            .ignore_errors()
            .cmd("ASKING")
            .ignore()
            .add_command(cmd.clone());
        let (reply,): (Value,) = pipeline.query_async(conn).await?;
        reply.extract_error()
    })
    .await
}

/// `cmd` on `conn` as [`query`] sends it; when the server does not know `script` (a restarted
/// node, a `SCRIPT FLUSH`), the script is loaded and `cmd` sent once more.
async fn query_loading(
    cmd: &redis::Cmd,
    script: Option<&Script>,
    conn: &mut MultiplexedConnection,
    asking: bool,
) -> redis::RedisResult<Value> {
    // The first answer's scope ends here, so it is not kept beside the loading below.
    let script = {
        let answer = query(cmd, conn, asking).await;
        match (&answer, script) {
            (Err(err), Some(script))
                if err.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                script
            }
            _ => return answer,
        }
    };
    // Boxed: rare (a restarted server, a `SCRIPT FLUSH`), and it would size every request's
    // future.
    Box::pin(async move {
        script.load_async(conn).await?;
        query(cmd, conn, asking).await
    })
    .await
}

/// `cmd` with the script's last arguments for one node, if it takes any: the node's own value
/// (`per_node`, by node index; empty when it has none), then the server's `run_id`.
fn extended(
    cmd: &redis::Cmd,
    per_node: Option<&[Option<u64>]>,
    node: usize,
    server_run: Option<&str>,
) -> Option<redis::Cmd> {
    let mut extended: Option<redis::Cmd> = None;
    if let Some(values) = per_node {
        let mut with_value = cmd.clone();
        match values.get(node).copied().flatten() {
            Some(value) => with_value.arg(value),
            None => with_value.arg(""),
        };
        extended = Some(with_value);
    }
    if let Some(server_run) = server_run {
        let mut with_run_id = extended.take().unwrap_or_else(|| cmd.clone());
        with_run_id.arg(server_run);
        extended = Some(with_run_id);
    }
    extended
}

/// The whole request's script command: its key and extra keys, token, number and payload.
fn whole_command(lua: &'static LuaScript, request: &Request) -> redis::Cmd {
    let keys = (request.key.as_slice(), request.extra_keys.as_slice());
    script_command(lua, keys, request, &request.payload)
}

/// `lua` on `key` and then `extra_keys`, with the request's token, number and then `payload`
/// as its arguments: `EVALSHA`, or `EVAL` for a script sent whole.
fn script_command(
    lua: &'static LuaScript,
    (key, extra_keys): (&[u8], &[Vec<u8>]),
    request: &Request,
    payload: &[Vec<u8>],
) -> redis::Cmd {
    let mut cmd = if lua.is_sent_whole() {
        let mut eval = redis::cmd("EVAL");
        eval.arg(lua.code());
        eval
    } else {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(lua.script().get_hash());
        evalsha
    };
    cmd.arg(1 + extra_keys.len()).arg(key);
    for extra in extra_keys {
        cmd.arg(extra.as_slice());
    }
    cmd.arg(request.token.as_str());
    if let Some(number) = request.number {
        cmd.arg(number);
    }
    for argument in payload {
        cmd.arg(argument.as_slice());
    }
    cmd
}

/// The parts `request` (the script `lua`, with extra keys) is sent in when a cluster refuses
/// it whole (see [`InParts`]).
fn parts(lua: &'static LuaScript, request: &Request) -> Vec<Part> {
    let script = (!lua.is_sent_whole()).then(|| lua.script());
    let script_part = |key: &[u8], payload: &[Vec<u8>]| Part {
        key: key.to_vec(),
        cmd: script_command(lua, (key, &[]), request, payload),
        script,
        answers: true,
    };
    match request.in_parts {
        InParts::Never => Vec::new(),
        InParts::LockKeyAlone => vec![script_part(&request.key, &request.payload)],
        InParts::LeaveQueue => {
            // Off the queue first, then the reservation passed on, as the whole script does in
            // one step: the other order would let a release between the parts hand the lock to
            // this waiter, still queued, after the part that passes reservations on had run.
            let mut parts = Vec::with_capacity(3);
            let queue_keys = [
                ("ZREM", request.extra_keys.first()),
                ("HDEL", request.extra_keys.get(1)),
            ];
            for (command, key) in queue_keys {
                if let Some(key) = key {
                    let mut cmd = redis::cmd(command);
                    cmd.arg(key.as_slice()).arg(request.token.as_str());
                    if command == "HDEL" {
                        // Its registration for a hand-off too (`scripts/lua/join_queue.lua`).
                        cmd.arg(format!("{}:h", request.token.as_str()));
                    }
                    parts.push(Part {
                        key: key.clone(),
                        cmd,
                        script: None,
                        answers: false,
                    });
                }
            }
            parts.push(script_part(&request.key, &request.payload));
            parts
        }
        InParts::EachKey { per_key_payload } => {
            let shared = per_key_payload.map_or(request.payload.len(), |from| {
                from.min(request.payload.len())
            });
            std::iter::once(&request.key)
                .chain(&request.extra_keys)
                .enumerate()
                .map(|(i, key)| {
                    let mut payload = request.payload.get(..shared).unwrap_or_default().to_vec();
                    if let Some(own) =
                        per_key_payload.and_then(|from| request.payload.get(from + i))
                    {
                        payload.push(own.clone());
                    }
                    script_part(key, &payload)
                })
                .collect()
        }
    }
}

/// A request built once per round and sent to every node as is: the arguments are encoded
/// once, not once per node.
pub(crate) struct EncodedRequest {
    /// What it encodes (the key a Cluster voter routes by, what "done" is).
    request: Request,
    wire: Encoding,
    /// The request in parts of one key each, for a cluster that refuses it whole with
    /// `TRYAGAIN` (see [`InParts`]); empty when it is never sent so. Made on first use: a
    /// slot half moved is rare, and every release would otherwise encode its parts.
    parts: OnceLock<Vec<Part>>,
    pub(crate) settled_nodes_only: bool,
    /// The server's own command that does the request's whole job, tried first where a
    /// node's server has it (see [`NativeForm`]).
    native: Option<NativeForm>,
    /// A native command answered "not done" on some node (a waiter marked the lock there, or
    /// the key was not ours): the lock's later requests go to the scripts directly.
    native_missed: std::sync::atomic::AtomicBool,
    /// Keep a request we stopped waiting for running until its connection has taken it.
    ///
    /// The redis crate's multiplexed connection skips a queued request whose caller went away
    /// before the connection's driver took it: behind a master that stopped reading (its
    /// buffers full), a compare-and-delete whose timeout fired would never be sent, and the
    /// released lock's key would outlive the master's recovery until its ttl. So a release
    /// is never dropped: once we stop waiting, a background task keeps it alive until it is
    /// answered or its connection breaks. Other requests may be dropped: an acquire or extend
    /// that never reaches the server does no harm.
    pub(crate) deliver_anyway: bool,
}

/// One key's part of a request sent in parts (see [`InParts`]).
pub(crate) struct Part {
    /// The one key it names, which routes it.
    key: Vec<u8>,
    cmd: redis::Cmd,
    /// The script to load on `NOSCRIPT` (a script sent by hash); `None` for a plain command.
    script: Option<&'static Script>,
    /// Whether its answer is the request's (the queue's `ZREM` and `HDEL` are not).
    answers: bool,
}

impl Part {
    /// The key that routes it.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Sends it on `conn`, as [`EncodedRequest::send`] sends the whole request.
    pub(crate) async fn send(
        &self,
        conn: &mut MultiplexedConnection,
        asking: bool,
    ) -> redis::RedisResult<Value> {
        query_loading(&self.cmd, self.script, conn, asking).await
    }
}

/// A request's native form: the server's own command, built on first use for each server kind
/// that has it. It answers only "done" or "not done"; where it was not done (another owner, no
/// key, a key a waiter marked) or the server refused it, the script runs next on the same
/// connection and answers as always, so every reply the round sees is the script's, and a
/// "not done" costs one round trip more, never a wrong answer.
struct NativeForm {
    kind: Native,
    del_if_eq: OnceLock<redis::Cmd>,
    del_ex: OnceLock<redis::Cmd>,
    /// `EVALSHA` of `scripts::DELETE_IF_EQUAL`, for a server without a command of its own.
    del_by_script: OnceLock<redis::Cmd>,
    renew: OnceLock<redis::Cmd>,
}

impl NativeForm {
    fn new(kind: Native) -> Self {
        Self {
            kind,
            del_if_eq: OnceLock::new(),
            del_ex: OnceLock::new(),
            del_by_script: OnceLock::new(),
            renew: OnceLock::new(),
        }
    }

    /// The command for `request` to a server that offers `offered`, if it has one, and the
    /// script to load should the server not know it (the stand-in for `DELIFEQ`).
    fn command(
        &self,
        request: &Request,
        offered: NativeCommands,
    ) -> Option<(&redis::Cmd, Option<&'static Script>)> {
        let (key, token) = (request.key.as_slice(), request.token.as_str());
        match self.kind {
            Native::Release => match offered.delete? {
                DeleteIfEqual::DelIfEq => Some((
                    self.del_if_eq.get_or_init(|| {
                        let mut cmd = redis::cmd("DELIFEQ");
                        cmd.arg(key).arg(token);
                        cmd
                    }),
                    None,
                )),
                DeleteIfEqual::DelEx => Some((
                    self.del_ex.get_or_init(|| {
                        let mut cmd = redis::cmd("DELEX");
                        cmd.arg(key).arg("IFEQ").arg(token);
                        cmd
                    }),
                    None,
                )),
                DeleteIfEqual::Script => {
                    let stand_in = scripts::DELETE_IF_EQUAL.script();
                    let cmd = self.del_by_script.get_or_init(|| {
                        let mut cmd = redis::cmd("EVALSHA");
                        cmd.arg(stand_in.get_hash()).arg(1).arg(key).arg(token);
                        cmd
                    });
                    Some((cmd, Some(stand_in)))
                }
            },
            Native::Renew => offered.renew.then(|| {
                let cmd = self.renew.get_or_init(|| {
                    let mut cmd = redis::cmd("SET");
                    cmd.arg(key)
                        .arg(token)
                        .arg("IFEQ")
                        .arg(token)
                        .arg("PX")
                        .arg(request.number.unwrap_or(0));
                    cmd
                });
                (cmd, None)
            }),
        }
    }

    /// Whether `reply` says the command did the job: `1` (deleted) or `OK` (renewed).
    fn did(&self, reply: &Value) -> bool {
        match self.kind {
            Native::Release => *reply == Value::Int(1),
            Native::Renew => *reply == Value::Okay,
        }
    }
}

/// Whether the server refused a native command itself (it does not have it, or an ACL
/// forbids it: `ERR unknown command`, `ERR syntax error`, `NOPERM`), rather than the key,
/// the connection or a cluster's routing: then the connection uses scripts only.
fn refuses_native(err: &redis::RedisError) -> bool {
    matches!(
        err.kind(),
        redis::ErrorKind::Server(ServerErrorKind::ResponseError | ServerErrorKind::NoPerm)
    )
}

/// Whether a native command's error is the request's, not the command's: the connection
/// broke, or the voter must act on it (a cluster's redirection or a slot being moved, a
/// replica's `READONLY` after a failover). Any other (`OOM` under `noeviction`, where the
/// renewal script's `PEXPIRE` would still run, `BUSY`, `LOADING`) sends the script after it,
/// which answers for the request.
fn is_the_requests_error(err: &redis::RedisError) -> bool {
    crate::voters::server_link::breaks_connection(err)
        || matches!(
            err.kind(),
            redis::ErrorKind::Server(
                ServerErrorKind::Moved
                    | ServerErrorKind::Ask
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::CrossSlot
                    | ServerErrorKind::ReadOnly
            )
        )
}

enum Encoding {
    Script {
        lua: &'static LuaScript,
        script: &'static Script,
        /// Made when first sent: a request whose native form does the job (a release nobody
        /// waits for) never sends it, and making it is most of a request's allocations.
        evalsha: OnceLock<redis::Cmd>,
        /// The same script with its last argument `1`, for the nodes marked (extend's re-add).
        marked: Option<(Vec<bool>, redis::Cmd)>,
        /// Append the server's `run_id` to the arguments (see `LuaScript::takes_run_id`).
        run_id: bool,
        /// Append each node's own value (see `Request::epochs`).
        per_node: Option<Vec<Option<u64>>>,
        /// Sent as `EVAL` (`LuaScript::sent_whole`): never `NOSCRIPT`, never sent twice.
        whole: bool,
    },
    SetIfAbsent(redis::Cmd),
}

impl EncodedRequest {
    pub(crate) fn new(request: Request) -> Self {
        let wire = match request.command {
            Command::Script(lua) => {
                let script = lua.script();
                let evalsha = OnceLock::new();
                let marked = request.readd_on.as_ref().map(|nodes| {
                    let mut unmarked = whole_command(lua, &request);
                    let mut marked = unmarked.clone();
                    marked.arg("1");
                    unmarked.arg("0");
                    let _ = evalsha.set(unmarked);
                    (nodes.clone(), marked)
                });
                if request.native.is_none() && marked.is_none() {
                    let _ = evalsha.set(whole_command(lua, &request));
                }
                Encoding::Script {
                    lua,
                    script,
                    evalsha,
                    marked,
                    run_id: lua.takes_run_id(),
                    per_node: request.epochs.clone(),
                    whole: lua.is_sent_whole(),
                }
            }
            Command::SetIfAbsent => {
                let mut set = redis::cmd("SET");
                set.arg(request.key.as_slice())
                    .arg(request.token.as_str())
                    .arg("NX")
                    .arg("PX")
                    .arg(request.number.unwrap_or(0));
                Encoding::SetIfAbsent(set)
            }
        };
        Self {
            wire,
            parts: OnceLock::new(),
            settled_nodes_only: request.settled_nodes_only,
            native: request.native.map(NativeForm::new),
            native_missed: std::sync::atomic::AtomicBool::new(false),
            deliver_anyway: request.operation == Operation::Release,
            request,
        }
    }

    /// The request it encodes.
    pub(crate) fn request(&self) -> &Request {
        &self.request
    }

    /// Whether a native command answered "not done" on some node so far.
    pub(crate) fn native_missed(&self) -> bool {
        self.native_missed
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The key the request is about, which decides a Cluster voter's shard.
    pub(crate) fn key(&self) -> &[u8] {
        &self.request.key
    }

    /// Sends the request on `conn`; a script the server does not know (a restarted node, a
    /// `SCRIPT FLUSH`) is loaded and sent once more. With `asking` (a cluster master answered
    /// `ASK`), the request follows `ASKING` in the same write, so nothing else sent on the
    /// connection can come between them.
    ///
    /// Where the request has a native form and the server offers it (`native`), the native
    /// command goes first: done, the answer is the script's "done" (`-1`); not done, or
    /// refused by the server (which then marks the connection scripts-only), the script
    /// follows on the same connection and its answer is the request's.
    pub(crate) async fn send(
        &self,
        conn: &mut MultiplexedConnection,
        (node, server_run): (usize, Option<&str>),
        asking: bool,
        native: &NativeLink,
    ) -> redis::RedisResult<Value> {
        if let Some(form) = &self.native
            && let Some((cmd, script)) = form.command(&self.request, native.offered())
        {
            // The script standing in for a server's own command is loaded when the server
            // does not know it (restarted, `SCRIPT FLUSH`).
            match query_loading(cmd, script, conn, asking).await {
                Ok(reply) if form.did(&reply) => return Ok(Value::Int(-1)),
                Ok(_) => {
                    self.native_missed
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Err(err) if refuses_native(&err) => {
                    tracing::info!(error = %err, "the server refused its own compare command: scripts only on this connection");
                    native.refuse();
                }
                Err(err) if is_the_requests_error(&err) => return Err(err),
                Err(err) => {
                    tracing::debug!(error = %err, "the server's own compare command failed: the script follows");
                }
            }
        }
        match &self.wire {
            Encoding::Script {
                lua,
                script,
                evalsha,
                marked,
                run_id,
                per_node,
                whole: _,
            } => {
                let cmd = match marked {
                    Some((nodes, marked)) if nodes.get(node) == Some(&true) => marked,
                    _ => evalsha.get_or_init(|| whole_command(lua, &self.request)),
                };
                let server_run = server_run.filter(|_| *run_id);
                if let Some(extended) = extended(cmd, per_node.as_deref(), node, server_run) {
                    // Boxed: only fenced requests take arguments of their own per node, and
                    // keeping their command here would size every request's future.
                    return Box::pin(async move {
                        query_loading(&extended, Some(script), conn, asking).await
                    })
                    .await;
                }
                query_loading(cmd, Some(script), conn, asking).await
            }
            Encoding::SetIfAbsent(set) => query(set, conn, asking).await,
        }
    }

    /// The parts the request is sent in when a cluster refuses it whole with `TRYAGAIN` (see
    /// [`InParts`]): none when it is never sent so.
    pub(crate) fn parts(&self) -> &[Part] {
        self.parts.get_or_init(|| match self.request.command {
            Command::Script(lua) if self.has_parts() => parts(lua, &self.request),
            _ => Vec::new(),
        })
    }

    /// Whether the request may be sent in parts (see [`InParts`]), without making them.
    pub(crate) fn has_parts(&self) -> bool {
        matches!(self.request.command, Command::Script(_))
            && !self.request.extra_keys.is_empty()
            && self.request.in_parts != InParts::Never
    }

    /// The request's answer from its parts' answers, in order: the first error if any part
    /// failed; else the first answering part's that is not `-1`, else `-1` (a part's `-1` is
    /// "done", as the whole script's).
    pub(crate) fn combine<E>(&self, answers: Vec<Result<Value, E>>) -> Result<Value, E> {
        let mut combined = Value::Int(-1);
        let mut decided = false;
        for (part, answer) in self.parts().iter().zip(answers) {
            let answer = answer?;
            if part.answers && !decided && answer != Value::Int(-1) {
                combined = answer;
                decided = true;
            }
        }
        Ok(combined)
    }

    /// Whether the request may be sent a second time (a script after `NOSCRIPT`, or after its
    /// native form): then it is ordered on its connection only once answered, not once queued.
    pub(crate) fn resendable(&self) -> bool {
        matches!(self.wire, Encoding::Script { whole: false, .. }) || self.native.is_some()
    }

    /// Whether the request carries the server's `run_id`, so cannot go to a server that
    /// would not say it.
    pub(crate) fn needs_run_id(&self) -> bool {
        matches!(self.wire, Encoding::Script { run_id: true, .. })
    }

    /// Whether `outcome` is a node doing what was asked.
    pub(crate) fn is_done(&self, outcome: &NodeOutcome) -> bool {
        std::mem::discriminant(outcome) == std::mem::discriminant(&self.request.done)
    }

    pub(crate) fn classify(&self, reply: Value) -> (NodeOutcome, Option<Grant>) {
        match self.wire {
            Encoding::Script { .. } => classify(reply, &self.request.done),
            Encoding::SetIfAbsent(_) => classify_set_if_absent(reply, &self.request.done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::token::Token;

    /// The arguments of `cmd`, as text.
    fn words(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not bytes>".to_owned(),
            })
            .collect()
    }

    fn release_of(lua: &'static LuaScript, keys: &[&str], token: &Token) -> Request {
        Request::new(
            Operation::Release,
            Command::Script(lua),
            keys[0].as_bytes(),
            token,
            NodeOutcome::Released,
        )
        .with_extra_keys(keys[1..].iter().map(|k| k.as_bytes().to_vec()).collect())
    }

    fn payload(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    /// Mutation: every part given the whole payload: the parts of `RELEASE_MANY` publish every
    /// key's release on the first key's channel.
    #[test]
    fn a_set_is_sent_key_by_key_each_with_its_own_channel() {
        let token = Token::generate();
        let request = release_of(&crate::scripts::RELEASE_MANY, &["k1", "k2"], &token)
            .in_parts(InParts::EachKey {
                per_key_payload: Some(1),
            })
            .with_payload(payload(&["id", "c1", "c2"]));
        let prepared = EncodedRequest::new(request);
        assert_eq!(prepared.parts().len(), 2);
        let hash = crate::scripts::RELEASE_MANY.script().get_hash();
        let t = token.expose();
        assert_eq!(
            words(&prepared.parts()[0].cmd),
            ["EVALSHA", hash, "1", "k1", t, "id", "c1"]
        );
        assert_eq!(
            words(&prepared.parts()[1].cmd),
            ["EVALSHA", hash, "1", "k2", t, "id", "c2"]
        );
        assert_eq!(prepared.parts()[1].key(), b"k2");

        let give_back = release_of(&crate::scripts::GIVE_BACK_PERMITS, &["p0", "p1"], &token)
            .in_parts(InParts::EachKey {
                per_key_payload: None,
            })
            .with_payload(payload(&["channel", "id"]));
        let prepared = EncodedRequest::new(give_back);
        assert_eq!(
            words(&prepared.parts()[1].cmd)[3..],
            ["p1", t, "channel", "id"]
        );
    }

    /// Waiter `c.w` leaving the queue of `k` (`DEQUEUE`), sent in parts on a half-moved slot.
    fn leaving_the_queue() -> Request {
        Request::for_waiter(
            Operation::Release,
            &crate::scripts::DEQUEUE,
            b"k",
            "c.w",
            NodeOutcome::Released,
        )
        .with_extra_keys(payload(&["k:queue", "k:waiters"]))
        .in_parts(InParts::LeaveQueue)
    }

    #[test]
    /// Mutation: the script part first: a release landing between
    /// the parts hands the lock to the leaving waiter, still queued.
    fn a_waiter_leaves_the_queue_then_passes_its_reservation_on() {
        let request = leaving_the_queue().with_payload(payload(&["ch", "id", "500"]));
        let prepared = EncodedRequest::new(request);
        let hash = crate::scripts::DEQUEUE.script().get_hash();
        let parts: Vec<Vec<String>> = prepared.parts().iter().map(|p| words(&p.cmd)).collect();
        assert_eq!(
            parts,
            [
                vec!["ZREM", "k:queue", "c.w"],
                vec!["HDEL", "k:waiters", "c.w", "c.w:h"],
                vec!["EVALSHA", hash, "1", "k", "c.w", "ch", "id", "500"],
            ]
        );
        assert_eq!(
            prepared
                .parts()
                .iter()
                .map(|p| p.answers)
                .collect::<Vec<_>>(),
            [false, false, true]
        );
    }

    /// `has_parts` says what `parts` would give, without making them: a disagreement would
    /// send no part at all and read the empty answer as "done".
    ///
    /// Mutation: `has_parts` without the `InParts::Never` check (not run: the first case).
    #[test]
    fn has_parts_agrees_with_the_parts() {
        let token = Token::generate();
        for in_parts in [
            InParts::Never,
            InParts::LockKeyAlone,
            InParts::LeaveQueue,
            InParts::EachKey {
                per_key_payload: None,
            },
        ] {
            for keys in [&["k"][..], &["k", "q", "w"][..]] {
                let request = EncodedRequest::new(
                    release_of(&crate::scripts::RELEASE, keys, &token).in_parts(in_parts),
                );
                assert_eq!(
                    request.has_parts(),
                    !request.parts().is_empty(),
                    "{in_parts:?}, {keys:?}"
                );
            }
        }
    }

    #[test]
    fn only_requests_with_several_keys_that_may_be_split_have_parts() {
        let token = Token::generate();
        let never = release_of(&crate::scripts::RELEASE, &["k", "q", "w"], &token);
        assert!(EncodedRequest::new(never).parts().is_empty());
        let alone =
            release_of(&crate::scripts::RELEASE, &["k"], &token).in_parts(InParts::LockKeyAlone);
        assert!(
            EncodedRequest::new(alone).parts().is_empty(),
            "one key: never refused"
        );
        let split = release_of(&crate::scripts::RELEASE, &["k", "q", "w"], &token)
            .in_parts(InParts::LockKeyAlone)
            .with_payload(payload(&["ch", "id", "500"]));
        let prepared = EncodedRequest::new(split);
        assert_eq!(prepared.parts().len(), 1);
        assert_eq!(
            words(&prepared.parts()[0].cmd)[2..],
            ["1", "k", token.expose(), "ch", "id", "500"]
        );
    }

    /// Mutation: the last answer kept instead of the first that is not `-1`: a set whose first
    /// key was another owner's reads as released.
    #[test]
    fn parts_answer_as_the_whole_script_would() {
        let token = Token::generate();
        let set = EncodedRequest::new(
            release_of(&crate::scripts::RELEASE_MANY, &["a", "b", "c"], &token).in_parts(
                InParts::EachKey {
                    per_key_payload: Some(1),
                },
            ),
        );
        let answers = |codes: [i64; 3]| -> Vec<Result<Value, ()>> {
            codes.iter().map(|c| Ok(Value::Int(*c))).collect()
        };
        assert_eq!(set.combine(answers([-1, -1, -1])), Ok(Value::Int(-1)));
        assert_eq!(set.combine(answers([-1, 700, -2])), Ok(Value::Int(700)));
        assert_eq!(set.combine(answers([-2, -1, 700])), Ok(Value::Int(-2)));
        assert_eq!(
            set.combine(vec![Ok(Value::Int(-1)), Err("down"), Ok(Value::Int(5))]),
            Err("down")
        );
        // The queue's commands answer 1 or 0, never the request's answer.
        let leave = EncodedRequest::new(leaving_the_queue());
        assert_eq!(leave.combine(answers([1, 0, -1])), Ok(Value::Int(-1)));
    }
}
