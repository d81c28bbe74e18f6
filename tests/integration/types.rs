//! Compile-time guarantees of the public types.

use redquorum::{Error, Lock, RedLock, Report};

fn assert_send<T: Send>(_: &T) {}
fn assert_send_sync_clone<T: Send + Sync + Clone + 'static>() {}
fn assert_send_sync<T: Send + Sync + 'static>() {}

#[test]
fn public_types_are_send_and_sync() {
    assert_send_sync_clone::<RedLock>();
    assert_send_sync::<Lock>();
    assert_send_sync::<Error>();
    assert_send_sync_clone::<Report>();
    assert_send_sync_clone::<redquorum::RetryPolicy>();
    assert_send_sync::<redquorum::Builder>();
}

/// The futures of every async method are `Send`, so they can be spawned on a multi-thread
/// runtime. Never run: this only has to compile.
#[allow(dead_code, unused_must_use)]
fn futures_are_send(rl: RedLock, mut lock: Lock, other: Lock) {
    let ttl = std::time::Duration::from_secs(1);
    assert_send(&rl.try_acquire("r", ttl));
    assert_send(&rl.acquire("r", ttl));
    assert_send(&rl.acquire_within("r", ttl, ttl));
    assert_send(&rl.connect());
    assert_send(&lock.extend(ttl));
    assert_send(&other.release());
}

#[test]
fn result_stays_small() {
    // Failures are boxed so that `Result<Lock, Error>` does not carry a report inline.
    assert!(
        std::mem::size_of::<Error>() <= 64,
        "{}",
        std::mem::size_of::<Error>()
    );
}
