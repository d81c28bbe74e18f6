//! Lock tokens: the secret that proves a key is ours.

use std::fmt;

use rand::{Rng, TryRng};

/// How many random bytes a token carries (160 bits, the Redis page's suggestion).
const TOKEN_BYTES: usize = 20;

/// How many hex digits of a token a release publishes (64 of its 160 bits).
const RELEASE_ID_DIGITS: usize = 16;

/// How many hex digits of a token `Display` and `Debug` show.
const SHOWN_DIGITS: usize = 8;

/// The random value stored in a lock's keys, unique to one acquisition.
///
/// A token is a capability: whoever knows it can extend or release the lock. It carries 160 bits
/// from the operating system's CSPRNG, and a fresh one is drawn for every acquire *round*, so a
/// stale request from an earlier round can never be mistaken for the current holder. `Display`
/// and `Debug` show only its first 8 hex digits, so logs never carry the whole secret.
///
/// ```
/// # async fn demo(lock: redquorum::Lock) {
/// println!("holding with token {}", lock.token()); // e.g. "3f9a01c2…"
/// # }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(String);

impl Token {
    /// Draws a new token from the OS CSPRNG (falling back to the thread-local CSPRNG, itself
    /// seeded from the OS, if the OS source reports an error).
    pub(crate) fn generate() -> Self {
        let mut bytes = [0u8; TOKEN_BYTES];
        if rand::rngs::SysRng.try_fill_bytes(&mut bytes).is_err() {
            rand::rng().fill_bytes(&mut bytes);
        }
        // Lower-case hex; a nibble is always a digit in base 16.
        let hex: String = bytes
            .iter()
            .flat_map(|byte| [byte >> 4, byte & 0x0f])
            .map(|nibble| char::from_digit(u32::from(nibble), 16).unwrap_or('0'))
            .collect();
        Self(hex)
    }

    /// What a release publishes to wake waiters: the token's first 16 hex digits, enough to
    /// tell one release from the next, never enough to act on the lock.
    pub(crate) fn release_id(&self) -> String {
        self.0
            .get(..RELEASE_ID_DIGITS)
            .unwrap_or_default()
            .to_owned()
    }

    /// The full token, as stored in Redis. Treat it as a secret.
    ///
    /// ```
    /// # async fn demo(lock: redquorum::Lock) {
    /// assert_eq!(lock.token().expose().len(), 40);
    /// # }
    /// ```
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", self.0.get(..SHOWN_DIGITS).unwrap_or_default())
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tokens_are_long_unique_and_hex() {
        let tokens: HashSet<String> = (0..10_000).map(|_| Token::generate().0).collect();
        assert_eq!(tokens.len(), 10_000);
        for t in &tokens {
            assert_eq!(t.len(), 40);
            assert!(
                t.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            );
        }
    }

    #[test]
    fn display_and_debug_hide_most_of_the_token() {
        let t = Token::generate();
        let shown = format!("{t} {t:?}");
        assert!(!shown.contains(t.expose()));
        assert!(shown.contains(&t.expose()[..8]));
        assert!(!shown.contains(&t.expose()[8..16]));
    }
}
