//! Waiting for a busy lock without spinning: release notifications over pub/sub.
//!
//! The release script publishes on the resource's channel on every node. A node that handed
//! the lock to a queued waiter (`scripts::RELEASE`) names it in the message
//! (`<release id>:<waiter id>`, and `:<nonce>` when it handed the waiter its own lock): only
//! that waiter is woken, in whichever process it waits, and each node's nonce is kept for it
//! ([`HandOffs`]): a majority naming its current one is its lock (`protocol::queue`). A node that had no live waiter queued
//! deleted the key and names nobody: each process wakes **one** waiter, the one that has
//! waited longest. A release's messages from the other nodes are recognised by their payload
//! and dropped. A waiting acquire subscribes on every node (one shared pub/sub connection per
//! node for all waiters of a `RedLock`, subscriptions counted per channel). Timed retries stay
//! as the fallback, so a lost message only costs a delay.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::voters::source::NodeSource;
use futures::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{Notify, watch};

/// How long one background (re)connection of a pub/sub connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The wait between two reconnection attempts of a pub/sub connection.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// How long a waiter waits for a SUBSCRIBE to be confirmed before relying on timed retries.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_millis(200);
/// How long a channel stays subscribed after its last waiter left: a process that waits for
/// the same lock again soon (a worker in a loop) does not subscribe and unsubscribe on every
/// node each time.
const LINGER: Duration = Duration::from_secs(2);
/// How many recent release messages a channel remembers, to drop the other nodes' copies of
/// a release message even when two releases' messages interleave (a hand-off's are kept per
/// node: one per node and release).
const RECENT_RELEASES: usize = 32;

/// How many hex digits name a client in waiter ids and channels (32 random bits: the
/// clients waiting for one resource at once are few).
const CLIENT_ID_DIGITS: usize = 8;

/// Release notifications for one `RedLock`.
#[derive(Debug)]
pub(crate) struct ReleaseWatch {
    clients: Vec<NodeSource>,
    shared: Arc<Watched>,
    started: std::sync::Once,
    /// Dropped with the watch: the per-node tasks end.
    _alive: watch::Sender<()>,
    alive: watch::Receiver<()>,
}

/// The waiters of one channel: how many, how to wake them, and the releases already seen.
#[derive(Debug)]
struct Waiters {
    /// Waiters now; the channel stays subscribed for [`LINGER`] after the last one leaves.
    count: usize,
    /// Moves on each time the last waiter leaves, so a lingering unsubscribe knows whether
    /// the channel was used again meanwhile.
    generation: u64,
    /// Its lingering unsubscribe is under way: a new waiter subscribes again itself.
    closing: bool,
    /// Wakes the longest-waiting waiter (a release that named nobody).
    notify: Arc<Notify>,
    /// Each queued waiter, by waiter id: its place in the lock's queue, and what a release
    /// that handed the lock to it does.
    named: HashMap<Vec<u8>, Named>,
    /// Each waiting reader of a read-write lock, by a number of its own: a release that names
    /// nobody wakes them all, as they may all hold at once.
    readers: HashMap<u64, Arc<Notify>>,
    /// The number the next reader gets.
    next_reader: u64,
    recent: VecDeque<Vec<u8>>,
}

impl Waiters {
    /// A release message (from node `from`, or from this client's own release): wakes the
    /// waiter it names if that waiter is ours, or, when it names nobody, the longest-waiting
    /// waiter; once per release and waiter, but a hand-off once per node: one node can hand
    /// the lock over a round trip after another (a release that tried the server's own delete
    /// first, `DESIGN.md` §3), after the waiter woken by the first lost its round there, and
    /// only that node's message says the lock now waits for it.
    fn released(&mut self, payload: &[u8], from: Option<usize>) {
        let named = payload.contains(&b':');
        if !named {
            self.wake_readers(payload, from);
        }
        let mut seen_as = payload.to_vec();
        if let (true, Some(node)) = (named, from) {
            seen_as.push(b'@');
            seen_as.extend_from_slice(node.to_string().as_bytes());
        }
        if !self.first_sighting(seen_as) {
            return;
        }
        if self.count == 0 {
            // Lingering: nobody to wake, and no wake-up to keep for a later waiter.
            return;
        }
        match payload.iter().position(|&b| b == b':') {
            Some(colon) => {
                // `<waiter id>`, or `<waiter id>:<nonce>` for a lock handed with its token
                // (`…:<nonce>:<counter>:<epoch>` by a fenced release).
                let named = payload.get(colon + 1..).unwrap_or_default();
                let (waiter, nonce) = match named.iter().position(|&b| b == b':') {
                    Some(at) => (named.get(..at).unwrap_or_default(), named.get(at + 1..)),
                    None => (named, None),
                };
                if let Some(entry) = self.named.get(waiter) {
                    if let (Some(node), Some(nonce)) = (from, nonce) {
                        entry.handed.record(node, nonce);
                    }
                    entry.notify.notify_one();
                }
            }
            None => self.wake_first(),
        }
    }

