//! What our scripts do to one node, in Rust, for the model checker (`crate::model`): each
//! function mirrors the script it names (`src/scripts/lua/`), line for line, and answers what the script
//! answers. Keep them in step with the Lua: a change to a script is a change to its mirror.

use redis::Value;

/// What the model's clients may find in a lock key: the owner's id.
pub(crate) type Key<O> = Option<O>;

/// The remaining ttl the model's nodes report for another owner's key.
pub(crate) const FOREIGN_TTL_MS: i64 = 1000;

fn not_ours<O>(key: &Key<O>) -> i64 {
    if key.is_none() { -2 } else { FOREIGN_TTL_MS }
}

/// [`ACQUIRE_FENCED`](super::ACQUIRE_FENCED): refuse on a master not re-seeded since it
/// started, else `SET NX`, and on success `INCR` the counter.
pub(crate) fn acquire_fenced<O: Copy>(
    key: &mut Key<O>,
    fence: &mut u64,
    seeded: bool,
    epoch: u64,
    me: O,
) -> Value {
    if !seeded {
        return Value::Int(-6);
    }
    if key.is_none() {
        *key = Some(me);
        *fence += 1;
        Value::Array(vec![
            Value::Int(-1),
            Value::Int(*fence as i64),
            Value::Int(epoch as i64),
        ])
    } else {
        Value::Int(FOREIGN_TTL_MS)
    }
}

/// [`SEED_READ`](super::SEED_READ): the counter and whether it is marked for the current
/// term, moving the epoch on (marked or not).
pub(crate) fn seed_read(fence: u64, seeded: bool, epoch: &mut u64) -> (u64, bool) {
    *epoch += 1;
    (fence, seeded)
}

/// [`SEED_FENCE`](super::SEED_FENCE): raise the counter to at least `value`, mark the
/// master re-seeded.
pub(crate) fn seed_fence(fence: &mut u64, seeded: &mut bool, value: u64) {
    if *fence < value {
        *fence = value;
    }
    *seeded = true;
}

/// Which confirm rule to model. The script's effect is the same for both; what differs
/// is which answers the client counts (see `crate::model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ConfirmRule {
    /// As shipped: only masters that granted before the decision count.
    GrantorsOnly,
    /// The rule before the correction: any master holding our key counts (F1).
    AnyHolder,
}

/// [`CONFIRM_FENCE`](super::CONFIRM_FENCE): raise the counter to at least T while our key
/// is there and the master is seeded for its current term.
pub(crate) fn confirm_fence<O: PartialEq>(
    key: &Key<O>,
    fence: &mut u64,
    (seeded, epoch): (bool, u64),
    me: O,
    token: u64,
    granted_in: Option<u64>,
) -> i64 {
    if key.as_ref() != Some(&me) {
        return not_ours(key);
    }
    if !seeded || granted_in.is_some_and(|granted_in| granted_in != epoch) {
        return -7;
    }
    if *fence < token {
        *fence = token;
    }
    -1
}
