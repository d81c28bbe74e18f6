//! Resource names and the Redis keys they map to.

use crate::errors::config_error::ConfigError;

/// The longest resource name accepted, in bytes.
///
/// Redis accepts keys of up to 512 MiB; a lock name that long is a bug, not a name, and every
/// byte of it travels to every node on every acquire, extend and release.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// The key prefix used when none is configured.
pub const DEFAULT_KEY_PREFIX: &str = "redquorum:";

/// How a resource name becomes its lock's key.
///
/// ```
/// # fn demo() -> Result<(), redquorum::Error> {
/// // Share locks with node-redlock, redsync or pottery: the key is exactly prefix + name.
/// let rl = redquorum::RedLock::builder(["redis://127.0.0.1:7001"])
///     .key_prefix("")
///     .key_layout(redquorum::KeyLayout::Shared)
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyLayout {
    /// `prefix{resource}`: the name is a Redis Cluster hash tag, so every key redquorum keeps
    /// for one resource (fence counter, leader info, permits, the waiters' queue) shares its
    /// slot, and no lock key can be another's suffixed key. What every feature needs.
    #[default]
    Tagged,
    /// `prefix` + `resource`, nothing added: the key other Redlock clients use for the same
    /// name, so a lock taken here blocks theirs and theirs blocks ours (node-redlock and
    /// redsync use the name as the key; pottery `redlock:` + the name, i.e. prefix
    /// `redlock:`). Redisson keeps its locks as hashes and cannot share. Fencing, elections and
    /// semaphores keep keys of their own beside the lock's, which other clients do not know,
    /// so they are refused ([`ConfigError::NeedsTaggedKeys`]); waiters do not queue on the
    /// masters (a queue key beside a name other clients own could be one of their locks):
    /// they wake on the release message and otherwise retry on their timers.
    ///
    /// - A lock taken by either side blocks the other: compare-and-delete and
    ///   compare-and-expire are by value on both sides. A release hands nothing over.
    /// - Use the same masters, in any order, and the same drift assumptions on both sides.
    /// - Tested against node-redlock 4.2 (npm) and pottery 3.0 (PyPI) on five real masters,
    ///   both ways (`tests/integration/interop.rs`).
    Shared,
}

/// The lock key of `resource` in `layout`.
pub(crate) fn lock_key_in(layout: KeyLayout, prefix: &[u8], resource: &[u8]) -> Vec<u8> {
    match layout {
        KeyLayout::Tagged => lock_key(prefix, resource),
        KeyLayout::Shared => [prefix, resource].concat(),
    }
}

/// Checks a resource name: not empty, at most [`MAX_RESOURCE_LEN`] bytes. Any bytes are allowed.
pub(crate) fn validate(resource: &[u8]) -> Result<(), ConfigError> {
    if resource.is_empty() {
        return Err(ConfigError::EmptyResource);
    }
    if resource.len() > MAX_RESOURCE_LEN {
        return Err(ConfigError::ResourceTooLong {
            len: resource.len(),
            max: MAX_RESOURCE_LEN,
        });
    }
    Ok(())
}

/// The lock key of `resource`: `prefix{resource}`.
///
/// The braces are a Redis Cluster hash tag, so every key redquorum keeps for one resource lands
/// in one slot should a node ever be a cluster. One resource makes one key; names are never
/// joined, so two different resources can never share a key.
pub(crate) fn lock_key(prefix: &[u8], resource: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + resource.len() + 2);
    key.extend_from_slice(prefix);
    key.push(b'{');
    key.extend_from_slice(resource);
    key.push(b'}');
    key
}

/// The number of hash slots in Redis Cluster.
pub(crate) const SLOTS: usize = 16_384;

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of the key's hash tag
/// (the bytes between the first `{` and the next `}`, when not empty) or of the whole key.
///
/// Written here because the redis crate keeps its own (`cluster_routing::Slot`) opaque; the
/// CRC is the `crc16` crate's, the one the redis crate uses.
pub(crate) fn hash_slot(key: &[u8]) -> usize {
    let tag = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = key.get(open + 1..)?;
            let close = rest.iter().position(|b| *b == b'}')?;
            rest.get(..close).filter(|tag| !tag.is_empty())
        })
        .unwrap_or(key);
    usize::from(crc16::State::<crc16::XMODEM>::calculate(tag)) % SLOTS
}

