//! A waiting acquire's place in the lock's queue on the nodes, and leaving it.

use std::sync::Arc;
use std::time::Duration;

use crate::core::clock::Awake;
use crate::core::config::Timing;
use crate::core::permit_keys::PermitKeys;
use crate::core::report::NodeOutcome;
use crate::core::resource;
use crate::core::retry::RetryPolicy;
use crate::core::server_clock;
use crate::core::token::Token;
use crate::engine::classify::Grant;
use crate::engine::request::{InParts, Request};
use crate::engine::round::{Round, Stragglers, Wait};
use crate::errors::error::Operation;
use crate::protocol::release::{hand_over_arguments, hand_over_arguments_on};
use crate::protocol::shared::Shared;
use crate::scripts;
use crate::voters::release_watch::{FencedHandOff, HandOff, Subscription};

/// A waiting acquire's place in the lock's queue on the nodes (`scripts::QUEUED_ACQUIRE`), or
/// in a semaphore's (`scripts::QUEUED_ACQUIRE_PERMIT`, one queue for all its permits): a
/// release hands the lock (the permit) to the first live waiter, so waiters are served in
/// turn and a releaser's next acquire cannot take it from them. It joins with the cleanup of
/// its first refused round (`scripts::UNDO_AND_QUEUE`, `scripts::GIVE_BACK_AND_QUEUE`) and
/// leaves when dropped: on success, on giving up, or cancelled, a tracked background round
/// (`RedLock::settle` waits for it) removes it from every node.
#[derive(Debug)]
pub(crate) struct Queue {
    shared: Arc<Shared>,
    /// The lock's key, or a semaphore's queue base (`PermitKeys::queue_base`): the queue's
    /// keys are beside it, in its hash slot.
    key: Vec<u8>,
    /// A semaphore's queue: its permits, which its leaving round passes on.
    permits: Option<Arc<PermitKeys>>,
    /// `<client>.<random>`, drawn when it first listens. Not secret: release messages name it.
    waiter: String,
    /// How long a registration stays live without another round.
    live_ms: u64,
    /// Its place in the queue: when it first listened (its first refusal, or its arrival
    /// behind this client's waiters), in µs of the servers' clocks as the voters agree on
    /// them (`core::server_clock`: the median of the connected voters' clocks, followed on this
    /// host's monotonic clock), never this host's wall clock, so a host whose clock is off is
    /// not served late. One number sent to every node, so every node orders the waiters alike
    /// (each server reading its own clock would split a hand-off between two waiters that
    /// queued a millisecond apart). Places only order turns, never exclusion.
    place: u64,
    /// The place is the host's wall clock (no voter's clock was known when it was drawn): it
    /// is drawn again before each round until one is.
    place_is_a_stand_in: bool,
    per_node_timeout: Duration,
    /// Whether any round may have queued it on a node (then dropping it must leave).
    joined: bool,
    /// Its release messages, subscribed before it first joins: a hand-off to it is never
    /// published before it listens.
    subscription: Option<Subscription>,
    /// Its requests of the last round still running on some node (a suspect one the
    /// cleanup did not wait for): the leaving round goes behind them.
    after: Option<Stragglers>,
    /// The lock's ttl, in ms, registered with each request for a hand-off.
    ttl_ms: u64,
    /// What its current requests registered for a hand-off with its token
    /// (`scripts/lua/hand_over.lua`), once registered.
    registration: Option<Registration>,
    /// A reader of a read-write lock: it registers as a reader (`r`), never with a token (a
    /// release hands a run of readers the readers' mark, and each takes its share with its
    /// own round), and a release that names nobody wakes it with every other waiting reader
    /// of its client (`DESIGN.md` §7c).
    reader: bool,
}

/// A waiter's registration for a hand-off with its token, carried by every request of one
/// round and its cleanup (each round has its own token, so its own registration).
#[derive(Debug)]
struct Registration {
    /// Names these requests in the hand-off messages: not the token, which stays secret.
    nonce: String,
    token: Token,
    /// A fenced waiter's: only a fenced release hands it its lock, raising the fence counter
    /// as it sets the key, and names the counter in its message.
    fenced: bool,
    /// Taken before any request carrying this registration was sent: every master that hands
    /// the lock over with it ran one of them first, so set the key after this.
    since: Awake,
}

