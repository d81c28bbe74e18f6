//! A waiting acquire's place in the lock's queue on the nodes, and leaving it.

use std::sync::Arc;
use std::time::Duration;

use crate::core::clock::Awake;
use crate::core::config::Timing;
use crate::core::report::NodeOutcome;
use crate::core::resource;
use crate::core::retry::RetryPolicy;
use crate::core::server_clock;
use crate::core::token::Token;
use crate::engine::request::{InParts, Request};
use crate::engine::round::{Round, Stragglers, Wait};
use crate::errors::error::Operation;
use crate::protocol::release::hand_over_arguments;
use crate::protocol::shared::Shared;
use crate::scripts;
use crate::voters::release_watch::Subscription;

/// A waiting acquire's place in the lock's queue on the nodes (`scripts::QUEUED_ACQUIRE`): a
/// release hands the lock to the first live waiter, so waiters are served in turn and a
/// releaser's next acquire cannot take the lock from them. It joins with the cleanup of its
/// first refused round (`scripts::UNDO_AND_QUEUE`) and leaves when dropped: on success, on
/// giving up, or cancelled, a tracked background round (`RedLock::settle` waits for it)
/// removes it from every node.
#[derive(Debug)]
pub(crate) struct Queue {
    shared: Arc<Shared>,
    key: Vec<u8>,
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
        }
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
    pub(crate) fn before_round(&mut self, shared: &Shared) {
        if self.place_is_a_stand_in {
            self.draw_place(shared);
        }
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
    /// already reserved for it (`scripts::DEQUEUE`).
    fn leave_request(&self) -> Request {
        let (keys, _) = self.arguments();
        Request::for_waiter(
            Operation::Release,
            &scripts::DEQUEUE,
            &self.key,
            &self.waiter,
            NodeOutcome::Released,
        )
        .with_extra_keys(keys)
        .in_parts(InParts::LeaveQueue)
        .with_payload(hand_over_arguments(
            &self.key,
            &Token::generate().release_id(),
            self.per_node_timeout,
        ))
    }

    /// The leaving round, on each node behind this waiter's requests still running there
    /// (`after`): a queued round or cleanup that landed after it would queue the waiter again.
    fn leave_round(&self, after: Option<Stragglers>) -> impl Future<Output = ()> + Send + 'static {
        let request = self.leave_request();
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
    pub(crate) fn leave_after(mut self, won: &Round) {
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
        let leave = self.leave_round(stragglers.clone());
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

    /// Leaves the queue now, waiting for every node but a suspect one (each bounded by the
    /// per-node timeout): an acquire that gives up returns only once no release can hand it
    /// the lock any more.
    ///
    /// # Cancel safety
    /// Dropped part-way, `Drop` sends the leaving round again in the background.
    pub(crate) async fn leave(mut self) {
        if self.joined {
            let after = self.after.take();
            self.leave_round(after).await;
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
        let leave = self.leave_round(after);
        self.shared.spawn_cleanup(&runtime, leave);
    }
}
