//! Redis Sentinel groups for tests: a master, its replicas and the sentinels that watch them,
//! on loopback, ended with the group (also when the test panics).

use std::time::{Duration, Instant};

use crate::Cluster;

/// How long a failover may take before the harness gives up.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);

/// One Sentinel-monitored master: server 0 of [`data`](Self::data) starts as the master,
/// the others (server 1, or more: [`start_with_replicas`](Self::start_with_replicas)) as its
/// replicas, and `sentinels` sentinels watch them under the master name. A
/// master is judged down after 5 s without an answer (long enough that a loaded machine does
/// not fail over on its own; [`failover`](Self::failover) forces one).
#[derive(Debug)]
pub struct SentinelGroup {
    name: String,
    data: Cluster,
    sentinels: Cluster,
    /// The sentinels' config files (a sentinel rewrites its own), removed with the group.
    _configs: tempfile::TempDir,
}

impl SentinelGroup {
    /// Starts a master, a replica of it, and `sentinels` sentinels monitoring the master as
    /// `name` (quorum: a majority of the sentinels), and waits until every sentinel knows the
    /// replica, so a failover can be forced at once.
    ///
    /// # Panics
    /// When a server does not start, or the sentinels do not see the replica in 20 s.
    pub fn start(name: &str, sentinels: usize) -> Self {
        Self::start_with(name, sentinels, false)
    }

    /// As [`start`](Self::start); with `min_replicas`, both servers run with
    /// `min-replicas-to-write 1` and `min-replicas-max-lag 1`, as the deploy guide asks
    /// (with a lag of 1 s where the guide's example has 10, which keeps tests short: the
    /// clients' restart grace must cover the ttl plus the lag): a master whose replica stopped
    /// acknowledging for a second refuses writes (a demoted master cut off from its sentinels
    /// stops granting locks).
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_with(name: &str, sentinels: usize, min_replicas: bool) -> Self {
        Self::start_with_replicas(name, sentinels, min_replicas, 1)
    }

    /// As [`start_with`](Self::start_with), with `replicas` replicas. With one replica and
    /// `min_replicas`, a forced failover leaves the new master refusing writes until the
    /// sentinels turn the old master into its replica and it has synced (about 15 s: the
    /// sentinels look at the old master every 10 s); with two, the other replica follows the
    /// new master within the failover, as the deploy guide advises.
    ///
    /// # Panics
    /// As [`start`](Self::start); when `replicas` is 0.
    pub fn start_with_replicas(
        name: &str,
        sentinels: usize,
        min_replicas: bool,
        replicas: usize,
    ) -> Self {
        assert!(sentinels > 0, "a group needs a sentinel");
        assert!(replicas > 0, "a failover needs a replica");
        let guard: &[&str] = if min_replicas {
            &[
                "--min-replicas-to-write",
                "1",
                "--min-replicas-max-lag",
                "1",
            ]
        } else {
            &[]
        };
        let kind = crate::ServerKind::of_group();
        let mut data = Cluster::start_kinds(&[kind], crate::Persistence::None, guard);
        let master_port = data.server(0).port().to_string();
        let mut replica = vec!["--replicaof", "127.0.0.1", &master_port];
        replica.extend_from_slice(guard);
        for _ in 0..replicas {
            data.add(&replica);
        }
        let configs = tempfile::tempdir().expect("temp dir");
        let mut watchers = Cluster::start(0);
        for i in 0..sentinels {
            let path = configs.path().join(format!("sentinel-{i}.conf"));
            let quorum = sentinels / 2 + 1;
            std::fs::write(
                &path,
                format!(
                    "bind 127.0.0.1\n\
                     sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
                     sentinel down-after-milliseconds {name} 5000\n\
                     sentinel failover-timeout {name} 10000\n\
                     sentinel parallel-syncs {name} 1\n"
                ),
            )
            .expect("write the sentinel's config");
            watchers.add_from_config(&path, &["--sentinel"]);
        }
        let group = Self {
            name: name.to_owned(),
            data,
            sentinels: watchers,
            _configs: configs,
        };
        group.wait_until_the_replica_is_known();
        group
    }

