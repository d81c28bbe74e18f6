//! Read-only inspection of a resource on every node: who holds it, for how long, its fence
//! counter, its advertised leader, and whether a semaphore of that name is in use. What
//! `redquorum status` shows.

use std::time::{Duration, SystemTime};

use crate::api::redlock::RedLock;
use crate::core::node_id::NodeId;
use crate::core::resource::KeyLayout;
use crate::core::token::{holder_about, shown_digits, unmarked};
use crate::engine::query::query_everywhere;
use crate::errors::error::Error;
use crate::errors::node_error::NodeError;
use crate::protocol::leader_info::{Leader, decode};
use crate::protocol::shared::ensure_runtime;
use crate::{Result, core::resource};

/// The values of the lock key, the fence key, the leader key and a semaphore's record of its
/// number of permits.
type Keys = (Option<Vec<u8>>, Option<u64>, Option<Vec<u8>>, Option<u32>);

/// What one node holds for a resource.
///
/// ```no_run
/// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
/// for node in rl.inspect("orders:42").await?.nodes() {
///     if let Ok(held) = node.state() {
///         println!("{}: holder {:?}, {:?} left", node.node(), held.holder(), held.ttl());
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    token: Option<Vec<u8>>,
    ttl: Option<Duration>,
    fence: Option<u64>,
    leader: Option<Leader>,
    permits: Option<u32>,
    about: Option<(SystemTime, String)>,
    /// The read-write lock's readers whose share on this node is live: their tokens.
    readers: Vec<Vec<u8>>,
}

impl Holding {
    /// Whether both name one holder (the same whole token); their ttls may differ, as each
    /// node's expiry does by the time it is read.
    pub(crate) fn same_holder(&self, other: &Holding) -> bool {
        self.token.is_some() && self.token == other.token
    }

    /// The first 8 hex digits of the holder's token (enough to tell holders apart in a
    /// listing, not enough to release someone else's lock), or `None` when the key is absent.
    /// A lock a release handed to a queued waiter with the waiter's own token shows that
    /// token's digits, as the waiter's own grant would. For a few milliseconds after a release
    /// that reserved the lock for a waiter (a fenced waiter, by a release that could not
    /// fence for it: an unfenced client's, on an unseeded master) or a permit for a
    /// semaphore's waiter, `handoff:<waiter id>`: it is reserved for that waiter (no token,
    /// no validity) until its round takes it. While readers of the read-write lock of the name hold,
    /// `readers` (their mark on the lock key: see [`RwLock`](crate::RwLock)).
    pub fn holder(&self) -> Option<String> {
        self.token.as_ref().map(|t| {
            let shown = if t.starts_with(b"handoff:") || t.as_slice() == b"readers" {
                t
            } else {
                shown_digits(t)
            };
            String::from_utf8_lossy(shown).into_owned()
        })
    }

    /// Who holds, as the holder's client describes itself (`Builder::holder_info`: in the
    /// `redquorum` command, the host, the process id and the program), or `None` for a holder
    /// that gave no description. For people: never trust it for anything.
    pub fn holder_about(&self) -> Option<&str> {
        self.about.as_ref().map(|(_, about)| about.as_str())
    }

    /// When the holder's winning round began, on its own clock, for a holder that describes
    /// itself (see [`holder_about`](Self::holder_about)).
    pub fn held_since(&self) -> Option<SystemTime> {
        self.about.as_ref().map(|(since, _)| *since)
    }

    /// The key's remaining time to live on this node (`None`: no key, or a key without expiry,
    /// which redquorum never writes).
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl
    }

    /// The resource's fence counter on this node, when fencing or elections ever used it.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The leader advertised on this node by an election on this resource, when the
    /// advertisement belongs to the current holder.
    pub fn leader(&self) -> Option<&Leader> {
        self.leader.as_ref()
    }

    /// The number of permits of a semaphore of this name in use on this node (its record,
    /// which lives while a permit is held), if one is: then
    /// [`Semaphore::inspect`](crate::Semaphore::inspect) shows its permits.
    pub fn semaphore_permits(&self) -> Option<u32> {
        self.permits
    }

    /// How many readers of the read-write lock of this name have a live share on this node
    /// (see [`RwLock`](crate::RwLock)): each share lasts its reader's ttl on the node's own
    /// clock, as the node judges it. While any does, [`holder`](Self::holder) is `readers`.
    pub fn readers(&self) -> usize {
        self.readers.len()
    }
}

/// One node's answer to an inspection.
///
/// ```no_run
/// # fn demo(n: &redquorum::NodeInspection) {
/// match n.state() {
///     Ok(held) => println!("{}: {:?}", n.node(), held.holder()),
///     Err(e) => println!("{}: unreachable ({e})", n.node()),
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct NodeInspection {
    node: NodeId,
    state: Result<Holding, NodeError>,
    latency: Duration,
    server: Option<std::sync::Arc<str>>,
}

impl NodeInspection {
    /// The node.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// What it holds, or why it could not be read.
    pub fn state(&self) -> Result<&Holding, &NodeError> {
        self.state.as_ref()
    }