    /// Whether a message, `seen_as` (its payload, and what sets its copies apart), is new
    /// among the last [`RECENT_RELEASES`]; it is remembered from now on.
    fn first_sighting(&mut self, seen_as: Vec<u8>) -> bool {
        if self.recent.contains(&seen_as) {
            return false;
        }
        if self.recent.len() == RECENT_RELEASES {
            self.recent.pop_front();
        }
        self.recent.push_back(seen_as);
        true
    }

    /// Wakes every waiting reader, once per node's message of a release that names nobody:
    /// readers may all hold together, and a reader woken by the first master's message can
    /// lose its round on a master that has not run the release yet, whose own message then
    /// wakes it again (as each node's hand-off does a queued waiter; seen in CI: woken once
    /// per release, a reader slept out its retry delay).
    fn wake_readers(&mut self, payload: &[u8], from: Option<usize>) {
        if self.readers.is_empty() {
            return;
        }
        let mut seen_as = payload.to_vec();
        seen_as.extend_from_slice(b"@r");
        if let Some(node) = from {
            seen_as.extend_from_slice(node.to_string().as_bytes());
        }
        if !self.first_sighting(seen_as) {
            return;
        }
        for reader in self.readers.values() {
            reader.notify_one();
        }
    }

    /// A release that named nobody: wakes the waiter first in the lock's queue (the one the
    /// nodes would have handed the lock to), or, with none queued, the longest waiting.
    fn wake_first(&self) {
        match self.named.values().min_by_key(|named| named.place) {
            Some(named) => named.notify.notify_one(),
            None => self.notify.notify_one(),
        }
    }
}

/// A queued waiter of this client, as its release messages reach it.
#[derive(Debug)]
struct Named {
    place: u64,
    /// Woken by each hand-off to it.
    notify: Arc<Notify>,
    handed: Arc<HandOffs>,
}

/// The hand-offs to one waiter: per node, what the last hand-off message from that node
/// said after the waiter's id: the nonce it named (the waiter's request that node ran last,
/// `scripts/lua/hand_over.lua`), and after a fenced release's, `:<counter>:<epoch>`.
#[derive(Debug)]
pub(crate) struct HandOffs(Mutex<Vec<Option<Vec<u8>>>>);

/// One node's hand-off of the lock to a waiter, as its message said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandOff {
    /// A fenced release's: the fence counter it raised as it set the key, and the epoch of
    /// the counter's re-seed marker then (what the waiter's confirmation must find there).
    pub(crate) fence: Option<FencedHandOff>,
}

/// What a fenced release's hand-off message names besides the nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FencedHandOff {
    pub(crate) counter: u64,
    pub(crate) epoch: u64,
}

impl HandOffs {
    fn new(nodes: usize) -> Self {
        Self(Mutex::new(vec![None; nodes]))
    }

    fn record(&self, node: usize, said: &[u8]) {
        if let Some(slot) = lock(&self.0).get_mut(node) {
            *slot = Some(said.to_vec());
        }
    }

    /// Per node, the hand-off its last message made, when that message named `nonce`.
    pub(crate) fn naming(&self, nonce: &[u8]) -> Vec<Option<HandOff>> {
        lock(&self.0)
            .iter()
            .map(|said| said.as_deref().and_then(|said| hand_off(said, nonce)))
            .collect()
    }
}

