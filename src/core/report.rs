//! Per-node reports: which node said what, and how fast.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::core::node_id::NodeId;
use crate::core::quorum::Vote;
use crate::errors::node_error::NodeError;

/// What one node answered in one round.
///
/// ```
/// # fn demo(r: &redquorum::NodeReport) {
/// use redquorum::NodeOutcome;
/// if let NodeOutcome::HeldByOther { expires_in } = r.outcome() {
///     println!("{} is busy for another {expires_in:?}", r.node());
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// Acquire: the node set our key.
    Granted,
    /// Extend: the node renewed our key's ttl.
    Extended,
    /// Extend: our key was missing on this node, which had not held it at the last acquire or
    /// extend, and was set again.
    Readded,
    /// Release: the node deleted our key.
    Released,
    /// Connect: the node is connected.
    Connected,
    /// Fenced acquire, second round: the node holds our key and its fence counter is now at
    /// least our fencing token.
    FenceConfirmed,
    /// The key belongs to another owner; it expires after `expires_in`.
    HeldByOther {
        /// The other owner's remaining ttl on this node, as the node reported it. `None`: the
        /// key has no expiry, or the node did not say. (An acquire sends a plain `SET NX`, whose
        /// refusal carries no ttl; the compare-and-delete that cleans up after the failed round
        /// answers with it, and the acquire's report is completed from that answer.)
        expires_in: Option<Duration>,
    },
    /// Extend or release: the key is gone from this node (it expired, or never was set here).
    Missing,
    /// Fenced acquire, second round: the node holds our key, but only since after the acquire
    /// was decided, so its fence counter is not part of the fencing token and its confirmation
    /// does not count (it is no evidence of loss either).
    LateGrant,
    /// Semaphore acquire: the node granted another permit than the one a majority granted
    /// (its holders were not the same as on the majority); that grant was given back.
    OtherPermit(u32),
    /// Semaphore acquire: the semaphore is in use on this node with this many permits, not
    /// the number this client gave; nothing was taken (see [`Error::PermitCountDiffers`](crate::Error::PermitCountDiffers)).
    PermitCountDiffers(u32),
    /// The node could not be asked, or did not answer usefully.
    Failed(NodeError),
    /// The round was decided before this node answered; its request was abandoned.
    ///
    /// Anything the abandoned request may still do on the node is undone by the
    /// compare-and-delete that later goes to every node on the same connection.
    NoReply,
}

impl NodeOutcome {
    pub(crate) fn vote(&self) -> Vote {
        match self {
            Self::Granted
            | Self::Extended
            | Self::Readded
            | Self::Released
            | Self::Connected
            | Self::FenceConfirmed => Vote::Yes,
            Self::HeldByOther { .. }
            | Self::Missing
            | Self::OtherPermit(_)
            | Self::PermitCountDiffers(_) => Vote::Refused,
            Self::Failed(_) | Self::NoReply | Self::LateGrant => Vote::Failed,
        }
    }

    /// The node's error, if it failed.
    ///
    /// ```
    /// # fn demo(r: &redquorum::NodeReport) {
    /// if let Some(err) = r.outcome().error() { eprintln!("{}: {err}", r.node()); }
    /// # }
    /// ```
    pub fn error(&self) -> Option<&NodeError> {
        match self {
            Self::Failed(err) => Some(err),
            _ => None,
        }
    }

    /// True for [`Granted`](Self::Granted), [`Extended`](Self::Extended) and
    /// [`Released`](Self::Released): the node counted toward the majority.
    ///
    /// ```
    /// # fn demo(report: &redquorum::Report) {
    /// let yes = report.iter().filter(|r| r.outcome().is_success()).count();
    /// # }
    /// ```
    pub fn is_success(&self) -> bool {
        self.vote() == Vote::Yes
    }
}

impl fmt::Display for NodeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Granted => f.write_str("granted"),
            Self::Extended => f.write_str("extended"),
            Self::Readded => f.write_str("re-added (missing on a node that had not granted it)"),
            Self::Released => f.write_str("released"),
            Self::Connected => f.write_str("connected"),
            Self::FenceConfirmed => f.write_str("fencing token confirmed"),
            Self::HeldByOther {
                expires_in: Some(left),
            } => write!(f, "held by another owner for {left:?}"),
            Self::HeldByOther { expires_in: None } => {
                f.write_str("held by another owner, no expiry known")
            }
            Self::Missing => f.write_str("key not found"),
            Self::OtherPermit(permit) => {
                write!(f, "granted permit {permit} instead (given back)")
            }
            Self::PermitCountDiffers(permits) => {
                write!(f, "the semaphore is in use here with {permits} permits")
            }
            Self::LateGrant => f.write_str(
                "holds our key, granted after the acquire was decided: not counted for the fencing token",
            ),
            Self::Failed(err) => {
                // A report names many nodes, so each line carries its own cause (the error's
                // `source()` can only point at one of them). One level: the redis crate's
                // errors repeat their text in their own sources.
                write!(f, "failed: {err}")?;
                match std::error::Error::source(err) {
                    Some(cause) => write!(f, ": {cause}"),
                    None => Ok(()),
                }
            }
            Self::NoReply => f.write_str("not waited for (decided without it)"),
        }
    }
}

