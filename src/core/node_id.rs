//! Which configured node a report line, an error or a duplicate names.

use std::fmt;
use std::sync::Arc;

/// Names one of the configured nodes: its position in the list given to
/// [`RedLock::new`](crate::RedLock::new) and its address (`host:port`, never credentials).
///
/// ```
/// # fn demo(err: redquorum::Error) {
/// for node in err.report().into_iter().flatten() {
///     println!("{} (#{}): {}", node.node().address(), node.node().index(), node.outcome());
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeId {
    index: usize,
    address: Arc<str>,
}

impl NodeId {
    pub(crate) fn new(index: usize, address: Arc<str>) -> Self {
        Self { index, address }
    }

    /// Zero-based position of the node in the configured list.
    pub fn index(&self) -> usize {
        self.index
    }

    /// `host:port` (or the socket path) of the node, without user name or password.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} ({})", self.index, self.address)
    }
}
