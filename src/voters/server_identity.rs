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

use crate::core::node_id::NodeId;

/// The `run_id` each server link last connected to: one per standalone or Sentinel-resolved
/// voter, one per master of a Cluster voter (the voter's index and the master's address).
#[derive(Debug, Default)]
pub(crate) struct ServerIdentities {
    claims: Mutex<HashMap<NodeId, Arc<str>>>,
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
        let holder = claims
            .iter()
            .find(|(other, claimed)| *other != node && &***claimed == run_id)
            .map(|(other, _)| other.clone());
        if let Some(holder) = holder {
            claims.remove(node);
            return Err(holder);
        }
        if claims.get(node).is_none_or(|own| &**own != run_id) {
            claims.insert(node.clone(), Arc::from(run_id));
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

    /// Mutation: claims kept by voter index alone: shard 7001's claim replaces shard 7000's,
    /// and another voter reaching 7000's server is let in.
    #[test]
    fn each_master_of_a_cluster_voter_keeps_its_own_claim() {
        let ids = ServerIdentities::new();
        let shard = |port: u16| NodeId::new(0, format!("127.0.0.1:{port}").into());
        assert_eq!(ids.claim(&shard(7000), "a"), Ok(()));
        assert_eq!(ids.claim(&shard(7001), "b"), Ok(()));
        assert_eq!(ids.claim(&node(1), "a"), Err(shard(7000)));
        assert_eq!(ids.claim(&shard(7000), "a"), Ok(()));
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