/// One node's line in a [`Report`].
///
/// ```
/// # fn demo(r: &redquorum::NodeReport) {
/// println!("{}: {} after {:?}", r.node(), r.outcome(), r.latency());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct NodeReport {
    node: NodeId,
    outcome: NodeOutcome,
    latency: Duration,
    server: Option<Arc<str>>,
}

impl NodeReport {
    pub(crate) fn new(node: NodeId, outcome: NodeOutcome, latency: Duration) -> Self {
        Self {
            node,
            outcome,
            latency,
            server: None,
        }
    }

    /// The same line, naming the server inside the voter (a Sentinel-resolved voter's master).
    pub(crate) fn with_server(mut self, server: Option<Arc<str>>) -> Self {
        self.server = server;
        self
    }

    /// For a voter whose server can change (a Sentinel-resolved one), the server it spoke
    /// for when the round ended (`host:port`); `None` for a standalone master, whose address
    /// is the node's own.
    ///
    /// ```
    /// # fn demo(r: &redquorum::NodeReport) {
    /// if let Some(server) = r.server() { println!("{} answered through {server}", r.node()); }
    /// # }
    /// ```
    pub fn server(&self) -> Option<&str> {
        self.server.as_deref()
    }

    /// Which node.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// What it answered.
    pub fn outcome(&self) -> &NodeOutcome {
        &self.outcome
    }

    /// Time from the start of the round to this node's answer (to the decision, for
    /// [`NodeOutcome::NoReply`]).
    pub fn latency(&self) -> Duration {
        self.latency
    }
}

/// Every node's answer in one round, in the order the nodes were configured.
///
/// `Display` writes a one-line summary such as
/// `2/5 yes (quorum 3); node 1 (127.0.0.1:7001): held by another owner for 9.1s; …`.
///
/// ```
/// # async fn demo(lock: redquorum::Lock) {
/// let report = lock.report();
/// println!("{} of {} nodes granted: {report}", report.successes(), report.len());
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Report {
    nodes: Vec<NodeReport>,
}

impl Report {
    pub(crate) fn new(nodes: Vec<NodeReport>) -> Self {
        Self { nodes }
    }

    /// The per-node lines, in configured order.
    pub fn iter(&self) -> std::slice::Iter<'_, NodeReport> {
        self.nodes.iter()
    }

    /// How many nodes are in the report (all configured nodes).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when no node was asked (an operation refused before any I/O).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Each node's vote, in node order: what the verdict (`crate::core::verdict`) counts.
    pub(crate) fn votes(&self) -> Vec<Vote> {
        self.nodes.iter().map(|r| r.outcome.vote()).collect()
    }

    /// How many nodes counted toward the majority.
    pub fn successes(&self) -> usize {
        self.nodes.iter().filter(|r| r.outcome.is_success()).count()
    }

    /// Completes an acquire's report with what its cleanup learnt: where the acquire found
    /// another owner's key without its ttl, the ttl the cleanup's compare-and-delete reported
    /// for that node (zero when the key was gone by then: the resource is free there now).
    pub(crate) fn learn_expiries(&mut self, cleanup: &Report) {
        for (acquired, cleaned) in self.nodes.iter_mut().zip(&cleanup.nodes) {
            if let NodeOutcome::HeldByOther { expires_in: None } = acquired.outcome {
                match &cleaned.outcome {
                    NodeOutcome::HeldByOther { expires_in } => {
                        acquired.outcome = NodeOutcome::HeldByOther {
                            expires_in: *expires_in,
                        };
                    }
                    NodeOutcome::Missing => {
                        acquired.outcome = NodeOutcome::HeldByOther {
                            expires_in: Some(Duration::ZERO),
                        };
                    }
                    _ => {}
                }
            }
        }
    }

    /// The nodes that failed, with their errors.
    ///
    /// ```
    /// # fn demo(report: &redquorum::Report) {
    /// for (node, err) in report.failures() { eprintln!("{node}: {err}"); }
    /// # }
    /// ```
    pub fn failures(&self) -> impl Iterator<Item = (&NodeId, &NodeError)> {
        self.nodes
            .iter()
            .filter_map(|r| r.outcome.error().map(|e| (&r.node, e)))
    }
}

impl<'a> IntoIterator for &'a Report {
    type Item = &'a NodeReport;
    type IntoIter = std::slice::Iter<'a, NodeReport>;

    fn into_iter(self) -> Self::IntoIter {
        self.nodes.iter()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.nodes.len();
        write!(
            f,
            "{}/{n} yes (quorum {})",
            self.successes(),
            crate::core::quorum::quorum(n)
        )?;
        for r in self.nodes.iter().filter(|r| !r.outcome.is_success()) {
            write!(f, "; {}", r.node)?;
            if let Some(server) = &r.server {
                write!(f, " via {server}")?;
            }
            write!(f, ": {}", r.outcome)?;
        }
        Ok(())
    }
}
