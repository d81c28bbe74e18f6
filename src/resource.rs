//! Resource names and the Redis keys they map to.

use crate::error::ConfigError;

/// The longest resource name accepted, in bytes.
///
/// Redis accepts keys of up to 512 MiB; a lock name that long is a bug, not a name, and every
/// byte of it travels to every node on every acquire, extend and release.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// The key prefix used when none is configured.
pub const DEFAULT_KEY_PREFIX: &str = "redquorum:";

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

/// The fence counter key of `resource`: `prefix{resource}:fence`.
///
/// Same hash tag as the lock key. It can never equal a lock key (those end in `}`), and two
/// resources never share one.
pub(crate) fn fence_key(prefix: &[u8], resource: &[u8]) -> Vec<u8> {
    let mut key = lock_key(prefix, resource);
    key.extend_from_slice(b":fence");
    key
}

/// The leader-info key of an election on `resource`: `prefix{resource}:leader`.
pub(crate) fn leader_key(prefix: &[u8], resource: &[u8]) -> Vec<u8> {
    let mut key = lock_key(prefix, resource);
    key.extend_from_slice(b":leader");
    key
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
    fn fence_keys_never_collide_with_lock_keys() {
        let names: [&[u8]; 5] = [b"a", b"a}:fence", b"a}", b"{a", b"a:fence"];
        for x in names {
            for y in names {
                assert_ne!(fence_key(b"p:", x), lock_key(b"p:", y));
                assert_eq!(x == y, fence_key(b"p:", x) == fence_key(b"p:", y));
            }
        }
        assert_eq!(fence_key(b"p:", b"r"), b"p:{r}:fence");
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

    #[test]
    fn display_escapes_non_text() {
        assert_eq!(display(b"orders:42"), "orders:42");
        assert_eq!(display(b"a\0\r\n\xff"), "a\\x00\\r\\n\\xff");
    }
}