/// The hash slot of `key`, as a slot number.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    // Below SLOTS (16,384), so it fits.
    u16::try_from(hash_slot(key)).unwrap_or(0)
}

/// For every hash slot, a short tag (a decimal number) that hashes to it: the fence counter of
/// a slot is named with it, so the counter lives in the same slot as the locks it serves.
/// Found once per process by counting up (about 170,000 CRCs); a slot no number up to the
/// bound reaches would keep per-resource counters (none does: a unit test checks every slot).
fn slot_tags() -> &'static [Option<u32>] {
    static TAGS: std::sync::OnceLock<Box<[Option<u32>]>> = std::sync::OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = vec![None; SLOTS];
        let mut missing = SLOTS;
        for n in 0..10_000_000u32 {
            let slot = usize::from(crc16::State::<crc16::XMODEM>::calculate(
                n.to_string().as_bytes(),
            )) % SLOTS;
            if let Some(tag @ None) = tags.get_mut(slot) {
                *tag = Some(n);
                missing -= 1;
                if missing == 0 {
                    break;
                }
            }
        }
        tags.into_boxed_slice()
    })
}

/// The fence counter for `resource`: one per hash slot (`prefix{TAG}:slot:fence`, TAG hashing
/// to the lock key's slot), shared by every resource of that slot.
///
/// So a master keeps at most 16,384 counters however many resource names are ever locked,
/// and every key a fenced acquire touches stays in one slot (a Redis Cluster voter can run it
/// as one script). Sharing a counter keeps each resource's tokens increasing: a counter only
/// ever grows, and other resources' acquires only make it grow faster. With a prefix whose
/// own braces would put the counter in another slot than the lock, a per-resource counter
/// (`prefix{resource}:fence`) is kept instead.
pub(crate) fn fence_key(prefix: &[u8], resource: &[u8]) -> Vec<u8> {
    let lock = lock_key(prefix, resource);
    let slot = hash_slot(&lock);
    if let Some(Some(tag)) = slot_tags().get(slot) {
        let mut key = prefix.to_vec();
        key.push(b'{');
        key.extend_from_slice(tag.to_string().as_bytes());
        key.extend_from_slice(b"}:slot:fence");
        if hash_slot(&key) == slot {
            return key;
        }
    }
    per_resource_fence_key(prefix, resource)
}

fn per_resource_fence_key(prefix: &[u8], resource: &[u8]) -> Vec<u8> {
    let mut key = lock_key(prefix, resource);
    key.extend_from_slice(b":fence");
    key
}

/// Every key a fenced acquire of one resource touches besides its lock key, named together
/// (the counter's name is computed once: the others follow from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FenceKeys {
    /// The fence counter ([`fence_key`]).
    pub(crate) counter: Vec<u8>,
    /// The re-seed marker next to the counter (`…:seeded` where the counter is `…:fence`, so
    /// both sit in one slot): it holds the `run_id` of the server process whose counter was
    /// last re-seeded from the other masters. A fenced acquire counts a master only while the
    /// marker names the server's current run: one that restarted, with or without its data,
    /// must be re-seeded first (`crate::protocol::reseed`). One per counter, so as bounded.
    pub(crate) marker: Vec<u8>,
    /// The per-resource counter (`prefix{resource}:fence`), folded into the slot's counter by
    /// the fenced acquire so tokens never go back;
    /// `None` when it *is* the counter in use (see [`fence_key`]).
    pub(crate) legacy: Option<Vec<u8>>,
}

