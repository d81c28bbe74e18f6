//! Lock tokens: the secret that proves a key is ours.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::{Rng, TryRng};

/// How many random bytes a token carries (160 bits, the Redis page's suggestion).
const TOKEN_BYTES: usize = 20;

/// How many hex digits of a token a release publishes (64 of its 160 bits).
const RELEASE_ID_DIGITS: usize = 16;

/// How many hex digits of a token `Display` and `Debug` show.
const SHOWN_DIGITS: usize = 8;

/// How a token that lets waiters mark it begins, as its holder writes it: nobody waits for
/// its release (yet). See [`Token::generate_markable`].
pub(crate) const NOBODY_WAITS: &str = "n-";

/// What a waiter puts in place of [`NOBODY_WAITS`] when a lock's holder refuses it: someone
/// waits for this release, so it must hand the lock over or say it was released (the
/// release script does, a server's `DELIFEQ` would not, and it no longer matches).
pub(crate) const WAITED_ON: &str = "w-";

/// How a lock's value begins when a release handed it to a queued waiter with the waiter's own
/// token: `h-<token>|<waiter id>`, set for the waiter's ttl (`scripts/lua/hand_over.lua`).
pub(crate) const HANDED: &str = "h-";

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
        Self(Self::random_hex(""))
    }

    /// `prefix`, then 20 random bytes in lower-case hex, in one allocation.
    fn random_hex(prefix: &str) -> String {
        let mut bytes = [0u8; TOKEN_BYTES];
        if rand::rngs::SysRng.try_fill_bytes(&mut bytes).is_err() {
            rand::rng().fill_bytes(&mut bytes);
        }
        let mut hex = String::with_capacity(prefix.len() + TOKEN_BYTES * 2);
        hex.push_str(prefix);
        for nibble in bytes.iter().flat_map(|byte| [byte >> 4, byte & 0x0f]) {
            // A nibble is always a digit in base 16.
            hex.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
        }
        hex
    }

    /// A new token for a client that describes its holders (`Builder::holder_info`): the
    /// random hex digits, then the time it was drawn (Unix ms) and the description, each
    /// after a space: `<40 hex> <ms> <about>`. The whole value is the token (what the scripts
    /// compare); the rest only tells people who holds. Without a description, [`generate`].
    ///
    /// [`generate`]: Self::generate
    pub(crate) fn generate_about(about: Option<&str>) -> Self {
        let mut token = Self::generate();
        if let Some(about) = about {
            let ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_millis());
            token.0 = format!("{} {ms} {about}", token.0);
        }
        token
    }

    /// [`generate_about`](Self::generate_about), written as [`NOBODY_WAITS`] and then the
    /// token: a waiter the holder refuses turns the prefix into [`WAITED_ON`], so a server's
    /// own compare-and-delete (which compares the whole value) no longer matches and the
    /// release script, which accepts both, hands the lock over. Only the lock's own scripts
    /// and the server's conditional commands read it: a value another library (or an
    /// earlier redquorum) wrote never has the prefix, so no waiter ever changes it.
    pub(crate) fn generate_markable(about: Option<&str>) -> Self {
        match about {
            None => Self(Self::random_hex(NOBODY_WAITS)),
            Some(_) => {
                let mut token = Self::generate_about(about);
                token.0.insert_str(0, NOBODY_WAITS);
                token
            }
        }
    }

    /// Whether waiters may mark it (see [`generate_markable`](Self::generate_markable)): only
    /// then may its release be the server's own compare-and-delete.
    pub(crate) fn is_markable(&self) -> bool {
        self.0.starts_with(NOBODY_WAITS)
    }

    /// The token without the [`NOBODY_WAITS`] prefix: its random hex digits first.
    fn random_first(&self) -> &str {
        self.0.strip_prefix(NOBODY_WAITS).unwrap_or(&self.0)
    }

    /// What a release publishes to wake waiters: the token's first 16 hex digits, enough to
    /// tell one release from the next, never enough to act on the lock.
    pub(crate) fn release_id(&self) -> String {
        self.random_first()
            .get(..RELEASE_ID_DIGITS)
            .unwrap_or_default()
            .to_owned()
    }

    /// The full token, as stored in Redis: 40 hex digits, followed by the time and the
    /// description of a client built with `Builder::holder_info`; a single lock's token (a
    /// client using the servers' own commands, the default) begins with `n-`, which a
    /// waiter turns into `w-`. Treat it as a secret.
    ///
    /// ```
    /// # async fn demo(lock: redquorum::Lock) {
    /// assert!(lock.token().expose().len() >= 40);
    /// # }
    /// ```
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Who holds a lock whose value carries a description (see [`Token::generate_about`]): when
/// the value was drawn and the description, or `None` for a plain token.
pub(crate) fn holder_about(value: &[u8]) -> Option<(SystemTime, String)> {
    let value = unmarked(value);
    let value = value
        .strip_prefix(NOBODY_WAITS.as_bytes())
        .unwrap_or(&value);
    let text = std::str::from_utf8(value.get(TOKEN_BYTES * 2..)?).ok()?;
    let (ms, about) = text.strip_prefix(' ')?.split_once(' ')?;
    let since = UNIX_EPOCH.checked_add(Duration::from_millis(ms.parse().ok()?))?;
    Some((since, about.to_owned()))
}

