//! Which locks the code running now holds, so that asking again for one of them is an error
//! at once instead of a wait for itself.
//!
//! Redisson's `RLock` is reentrant per thread: a hold count in a Redis hash, raised by every
//! `lock()` of the owning thread. redquorum hands out no nested guard. In async Rust the
//! [`Lock`](crate::Lock) value *is* the ownership: code that needs the lock again takes
//! `&mut Lock` (or the lease) from its caller, and a second guard would let two values each
//! believe they own the lock, one releasing it under the other. What must not happen is work
//! asking its own client for the resource it runs under being treated as a stranger: refused
//! as busy after its retries or, given a long wait, blocked until its own lock expires (a
//! self-deadlock that ends by breaking the lock).
//!
//! A thread is no owner in async Rust: one task runs many futures (`join!`, `select!`), and two
//! of them asking for one lock are two waiters, one of which gets it when the other releases.
//! So ownership is scoped to the future that runs under the lock: `with_lock`'s work runs
//! inside a task-local scope naming its client and key, and only an acquire made from within
//! that future (however deeply nested, not from a task it spawns, not from a sibling future)
//! is refused with [`Error::HeldByCaller`](crate::Error::HeldByCaller). A plain `Lock` held in
//! straight-line code has no scope; passing it on is the way there.

use std::future::Future;

tokio::task_local! {
    /// The (client, lock key) pairs held by the future being polled and the futures it runs in.
    static HELD_HERE: Vec<(usize, Vec<u8>)>;
}

/// Whether the code running now is inside [`holding`] for `key` of `client`.
pub(crate) fn held_here(client: usize, key: &[u8]) -> bool {
    HELD_HERE
        .try_with(|held| held.iter().any(|(c, k)| *c == client && k == key))
        .unwrap_or(false)
}

/// Runs `work` as the holder of `key` of `client` (an address unique to the client while it
/// lives: the caller holds the client for as long as `work` runs).
///
/// # Cancel safety
/// Cancel safe: dropping it drops `work` and the scope with it.
pub(crate) async fn holding<F: Future>(client: usize, key: Vec<u8>, work: F) -> F::Output {
    let mut held = HELD_HERE.try_with(Clone::clone).unwrap_or_default();
    held.push((client, key));
    HELD_HERE.scope(held, work).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mutation: a scope that does not carry the outer scopes' entries forgets the outer lock
    /// inside a nested one.
    #[tokio::test]
    async fn the_scope_covers_nested_work_only() {
        assert!(!held_here(1, b"a"));
        holding(1, b"a".to_vec(), async {
            assert!(held_here(1, b"a"));
            assert!(
                !held_here(2, b"a"),
                "another client's lock of the same name"
            );
            assert!(!held_here(1, b"b"));
            holding(1, b"b".to_vec(), async {
                assert!(held_here(1, b"a") && held_here(1, b"b"));
            })
            .await;
            let spawned = tokio::spawn(async { held_here(1, b"a") });
            assert!(
                !spawned.await.expect("task"),
                "a spawned task is another owner"
            );
        })
        .await;
        // A sibling future of one task is another owner too.
        let (inside, beside) = tokio::join!(
            holding(1, b"a".to_vec(), async { held_here(1, b"a") }),
            async {
                tokio::task::yield_now().await;
                held_here(1, b"a")
            }
        );
        assert!(inside && !beside);
        assert!(!held_here(1, b"a"));
    }
}