/// The hand-off a message's `said` (`<nonce>`, or `<nonce>:<counter>:<epoch>`) made, when it
/// names `nonce`. A fenced message whose numbers do not read names nothing that counts.
fn hand_off(said: &[u8], nonce: &[u8]) -> Option<HandOff> {
    let mut parts = said.split(|&b| b == b':');
    if parts.next()? != nonce {
        return None;
    }
    let number = |part: Option<&[u8]>| -> Option<Option<u64>> {
        match part {
            None => Some(None),
            Some(digits) => std::str::from_utf8(digits).ok()?.parse().ok().map(Some),
        }
    };
    let counter = number(parts.next())?;
    let epoch = number(parts.next())?;
    if parts.next().is_some() {
        return None;
    }
    match (counter, epoch) {
        (None, None) => Some(HandOff { fence: None }),
        (Some(counter), Some(epoch)) => Some(HandOff {
            fence: Some(FencedHandOff { counter, epoch }),
        }),
        _ => None,
    }
}

#[derive(Debug, Default)]
struct Watched {
    /// This `RedLock`'s id among the clients waiting on the same masters: a release that hands
    /// the lock to one of its waiters publishes on the channel `<release channel>:<client>`,
    /// which only this client subscribes to.
    client: Vec<u8>,
    channels: Mutex<HashMap<Vec<u8>, Waiters>>,
    /// How many channels have waiters: while none do, releases and new acquires never touch
    /// the `channels` lock.
    waited_channels: AtomicUsize,
    /// One sink per node, while its pub/sub connection is up.
    sinks: Mutex<Vec<Option<PubSubSink>>>,
}

/// A waiter's interest in one channel; unsubscribes when the last one is dropped.
#[derive(Debug)]
pub(crate) struct Subscription {
    shared: Weak<Watched>,
    channel: Vec<u8>,
    notify: Arc<Notify>,
    waiter: Vec<u8>,
    named: Arc<Notify>,
    handed: Arc<HandOffs>,
    /// A reader's number among the channel's waiting readers.
    reader: Option<u64>,
}

impl ReleaseWatch {
    pub(crate) fn new(clients: Vec<NodeSource>) -> Self {
        let (tx, rx) = watch::channel(());
        let shared = Arc::new(Watched {
            client: crate::core::token::Token::generate()
                .release_id()
                .get(..CLIENT_ID_DIGITS)
                .unwrap_or_default()
                .as_bytes()
                .to_vec(),
            channels: Mutex::new(HashMap::new()),
            waited_channels: AtomicUsize::new(0),
            sinks: Mutex::new(vec![None; clients.len()]),
        });
        Self {
            clients,
            shared,
            started: std::sync::Once::new(),
            _alive: tx,
            alive: rx,
        }
    }

    /// A new waiter id: `<client>.<random>`, so a release names the client's own channel
    /// (`scripts::RELEASE`).
    pub(crate) fn new_waiter_id(&self) -> String {
        let mut id = String::from_utf8_lossy(&self.shared.client).into_owned();
        id.push('.');
        id.push_str(&crate::core::token::Token::generate().release_id());
        id
    }

    /// Registers interest in `channel` as waiter `waiter` (the id its queued rounds give the
    /// nodes, empty for a waiter that does not queue) with `place` in the lock's queue,
    /// subscribing on every connected node if it is the first waiter. Never fails: a node
    /// that cannot subscribe leaves its waiters on timed retries.
    pub(crate) async fn subscribe(
        &self,
        channel: Vec<u8>,
        waiter: &str,
        place: u64,
    ) -> Subscription {
        self.subscribe_as(channel, waiter, place, false).await
    }

    /// [`subscribe`](Self::subscribe) for a reader of a read-write lock that queues as
    /// `waiter` at `place`: a release that names nobody (a hand-over to a run of readers
    /// among them) wakes every waiting reader of this client, not only the longest waiting,
    /// since readers may all hold at once (`DESIGN.md` §7c).
    pub(crate) async fn subscribe_reader(
        &self,
        channel: Vec<u8>,
        waiter: &str,
        place: u64,
    ) -> Subscription {
        self.subscribe_as(channel, waiter, place, true).await
    }

