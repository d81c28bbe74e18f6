//! What a script's integer reply means (the table in `crate::scripts`).

/// What a script's integer reply means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScriptReply {
    Done,
    Missing,
    Foreign {
        expires_in_ms: Option<u64>,
    },
    /// Extend: the key was missing and was set again.
    Readded,
    /// Fenced acquire: the master's counter was not re-seeded since it last started.
    Unseeded,
    /// Fenced confirm: a re-seed read the master's counter after it granted.
    SeededSinceGrant,
}

impl ScriptReply {
    /// Classifies a script's reply; `None` for a value no script of ours returns.
    pub(crate) fn from_code(code: i64) -> Option<Self> {
        match code {
            -1 => Some(Self::Done),
            -2 => Some(Self::Missing),
            -3 => Some(Self::Foreign {
                expires_in_ms: None,
            }),
            -5 => Some(Self::Readded),
            -6 => Some(Self::Unseeded),
            -7 => Some(Self::SeededSinceGrant),
            n => u64::try_from(n).ok().map(|ms| Self::Foreign {
                expires_in_ms: Some(ms),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_integer_classifies_without_panicking() {
        assert_eq!(ScriptReply::from_code(-1), Some(ScriptReply::Done));
        assert_eq!(ScriptReply::from_code(-2), Some(ScriptReply::Missing));
        assert_eq!(
            ScriptReply::from_code(-3),
            Some(ScriptReply::Foreign {
                expires_in_ms: None
            })
        );
        assert_eq!(
            ScriptReply::from_code(0),
            Some(ScriptReply::Foreign {
                expires_in_ms: Some(0)
            })
        );
        assert_eq!(
            ScriptReply::from_code(i64::MAX),
            Some(ScriptReply::Foreign {
                expires_in_ms: Some(i64::MAX as u64)
            })
        );
        assert_eq!(ScriptReply::from_code(-5), Some(ScriptReply::Readded));
        assert_eq!(ScriptReply::from_code(-6), Some(ScriptReply::Unseeded));
        assert_eq!(
            ScriptReply::from_code(-7),
            Some(ScriptReply::SeededSinceGrant)
        );
        for code in [-4, -8, -100, i64::MIN] {
            assert_eq!(ScriptReply::from_code(code), None);
        }
    }
}
