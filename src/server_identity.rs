//! One server, one vote: which configured node speaks for which Redis server process.
//!
//! The builder refuses two entries that spell the same address, but addresses cannot tell
//! everything: `127.1`, a second bind address, a Unix socket, a port forward or two DNS names
//! reach one server under different names, and a name can start pointing at another voter's
//! server later (a DNS change, a port reused). Such a server would be counted once per name.
//! Set-if-absent still grants a key to one owner per server, but every compare-and-set
//! (extend, release, the fence confirmation) and every inspection would count it again: an
//! extension would report a majority that one server gave, and the failures the client
//! believes it tolerates would be fewer than it thinks (one crash costs several votes).
//!
//! So each connection reads the server's `run_id` (unique to each start of a server process)
//! before it carries any request, and claims it here. The first node to claim a `run_id`
//! speaks for that server; another node reaching the same `run_id` is refused
//! ([`NodeError::SameServer`](crate::NodeError::SameServer)) and does not vote until it
//! reaches a different server. A node keeps its claim while it reconnects, so a refused
//! alias cannot take over the vote of a server whose own node is merely between connections.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::node_id::NodeId;

/// The `run_id` each configured node last connected to, by node index.
#[derive(Debug, Default)]
pub(crate) struct ServerIdentities {
    claims: Mutex<HashMap<usize, Claim>>,
}

#[derive(Debug)]
struct Claim {
    run_id: Arc<str>,
    /// The node that made it, to name in another node's refusal.
    by: NodeId,
}

impl ServerIdentities {
    /// No claim made yet.
    pub(crate) fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Node `node` has connected to the server whose `run_id` this is: it may vote for it
    /// unless another node already speaks for that server. Then the answer names that node,
    /// and `node` gives up any claim it held (it no longer reaches that server).
    pub(crate) fn claim(&self, node: &NodeId, run_id: &str) -> Result<(), NodeId> {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let index = node.index();
        let holder = claims
            .iter()
            .find(|(other, claim)| **other != index && &*claim.run_id == run_id)
            .map(|(_, claim)| claim.by.clone());
        if let Some(holder) = holder {
            claims.remove(&index);
            return Err(holder);
        }
        if claims.get(&index).is_none_or(|own| &*own.run_id != run_id) {
            let claim = Claim {
                run_id: Arc::from(run_id),
                by: node.clone(),
            };
            claims.insert(index, claim);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(i: usize) -> NodeId {
        NodeId::new(i, format!("127.0.0.1:{}", 7000 + i).into())
    }

    #[test]
    fn the_first_node_to_reach_a_server_keeps_its_vote() {
        let ids = ServerIdentities::new();
        assert_eq!(ids.claim(&node(2), "a"), Ok(()));
        let refused = ids
            .claim(&node(0), "a")
            .expect_err("node 0 reaches node 2's server");
        assert_eq!(refused, node(2));
        // Reconnecting to its own server again is no conflict.
        assert_eq!(ids.claim(&node(2), "a"), Ok(()));
        assert_eq!(ids.claim(&node(1), "b"), Ok(()));
    }

    /// Mutation: keeping the old claim on a refusal (no `claims.remove`) keeps node 2
    /// refused for server `a`, which no other node reaches any more.
    #[test]
    fn a_node_that_moves_to_another_server_frees_its_old_one() {
        let ids = ServerIdentities::new();
        assert_eq!(ids.claim(&node(0), "a"), Ok(()));
        assert_eq!(ids.claim(&node(1), "b"), Ok(()));
        // Node 0 now reaches b (say its DNS name moved): refused, and a is free again.
        assert!(ids.claim(&node(0), "b").is_err());
        assert_eq!(ids.claim(&node(2), "a"), Ok(()));
        // Node 0 reaches a server of its own again: it votes.
        assert_eq!(ids.claim(&node(0), "c"), Ok(()));
    }

    /// A node between connections keeps its claim: an alias cannot take its server's vote.
    #[test]
    fn a_claim_outlives_a_reconnect() {
        let ids = ServerIdentities::new();
        assert_eq!(ids.claim(&node(0), "a"), Ok(()));
        // Node 0 is reconnecting (no new claim yet); node 1 reaches a.
        assert!(ids.claim(&node(1), "a").is_err());
        assert!(ids.claim(&node(1), "a").is_err());
        assert_eq!(ids.claim(&node(0), "a"), Ok(()));
    }
}