    async fn subscribe_as(
        &self,
        channel: Vec<u8>,
        waiter: &str,
        place: u64,
        reader: bool,
    ) -> Subscription {
        self.start();
        let waiter = waiter.as_bytes().to_vec();
        let named = Arc::new(Notify::new());
        let handed = Arc::new(HandOffs::new(self.clients.len()));
        let mut reader_number = None;
        let (notify, first) = {
            let mut channels = lock(&self.shared.channels);
            let mut new = false;
            let entry = channels.entry(channel.clone()).or_insert_with(|| {
                new = true;
                Waiters {
                    count: 0,
                    generation: 0,
                    closing: false,
                    notify: Arc::new(Notify::new()),
                    named: HashMap::new(),
                    readers: HashMap::new(),
                    next_reader: 0,
                    recent: VecDeque::with_capacity(RECENT_RELEASES),
                }
            });
            if reader {
                let number = entry.next_reader;
                entry.next_reader = entry.next_reader.wrapping_add(1);
                entry.readers.insert(number, named.clone());
                reader_number = Some(number);
            }
            if !waiter.is_empty() {
                let entry_named = Named {
                    place,
                    notify: named.clone(),
                    handed: handed.clone(),
                };
                entry.named.insert(waiter.clone(), entry_named);
            }
            entry.count += 1;
            if entry.count == 1 {
                self.shared.waited_channels.fetch_add(1, Ordering::AcqRel);
            }
            // A lingering channel is still subscribed, unless its unsubscribe is under way.
            (entry.notify.clone(), new || entry.closing)
        };
        if first {
            self.wait_for_listeners().await;
            let sinks: Vec<PubSubSink> =
                lock(&self.shared.sinks).iter().flatten().cloned().collect();
            let channels = node_channels(&channel, &self.shared.client);
            let confirmations = sinks.into_iter().map(|mut sink| {
                let channels = channels.clone();
                async move {
                    let _ = tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(channels)).await;
                }
            });
            futures::future::join_all(confirmations).await;
        }
        Subscription {
            shared: Arc::downgrade(&self.shared),
            channel,
            notify,
            waiter,
            named,
            handed,
            reader: reader_number,
        }
    }

    /// True while some acquire of this `RedLock` waits on `channel`: a new one should queue
    /// behind it rather than race it.
    pub(crate) fn has_waiters(&self, channel: &[u8]) -> bool {
        self.shared.waited_channels.load(Ordering::Acquire) > 0
            && lock(&self.shared.channels)
                .get(channel)
                .is_some_and(|w| w.count > 0)
    }

    /// A release made through this `RedLock`: wakes its longest waiter now, as a message
    /// naming nobody would.
    pub(crate) fn released(&self, channel: &[u8], id: &[u8]) {
        if self.shared.waited_channels.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(waiters) = lock(&self.shared.channels).get_mut(channel) {
            waiters.released(id, None);
        }
    }

    /// Waits (at most [`SUBSCRIBE_TIMEOUT`]) until a majority of the nodes' pub/sub
    /// connections are up: the first waiter of a new client would otherwise subscribe nowhere,
    /// then queue, and miss a hand-off published before the listeners connect.
    async fn wait_for_listeners(&self) {
        let needed = self.clients.len() / 2 + 1;
        let up = || lock(&self.shared.sinks).iter().flatten().count() >= needed;
        let deadline = tokio::time::Instant::now() + SUBSCRIBE_TIMEOUT;
        while !up() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn start(&self) {
        self.started.call_once(|| {
            for (index, source) in self.clients.iter().enumerate() {
                crate::core::telemetry::task_spawned();
                tokio::spawn(listen(
                    index,
                    source.clone(),
                    Arc::downgrade(&self.shared),
                    self.alive.clone(),
                ));
            }
        });
    }
}

impl Subscription {
    /// The hand-offs of the lock to this waiter, per node.
    pub(crate) fn hand_offs(&self) -> &HandOffs {
        &self.handed
    }