/// The [`FenceKeys`] of hash slot `slot` (`prefix{TAG}:slot:fence` and its marker), for
/// seeding every slot (`crate::protocol::fence_sweep`); `None` where the slot keeps no such counter (a
/// prefix whose braces put the keys in another slot: per-resource counters, seeded lazily).
pub(crate) fn slot_fence_keys(prefix: &[u8], slot: usize) -> Option<FenceKeys> {
    let tag = (*slot_tags().get(slot)?)?;
    let mut counter = prefix.to_vec();
    counter.push(b'{');
    counter.extend_from_slice(tag.to_string().as_bytes());
    counter.extend_from_slice(b"}:slot:fence");
    if hash_slot(&counter) != slot {
        return None;
    }
    let mut marker = counter.clone();
    marker.truncate(marker.len() - b"fence".len());
    marker.extend_from_slice(b"seeded");
    Some(FenceKeys {
        counter,
        marker,
        legacy: None,
    })
}

/// A server's seeding record, `prefix` + `fence:seeded`: the term in which every slot's fence
/// counter on that server was last seeded (`crate::protocol::fence_sweep`). Never a lock key (those
/// have a brace right after the prefix), and kept on standalone and Sentinel-resolved
/// voters only (on a Redis Cluster it would live on one master of many).
pub(crate) fn fence_record_key(prefix: &[u8]) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(b"fence:seeded");
    key
}

/// The [`FenceKeys`] of `resource`.
pub(crate) fn fence_keys(prefix: &[u8], resource: &[u8]) -> FenceKeys {
    let counter = fence_key(prefix, resource);
    let mut marker = counter.clone();
    marker.truncate(marker.len() - b"fence".len());
    marker.extend_from_slice(b"seeded");
    let legacy = per_resource_fence_key(prefix, resource);
    FenceKeys {
        legacy: (legacy != counter).then_some(legacy),
        marker,
        counter,
    }
}

/// The leader-info key of an election on `resource`: `prefix{resource}:leader`.
pub(crate) fn leader_key(prefix: &[u8], resource: &[u8]) -> Vec<u8> {
    let mut key = lock_key(prefix, resource);
    key.extend_from_slice(b":leader");
    key
}

/// The readers of the read-write lock on `resource`: `prefix{resource}:readers`, a sorted set
/// of reader tokens scored by the server's millisecond each share expires at. Its writer is
/// the lock on `resource` itself (`prefix{resource}`): a write lock is the lock, and while any
/// share is live the lock key holds the readers' mark (`scripts::ACQUIRE_READ`). No lock key
/// (they end with their closing brace) nor permit key is this.
pub(crate) fn readers_key(prefix: &[u8], resource: &[u8]) -> Vec<u8> {
    readers_key_beside(&lock_key(prefix, resource))
}

/// The readers' set of the read-write lock whose lock key is `lock_key` (see [`readers_key`]).
pub(crate) fn readers_key_beside(lock_key: &[u8]) -> Vec<u8> {
    let mut key = lock_key.to_vec();
    key.extend_from_slice(b":readers");
    key
}

/// What follows a semaphore's lock key in the key of each of its permits.
const PERMIT_INFIX: &[u8] = b":permit:";

/// The key of permit `index` of the semaphore `name`: `prefix{name}:permit:<index>`, in the
/// name's hash slot. A lock key always ends with its closing brace, so no lock's key is ever a
/// permit's (the lock named `x}:permit:0` has the key `prefix{x}:permit:0}`).
pub(crate) fn permit_key(prefix: &[u8], name: &[u8], index: u32) -> Vec<u8> {
    let mut key = lock_key(prefix, name);
    key.extend_from_slice(PERMIT_INFIX);
    key.extend_from_slice(index.to_string().as_bytes());
    key
}

/// The key of the record of how many permits the semaphore `name` has:
/// `prefix{name}:permits`, in the name's hash slot, set by every grant of a permit and
/// deleted with the last permit (`scripts::ACQUIRE_PERMIT`), so that a client counting other
/// permits is refused instead of admitting more holders than the others expect. No lock's key
/// (they end with their closing brace) nor any permit's (`:permit:<digits>`) is this.
pub(crate) fn permit_count_key(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut key = lock_key(prefix, name);
    key.extend_from_slice(b":permits");
    key
}

