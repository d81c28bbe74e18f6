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
    /// Starts `masters` cluster-enabled servers, assigns every slot among them (joined by
    /// `redis-cli --cluster create`, which asks for at least 3; one master takes every slot
    /// itself), and waits until each says `cluster_state:ok`.
    ///
    /// # Panics
    /// With 0 or 2 masters, when `redis-cli` is missing or refuses, or when the cluster does
    /// not form in 20 s.
    pub fn start(masters: usize) -> Self {
        assert!(
            masters == 1 || masters >= 3,
            "a Redis Cluster of several masters needs at least 3 (redis-cli --cluster create)"
        );
        if masters == 1 {
            let servers = cluster_enabled(1);
            let _: () = servers.run(
                0,
                redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383),
            );
            let cluster = Self { servers };
            cluster.wait_until_formed();
            return cluster;
        }
        let servers = cluster_enabled(masters);
        create(&servers, 0);
        let cluster = Self { servers };
        cluster.wait_until_formed();
        cluster
    }

    /// Starts `masters` (at least 3) cluster-enabled masters and `replicas` replicas of each,
    /// joined by `redis-cli --cluster create --cluster-replicas`, and waits until every server
    /// says `cluster_state:ok`. Which server replicates which is `redis-cli`'s choice: ask
    /// [`role_of`](Self::role_of).
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_with_replicas(masters: usize, replicas: usize) -> Self {
        assert!(masters >= 3, "redis-cli --cluster create needs 3 masters");
        let servers = cluster_enabled(masters * (1 + replicas));
        create(&servers, replicas);
        let cluster = Self { servers };
        cluster.wait_until_formed();
        // Replicas report the cluster ok before they have synced: wait for the links.
        let deadline = Instant::now() + FORM_TIMEOUT;
        for i in 0..cluster.servers.len() {
            while cluster.role_of(i).1.is_some() && !cluster.replica_synced(i) {
                assert!(Instant::now() < deadline, "replica {i} never synced");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        cluster
    }

    /// Whether server `i` is a master, and for a replica the index of its master.
    pub fn role_of(&self, i: usize) -> (bool, Option<usize>) {
        let info: String = self.servers.run(i, redis::cmd("INFO").arg("replication"));
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        if field("role:").as_deref() == Some("master") {
            return (true, None);
        }
        let port: Option<u16> = field("master_port:").and_then(|p| p.parse().ok());
        let master = port.and_then(|port| {
            (0..self.servers.len()).find(|j| self.servers.server(*j).port() == port)
        });
        (false, master)
    }

    fn replica_synced(&self, i: usize) -> bool {
        let info: String = self.servers.run(i, redis::cmd("INFO").arg("replication"));
        info.contains("master_link_status:up")
    }

    /// A manual failover (`CLUSTER FAILOVER`, no data lost) to replica `replica`: it becomes
    /// the master of its master's slots, and the old master its replica. Waits until both
    /// say so and the replica link is up again.
    ///
    /// # Panics
    /// When `replica` is no replica, or the failover does not finish in 20 s.
    pub fn failover(&self, replica: usize) {
        let (is_master, Some(master)) = self.role_of(replica) else {
            panic!("server {replica} is no replica");
        };
        assert!(!is_master);
        // A manual failover gives up after 5 s (Redis's own bound) if the master does not
        // pause its clients in time, as on a loaded machine: asked again then.
        let deadline = Instant::now() + FORM_TIMEOUT * 2;
        let mut asked: Option<Instant> = None;
        while !(self.role_of(replica).0
            && self.role_of(master) == (false, Some(replica))
            && self.replica_synced(master))
        {
            assert!(
                Instant::now() < deadline,
                "the failover to {replica} did not finish"
            );
            if asked.is_none_or(|at| at.elapsed() > Duration::from_secs(6))
                && !self.role_of(replica).0
            {
                let _: () = self
                    .servers
                    .run(replica, redis::cmd("CLUSTER").arg("FAILOVER"));
                asked = Some(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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
        let migrating: redis::RedisResult<()> = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(self.node_id(to))
            .query(&mut self.servers.server(from).inspect());
        if let Err(err) = migrating {
            panic!(
                "CLUSTER SETSLOT {slot} MIGRATING on {from}: {err}; {}",
                self.views_of(slot)
            );
        }
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

    /// Moves one key from server `from` to server `to` (`MIGRATE`, ttl kept); its slot must be
    /// migrating. With other keys of the slot left behind, the slot is half moved: a command
    /// naming keys on both sides is refused with `TRYAGAIN`.
    pub fn move_key(&self, key: &[u8], from: usize, to: usize) {
        let reply: String = self.servers.run(
            from,
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.servers.server(to).port())
                .arg(key)
                .arg(0)
                .arg(5000),
        );
        assert_eq!(
            reply,
            "OK",
            "MIGRATE {} from {from} to {to}",
            key.escape_ascii()
        );
    }

    /// Ends a migration: every master learns that server `to` serves `slot` (the importing
    /// server first, as `redis-cli --cluster reshard` does), and the call returns once every
    /// server's own slot map says so.
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
        // The importing server takes a new config epoch for the slot only when its own is not
        // the highest already; a ping the old owner sent before it gave the slot up, arriving
        // late at a server whose epoch is lower, then hands the slot back to the old owner, and
        // with two moves in a row the slot ended up claimed by nobody (seen under load). A
        // fresh highest epoch for the new owner wins over every such ping.
        let _: String = self.servers.run(to, redis::cmd("CLUSTER").arg("BUMPEPOCH"));
        let deadline = Instant::now() + FORM_TIMEOUT;
        while (0..self.servers.len()).any(|i| self.owner_seen_by(i, slot) != Some(to))
            || !self.epochs_agree()
        {
            assert!(
                Instant::now() < deadline,
                "the cluster never agreed that {to} serves slot {slot}: {}",
                self.views_of(slot)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether every server sees every other's config epoch as that server says it: the
    /// epoch the importing server took for the slot has spread, so a next move of the slot
    /// starts from one agreed configuration (moving a slot again before that can leave it
    /// claimed by nobody, which the cluster does not repair by itself).
    fn epochs_agree(&self) -> bool {
        let views: Vec<Vec<(String, String, bool)>> = (0..self.servers.len())
            .map(|i| {
                let nodes: String = self.servers.run(i, redis::cmd("CLUSTER").arg("NODES"));
                nodes
                    .lines()
                    .filter_map(|line| {
                        let fields: Vec<&str> = line.split_whitespace().collect();
                        let (id, flags, epoch) = (fields.first()?, fields.get(2)?, fields.get(6)?);
                        Some((
                            (*id).to_owned(),
                            (*epoch).to_owned(),
                            flags.contains("myself"),
                        ))
                    })
                    .collect()
            })
            .collect();
        let own: Vec<(String, String)> = views
            .iter()
            .flat_map(|view| view.iter().filter(|(_, _, me)| *me))
            .map(|(id, epoch, _)| (id.clone(), epoch.clone()))
            .collect();
        views.iter().all(|view| {
            view.iter()
                .all(|(id, epoch, _)| own.iter().any(|(i, e)| i == id && e == epoch))
        })
    }

    /// What each server thinks of `slot` and of the cluster, for a failure's message.
    fn views_of(&self, slot: u16) -> String {
        let owners: Vec<Option<usize>> = (0..self.servers.len())
            .map(|i| self.owner_seen_by(i, slot))
            .collect();
        let nodes: Vec<String> = (0..self.servers.len())
            .map(|i| self.servers.run(i, redis::cmd("CLUSTER").arg("NODES")))
            .collect();
        format!("owners seen: {owners:?}; {nodes:?}")
    }

    /// The server that serves `slot` in server `i`'s own slot map.
    fn owner_seen_by(&self, i: usize, slot: u16) -> Option<usize> {
        let ranges: Vec<redis::Value> = self.servers.run(i, redis::cmd("CLUSTER").arg("SLOTS"));
        let number = |v: Option<&redis::Value>| match v {
            Some(redis::Value::Int(n)) => *n,
            _ => -1,
        };
        ranges.iter().find_map(|range| {
            let redis::Value::Array(parts) = range else {
                return None;
            };
            let (from, to) = (number(parts.first()), number(parts.get(1)));
            if !(from..=to).contains(&i64::from(slot)) {
                return None;
            }
            let Some(redis::Value::Array(master)) = parts.get(2) else {
                return None;
            };
            let port = number(master.get(1));
            (0..self.servers.len()).find(|j| i64::from(self.servers.server(*j).port()) == port)
        })
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
        let slot = self.slot_of(key);
        self.owner_seen_by(0, slot)
            .unwrap_or_else(|| panic!("no server claims slot {slot}"))
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

/// Joins every server of `servers` into one cluster with `redis-cli --cluster create`,
/// `replicas` replicas per master.
fn create(servers: &Cluster, replicas: usize) {
    let addresses: Vec<String> = (0..servers.len())
        .map(|i| format!("127.0.0.1:{}", servers.server(i).port()))
        .collect();
    let created = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addresses)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .expect("redis-cli on PATH (Debian's redis-tools, which redis-server depends on)");
    assert!(
        created.status.success(),
        "redis-cli --cluster create failed: {}",
        String::from_utf8_lossy(&created.stdout)
    );
}

/// `count` memory-only cluster-enabled servers, not joined yet.
fn cluster_enabled(count: usize) -> Cluster {
    Cluster::start_kinds(
        &vec![crate::ServerKind::of_group(); count],
        Persistence::None,
        &["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"],
    )
}