    /// Resolves when a release wakes this waiter: one that handed the lock to it, or one that
    /// named nobody while it was this process's longest waiter. Call it (and poll or `enable`
    /// it) before the round whose failure it waits after: a release published meanwhile is
    /// then not missed. A hand-off to this waiter is never missed anyway (its wake-up is kept
    /// until taken).
    pub(crate) fn woken(&self) -> impl Future<Output = ()> + Send + 'static {
        let (notify, named) = (self.notify.clone(), self.named.clone());
        async move {
            let any = notify.notified();
            let mine = named.notified();
            tokio::select! {
                () = any => {}
                () = mine => {}
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let last = {
            let mut channels = lock(&shared.channels);
            match channels.get_mut(&self.channel) {
                Some(entry) => {
                    entry.named.remove(&self.waiter);
                    if let Some(number) = self.reader {
                        entry.readers.remove(&number);
                    }
                    entry.count = entry.count.saturating_sub(1);
                    if entry.count == 0 {
                        entry.generation = entry.generation.wrapping_add(1);
                        shared.waited_channels.fetch_sub(1, Ordering::AcqRel);
                        Some(entry.generation)
                    } else {
                        None
                    }
                }
                None => None,
            }
        };
        let Some(generation) = last else { return };
        let channel = std::mem::take(&mut self.channel);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            lock(&shared.channels).remove(&channel);
            return;
        };
        let weak = self.shared.clone();
        drop(shared);
        crate::core::telemetry::task_spawned();
        runtime.spawn(async move {
            tokio::time::sleep(LINGER).await;
            let Some(shared) = weak.upgrade() else { return };
            let unused = |channels: &HashMap<Vec<u8>, Waiters>| {
                channels
                    .get(&channel)
                    .is_some_and(|w| w.count == 0 && w.generation == generation)
            };
            {
                let mut channels = lock(&shared.channels);
                if !unused(&channels) {
                    return;
                }
                if let Some(entry) = channels.get_mut(&channel) {
                    entry.closing = true;
                }
            }
            let sinks: Vec<PubSubSink> = lock(&shared.sinks).iter().flatten().cloned().collect();
            let channels = node_channels(&channel, &shared.client);
            for mut sink in sinks.iter().cloned() {
                let _ = tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.unsubscribe(channels.clone()))
                    .await;
            }
            let came_back = {
                let mut waiting = lock(&shared.channels);
                if unused(&waiting) {
                    waiting.remove(&channel);
                    false
                } else {
                    if let Some(entry) = waiting.get_mut(&channel) {
                        entry.closing = false;
                    }
                    true
                }
            };
            // A waiter that came meanwhile subscribed too, but perhaps before our unsubscribe
            // landed: subscribing twice is harmless, missing its messages is not.
            if came_back {
                for mut sink in sinks {
                    let _ =
                        tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(channels.clone()))
                            .await;
                }
            }
        });
    }
}

/// Keeps node `index`'s pub/sub connection up, re-subscribing the channels that have waiters,
/// and wakes the waiters of every message's channel. Ends when the watch is dropped.
async fn listen(
    index: usize,
    source: NodeSource,
    shared: Weak<Watched>,
    mut alive: watch::Receiver<()>,
) {
    let mut switched_away: Option<String> = None;
    loop {
        let connected = tokio::select! {
            _ = alive.changed() => return,
            // A Sentinel-resolved voter's master is looked up again at every connection, and
            // the listener moves when the sentinels switch it (below).
            c = tokio::time::timeout(source.lookup_budget(CONNECT_TIMEOUT), async {
                let client = source.client().await?;
                let address = client.get_connection_info().addr().to_string();
                Ok::<_, redis::RedisError>((client.get_async_pubsub().await?, address))
            }) => c,
        };
        if let Ok(Ok((pubsub, address))) = connected {
            // Found the master a switch took us from: the sentinels disagree for now, and
            // comparing at once would reconnect in a loop (as in `node::supervise`).
            let compare = switched_away.take().as_deref() != Some(address.as_str());
            let switched = source.switched_from(&address, compare);
            tokio::pin!(switched);
            let (mut sink, mut stream) = pubsub.split();
            // The sink first, then the channels wanted so far: a channel added in between is
            // subscribed by its first waiter through the sink, one added before by us here
            // (twice is harmless; never is not).
            let (wanted, client): (Vec<Vec<u8>>, Vec<u8>) = match shared.upgrade() {
                Some(s) => {
                    set_sink(&s, index, Some(sink.clone()));
                    (
                        lock(&s.channels).keys().cloned().collect(),
                        s.client.clone(),
                    )
                }
                None => return,
            };
            for channel in wanted {
                let channels = node_channels(&channel, &client);
                let _ = tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(channels)).await;
            }
            loop {
                let message = tokio::select! {
                    _ = alive.changed() => return,
                    m = stream.next() => m,
                    // Messages are published on the new master now: reconnect there.
                    () = &mut switched => {
                        switched_away = Some(address.clone());
                        break;
                    }
                };
                let Some(message) = message else { break };
                let Some(s) = shared.upgrade() else { return };
                let Ok(mut channel) = message.get_channel::<Vec<u8>>() else {
                    continue;
                };
                // A hand-off to one of ours comes on `<channel>:<client>`.
                if channel.ends_with(&s.client)
                    && channel.len() > s.client.len()
                    && channel.get(channel.len() - s.client.len() - 1) == Some(&b':')
                {
                    channel.truncate(channel.len() - s.client.len() - 1);
                }
                if let Some(waiters) = lock(&s.channels).get_mut(&channel) {
                    waiters.released(message.get_payload_bytes(), Some(index));
                }
            }
            match shared.upgrade() {
                Some(s) => set_sink(&s, index, None),
                None => return,
            }
        }
        tokio::select! {
            _ = alive.changed() => return,
            _ = tokio::time::sleep(RECONNECT_DELAY) => {}
        }
    }
}