/// The channel releases of the lock `key` are published on: `key:released` (a pub/sub
/// channel, not a key: it lives in no slot and is never stored). The permits of one semaphore
/// share one channel, `prefix{name}:permit:released`: a waiter wants any permit, and listens
/// on one channel, not on one per permit.
pub(crate) fn release_channel(key: &[u8]) -> Vec<u8> {
    let digits = key.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let before_digits = key.len() - digits;
    let permit_of = key
        .get(..before_digits)
        .filter(|head| digits > 0 && head.ends_with(PERMIT_INFIX));
    if let Some(head) = permit_of {
        let mut channel = head.to_vec();
        channel.extend_from_slice(b"released");
        return channel;
    }
    let mut channel = key.to_vec();
    channel.extend_from_slice(b":released");
    channel
}

/// Where the waiters for the lock `key` queue on a node (`scripts::QUEUED_ACQUIRE`): `key:queue`
/// (a sorted set of waiter ids, first registration first) and `key:waiters` (each waiter's
/// liveness, in the server's ms). Both in the lock's hash slot.
pub(crate) fn queue_keys(key: &[u8]) -> [Vec<u8>; 2] {
    let with = |suffix: &[u8]| {
        let mut k = key.to_vec();
        k.extend_from_slice(suffix);
        k
    };
    [with(b":queue"), with(b":waiters")]
}

/// Several resource names as one, for messages about a multi-resource lock: `a + b + c`
/// (raw bytes; shown through [`display`] like a single name).
pub(crate) fn joined<'a>(resources: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    resources.into_iter().collect::<Vec<_>>().join(&b" + "[..])
}

