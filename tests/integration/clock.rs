//! Real clock jumps on masters (issue 35 §3): three Valkey masters under libfaketime, whose
//! wall clocks the tests jump while a lock is held, so keys expire early for real, as in
//! Kleppmann's critique of Redlock. Valkey only: Debian's `redis-server` does not start
//! under libfaketime.
//!
//! What must hold: with a majority of the holder's masters jumped past its ttl, another
//! client gets the lock while the first still trusts it (the documented clock assumption
//! failing, a negative control showing the jump bites), and a fenced store refuses the first
//! holder's writes after the second's; with a minority jumped, nobody else gets it.

use std::time::Duration;

use redquorum::RedLock;
use redquorum_testkit::{Cluster, libfaketime};

use crate::settled;

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// A fenced store: accepts a write only with a token at least the highest it accepted.
#[derive(Default)]
struct FencedStore {
    highest: u64,
}

impl FencedStore {
    fn write(&mut self, token: u64) -> bool {
        if token < self.highest {
            return false;
        }
        self.highest = token;
        true
    }
}

fn fenced_client(cluster: &Cluster) -> RedLock {
    RedLock::builder(cluster.urls())
        .per_node_timeout(NODE_TIMEOUT)
        .fencing(true)
        .build()
        .expect("config")
}

/// Two masters of three jumped 30 s forward while A holds a 10 s lock: A's key expires there
/// at once, B takes the lock on those two while A still trusts its own (an overlap: the clock
/// assumption failing, which this test expects as a negative control), and the fenced store
/// accepts B's write and refuses A's, whose token is lower. The clocks jumped back, B
/// releases; nothing is left.
///
/// Mutations: the jump written to no master (`+0` for `+30s`): B is refused, and the negative
/// control fails ("the jump did not bite"); the fenced acquire not raising the counter
/// (`take_fenced` answering the counter as it stands): B's token equals A's and the store
/// accepts A's stale write.
#[tokio::test]
async fn a_majority_of_masters_jumped_forward_lets_a_second_holder_in_and_fencing_refuses_the_first()
 {
    let cluster = Cluster::start_with_fake_clocks(3, &libfaketime());
    let (a, b) = (fenced_client(&cluster), fenced_client(&cluster));
    let held = a.try_acquire("report", TTL).await.expect("A's lock");
    // A's requests still out land before the jump: a straggling `SET` that lands after it sets
    // the key anew, on the jumped clock, which then outlives the jump (seen once under two CPU
    // hogs: "the jumped masters still hold A's key").
    settled(&a).await;
    let a_token = held.fencing_token().expect("A's token");
    for i in [0, 1] {
        cluster.jump_clock(i, "+30s");
    }
    // The keys are gone on the jumped masters, for real: their clocks passed the expiry.
    assert!(
        crate::eventually(Duration::from_secs(3), || (0..2)
            .all(|i| cluster.pttl(i, &crate::lock_key(b"report")) == -2))
        .await,
        "the jumped masters still hold A's key"
    );
    let second = b.try_acquire("report", TTL).await;
    let second = second.expect("the jump did not bite: B was refused");
    let b_token = second.fencing_token().expect("B's token");
    assert!(
        held.remaining() > Duration::ZERO,
        "A's lock had ended on its own clock: no overlap to show"
    );
    let mut store = FencedStore::default();
    assert!(store.write(b_token), "B's write");
    assert!(
        !store.write(a_token),
        "the store accepted A's stale write: {a_token} after {b_token}"
    );
    for i in [0, 1] {
        cluster.jump_clock(i, "+0");
    }
    second.release().await.expect("B's release");
    let stale = held.release().await;
    assert!(
        stale.is_err(),
        "A's release after losing its key: {stale:?}"
    );
    settled(&a).await;
    settled(&b).await;
    crate::assert_no_lock_keys(&cluster);
}

/// One master of three jumped 30 s forward while A holds: A's key goes there, for real, and B
/// is refused by the other two, whatever the jumped master says. Jumped back, that master
/// does not bring the key back (it expired). A's release deletes its key everywhere; it may
/// say `Expired`, rightly: when A's acquire was decided on two grants, the third master's not
/// yet heard, the jumped master and that one could have been free together.
///
/// Mutation: the jump written to two masters: B gets the lock.
#[tokio::test]
async fn a_minority_of_masters_jumped_lets_nobody_else_in() {
    minority_stepped_lets_nobody_else_in(3, &[0], "report").await;
}

/// Steps `stepped`, a minority of `masters`, 30 s forward together while A holds, then back:
/// A's key goes on each, for real, B is refused by the others, and A's release deletes its key
/// everywhere (it may rightly say `Expired`).
async fn minority_stepped_lets_nobody_else_in(masters: usize, stepped: &[usize], resource: &str) {
    let cluster = Cluster::start_with_fake_clocks(masters, &libfaketime());
    let (a, b) = (fenced_client(&cluster), fenced_client(&cluster));
    let held = a.try_acquire(resource, TTL).await.expect("A's lock");
    // A's requests still out land before the jump: a straggling `SET` that lands after it sets
    // the key anew, on the jumped clock, which then outlives the jump (seen once under two CPU
    // hogs: "the jumped masters still hold A's key").
    settled(&a).await;
    for &i in stepped {
        cluster.jump_clock(i, "+30s");
    }
    let key = crate::lock_key(resource.as_bytes());
    assert!(
        crate::eventually(Duration::from_secs(3), || stepped
            .iter()
            .all(|&i| cluster.pttl(i, &key) == -2))
        .await,
        "the stepped masters still hold A's key"
    );
    let refused = b.try_acquire(resource, TTL).await;
    assert!(
        refused.as_ref().is_err_and(redquorum::Error::is_conflict),
        "B got in with {} masters of {masters} stepped: {refused:?}",
        stepped.len()
    );
    for &i in stepped {
        cluster.jump_clock(i, "+0");
    }
    let released = held.release().await;
    assert!(
        released.is_ok() || released.as_ref().is_err_and(redquorum::Error::is_expired),
        "A's release: {released:?}"
    );
    settled(&a).await;
    settled(&b).await;
    crate::assert_no_lock_keys(&cluster);
}

/// Two masters of five stepped at once (issue 35 §3), forward past the ttl while A holds: A's
/// key goes on both, for real, and B is refused by the other three; stepped back together,
/// neither brings the key back. A's release may rightly say `Expired` (as above).
///
/// Mutation: a third master stepped with them (`&[0, 1, 2]`): B gets the lock (run,
/// caught: that is the majority case above).
#[tokio::test]
async fn two_masters_of_five_stepped_at_once_let_nobody_else_in() {
    minority_stepped_lets_nobody_else_in(5, &[0, 1], "two").await;
}