/// What a waited-for release channel is on the nodes: the channel every release publishes on
/// (a release that handed the lock to nobody), and this client's own (`<channel>:<client>`,
/// a release that handed it to one of our waiters).
fn node_channels(channel: &[u8], client: &[u8]) -> Vec<Vec<u8>> {
    let mut own = channel.to_vec();
    own.push(b':');
    own.extend_from_slice(client);
    vec![channel.to_vec(), own]
}

fn set_sink(shared: &Watched, index: usize, sink: Option<PubSubSink>) {
    if let Some(slot) = lock(&shared.sinks).get_mut(index) {
        *slot = sink;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    fn woken(notify: &Notify) -> bool {
        notify.notified().now_or_never().is_some()
    }

    fn waiting(ids: &[&str]) -> (Waiters, Vec<Arc<Notify>>) {
        let named: Vec<Arc<Notify>> = ids.iter().map(|_| Arc::new(Notify::new())).collect();
        let waiters = Waiters {
            count: ids.len(),
            generation: 0,
            closing: false,
            notify: Arc::new(Notify::new()),
            named: ids
                .iter()
                .zip(&named)
                .enumerate()
                .map(|(place, (id, n))| {
                    let named = Named {
                        place: place as u64,
                        notify: n.clone(),
                        handed: Arc::new(HandOffs::new(5)),
                    };
                    (id.as_bytes().to_vec(), named)
                })
                .collect(),
            readers: HashMap::new(),
            next_reader: 0,
            recent: VecDeque::new(),
        };
        (waiters, named)
    }

    /// Mutations: a message naming nobody waking only the first waiter (no call to
    /// `wake_readers`): the readers stay asleep until their timers; readers woken once per
    /// release (the node left out of their key): node 1's message wakes nobody (run, both
    /// caught).
    #[test]
    fn a_message_naming_nobody_wakes_every_waiting_reader_and_a_hand_off_none() {
        let (mut waiters, named) = waiting(&["c.a"]);
        let readers: Vec<Arc<Notify>> = (0..3).map(|_| Arc::new(Notify::new())).collect();
        for (number, reader) in readers.iter().enumerate() {
            waiters.readers.insert(number as u64, reader.clone());
        }
        waiters.count += readers.len();
        waiters.released(b"r1:c.a", Some(0));
        assert!(woken(&named[0]));
        assert!(
            readers.iter().all(|r| !woken(r)),
            "a hand-off to a writer wakes no reader"
        );
        waiters.released(b"r2", Some(0));
        assert!(readers.iter().all(|r| woken(r)), "every reader woken");
        assert!(
            woken(&named[0]),
            "the queued writer, first in line, is woken too"
        );
        // Another master's message of the same release wakes the readers again (one may
        // have lost its round there), but not the writer (once per release).
        waiters.released(b"r2", Some(1));
        assert!(readers.iter().all(|r| woken(r)), "woken again by node 1");
        assert!(!woken(&named[0]));
        waiters.released(b"r2", Some(1));
        assert!(
            readers.iter().all(|r| !woken(r)),
            "a message seen twice wakes nobody"
        );
    }

    /// Mutation: waking the longest waiter for a message that names someone wakes a waiter
    /// whose round can only fail.
    #[test]
    fn a_message_naming_a_waiter_wakes_only_that_waiter_once() {
        let (mut waiters, named) = waiting(&["c.a", "c.b"]);
        waiters.released(b"r1:c.b", Some(0));
        waiters.released(b"r1:c.b", Some(0));
        assert!(!woken(&named[0]));
        assert!(woken(&named[1]));
        assert!(
            !woken(&named[1]),
            "the same node's copy of the same release is dropped"
        );
        assert!(!woken(&waiters.notify), "nobody else");
        waiters.released(b"r2:other.x", Some(0));
        assert!(!named.iter().any(|n| woken(n)) && !woken(&waiters.notify));
    }

    /// A hand-off from another node of the same release wakes the waiter again: that node
    /// handed the lock over later (its release tried the server's own delete first), after
    /// the round the first message started lost there, and without this message the waiter
    /// would sleep out its retry delay (`integration::waiting::a_waiter_wakes_as_soon_as_the_lock_is_released`
    /// failed that way under load).
    ///
    /// Mutation: the dedup key without the node: the second node's hand-off is dropped (run,
    /// caught here and by the integration test, 5 s instead of a wake-up).
    #[test]
    fn a_hand_off_from_another_node_wakes_the_waiter_again() {
        let (mut waiters, named) = waiting(&["c.a"]);
        waiters.released(b"r1:c.a", Some(0));
        assert!(woken(&named[0]));
        waiters.released(b"r1:c.a", Some(3));
        assert!(woken(&named[0]), "node 3 handed it over too");
        // A message naming nobody is still once per release, whatever the node.
        waiters.released(b"r2", Some(0));
        waiters.released(b"r2", Some(1));
        assert!(woken(&named[0]));
        assert!(!woken(&named[0]));
    }

    /// Mutation: waking the longest waiter of the `Notify` (the order in which waiters last
    /// went to sleep) instead of the first in the queue.
    #[test]
    fn a_message_naming_nobody_wakes_the_first_queued_waiter_once() {
        let (mut waiters, named) = waiting(&["c.a", "c.b"]);
        waiters.released(b"r1", Some(0));
        waiters.released(b"r1", Some(1));
        assert!(woken(&named[0]));
        assert!(!woken(&named[0]));
        assert!(!woken(&named[1]) && !woken(&waiters.notify));
        // With nobody queued (waiters under the shared layout), the longest waiting.
        let (mut unqueued, _) = waiting(&[]);
        unqueued.count = 1;
        unqueued.released(b"r2", None);
        assert!(woken(&unqueued.notify));
    }

    /// Mutation: dropping the `count == 0` check keeps a wake-up for the next waiter, which
    /// then runs a round for a release long past.
    #[test]
    fn a_lingering_channel_keeps_no_wake_up() {
        let (mut waiters, _) = waiting(&[]);
        waiters.released(b"r1", Some(0));
        assert!(!woken(&waiters.notify));
    }

    /// A hand-off message names its nonce, and a fenced release's also the counter and
    /// epoch; one that does not read (a number missing or not a number, more parts) counts
    /// as no hand-off at all, never as an unfenced one.
    ///
    /// Mutation: reading a fenced message's missing epoch as no fence (`(Some(_), None)` as
    /// `Some(HandOff { fence: None })`) would let a fenced waiter's count see it unfenced.
    #[test]
    fn hand_off_messages_read_their_nonce_and_fence() {
        assert_eq!(hand_off(b"n1", b"n1"), Some(HandOff { fence: None }));
        assert_eq!(hand_off(b"n1", b"n2"), None);
        assert_eq!(
            hand_off(b"n1:42:3", b"n1"),
            Some(HandOff {
                fence: Some(FencedHandOff {
                    counter: 42,
                    epoch: 3
                })
            })
        );
        for bad in [&b"n1:42"[..], b"n1:x:3", b"n1:42:", b"n1:42:3:9", b"n1::3"] {
            assert_eq!(hand_off(bad, b"n1"), None, "{}", bad.escape_ascii());
        }
    }
}