/// A resource name for messages: UTF-8 shown as is, other bytes escaped.
pub(crate) fn display(resource: &[u8]) -> String {
    resource.escape_ascii().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_prefixed_and_hash_tagged() {
        assert_eq!(
            lock_key(b"redquorum:", b"orders:42"),
            b"redquorum:{orders:42}"
        );
        assert_eq!(lock_key(b"", b"\0\r\n\xff"), b"{\0\r\n\xff}");
    }

    #[test]
    fn distinct_resources_never_share_a_key() {
        let names: [&[u8]; 6] = [b"a", b"a}", b"{a", b"a}{", b"ab", b"a\0"];
        for x in names {
            for y in names {
                assert_eq!(x == y, lock_key(b"p:", x) == lock_key(b"p:", y));
            }
        }
    }

    #[test]
    fn fence_keys_never_collide_with_lock_or_legacy_keys() {
        let names: [&[u8]; 7] = [
            b"a",
            b"a}:fence",
            b"a}",
            b"{a",
            b"a:fence",
            b"1}:slot",
            b"1",
        ];
        for x in names {
            for y in names {
                assert_ne!(fence_key(b"p:", x), lock_key(b"p:", y));
                assert_ne!(fence_keys(b"p:", x).marker, lock_key(b"p:", y));
                assert_ne!(fence_keys(b"p:", x).marker, fence_key(b"p:", y));
                assert_ne!(Some(fence_key(b"p:", x)), fence_keys(b"p:", y).legacy);
            }
        }
        assert_eq!(
            fence_keys(b"p:", b"r").legacy.as_deref(),
            Some(&b"p:{r}:fence"[..])
        );
    }

    /// The cluster spec's hash-tag examples, with the slots `CLUSTER KEYSLOT` gives on a
    /// real redis-server 7.0, and CRC16/XMODEM's check value.
    #[test]
    fn hash_slots_follow_redis_cluster() {
        assert_eq!(
            crc16::State::<crc16::XMODEM>::calculate(b"123456789"),
            0x31c3
        );
        let keyslot: [(&[u8], usize); 7] = [
            (b"foo", 12182),
            (b"bar", 5061),
            (b"foo{}{bar}", 8363), // empty first tag: the whole key
            (b"foo{}{bar}x", 10673),
            (b"foo{{bar}}zap", 4015), // the tag is "{bar"
            (b"{bar", 4015),
            (b"foo{bar}{zap}", 5061), // the first tag only
        ];
        for (key, slot) in keyslot {
            assert_eq!(hash_slot(key), slot, "{}", key.escape_ascii());
        }
        assert_eq!(
            hash_slot(b"{user1000}.following"),
            hash_slot(b"{user1000}.followers")
        );
    }

    /// Every slot has a tag, every counter key sits in its lock's slot, and 100,000 distinct
    /// resource names share at most 16,384 counters.
    #[test]
    fn fence_counters_are_bounded_and_in_the_locks_slot() {
        assert!(slot_tags().iter().all(Option::is_some));
        let mut counters = std::collections::HashSet::new();
        for n in 0..100_000u32 {
            let resource = format!("job:{n}");
            let key = fence_key(b"redquorum:", resource.as_bytes());
            assert_eq!(
                hash_slot(&key),
                hash_slot(&lock_key(b"redquorum:", resource.as_bytes()))
            );
            assert!(key.ends_with(b"}:slot:fence"));
            let marker = fence_keys(b"redquorum:", resource.as_bytes()).marker;
            assert_eq!(hash_slot(&marker), hash_slot(&key));
            assert!(marker.ends_with(b"}:slot:seeded"));
            counters.insert(key);
        }
        assert!(counters.len() <= SLOTS, "{}", counters.len());
        // A prefix whose braces would move the counter to another slot keeps per-resource ones.
        assert_eq!(fence_key(b"a{b", b"r"), b"a{b{r}:fence");
        assert_eq!(fence_keys(b"a{b", b"r").legacy, None);
        assert_eq!(fence_keys(b"a{b", b"r").marker, b"a{b{r}:seeded");
    }

    #[test]
    fn validation_bounds() {
        assert!(matches!(validate(b""), Err(ConfigError::EmptyResource)));
        assert!(validate(&[0u8; MAX_RESOURCE_LEN]).is_ok());
        assert!(matches!(
            validate(&[b'x'; MAX_RESOURCE_LEN + 1]),
            Err(ConfigError::ResourceTooLong { len, max: MAX_RESOURCE_LEN }) if len == MAX_RESOURCE_LEN + 1
        ));
    }

    /// Mutation: one channel per permit (the plain `key:released`) leaves a waiter deaf to
    /// every permit but one.
    #[test]
    fn the_permits_of_a_semaphore_share_one_release_channel_and_no_lock_key() {
        let channel = |key: &[u8]| String::from_utf8(release_channel(key)).expect("utf-8");
        let permit = |i| permit_key(b"p:", b"pool", i);
        assert_eq!(permit(7), b"p:{pool}:permit:7");
        assert_eq!(channel(&permit(0)), "p:{pool}:permit:released");
        assert_eq!(channel(&permit(0)), channel(&permit(255)));
        assert_eq!(channel(b"p:{pool}"), "p:{pool}:released");
        // Locks whose names look like permits keep channels (and keys) of their own.
        for name in [&b"pool}:permit:0"[..], b"pool:permit:1", b"x:permit:"] {
            let key = lock_key(b"p:", name);
            assert_ne!(key, permit(0));
            assert_eq!(channel(&key), format!("{}:released", display(&key)));
        }
    }

    #[test]
    fn the_shared_layout_is_exactly_prefix_and_name() {
        assert_eq!(
            lock_key_in(KeyLayout::Shared, b"", b"jobs:nightly"),
            b"jobs:nightly"
        );
        assert_eq!(
            lock_key_in(KeyLayout::Shared, b"redlock:", b"nightly"),
            b"redlock:nightly"
        );
        assert_eq!(
            lock_key_in(KeyLayout::Tagged, b"p:", b"nightly"),
            lock_key(b"p:", b"nightly")
        );
    }

    #[test]
    fn display_escapes_non_text() {
        assert_eq!(display(b"orders:42"), "orders:42");
        assert_eq!(display(b"a\0\r\n\xff"), "a\\x00\\r\\n\\xff");
    }
}