    /// The voter's URL: `redis+sentinel://127.0.0.1:<port>,…/<name>`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = (0..self.sentinels.len())
            .map(|i| format!("127.0.0.1:{}", self.sentinels.server(i).port()))
            .collect();
        format!("redis+sentinel://{}/{}", hosts.join(","), self.name)
    }

    /// The master name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The master and its replicas (index 0 the master as started; a failover moves the role).
    pub fn data(&self) -> &Cluster {
        &self.data
    }

    /// The master and its replicas, to kill or pause one.
    pub fn data_mut(&mut self) -> &mut Cluster {
        &mut self.data
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &Cluster {
        &self.sentinels
    }

    /// The index in [`data`](Self::data) of the server the first running sentinel names as
    /// the master.
    ///
    /// # Panics
    /// When no sentinel answers, or it names a server not of this group.
    pub fn master_index(&self) -> usize {
        let port = self.master_port_by_sentinels();
        (0..self.data.len())
            .find(|i| self.data.server(*i).port() == port)
            .expect("the sentinels name one of the group's servers")
    }

    fn master_port_by_sentinels(&self) -> u16 {
        let i = (0..self.sentinels.len())
            .find(|i| self.sentinels.server(*i).is_running())
            .expect("a running sentinel");
        let (_, port): (String, String) = self.sentinels.run(
            i,
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.name),
        );
        port.parse().expect("a port")
    }

    /// Forces a failover (`SENTINEL FAILOVER`) and waits until the sentinels name the other
    /// server and it says it is a master; returns its index in [`data`](Self::data).
    ///
    /// # Panics
    /// When the failover does not complete in 20 s.
    pub fn failover(&self) -> usize {
        let before = self.master_index();
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        loop {
            let forced: redis::RedisResult<String> = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(&self.name)
                .query(&mut self.sentinels.server(0).inspect());
            if forced.is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "no failover: {forced:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
        loop {
            let now = self.master_index();
            if now != before && self.role(now) == "master" {
                return now;
            }
            assert!(Instant::now() < deadline, "the failover did not complete");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `SENTINEL FAILOVER` once, without waiting for it: the sentinel refuses while a
    /// failover is in progress or no replica is ready (the error says which).
    ///
    /// # Errors
    /// The sentinel's refusal, as text.
    pub fn start_failover(&self) -> Result<(), String> {
        let forced: redis::RedisResult<String> = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(&self.name)
            .query(&mut self.sentinels.server(0).inspect());
        forced.map(drop).map_err(|e| e.to_string())
    }

    /// Waits until the master the sentinels name says it is a master (a failover in progress
    /// has completed).
    ///
    /// # Panics
    /// When that takes more than 20 s.
    pub fn settle(&self) {
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        while self.role(self.master_index()) != "master" {
            assert!(Instant::now() < deadline, "the group did not settle");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn role(&self, i: usize) -> String {
        let role: Vec<redis::Value> = self.data.run(i, &redis::cmd("ROLE"));
        match role.first() {
            Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            Some(redis::Value::SimpleString(text)) => text.clone(),
            other => panic!("unexpected ROLE reply: {other:?}"),
        }
    }

    /// Waits until every sentinel lists every replica, linked to its master: a failover needs a
    /// replica the sentinels know.
    fn wait_until_the_replica_is_known(&self) {
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        let replica_ports: Vec<String> = (1..self.data.len())
            .map(|r| self.data.server(r).port().to_string())
            .collect();
        for i in 0..self.sentinels.len() {
            loop {
                let replicas: Vec<std::collections::HashMap<String, String>> = self
                    .sentinels
                    .run(i, redis::cmd("SENTINEL").arg("REPLICAS").arg(&self.name));
                let known = replica_ports.iter().all(|port| {
                    replicas.iter().any(|r| {
                        r.get("port") == Some(port)
                            && r.get("master-link-status").map(String::as_str) == Some("ok")
                            && r.get("flags").map(String::as_str) == Some("slave")
                    })
                });
                if known {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "sentinel {i} does not know the replica: {replicas:?}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
