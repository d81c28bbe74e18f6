//! Why the demo or the bench failed.

/// A failure of the demo or the bench, with a message for stderr (exit code 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LabError(pub String);

impl LabError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl From<redquorum_testkit::DevError> for LabError {
    fn from(e: redquorum_testkit::DevError) -> Self {
        Self(e.to_string())
    }
}

impl From<redquorum::Error> for LabError {
    fn from(e: redquorum::Error) -> Self {
        Self(e.to_string())
    }
}

impl From<std::io::Error> for LabError {
    fn from(e: std::io::Error) -> Self {
        Self(e.to_string())
    }
}