/// A lock handed to this waiter by a majority of the nodes' releases, with its own token.
#[derive(Debug)]
pub(crate) struct HandedLock {
    pub(crate) token: Token,
    /// The start of its validity clock (see [`Registration::since`]).
    pub(crate) since: Awake,
    /// Per node, whether its hand-off counted.
    pub(crate) counted: Vec<bool>,
    /// A fenced waiter's: the fencing token to confirm (the largest counter the counted
    /// hand-offs raised) and, per node, the grant its hand-off made (counted nodes only).
    pub(crate) fence: Option<(u64, Vec<Option<Grant>>)>,
}

impl Queue {
    /// Whether any round may have queued it on a node.
    pub(crate) fn is_joined(&self) -> bool {
        self.joined
    }

    /// Its release messages, once it listens.
    pub(crate) fn subscription(&self) -> Option<&Subscription> {
        self.subscription.as_ref()
    }

    /// Its requests of the last round still running on some node: the leaving round goes
    /// behind them.
    pub(crate) fn leave_behind(&mut self, stragglers: Stragglers) {
        self.after = Some(stragglers);
    }
}

impl Queue {
    pub(crate) fn new(
        shared: &Arc<Shared>,
        key: &[u8],
        timing: &Timing,
        policy: &RetryPolicy,
    ) -> Self {
        // Live across the longest sleep between two rounds, twice, and their rounds.
        let live = policy
            .longest_delay()
            .saturating_add(timing.per_node_timeout)
            .saturating_mul(2)
            .max(Duration::from_millis(100));
        Self {
            shared: shared.clone(),
            key: key.to_vec(),
            permits: None,
            // Both drawn when it first listens: an acquire that wins its first round (the
            // common case) never pays for them.
            waiter: String::new(),
            live_ms: u64::try_from(live.as_millis()).unwrap_or(u64::MAX),
            place: 0,
            place_is_a_stand_in: false,
            per_node_timeout: timing.per_node_timeout,
            joined: false,
            subscription: None,
            after: None,
            ttl_ms: timing.ttl_ms,
            registration: None,
            reader: false,
        }
    }

    /// The same place, as a reader of the read-write lock whose lock key it is, when
    /// `reader`.
    pub(crate) fn reading(mut self, reader: bool) -> Self {
        self.reader = reader;
        self
    }

    /// A waiter's place in the queue of the semaphore whose keys are `permits`.
    pub(crate) fn for_permits(
        shared: &Arc<Shared>,
        permits: &Arc<PermitKeys>,
        timing: &Timing,
        policy: &RetryPolicy,
    ) -> Self {
        let mut queue = Self::new(shared, &permits.queue_base, timing, policy);
        queue.permits = Some(permits.clone());
        queue
    }

    /// Listens for the hand-offs to this waiter (and, as its client's waiter with this
    /// place, for the releases that name nobody).
    ///
    /// # Cancel safety
    /// Dropped part-way, it has joined nowhere.
    pub(crate) async fn listen(&mut self, shared: &Shared, channel: &[u8]) -> &Subscription {
        if self.waiter.is_empty() {
            self.waiter = shared.releases.new_waiter_id();
            self.draw_place(shared);
        }
        let watch = match self.subscription.take() {
            Some(watch) => watch,
            None if self.reader => {
                shared
                    .releases
                    .subscribe_reader(channel.to_vec(), &self.waiter, self.place)
                    .await
            }
            None => {
                shared
                    .releases
                    .subscribe(channel.to_vec(), &self.waiter, self.place)
                    .await
            }
        };
        self.subscription.insert(watch)
    }

    /// Listens, then counts as joined: the cleanup under way (`UNDO_AND_QUEUE`) queues it,
    /// and its next rounds are `QUEUED_ACQUIRE`.
    ///
    /// # Cancel safety
    /// Dropped part-way, it has joined nowhere yet.
    pub(crate) async fn join(&mut self, shared: &Shared, channel: &[u8]) {
        self.listen(shared, channel).await;
        self.before_round(shared);
        self.joined = true;
    }