    /// How long the node took to answer (or to fail).
    pub fn latency(&self) -> Duration {
        self.latency
    }

    /// What the server that holds the resource's keys said it runs when this client
    /// connected to it: `valkey 9.1.2`, `redis 7.0.15`. `None` while not connected, or when
    /// the server would not say (an ACL without `+info`).
    pub fn server(&self) -> Option<&str> {
        self.server.as_deref()
    }
}

/// The state of a resource on every node, and the majority view of it.
///
/// The nodes are read in parallel but not at one instant, so a lock changing hands during the
/// read may look split. It is a diagnostic, not a lock: never decide to act on it.
///
/// ```no_run
/// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
/// let seen = rl.inspect("orders:42").await?;
/// match seen.majority_holder() {
///     Some(who) => println!("held by {who} on a majority"),
///     None if seen.free_on_majority() => println!("free"),
///     None => println!("no majority agrees"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Inspection {
    nodes: Vec<NodeInspection>,
    quorum: usize,
}

impl Inspection {
    /// Each node's answer, in configuration order.
    pub fn nodes(&self) -> &[NodeInspection] {
        &self.nodes
    }

    /// The majority needed (N/2+1).
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How many nodes answered.
    pub fn reachable(&self) -> usize {
        self.nodes.iter().filter(|n| n.state.is_ok()).count()
    }

    /// The holder (first 8 hex digits of its token) whose key is on at least a majority of
    /// nodes, if any.
    pub fn majority_holder(&self) -> Option<String> {
        self.majority_holding().and_then(Holding::holder)
    }

    /// The leader advertised by the majority holder, if it is an election's leader.
    pub fn majority_leader(&self) -> Option<&Leader> {
        let holding = self.majority_holding()?;
        let token = holding.token.as_ref()?;
        let agreeing = self.holdings().filter(|h| {
            h.token.as_ref() == Some(token) && h.leader.as_ref() == holding.leader.as_ref()
        });
        if agreeing.count() >= self.quorum {
            holding.leader.as_ref()
        } else {
            None
        }
    }

    /// True when a majority of nodes answered and hold no key for the resource.
    pub fn free_on_majority(&self) -> bool {
        self.holdings().filter(|h| h.token.is_none()).count() >= self.quorum
    }

    /// The highest fence counter seen on any node (a lower bound for the next token).
    pub fn highest_fence(&self) -> Option<u64> {
        self.holdings().filter_map(|h| h.fence).max()
    }

    /// The number of permits of a semaphore of this name in use on any node (the largest,
    /// should nodes disagree), if one is.
    pub fn semaphore_permits(&self) -> Option<u32> {
        self.holdings().filter_map(|h| h.permits).max()
    }

    /// How many readers of the read-write lock of this name hold a live share on at least a
    /// majority of nodes: the readers that hold it now. Each node's own count
    /// ([`Holding::readers`]) can be higher: a reader that took its share on a majority and
    /// failed, or released it where it could, leaves shares that last their ttl.
    pub fn readers_on_majority(&self) -> usize {
        let mut seen: Vec<&[u8]> = self
            .holdings()
            .flat_map(|h| h.readers.iter().map(Vec::as_slice))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        seen.iter()
            .filter(|reader| {
                self.holdings()
                    .filter(|h| h.readers.iter().any(|r| r.as_slice() == **reader))
                    .count()
                    >= self.quorum
            })
            .count()
    }

    fn holdings(&self) -> impl Iterator<Item = &Holding> {
        self.nodes.iter().filter_map(|n| n.state.as_ref().ok())
    }

    fn majority_holding(&self) -> Option<&Holding> {
        self.holdings().find(|candidate| {
            self.holdings().filter(|h| h.same_holder(candidate)).count() >= self.quorum
        })
    }
}

