//! Redis Clusters for tests: masters with `cluster-enabled yes` on loopback, joined with
//! `redis-cli --cluster create`, every slot assigned; ended with the cluster (also when the
//! test panics). The ground for Cluster voters (one voter = one whole cluster).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Cluster, Persistence};

/// How long the cluster may take to agree on its slots.
const FORM_TIMEOUT: Duration = Duration::from_secs(20);

/// A Redis Cluster of masters without replicas.
#[derive(Debug)]
pub struct RedisCluster {
    servers: Cluster,
}

impl RedisCluster {
    /// Starts `masters` (at least 3, as `redis-cli --cluster create` asks) cluster-enabled
    /// servers, assigns every slot among them, and waits until each says `cluster_state:ok`.
    ///
    /// # Panics
    /// With fewer than 3 masters, when `redis-cli` is missing or refuses, or when the cluster
    /// does not form in 20 s.
    pub fn start(masters: usize) -> Self {
        assert!(masters >= 3, "a Redis Cluster needs at least 3 masters");
        let servers = Cluster::start_with_args(
            masters,
            Persistence::None,
            &["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"],
        );
        let addresses: Vec<String> = (0..masters)
            .map(|i| format!("127.0.0.1:{}", servers.server(i).port()))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli on PATH (Debian's redis-tools, which redis-server depends on)");
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = Self { servers };
        cluster.wait_until_formed();
        cluster
    }

    /// The servers (to kill, pause or inspect one).
    pub fn servers(&self) -> &Cluster {
        &self.servers
    }

    /// The servers, to kill or pause one.
    pub fn servers_mut(&mut self) -> &mut Cluster {
        &mut self.servers
    }

    /// Every master's URL: the seeds a cluster client starts from.
    pub fn seeds(&self) -> Vec<String> {
        self.servers.urls()
    }

    /// The cluster as one redquorum voter: `redis+cluster://` and every master's address.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = (0..self.servers.len())
            .map(|i| format!("127.0.0.1:{}", self.servers.server(i).port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Server `i`'s cluster node id (`CLUSTER MYID`).
    pub fn node_id(&self, i: usize) -> String {
        self.servers.run(i, redis::cmd("CLUSTER").arg("MYID"))
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &[u8]) -> u16 {
        self.servers
            .run(0, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    }

    /// Starts moving `slot` from server `from` to server `to`, as a resharding does: `to`
    /// imports it, `from` migrates it. Until [`finish_migration`](Self::finish_migration),
    /// `from` answers `ASK` for the slot's keys it does not have.
    pub fn begin_migration(&self, slot: u16, from: usize, to: usize) {
        let _: () = self.servers.run(
            to,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(self.node_id(from)),
        );
        let _: () = self.servers.run(
            from,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(self.node_id(to)),
        );
    }

    /// Moves every key of `slot` from server `from` to server `to` (`MIGRATE`, ttls kept);
    /// the slot must be migrating.
    pub fn move_keys(&self, slot: u16, from: usize, to: usize) {
        loop {
            let keys: Vec<Vec<u8>> = self.servers.run(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100),
            );
            if keys.is_empty() {
                return;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(self.servers.server(to).port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(keys);
            let _: redis::Value = self.servers.run(from, &migrate);
        }
    }

    /// Ends a migration: every master learns that server `to` serves `slot` (the importing
    /// server first, as `redis-cli --cluster reshard` does).
    pub fn finish_migration(&self, slot: u16, to: usize) {
        let id = self.node_id(to);
        let mut order: Vec<usize> = (0..self.servers.len()).collect();
        order.sort_by_key(|i| *i != to);
        for i in order {
            let _: () = self.servers.run(
                i,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&id),
            );
        }
    }

    /// Moves `slot` with its keys from server `from` to server `to`: a resharding of one slot.
    pub fn move_slot(&self, slot: u16, from: usize, to: usize) {
        self.begin_migration(slot, from, to);
        self.move_keys(slot, from, to);
        self.finish_migration(slot, to);
    }

    /// The index of the server that serves `key`'s slot.
    ///
    /// # Panics
    /// When no server claims the slot.
    pub fn owner_of(&self, key: &[u8]) -> usize {
        let slot: u16 = self
            .servers
            .run(0, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key));
        let ranges: Vec<redis::Value> = self.servers.run(0, redis::cmd("CLUSTER").arg("SLOTS"));
        for range in ranges {
            let redis::Value::Array(parts) = range else {
                continue;
            };
            let number = |v: Option<&redis::Value>| match v {
                Some(redis::Value::Int(n)) => *n,
                _ => -1,
            };
            let (from, to) = (number(parts.first()), number(parts.get(1)));
            if !(from..=to).contains(&i64::from(slot)) {
                continue;
            }
            let Some(redis::Value::Array(master)) = parts.get(2) else {
                continue;
            };
            let port = number(master.get(1));
            if let Some(i) =
                (0..self.servers.len()).find(|i| i64::from(self.servers.server(*i).port()) == port)
            {
                return i;
            }
        }
        panic!("no server claims slot {slot}");
    }

    fn wait_until_formed(&self) {
        let deadline = Instant::now() + FORM_TIMEOUT;
        for i in 0..self.servers.len() {
            loop {
                let info: String = self.servers.run(i, redis::cmd("CLUSTER").arg("INFO"));
                if info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_assigned:16384")
                {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "server {i} did not join a formed cluster: {info}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