/// The token of a value a release handed to a waiter (see [`HANDED`]): between the prefix
/// and the last `|` (a waiter id has none; a description may).
fn handed_token(value: &[u8]) -> Option<&[u8]> {
    let rest = value.strip_prefix(HANDED.as_bytes())?;
    let bar = rest.iter().rposition(|&b| b == b'|')?;
    rest.get(..bar)
}

/// A lock's value as its holder wrote it (a handed one as the token it was handed with): [`WAITED_ON`] read back as [`NOBODY_WAITS`], so a
/// holder is the same holder whether or not someone waits for it.
pub(crate) fn unmarked(value: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if let Some(token) = handed_token(value) {
        return std::borrow::Cow::Borrowed(token);
    }
    match value.strip_prefix(WAITED_ON.as_bytes()) {
        Some(rest) => {
            let mut holder = NOBODY_WAITS.as_bytes().to_vec();
            holder.extend_from_slice(rest);
            std::borrow::Cow::Owned(holder)
        }
        None => std::borrow::Cow::Borrowed(value),
    }
}

/// The first hex digits of a lock's value, enough to tell holders apart in a listing (the
/// [`NOBODY_WAITS`] or [`WAITED_ON`] prefix left out).
pub(crate) fn shown_digits(value: &[u8]) -> &[u8] {
    let value = handed_token(value).unwrap_or(value);
    let value = [NOBODY_WAITS, WAITED_ON]
        .iter()
        .find_map(|prefix| value.strip_prefix(prefix.as_bytes()))
        .unwrap_or(value);
    value.get(..SHOWN_DIGITS).unwrap_or(value)
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}…",
            self.random_first().get(..SHOWN_DIGITS).unwrap_or_default()
        )
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

    /// A described token reads back as its time and description; a plain one as none, and
    /// so does anything that is not ours (a hand-off reservation, another client's value).
    #[test]
    fn a_described_token_tells_who_and_since_when() {
        let before = SystemTime::now() - Duration::from_millis(1);
        let t = Token::generate_about(Some("web1 pid 42 backup.sh --full"));
        assert!(t.expose().starts_with(&t.release_id()));
        let (since, about) = holder_about(t.expose().as_bytes()).expect("described");
        assert_eq!(about, "web1 pid 42 backup.sh --full");
        assert!(since >= before && since <= SystemTime::now(), "{since:?}");
        for plain in [
            Token::generate().expose().as_bytes(),
            b"handoff:abc.1",
            b"",
            b"0123456789012345678901234567890123456789 notanumber x",
        ] {
            assert_eq!(holder_about(plain), None);
        }
        assert_eq!(Token::generate_about(None).expose().len(), 40);
    }

    /// Mutation: `unmarked` returning the value as read: a holder someone waits for reads as
    /// another holder (`Holding::same_holder`); `random_first` not stripping the prefix: the
    /// release id and `Display` show `n-`.
    #[test]
    fn a_markable_token_reads_the_same_marked_or_not() {
        let t = Token::generate_markable(Some("web1 pid 42"));
        assert!(t.expose().starts_with(NOBODY_WAITS));
        assert_eq!(t.release_id().len(), RELEASE_ID_DIGITS);
        assert!(t.expose()[2..].starts_with(&t.release_id()));
        assert!(!format!("{t}").contains(':'));
        let marked = format!("{WAITED_ON}{}", &t.expose()[2..]);
        assert_eq!(&*unmarked(marked.as_bytes()), t.expose().as_bytes());
        assert_eq!(&*unmarked(t.expose().as_bytes()), t.expose().as_bytes());
        assert_eq!(
            shown_digits(marked.as_bytes()),
            &t.expose().as_bytes()[2..10]
        );
        assert_eq!(shown_digits(b"abc"), b"abc");
        for value in [t.expose().as_bytes(), marked.as_bytes()] {
            assert_eq!(holder_about(value).expect("described").1, "web1 pid 42");
        }
        assert_eq!(Token::generate_markable(None).expose().len(), 42);
    }

    /// Mutation: `handed_token` returning `None`: a lock handed to a waiter reads as another
    /// holder than the one its waiter holds, and lists as `h-…`.
    #[test]
    fn a_handed_token_reads_as_the_token_it_was_handed_with() {
        let t = Token::generate_markable(Some("web1 | pid 42"));
        let handed = format!("{HANDED}{}|c1.w2", t.expose());
        assert_eq!(&*unmarked(handed.as_bytes()), t.expose().as_bytes());
        assert_eq!(
            shown_digits(handed.as_bytes()),
            &t.expose().as_bytes()[2..10]
        );
        assert_eq!(
            holder_about(handed.as_bytes()).expect("described").1,
            "web1 | pid 42"
        );
    }
}