    /// Draws its place: from the voters' clocks, or this host's wall clock standing in while
    /// no voter's is known.
    fn draw_place(&mut self, shared: &Shared) {
        let agreed = place_now(shared, &self.key);
        self.place_is_a_stand_in = agreed.is_none();
        self.place = agreed.unwrap_or_else(server_clock::host_now);
    }

    /// Before a round: a place the host's wall clock stood in for is drawn again, from the
    /// voters' clocks once one is known. (A round that carried the stand-in may have queued it
    /// on a master that connected meanwhile: there it keeps that place, an order only.)
    fn before_round(&mut self, shared: &Shared) {
        if self.place_is_a_stand_in {
            self.draw_place(shared);
        }
    }

    /// Registers `token` (this round's) for a hand-off: the round's requests and its cleanup
    /// carry it, with a new nonce, unless they already do. A `fenced` waiter's registration
    /// says so: only a fenced release, which raises the fence counter as it sets the key,
    /// hands it its lock (any other hand-over reserves the lock for its round). A reader
    /// registers no token: its requests say it is a reader.
    pub(crate) fn register(&mut self, token: &Token, fenced: bool) {
        if self.reader
            || self
                .registration
                .as_ref()
                .is_some_and(|r| r.token == *token)
        {
            return;
        }
        self.registration = Some(Registration {
            nonce: Token::generate().release_id(),
            token: token.clone(),
            fenced,
            since: Awake::now(),
        });
    }

    /// Forgets its registration: its round's cleanup deletes whatever holds the round's token,
    /// a lock handed to it included, so no hand-off with it may count.
    pub(crate) fn unregister(&mut self) {
        self.registration = None;
    }

    /// The registration's nonce, as the last argument of `QUEUED_ACQUIRE`.
    pub(crate) fn nonce_argument(&self) -> Option<Vec<u8>> {
        self.registration
            .as_ref()
            .map(|r| r.nonce.clone().into_bytes())
    }

    /// The registration's ttl (`f<ttl>` for a fenced waiter's) and nonce, as
    /// `UNDO_AND_QUEUE`'s last arguments (none unless registered).
    pub(crate) fn registration_arguments(&self) -> Vec<Vec<u8>> {
        match &self.registration {
            Some(registration) => {
                let fenced = if registration.fenced { "f" } else { "" };
                vec![
                    format!("{fenced}{}", self.ttl_ms).into_bytes(),
                    registration.nonce.clone().into_bytes(),
                ]
            }
            None => Vec::new(),
        }
    }

    /// Per node, the hand-off its last message made with this waiter's current registration,
    /// from a master whose vote a round would count now (`Node::would_vote_now`). A master in
    /// its grace may have lost the holder's key in an empty restart, and a cleanup of ours
    /// that found the key free there hands it to us; a node that is another's alias hears the
    /// same server's messages twice. A fenced waiter counts only a fenced release's hand-off
    /// (which names the counter it raised).
    fn handed_by(&self) -> Vec<Option<HandOff>> {
        let (Some(registration), Some(subscription)) = (&self.registration, &self.subscription)
        else {
            return Vec::new();
        };
        let named = subscription
            .hand_offs()
            .naming(registration.nonce.as_bytes());
        named
            .into_iter()
            .zip(self.shared.nodes.iter())
            .map(|(named, node)| {
                named
                    .filter(|hand_off| hand_off.fence.is_some() == registration.fenced)
                    .filter(|_| node.would_vote_now(&self.key))
            })
            .collect()
    }

    /// How many nodes handed the lock over with its current registration.
    pub(crate) fn hand_offs(&self) -> usize {
        self.handed_by().into_iter().flatten().count()
    }