impl RedLock {
    /// Reads what every node holds for `resource`: the holder, the remaining ttl, the fence
    /// counter and an election's advertised leader. Changes nothing.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid resource; [`Error::NoRuntime`] outside a tokio runtime.
    /// Unreachable nodes are not an error: their entry says why.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```no_run
    /// # async fn demo(rl: redquorum::RedLock) -> Result<(), redquorum::Error> {
    /// let seen = rl.inspect("orders:42").await?;
    /// println!("{} of {} nodes answered", seen.reachable(), seen.nodes().len());
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, resource: impl AsRef<[u8]>) -> Result<Inspection> {
        let resource = resource.as_ref();
        resource::validate(resource).map_err(Error::Config)?;
        ensure_runtime()?;
        let config = &self.shared().config;
        let prefix = &config.key_prefix;
        let keys = [
            config.lock_key(resource),
            resource::fence_key(prefix, resource),
            resource::leader_key(prefix, resource),
            resource::permit_count_key(prefix, resource),
            resource::readers_key(prefix, resource),
        ];
        let grace_floor = config.node_timeout_without_ttl();
        let timeout = config.connect_timeout.saturating_add(grace_floor);
        // Once the answers settle what the lock is (held by one owner on a majority, or free on
        // one), the others get a grace, not their whole timeout: a hung master costs that.
        let quorum = self.quorum();
        let [lock_key, fence_key, leader_key, permits_key, readers_key] = &keys;
        let nodes = &self.shared().nodes;
        let answers = if config.key_layout == KeyLayout::Shared {
            // No fence counter or leader info in the shared layout, and the lock key has no
            // hash tag: asking for the tagged keys beside it would be a cross-slot read on a
            // Redis Cluster voter.
            let mut pipeline = redis::pipe();
            pipeline.cmd("GET").arg(lock_key).cmd("PTTL").arg(lock_key);
            let decided =
                |answers: &[_]| settles(answers, quorum, |(token, _): &Plain| token.as_deref());
            query_everywhere(nodes, lock_key, &pipeline, timeout, decided, grace_floor)
                .await
                .into_iter()
                .map(|(node, answer, latency)| {
                    let answer = answer
                        .map(|(token, pttl)| ((token, None, None, None), pttl, (0, 0), Vec::new()));
                    (node, answer, latency)
                })
                .collect()
        } else {
            let mut pipeline = redis::pipe();
            pipeline
                .cmd("MGET")
                .arg(lock_key)
                .arg(fence_key)
                .arg(leader_key)
                .arg(permits_key)
                .cmd("PTTL")
                .arg(lock_key)
                // The server's own time, to tell its live read shares from expired ones (each
                // share's score is the server's millisecond it expires at).
                .cmd("TIME")
                .cmd("ZRANGE")
                .arg(readers_key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES");
            let decided = |answers: &[_]| {
                settles(answers, quorum, |((token, ..), ..): &Tagged| {
                    token.as_deref()
                })
            };
            query_everywhere(nodes, lock_key, &pipeline, timeout, decided, grace_floor).await
        };
        let nodes = answers
            .into_iter()
            .zip(nodes.iter())
            .map(|((node, answer, latency), voter)| NodeInspection {
                node,
                state: answer.map(|((token, fence, info, permits), pttl, now, shares)| {
                    let mut held = holding(token, fence, info, pttl);
                    held.permits = permits;
                    held.readers = live_shares(now, shares);
                    held
                }),
                latency,
                server: voter.software(lock_key),
            })
            .collect();
        Ok(Inspection {
            nodes,
            quorum: self.quorum(),
        })
    }
}

/// A shared-layout node's answer: its lock key's value and `PTTL`.
type Plain = (Option<Vec<u8>>, i64);
/// A tagged-layout node's answer: its lock key, fence counter, leader info and semaphore
/// record, `PTTL`, the server's `TIME` (seconds, microseconds) and the readers' shares (token,
/// the server's millisecond it expires at).
type Tagged = (Keys, i64, (u64, u64), Vec<(Vec<u8>, f64)>);

/// The tokens of the shares that are live at the server's time `now` (`TIME`'s seconds and
/// microseconds), as the scripts judge them: a share lives while its expiry is after now.
fn live_shares((secs, micros): (u64, u64), shares: Vec<(Vec<u8>, f64)>) -> Vec<Vec<u8>> {
    let now_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
    shares
        .into_iter()
        .filter(|(_, expires)| *expires > now_ms as f64)
        .map(|(token, _)| token)
        .collect()
}

/// Whether the answers so far settle what an inspection says of the lock: one owner's key on
/// a majority, a majority holding none, or too many nodes failed for either.
pub(crate) fn settles<T>(
    answers: &[Option<(Result<T, NodeError>, Duration)>],
    quorum: usize,
    token: impl Fn(&T) -> Option<&[u8]>,
) -> bool {
    let answered = || answers.iter().flatten().map(|(answer, _)| answer);
    let failed = answered().filter(|answer| answer.is_err()).count();
    // Holders as they wrote their values: one holder is one holder, marked or not.
    let tokens: Vec<Option<std::borrow::Cow<'_, [u8]>>> = answered()
        .flatten()
        .map(|answer| token(answer).map(unmarked))
        .collect();
    let most_alike = tokens
        .iter()
        .map(|t| tokens.iter().filter(|other| *other == t).count())
        .max()
        .unwrap_or(0);
    most_alike >= quorum || failed > answers.len().saturating_sub(quorum)
}

/// What a node holds: `token` is the lock's value as read, which names its holder whether or
/// not a waiter marked it (`token::unmarked`).
pub(crate) fn holding(
    token: Option<Vec<u8>>,
    fence: Option<u64>,
    info: Option<Vec<u8>>,
    pttl: i64,
) -> Holding {
    let token = token.map(|value| unmarked(&value).into_owned());
    let leader = match (&token, &info) {
        (Some(token), Some(info)) => decode(info)
            .filter(|(owner, _)| *owner == token.as_slice())
            .map(|(_, leader)| leader),
        _ => None,
    };
    Holding {
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        about: token.as_deref().and_then(holder_about),
        token,
        fence,
        leader,
        permits: None,
        readers: Vec::new(),
    }
}
