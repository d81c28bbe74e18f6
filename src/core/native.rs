//! Which of a server's own conditional commands can do a script's whole job: read from what the
//! server says it runs (`INFO server`), at every connection.
//!
//! | command | what it does | first in |
//! |---|---|---|
//! | `SET key value IFEQ old PX ttl` | renews the key only while it holds `old` | Valkey 8.1, Redis 8.4 |
//! | `DELIFEQ key value` | deletes the key only while it holds `value` | Valkey 9.0 |
//! | `DELEX key IFEQ value` | the same | Redis 8.4, Valkey 9.2 |
//!
//! A server without a compare-and-delete of its own (Redis before 8.4, Valkey before 9.0) is
//! sent a script that does what `DELIFEQ` does, in its place: the release nobody waits for then
//! costs what a plain compare-and-delete costs, not the release script's queue keys and
//! arguments.
//!
//! A release may go native only where nobody waits for it, and an extend only where nothing
//! but the key's ttl changes: `DESIGN.md` §3 gives the rule (the lock's value says whether
//! someone waits, so the server judges it atomically) and `crate::engine::encoded` the
//! fallback to the script.

/// What one server offers natively, as its software and version say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NativeCommands {
    /// `SET … IFEQ … PX`: a compare-and-renew.
    pub(crate) renew: bool,
    /// A compare-and-delete, if any.
    pub(crate) delete: Option<DeleteIfEqual>,
}

/// The server's compare-and-delete command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeleteIfEqual {
    /// `DELIFEQ key value` (Valkey 9.0 and later).
    DelIfEq,
    /// `DELEX key IFEQ value` (Redis 8.4 and later).
    DelEx,
    /// A script that does what `DELIFEQ` does (`scripts::DELETE_IF_EQUAL`), on a Redis or
    /// Valkey without a command of its own: one key and one argument, where the release
    /// script names the queue's keys and four arguments more (counted in `bench --counts`).
    Script,
}

impl NativeCommands {
    /// None: a server we know nothing of, or one told to use scripts only.
    pub(crate) const NONE: Self = Self {
        renew: false,
        delete: None,
    };

    /// What `software` (`valkey 9.1.2`, `redis 7.0.15`, as `INFO server` gives it) offers.
    /// Anything unparsable offers nothing: scripts do every job.
    pub(crate) fn of(software: &str) -> Self {
        let Some((name, version)) = software.split_once(' ') else {
            return Self::NONE;
        };
        let Some(version) = Version::parse(version) else {
            return Self::NONE;
        };
        match name {
            "valkey" => Self {
                renew: version >= Version(8, 1),
                delete: Some(if version >= Version(9, 0) {
                    DeleteIfEqual::DelIfEq
                } else {
                    DeleteIfEqual::Script
                }),
            },
            "redis" => Self {
                renew: version >= Version(8, 4),
                delete: Some(if version >= Version(8, 4) {
                    DeleteIfEqual::DelEx
                } else {
                    DeleteIfEqual::Script
                }),
            },
            _ => Self::NONE,
        }
    }
}

/// A major and minor version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u32, u32);

impl Version {
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
        Some(Self(major, minor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mutation: `>` for `>=` in any comparison: the first version that has a command is
    /// sent the script (one of the first three asserts fails).
    #[test]
    fn each_server_offers_what_its_version_has() {
        let valkey_9 = NativeCommands::of("valkey 9.0.0");
        assert_eq!(valkey_9.delete, Some(DeleteIfEqual::DelIfEq));
        assert!(valkey_9.renew);
        assert!(NativeCommands::of("valkey 8.1.0").renew);
        let script_only = NativeCommands {
            renew: false,
            delete: Some(DeleteIfEqual::Script),
        };
        assert_eq!(
            NativeCommands::of("valkey 8.1.4").delete,
            Some(DeleteIfEqual::Script)
        );
        assert_eq!(
            NativeCommands::of("valkey 8.0.2"),
            script_only,
            "before 8.1: the compare-and-delete script only"
        );
        assert_eq!(
            NativeCommands::of("valkey 9.1.2").delete,
            Some(DeleteIfEqual::DelIfEq)
        );
        let redis_84 = NativeCommands::of("redis 8.4.0");
        assert_eq!(redis_84.delete, Some(DeleteIfEqual::DelEx));
        assert!(redis_84.renew);
        assert_eq!(NativeCommands::of("redis 8.2.1"), script_only);
        assert_eq!(NativeCommands::of("redis 7.0.15"), script_only);
        assert_eq!(NativeCommands::of("redis 10"), redis_84, "a major alone");
    }

    #[test]
    fn what_cannot_be_read_offers_nothing() {
        for software in ["", "valkey", "valkey x.y", "keydb 9.0.0", "redis .4"] {
            assert_eq!(
                NativeCommands::of(software),
                NativeCommands::NONE,
                "{software}"
            );
        }
    }
}