    /// The lock, when a majority of the nodes handed it over with its current registration
    /// and validity is left counted from the registration (`DESIGN.md` §7): its requests of
    /// this round were its last to each of those nodes, so each set the key after
    /// `since`. With too little validity left, `None`: the next round takes the handed keys
    /// as its own grants, with a fresh ttl.
    pub(crate) fn handed_lock(&self, timing: &Timing) -> Option<HandedLock> {
        let registration = self.registration.as_ref()?;
        let handed = self.handed_by();
        let quorum = crate::core::quorum::quorum(handed.len());
        if handed.is_empty() || handed.iter().flatten().count() < quorum {
            return None;
        }
        let elapsed = registration.since.elapsed_until(&Awake::now());
        timing.validity_after(elapsed)?;
        // The token is the largest counter the counted hand-offs raised: theirs are the
        // grants made before this decision (`DESIGN.md` §5, §7).
        let fences: Vec<Option<FencedHandOff>> = handed
            .iter()
            .map(|hand_off| hand_off.and_then(|h| h.fence))
            .collect();
        let fence = registration.fenced.then(|| {
            let token = fences.iter().flatten().map(|f| f.counter).max();
            let grants = fences
                .iter()
                .map(|f| {
                    f.map(|f| Grant {
                        counter: f.counter,
                        epoch: f.epoch,
                    })
                })
                .collect();
            (token.unwrap_or_default(), grants)
        });
        Some(HandedLock {
            token: registration.token.clone(),
            since: registration.since,
            counted: handed.iter().map(Option::is_some).collect(),
            fence,
        })
    }

    /// Its id in the queue.
    pub(crate) fn waiter_id(&self) -> &str {
        &self.waiter
    }

    /// Its requests still running on some node: the lock it was handed goes behind them.
    /// Kept, not taken: a fenced waiter's confirmation may yet fail (it waits on, queued) or
    /// be cancelled (its leaving, from `Drop`, must still go behind them).
    pub(crate) fn still_running(&self) -> Option<Stragglers> {
        self.after.clone()
    }

    /// Before a round ([`before_round`](Self::before_round)), and, once joined, its requests
    /// still running on some node, for the round to go behind: a cleanup sent by hash waits
    /// for the answer of the round it cleans up, so on a hung node it would otherwise land
    /// after this round, and after the leaving round behind it, and queue the waiter again.
    /// Kept, not taken: should the round's request to such a node never be sent (the acquire
    /// dropped while it waited), whatever comes after, its leaving included, must still go
    /// behind them; the round's cleanup replaces them with its own, which go behind the round.
    pub(crate) fn prepare_round(&mut self, shared: &Shared) -> Option<Stragglers> {
        self.before_round(shared);
        self.after.clone().filter(|_| self.joined)
    }

    /// What a queued reader's round needs to pass a readers' mark on as a release would
    /// (`scripts/lua/take_share.lua`): the release channel, a release id, the reservation.
    pub(crate) fn hand_over_arguments(&self) -> Vec<Vec<u8>> {
        hand_over_arguments(
            &self.key,
            &Token::generate().release_id(),
            self.per_node_timeout,
        )
    }

    /// The queue's keys, and the waiter's id and liveness, as a queued script's arguments.
    pub(crate) fn arguments(&self) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        (
            resource::queue_keys(&self.key).into(),
            vec![
                self.waiter.clone().into_bytes(),
                self.live_ms.to_string().into_bytes(),
                self.place.to_string().into_bytes(),
            ],
        )
    }
}

/// A waiter's place, now: the voters' agreed clock (`server_clock::agreed`), or `None` when
/// no voter's is known.
fn place_now(shared: &Shared, key: &[u8]) -> Option<u64> {
    let now = Awake::now();
    let readings = shared
        .nodes
        .iter()
        .filter_map(|node| node.server_clock(key))
        .map(|clock| clock.at(&now))
        .collect();
    server_clock::agreed(readings)
}

impl Queue {
    /// The round that takes this waiter out of the queue on every node, passing on a lock
    /// already reserved for it, or for a reader a bare readers' mark (`scripts::DEQUEUE`).
    fn leave_request(&self, holding: Option<&Token>) -> Request {
        let (mut keys, _) = self.arguments();
        // A reader's: a bare readers' mark it leaves is passed on as its round's would be.
        if self.reader {
            keys.push(resource::readers_key_beside(&self.key));
        }
        if let Some(permits) = &self.permits {
            return self.leave_permits_request(permits, keys);
        }
        let mut arguments = hand_over_arguments(
            &self.key,
            &Token::generate().release_id(),
            self.per_node_timeout,
        );
        if let Some(token) = holding {
            arguments.push(token.expose().as_bytes().to_vec());
        }
        Request::for_waiter(
            Operation::Release,
            &scripts::DEQUEUE,
            &self.key,
            &self.waiter,
            NodeOutcome::Released,
        )
        .with_extra_keys(keys)
        .in_parts(InParts::LeaveQueue)
        .with_payload(arguments)
    }

