//! Waiting for a busy lock without spinning: release notifications over pub/sub.
//!
//! The release script publishes on the resource's channel on every node. A waiting acquire
//! subscribes on every node (one shared pub/sub connection per node for all waiters of a
//! `RedLock`, subscriptions counted per channel) and retries as soon as a message arrives from
//! any node. Timed retries stay as the fallback, so a lost message only costs a delay.

use std::collections::HashMap;
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

/// The waiters of one channel: how many, and how to wake them.
#[derive(Debug)]
struct Waiters {
    count: usize,
    notify: Arc<Notify>,
}

#[derive(Debug, Default)]
struct Shared {
    channels: Mutex<HashMap<Vec<u8>, Waiters>>,
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
            });
            entry.count += 1;
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
                let notify = lock(&s.channels).get(&channel).map(|w| w.notify.clone());
                if let Some(notify) = notify {
                    notify.notify_waiters();
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
