//! Tracing output: spans and events for every operation, and never a token or a password.
//!
//! A test binary of its own: tracing caches each callsite's interest process-wide, and a
//! callsite that another test's thread registers at the moment this test installs its
//! thread-local subscriber can stay cached as "nobody listens" (under load, the release span
//! went missing once in two runs). Alone in its process, nothing races it.

const PREFIX: &[u8] = b"redquorum:";

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use redquorum_testkit::eventually;
use redquorum_testkit::{Cluster, Persistence};

/// Records every span and event, with all their fields, as text.
#[derive(Clone, Default)]
struct Capture {
    text: Arc<Mutex<String>>,
    next_id: Arc<AtomicU64>,
}

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut text = self.text.lock().expect("capture");
        let _ = write!(text, "\nspan {}", span.metadata().name());
        span.record(&mut Fields(&mut text));
        Id::from_u64(self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        values.record(&mut Fields(&mut self.text.lock().expect("capture")));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut text = self.text.lock().expect("capture");
        let _ = write!(text, "\nevent {}", event.metadata().target());
        event.record(&mut Fields(&mut text));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[tokio::test]
async fn operations_are_traced_without_tokens_or_passwords() {
    let cluster = Cluster::start_with_args(3, Persistence::None, &["--requirepass", "hunter2"]);
    let urls = cluster.urls_with(":hunter2");
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.clone());

    let rl = redquorum::RedLock::builder(&urls)
        .per_node_timeout(Duration::from_millis(250))
        .build()
        .expect("config");
    let ttl = Duration::from_secs(10);
    let mut tokens = Vec::new();
    let mut lock = rl.try_acquire("traced", ttl).await.expect("acquire");
    tokens.push(lock.token().expose().to_owned());
    let busy = rl.try_acquire("traced", ttl).await.expect_err("held");
    assert!(busy.is_conflict());
    lock.extend(ttl).await.expect("extend");
    lock.release().await.expect("release");
    let dropped = rl.try_acquire("traced", ttl).await.expect("acquire");
    tokens.push(dropped.token().expose().to_owned());
    drop(dropped);
    assert!(eventually(Duration::from_secs(2), || cluster.keys().is_empty()).await);
    assert!(rl.settle(std::time::Duration::from_secs(5)).await);
    cluster.assert_no_keys_under(PREFIX);

    let text = capture.text.lock().expect("capture").clone();
    for expected in [
        "span redquorum.acquire",
        "span redquorum.extend",
        "span redquorum.release",
        "round decided",
        "resource=traced",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    for token in &tokens {
        // Not the whole token, and not even its second half (the first 8 hex digits may appear).
        assert!(
            !text.contains(&token[8..]),
            "a token leaked into the logs:\n{text}"
        );
    }
    assert!(
        !text.contains("hunter2"),
        "a password leaked into the logs:\n{text}"
    );
}