    /// A semaphore waiter's leaving round (`scripts::DEQUEUE_PERMIT`): every permit, then the
    /// queue's `keys`. Never sent in parts: in a half-moved slot the entry lapses with its
    /// liveness.
    fn leave_permits_request(&self, permits: &PermitKeys, keys: Vec<Vec<u8>>) -> Request {
        let mut all = permits.keys.iter().cloned();
        let first = all.next().unwrap_or_default();
        Request::for_waiter(
            Operation::Release,
            &scripts::DEQUEUE_PERMIT,
            &first,
            &self.waiter,
            NodeOutcome::Released,
        )
        .with_extra_keys(all.chain(keys).collect())
        .with_payload(hand_over_arguments_on(
            permits.channel.clone(),
            &Token::generate().release_id(),
            self.per_node_timeout,
        ))
    }

    /// The leaving round, on each node behind this waiter's requests still running there
    /// (`after`): a queued round or cleanup that landed after it would queue the waiter again.
    fn leave_round(
        &self,
        after: Option<Stragglers>,
        holding: Option<&Token>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let request = self.leave_request(holding);
        let shared = self.shared.clone();
        let timeout = self.per_node_timeout;
        async move {
            shared
                .fanout()
                .run_behind(request, timeout, Wait::ForAll, after.as_ref(), || {})
                .await;
        }
    }

    /// Leaves the queue after `won`, the round that took the lock, in the background (not to
    /// delay the holder): each node that granted it has already dropped this waiter
    /// (`QUEUED_ACQUIRE`), so only when a node did not, or a straggler of the round does not,
    /// is a round needed to leave.
    /// A node may also hold the lock handed to this waiter with `token` (its registration
    /// for the winning round): that is the lock's key there, kept.
    pub(crate) fn leave_after(mut self, won: &Round, token: &Token) {
        if !std::mem::take(&mut self.joined) {
            return;
        }
        let answered_all_granted = won
            .report
            .iter()
            .all(|r| matches!(r.outcome(), NodeOutcome::Granted | NodeOutcome::NoReply));
        let stragglers = won.stragglers.clone();
        if answered_all_granted && stragglers.is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let leave = self.leave_round(stragglers.clone(), Some(token));
        self.shared.spawn_cleanup(&runtime, async move {
            if answered_all_granted
                && let Some(stragglers) = stragglers
                && stragglers.all_done().await
            {
                return;
            }
            leave.await;
        });
    }

    /// Holds the lock releases handed it: stays queued where its hand-off has not come, or
    /// came as a reservation only (its release leaves the queue there, see
    /// `acquire::handed_over`), and stops listening.
    pub(crate) fn hold(mut self) {
        self.joined = false;
    }

    /// Leaves the queue now, waiting for every node but a suspect one (each bounded by the
    /// per-node timeout): an acquire that gives up returns only once no release can hand it
    /// the lock any more.
    ///
    /// # Cancel safety
    /// Dropped part-way, `Drop` sends the leaving round again in the background.
    pub(crate) async fn leave(mut self) {
        if self.joined {
            // Kept, not taken: dropped part-way, the leaving round `Drop` sends again must
            // still go behind them (a helper's review).
            let after = self.after.clone();
            self.leave_round(after, None).await;
            self.joined = false;
        }
    }
}

impl Drop for Queue {
    /// Leaves the queue in the background: when the acquire was cancelled (or its `leave`
    /// was).
    fn drop(&mut self) {
        if !self.joined {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let after = self.after.take();
        let leave = self.leave_round(after, None);
        self.shared.spawn_cleanup(&runtime, leave);
    }
}
