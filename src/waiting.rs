//! Waiting for a busy lock without spinning: release notifications over pub/sub.
//!
//! The release script publishes a release id on the resource's channel on every node. A
//! waiting acquire subscribes on every node (one shared pub/sub connection per node for all
//! waiters of a `RedLock`, subscriptions counted per channel). The first message of a release,
//! from whichever node, wakes **one** waiter, the one that has waited longest; the same
//! release's messages from the other nodes are recognised by their id and dropped. Waking
//! them all would have them race for one lock, and split votes cost rounds on every node. A
//! release made through the same `RedLock` wakes its waiter directly, without waiting for the
//! message. Timed retries stay as the fallback, so a lost message only costs a delay.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::Client;
use redis::aio::PubSubSink;
use tokio::sync::{Notify, watch};

/// How long one background (re)connection of a pub/sub connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The wait between two reconnection attempts of a pub/sub connection.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);
/// How long a waiter waits for a SUBSCRIBE to be confirmed before relying on timed retries.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_millis(200);
/// How many recent release ids a channel remembers, to drop the other nodes' copies of a
/// release message even when two releases' messages interleave.
const RECENT_RELEASES: usize = 4;

/// Release notifications for one `RedLock`.
#[derive(Debug)]
pub(crate) struct ReleaseWatch {
    clients: Vec<Client>,
    shared: Arc<Shared>,
    started: std::sync::Once,
    /// Dropped with the watch: the per-node tasks end.
    _alive: watch::Sender<()>,
    alive: watch::Receiver<()>,
}

/// The waiters of one channel: how many, how to wake them, and the releases already seen.
#[derive(Debug)]
struct Waiters {
    count: usize,
    notify: Arc<Notify>,
    recent: VecDeque<Vec<u8>>,
}

impl Waiters {
    /// Wakes the longest-waiting waiter, once per release.
    fn released(&mut self, id: &[u8]) {
        if self.recent.iter().any(|seen| seen == id) {
            return;
        }
        if self.recent.len() == RECENT_RELEASES {
            self.recent.pop_front();
        }
        self.recent.push_back(id.to_vec());
        self.notify.notify_one();
    }
}

#[derive(Debug, Default)]
struct Shared {
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
    shared: Weak<Shared>,
    channel: Vec<u8>,
    notify: Arc<Notify>,
}

impl ReleaseWatch {
    pub(crate) fn new(clients: Vec<Client>) -> Self {
        let (tx, rx) = watch::channel(());
        let shared = Arc::new(Shared {
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

    /// Registers interest in `channel`, subscribing on every connected node if it is the
    /// first waiter. Never fails: a node that cannot subscribe leaves its waiters on timed
    /// retries.
    pub(crate) async fn subscribe(&self, channel: Vec<u8>) -> Subscription {
        self.start();
        let (notify, first) = {
            let mut channels = lock(&self.shared.channels);
            let entry = channels.entry(channel.clone()).or_insert_with(|| Waiters {
                count: 0,
                notify: Arc::new(Notify::new()),
                recent: VecDeque::with_capacity(RECENT_RELEASES),
            });
            entry.count += 1;
            if entry.count == 1 {
                self.shared.waited_channels.fetch_add(1, Ordering::AcqRel);
            }
            (entry.notify.clone(), entry.count == 1)
        };
        if first {
            let sinks: Vec<PubSubSink> =
                lock(&self.shared.sinks).iter().flatten().cloned().collect();
            let confirmations = sinks.into_iter().map(|mut sink| {
                let channel = channel.clone();
                async move {
                    let _ = tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(channel)).await;
                }
            });
            futures::future::join_all(confirmations).await;
        }
        Subscription {
            shared: Arc::downgrade(&self.shared),
            channel,
            notify,
        }
    }

    /// True while some acquire of this `RedLock` waits on `channel`: a new one should queue
    /// behind it rather than race it.
    pub(crate) fn has_waiters(&self, channel: &[u8]) -> bool {
        self.shared.waited_channels.load(Ordering::Acquire) > 0
            && lock(&self.shared.channels).contains_key(channel)
    }

    /// A release made through this `RedLock`: wakes one waiter now.
    pub(crate) fn released(&self, channel: &[u8], id: &[u8]) {
        if self.shared.waited_channels.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(waiters) = lock(&self.shared.channels).get_mut(channel) {
            waiters.released(id);
        }
    }

    fn start(&self) {
        self.started.call_once(|| {
            for (index, client) in self.clients.iter().enumerate() {
                tokio::spawn(listen(
                    index,
                    client.clone(),
                    Arc::downgrade(&self.shared),
                    self.alive.clone(),
                ));
            }
        });
    }
}

impl Subscription {
    /// The notifier that fires when a release is published on this channel.
    pub(crate) fn notify(&self) -> &Arc<Notify> {
        &self.notify
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
                Some(entry) if entry.count > 1 => {
                    entry.count -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(&self.channel);
                    shared.waited_channels.fetch_sub(1, Ordering::AcqRel);
                    true
                }
                None => false,
            }
        };
        if last {
            let sinks: Vec<PubSubSink> = lock(&shared.sinks).iter().flatten().cloned().collect();
            let channel = std::mem::take(&mut self.channel);
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    for mut sink in sinks {
                        let _ = tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.unsubscribe(&channel))
                            .await;
                    }
                });
            }
        }
    }
}

/// Keeps node `index`'s pub/sub connection up, re-subscribing the channels that have waiters,
/// and wakes the waiters of every message's channel. Ends when the watch is dropped.
async fn listen(
    index: usize,
    client: Client,
    shared: Weak<Shared>,
    mut alive: watch::Receiver<()>,
) {
    loop {
        let connected = tokio::select! {
            _ = alive.changed() => return,
            c = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub()) => c,
        };
        if let Ok(Ok(pubsub)) = connected {
            let (mut sink, mut stream) = pubsub.split();
            let wanted: Vec<Vec<u8>> = match shared.upgrade() {
                Some(s) => lock(&s.channels).keys().cloned().collect(),
                None => return,
            };
            for channel in wanted {
                let _ = tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(channel)).await;
            }
            match shared.upgrade() {
                Some(s) => set_sink(&s, index, Some(sink)),
                None => return,
            }
            loop {
                let message = tokio::select! {
                    _ = alive.changed() => return,
                    m = stream.next() => m,
                };
                let Some(message) = message else { break };
                let Some(s) = shared.upgrade() else { return };
                let Ok(channel) = message.get_channel::<Vec<u8>>() else {
                    continue;
                };
                if let Some(waiters) = lock(&s.channels).get_mut(&channel) {
                    waiters.released(message.get_payload_bytes());
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

fn set_sink(shared: &Shared, index: usize, sink: Option<PubSubSink>) {
    if let Some(slot) = lock(&shared.sinks).get_mut(index) {
        *slot = sink;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
