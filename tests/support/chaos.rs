//! Chaos runs: contenders on one lock (or on the permits of one semaphore), a seeded nemesis,
//! and a checker of the holds.
//!
//! Every hold is recorded on this process's monotonic clock: `[acquired, end)` where `end` is
//! the earlier of the lock's `valid_until` and the start of its release (a holder stops acting
//! at its deadline, as a lease's `lost()` tells it). Two overlapping windows are a violation;
//! for a semaphore of P permits, a hold that begins while P others are valid, or while another
//! of the same permit is.
#![allow(dead_code, unreachable_pub)]

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redquorum::{Error, NodeOutcome, Permit, RedLock, Report};

use redquorum_testkit::{Cluster, RedisCluster, SentinelGroup};
use redquorum_testkit::{Fault, Proxy};

pub const RESOURCE: &str = "chaos:lock";
pub const PREFIX: &[u8] = b"redquorum:";

/// One holder's use of the lock.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    pub holder: usize,
    pub acquired: Instant,
    pub valid_until: Instant,
    pub release_started: Instant,
}

impl Hold {
    pub fn end(&self) -> Instant {
        self.valid_until.min(self.release_started)
    }
}

/// Number of pairs of holds whose windows overlap.
pub fn overlaps(holds: &[Hold]) -> usize {
    let mut sorted = holds.to_vec();
    sorted.sort_by_key(|h| h.acquired);
    let mut count = 0;
    let mut latest_end: Option<Instant> = None;
    for h in &sorted {
        if latest_end.is_some_and(|end| h.acquired < end) {
            count += 1;
        }
        latest_end = latest_end.max(Some(h.end()));
    }
    count
}

/// Number of a read-write lock's write holds whose window overlaps another hold's (a read's or
/// a write's).
pub fn writers_beside_anyone(holds: &[(Hold, bool)]) -> usize {
    holds
        .iter()
        .enumerate()
        .filter(|(i, (h, write))| {
            *write
                && holds
                    .iter()
                    .enumerate()
                    .any(|(j, (o, _))| *i != j && h.acquired < o.end() && o.acquired < h.end())
        })
        .count()
}

/// The most read holds valid at once (at the start of one of them).
pub fn most_readers(holds: &[(Hold, bool)]) -> usize {
    let reads: Vec<&Hold> = holds.iter().filter(|(_, w)| !w).map(|(h, _)| h).collect();
    reads
        .iter()
        .map(|h| {
            reads
                .iter()
                .filter(|o| o.acquired <= h.acquired && h.acquired < o.end())
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// A hold of one permit of a semaphore.
#[derive(Debug, Clone, Copy)]
pub struct PermitHold {
    pub index: u32,
    pub hold: Hold,
}

/// Number of holds of a semaphore of `permits` that began while `permits` others were valid,
/// or while another hold of the same permit was.
pub fn permit_violations(holds: &[PermitHold], permits: u32) -> usize {
    holds
        .iter()
        .enumerate()
        .filter(|(i, h)| {
            let at_once: Vec<&PermitHold> = holds
                .iter()
                .enumerate()
                .filter(|(j, o)| {
                    j != i && o.hold.acquired <= h.hold.acquired && h.hold.acquired < o.hold.end()
                })
                .map(|(_, o)| o)
                .collect();
            at_once.len() >= permits as usize || at_once.iter().any(|o| o.index == h.index)
        })
        .count()
}

/// What the nemesis does at one moment.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    Kill(usize),
    /// Start again on the same port (empty, or from its AOF if the cluster persists).
    Restart(usize),
    Pause(usize),
    Resume(usize),
    /// A proxy fault on the way from every client to a node.
    Net(usize, Fault),
    /// A proxy fault on the way from one client (contender) to a node: asymmetric partitions.
    Partition {
        client: usize,
        node: usize,
        fault: Fault,
    },
    /// The lock key deleted on one node: stands in for a server clock jump.
    Expire(usize),
    /// A forced failover (`SENTINEL FAILOVER`) inside Sentinel group `g` (voter
    /// `5 − groups + g`): its replica becomes the master, whatever it has replicated so far.
    Failover(usize),
    /// Redis Cluster voter `c` (the last voters): the master serving the lock's slot killed.
    ShardKill(usize),
    /// Redis Cluster voter `c`: the master last killed started again, empty (its cluster
    /// config kept: same node id, same slots).
    ShardRestart(usize),
    /// Redis Cluster voter `c`: the master serving the lock's slot paused (`SIGSTOP`).
    ShardPause(usize),
    /// Redis Cluster voter `c`: the paused master resumed.
    ShardResume(usize),
    /// Redis Cluster voter `c`: the lock's slot moved, keys and all, to the next master
    /// (a resharding: `ASK` while it migrates, `MOVED` after).
    Reshard(usize),
}

/// Where the probe finds a voter's server: a fixed port, or the master a sentinel names now.
#[derive(Debug, Clone)]
pub enum Probe {
    Fixed(u16),
    Group {
        sentinel: u16,
        name: String,
        /// When the group's last failover was started, and the clients' restart grace: the
        /// new master votes for nobody before `failover + grace` (clients meet it only after
        /// it was promoted, which is after the failover began), so the voter counts as
        /// holding the key until then even where the new master lacks it.
        failover: Arc<Mutex<Option<Instant>>>,
        grace: Duration,
    },
    /// A Redis Cluster voter: the key is wherever one of its masters has it (asked with
    /// `ASKING`, so a slot being imported answers too); a master that does not answer may
    /// hold it. Like a group after a failover, the cluster counts as holding the key until
    /// its last shard restart plus the grace (the restarted master votes for nobody before).
    Shards {
        ports: Vec<u16>,
        restarted: Arc<Mutex<Option<Instant>>>,
        grace: Duration,
    },
}

/// A scenario: who does what, for how long.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub duration: Duration,
    pub ttl: Duration,
    pub per_node_timeout: Duration,
    pub contenders: usize,
    pub schedule: Vec<(Duration, Action)>,
    pub aof: bool,
    /// `Some(P)`: the contenders take permits of a semaphore of P on [`RESOURCE`] instead of
    /// the lock.
    pub permits: Option<u32>,
    /// The contenders take the read-write lock [`RESOURCE`] instead of the lock: the even
    /// ones write, the odd ones read. An overlap is then a writer's hold beside anyone's.
    pub read_write: bool,
    /// How many of the five voters are Sentinel groups (a master, a replica, one sentinel;
    /// after the standalone voters, reached directly, not through proxies); the others are
    /// standalone.
    pub sentinel_groups: usize,
    /// How many of the five voters are Redis Clusters (three masters each; the last voters,
    /// reached directly).
    pub redis_clusters: usize,
    /// The clients' `restart_grace`.
    pub restart_grace: Option<Duration>,
}

/// The figures of one run.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub name: &'static str,
    pub seed: u64,
    pub attempts: u64,
    pub acquisitions: u64,
    pub overlaps: usize,
    /// With a read-write lock, the most readers valid at once.
    pub most_readers: usize,
    /// With a read-write lock, how many holds were writes.
    pub writes: usize,
    pub conflicts: u64,
    pub no_quorum: u64,
    pub other_errors: u64,
    /// Single-round attempts made while a majority of nodes was healthy and the lock free
    /// (for a semaphore: a permit free), from before the round to after it: an attempt during
    /// which the nemesis acted is not held against availability (a master killed mid-round
    /// fails that round, as it should).
    pub attempts_with_majority_and_free: u64,
    pub failures_with_majority_and_free: u64,
    /// Release answers from nodes where another holder owned the key (refused by the compare).
    pub foreign_release_refusals: u64,
    pub releases_after_expiry: u64,
    /// Locks whose `valid_until` came after the moment fewer than a majority of masters still
    /// held their key (probed right after the acquire): validity that was claimed but not there.
    pub optimistic_validity: u64,
    pub keys_left: usize,
    /// Keys of locks whose release every master answered, found right after the run (before
    /// any ttl could have removed them): a release that deleted nothing shows here.
    pub released_keys_left: usize,
    /// Holds kept until the lock's `valid_until` (one in twenty): with latency in the
    /// rounds, a deadline computed too late shows as an overlap, not only in the probe.
    pub holds_to_deadline: u64,
    pub acquire_p50: Duration,
    pub acquire_p99: Duration,
    pub acquire_max: Duration,
    pub fault_log: Vec<String>,
}

impl Figures {
    pub fn availability(&self) -> f64 {
        if self.attempts_with_majority_and_free == 0 {
            return 1.0;
        }
        1.0 - self.failures_with_majority_and_free as f64
            / self.attempts_with_majority_and_free as f64
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<28} seed {:>5} | {:>5} acquisitions / {:>5} attempts | overlaps {} | keys left {} | \
             released keys left {} | holds to the deadline {} | \
             optimistic validity {} | release refusals on another key {} | releases reported expired {} | \
             availability {:.2}% ({} of {}) | \
             conflict {} no-quorum {} other {} | acquire p50 {:.2?} p99 {:.2?} max {:.2?}{}",
            self.name,
            self.seed,
            self.acquisitions,
            self.attempts,
            self.overlaps,
            self.keys_left,
            self.released_keys_left,
            self.holds_to_deadline,
            self.optimistic_validity,
            self.foreign_release_refusals,
            self.releases_after_expiry,
            self.availability() * 100.0,
            self.attempts_with_majority_and_free - self.failures_with_majority_and_free,
            self.attempts_with_majority_and_free,
            self.conflicts,
            self.no_quorum,
            self.other_errors,
            self.acquire_p50,
            self.acquire_p99,
            self.acquire_max,
            if self.most_readers > 0 || self.writes > 0 {
                format!(
                    " | {} writes, at most {} readers at once",
                    self.writes, self.most_readers
                )
            } else {
                String::new()
            },
        )
    }
}

/// Shared state of a run.
#[derive(Default)]
struct Record {
    holds: Vec<Hold>,
    permit_holds: Vec<PermitHold>,
    /// A read-write lock's holds, and whether each was a write.
    rw_holds: Vec<(Hold, bool)>,
    latencies: Vec<Duration>,
    figures: Figures,
    /// Tokens of locks whose release every master answered (deleted, or not there): none of
    /// them may be left on any master right after the run, long before the ttl.
    cleanly_released: std::collections::HashSet<String>,
}

/// Which nodes are healthy right now, as the nemesis left them.
struct Health {
    healthy: Mutex<Vec<bool>>,
    /// Counts the nemesis's actions on each node, so a delayed change knows whether another
    /// came since.
    changes: Mutex<Vec<u64>>,
    quorum: usize,
}

impl Health {
    fn majority(&self) -> bool {
        self.healthy
            .lock()
            .map(|h| h.iter().filter(|x| **x).count() >= self.quorum)
            .unwrap_or(false)
    }

    /// How many actions the nemesis has taken so far, on any node.
    fn actions(&self) -> u64 {
        self.changes.lock().map(|c| c.iter().sum()).unwrap_or(0)
    }

    /// Records an action on node `i`; returns how many there have been.
    fn changed(&self, i: usize) -> u64 {
        self.changes
            .lock()
            .map(|mut c| {
                c[i] += 1;
                c[i]
            })
            .unwrap_or(0)
    }

    /// Marks node `i` healthy after `delay`, unless the nemesis acts on it again meanwhile
    /// (then that action's state stands).
    fn healthy_after(self: &Arc<Self>, i: usize, delay: Duration) {
        let health = self.clone();
        let changes = health.changes(i);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Ok(mut h) = health.healthy.lock()
                && health.changes(i) == changes
            {
                h[i] = true;
            }
        });
    }

    /// How many actions node `i` has seen.
    fn changes(&self, i: usize) -> u64 {
        self.changes.lock().map(|c| c[i]).unwrap_or(0)
    }
}

/// The seed of this run: `REDQUORUM_CHAOS_SEED`, or a fixed default so CI is repeatable.
pub fn seed() -> u64 {
    std::env::var("REDQUORUM_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261121)
}

/// How long each scenario runs: `REDQUORUM_SOAK_SECS` for a soak, a few seconds in CI.
pub fn duration(ci_default: Duration) -> Duration {
    std::env::var("REDQUORUM_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(ci_default)
}

/// Runs `scenario` on five fresh voters: standalone masters behind proxies, and the
/// scenario's Sentinel groups.
pub async fn run(scenario: Scenario, seed: u64) -> Figures {
    let standalone = 5 - scenario.sentinel_groups - scenario.redis_clusters;
    let cluster = Arc::new(Mutex::new(if scenario.aof {
        Cluster::start_with(standalone, redquorum_testkit::Persistence::AofAlways)
    } else {
        Cluster::start(standalone)
    }));
    // Run as the deploy guide asks (`min-replicas-to-write`), so a demoted master stops
    // granting once its replica has left it.
    let groups: Arc<Vec<SentinelGroup>> = Arc::new(
        (0..scenario.sentinel_groups)
            .map(|g| SentinelGroup::start_with(&format!("chaos{g}"), 1, true))
            .collect(),
    );
    let failovers: Vec<Arc<Mutex<Option<Instant>>>> = (0..scenario.sentinel_groups)
        .map(|_| Arc::new(Mutex::new(None)))
        .collect();
    let clusters = Clusters {
        clusters: (0..scenario.redis_clusters)
            .map(|_| Arc::new(Mutex::new(RedisCluster::start(3))))
            .collect(),
        down: Mutex::new(vec![None; scenario.redis_clusters]),
        restarted: (0..scenario.redis_clusters)
            .map(|_| Arc::new(Mutex::new(None)))
            .collect(),
        first_voter: standalone + scenario.sentinel_groups,
    };
    let cluster_urls: Vec<String> = clusters
        .clusters
        .iter()
        .map(|c| c.lock().expect("cluster").url())
        .collect();
    let ports: Vec<u16> = {
        let c = cluster.lock().expect("cluster");
        (0..standalone).map(|i| c.server(i).port()).collect()
    };
    let probes: Vec<Probe> = ports
        .iter()
        .map(|port| Probe::Fixed(*port))
        .chain(
            groups
                .iter()
                .zip(&failovers)
                .map(|(group, failover)| Probe::Group {
                    sentinel: group.sentinels().server(0).port(),
                    name: group.name().to_owned(),
                    failover: failover.clone(),
                    grace: scenario.restart_grace.unwrap_or_default(),
                }),
        )
        .chain(
            clusters
                .clusters
                .iter()
                .zip(&clusters.restarted)
                .map(|(cluster, restarted)| Probe::Shards {
                    ports: {
                        let c = cluster.lock().expect("cluster");
                        (0..3).map(|i| c.servers().server(i).port()).collect()
                    },
                    restarted: restarted.clone(),
                    grace: scenario.restart_grace.unwrap_or_default(),
                }),
        )
        .collect();
    // One set of proxies per contender, so a partition can cut one client off alone.
    let mut proxies: Vec<Vec<Proxy>> = Vec::new();
    for _ in 0..scenario.contenders {
        let mut set = Vec::new();
        for port in &ports {
            set.push(Proxy::start(*port).await);
        }
        proxies.push(set);
    }
    let proxies = Arc::new(proxies);
    let health = Arc::new(Health {
        healthy: Mutex::new(vec![true; 5]),
        changes: Mutex::new(vec![0; 5]),
        quorum: 3,
    });
    let record = Arc::new(Mutex::new(Record::default()));
    let holding = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    let mut tasks = Vec::new();
    for holder in 0..scenario.contenders {
        let urls: Vec<String> = proxies[holder]
            .iter()
            .map(Proxy::url)
            .chain(groups.iter().map(SentinelGroup::url))
            .chain(cluster_urls.iter().cloned())
            .collect();
        let mut builder = RedLock::builder(&urls)
            .per_node_timeout(scenario.per_node_timeout)
            .retry_seed(seed ^ holder as u64);
        if let Some(grace) = scenario.restart_grace {
            builder = builder.restart_grace(grace);
        }
        let rl = builder.build().expect("config");
        tasks.push(tokio::spawn(contend(
            holder,
            Contender::new(
                rl,
                scenario.permits,
                scenario.read_write && holder % 2 == 0,
                scenario.read_write,
            ),
            probes.clone(),
            scenario.ttl,
            seed.wrapping_add(holder as u64),
            record.clone(),
            health.clone(),
            holding.clone(),
            stop.clone(),
        )));
    }

    let started = Instant::now();
    let mut fault_log = Vec::new();
    for (at, action) in &scenario.schedule {
        tokio::time::sleep_until((started + *at).into()).await;
        fault_log.push(format!("{:>6.2}s {action:?}", at.as_secs_f64()));
        if let Action::Failover(g) = action
            && let Ok(mut at) = failovers[*g].lock()
        {
            *at = Some(Instant::now());
        }
        let outcome = match action {
            Action::ShardKill(_)
            | Action::ShardRestart(_)
            | Action::ShardPause(_)
            | Action::ShardResume(_)
            | Action::Reshard(_) => {
                clusters
                    .apply(*action, &health, scenario.restart_grace.unwrap_or_default())
                    .await
            }
            _ => apply(*action, &cluster, &groups, &proxies, &health).await,
        };
        if let Action::Failover(g) = action {
            // The voter does not vote until its grace has passed after the client moved to the
            // new master: not held against availability meanwhile (a second after the grace).
            let grace = scenario.restart_grace.unwrap_or_default();
            health.healthy_after(5 - groups.len() + g, grace + Duration::from_secs(1));
        }
        if let Some(outcome) = outcome {
            fault_log.push(format!("        {outcome}"));
        }
    }
    tokio::time::sleep_until((started + scenario.duration).into()).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("contender");
    }
    // Heal, so what is left behind can be counted on every node.
    for group in groups.iter() {
        group.settle();
    }
    clusters.heal();
    for i in 0..standalone {
        for set in proxies.iter() {
            set[i].set(Fault::None);
        }
        let mut c = cluster.lock().expect("cluster");
        if !c.server(i).is_running() {
            if c.port_open(i) {
                c.resume(i);
            } else {
                c.restart(i);
            }
        }
    }
    // Right after the run, long before any ttl: no key of a cleanly released lock (or permit).
    let released_keys_left = {
        let c = cluster.lock().expect("cluster");
        let r = record.lock().expect("record");
        // A string key holding such a token, or a readers' set with one among its members.
        let released = |c: &Cluster, i: usize, key: &[u8]| {
            let kind: String = c.run(i, redis::cmd("TYPE").arg(key));
            let values = match kind.as_str() {
                "string" => c.get(i, key).into_iter().collect(),
                "zset" => c.run(i, redis::cmd("ZRANGE").arg(key).arg(0).arg(-1)),
                _ => Vec::<Vec<u8>>::new(),
            };
            // As written, or marked as waited for by a waiter (`w-` for `n-`).
            values.iter().any(|value| {
                r.cleanly_released
                    .iter()
                    .any(|token| redquorum_testkit::holds_token(value, token))
            })
        };
        let on_masters = groups.iter().map(|group| {
            let master = group.master_index();
            group
                .data()
                .keys()
                .into_iter()
                .filter(|(i, key)| *i == master && key.starts_with(PREFIX))
                .filter(|(i, key)| released(group.data(), *i, key))
                .count()
        });
        let on_shards = clusters.clusters.iter().map(|cluster| {
            let cluster = cluster.lock().expect("cluster");
            let servers = cluster.servers();
            servers
                .keys()
                .into_iter()
                .filter(|(_, key)| key.starts_with(PREFIX))
                .filter(|(i, key)| released(servers, *i, key))
                .count()
        });
        c.keys()
            .into_iter()
            .filter(|(_, key)| key.starts_with(PREFIX))
            .filter(|(i, key)| released(&c, *i, key))
            .count()
            + on_masters.sum::<usize>()
            + on_shards.sum::<usize>()
    };
    // Holders' keys from failed releases expire with the ttl.
    tokio::time::sleep(scenario.ttl + Duration::from_millis(200)).await;
    let keys_left = cluster
        .lock()
        .expect("cluster")
        .keys()
        .iter()
        .chain(
            groups
                .iter()
                .flat_map(|group| group.data().keys())
                .collect::<Vec<_>>()
                .iter(),
        )
        .chain(
            clusters
                .clusters
                .iter()
                .flat_map(|c| c.lock().expect("cluster").servers().keys())
                .collect::<Vec<_>>()
                .iter(),
        )
        .filter(|(_, k)| k.starts_with(PREFIX))
        .count();

    let mut r = record.lock().expect("record");
    let mut figures = std::mem::take(&mut r.figures);
    figures.name = scenario.name;
    figures.seed = seed;
    figures.overlaps = match scenario.permits {
        Some(permits) => permit_violations(&r.permit_holds, permits),
        None if scenario.read_write => writers_beside_anyone(&r.rw_holds),
        None => overlaps(&r.holds),
    };
    figures.most_readers = most_readers(&r.rw_holds);
    figures.writes = r.rw_holds.iter().filter(|(_, write)| *write).count();
    figures.keys_left = keys_left;
    figures.released_keys_left = released_keys_left;
    figures.fault_log = fault_log;
    let mut lat = r.latencies.clone();
    lat.sort_unstable();
    let at = |q: f64| {
        lat.get(((lat.len().max(1) - 1) as f64 * q) as usize)
            .copied()
            .unwrap_or_default()
    };
    figures.acquire_p50 = at(0.5);
    figures.acquire_p99 = at(0.99);
    figures.acquire_max = lat.last().copied().unwrap_or_default();
    figures
}

/// Applies `action`; what it came to, when that is worth logging.
async fn apply(
    action: Action,
    cluster: &Mutex<Cluster>,
    groups: &[SentinelGroup],
    proxies: &[Vec<Proxy>],
    health: &Arc<Health>,
) -> Option<String> {
    let set_health = |i: usize, ok: bool| {
        if let Ok(mut h) = health.healthy.lock() {
            h[i] = ok;
        }
        health.changed(i);
    };
    match action {
        Action::Kill(i) => {
            cluster.lock().expect("cluster").kill(i);
            set_health(i, false);
        }
        Action::Restart(i) => {
            cluster.lock().expect("cluster").restart(i);
            health.changed(i);
            // Counted as available to the clients once they can have reconnected: a client
            // tries a down master again at most 250 ms apart (`node::RECONNECT_MAX_DELAY`),
            // and fails fast until then. Attempts in that window are not held against
            // availability; safety is checked throughout.
            health.healthy_after(i, Duration::from_millis(300));
        }
        Action::Pause(i) => {
            cluster.lock().expect("cluster").pause(i);
            set_health(i, false);
        }
        Action::Resume(i) => {
            cluster.lock().expect("cluster").resume(i);
            set_health(i, true);
        }
        Action::Partition {
            client,
            node,
            fault,
        } => {
            // One client loses a node; the node stays healthy for the others.
            proxies[client][node].set(fault);
        }
        Action::Net(i, fault) => {
            for set in proxies {
                set[i].set(fault);
            }
            // The scenarios delay by more than the per-node timeout: such a node cannot vote.
            set_health(i, fault == Fault::None);
        }
        Action::Expire(i) => {
            let c = cluster.lock().expect("cluster");
            if c.server(i).is_running() {
                // The lock's key, and a read-write lock's readers.
                let key = format!("redquorum:{{{RESOURCE}}}");
                let readers = format!("{key}:readers");
                let _: i64 = c.run(i, redis::cmd("DEL").arg(key).arg(readers));
            }
        }
        Action::Failover(g) => {
            // Unhealthy until the run marks it back after the clients' grace.
            set_health(5 - groups.len() + g, false);
            let started = groups[g].start_failover();
            return Some(match started {
                Ok(()) => "failover started".to_owned(),
                Err(e) => format!("failover refused: {e}"),
            });
        }
        // Applied by `Clusters::apply`.
        Action::ShardKill(_)
        | Action::ShardRestart(_)
        | Action::ShardPause(_)
        | Action::ShardResume(_)
        | Action::Reshard(_) => {}
    }
    None
}

/// What a contender takes: the lock, a permit of a semaphore, or one side of a read-write
/// lock.
enum Contender {
    Lock(RedLock),
    Semaphore(redquorum::Semaphore),
    ReadWrite(redquorum::RwLock, bool),
}

impl Contender {
    fn new(rl: RedLock, permits: Option<u32>, write: bool, read_write: bool) -> Self {
        match (permits, read_write) {
            (Some(permits), _) => {
                Self::Semaphore(rl.semaphore(RESOURCE, permits).expect("semaphore"))
            }
            (None, true) => Self::ReadWrite(rl.rw_lock(RESOURCE).expect("rw"), write),
            (None, false) => Self::Lock(rl),
        }
    }

    /// How many may hold at once (a reader counts the lock free whoever holds: its refusals
    /// by a writer are conflicts, never held against availability).
    fn capacity(&self) -> usize {
        match self {
            Self::Lock(_) | Self::ReadWrite(_, true) => 1,
            Self::ReadWrite(_, false) => usize::MAX,
            Self::Semaphore(semaphore) => semaphore.permits() as usize,
        }
    }

    async fn try_acquire(&self, ttl: Duration) -> Result<Held, Error> {
        match self {
            Self::Lock(rl) => rl.try_acquire(RESOURCE, ttl).await.map(Held::Lock),
            Self::Semaphore(semaphore) => semaphore.try_acquire(ttl).await.map(Held::Permit),
            Self::ReadWrite(rw, true) => rw.try_write(ttl).await.map(|l| Held::Side(l, true)),
            Self::ReadWrite(rw, false) => rw.try_read(ttl).await.map(|l| Held::Side(l, false)),
        }
    }
}

/// A held lock, permit, or side of a read-write lock (`true`: the write).
enum Held {
    Lock(redquorum::Lock),
    Permit(Permit),
    Side(redquorum::Lock, bool),
}

impl Held {
    fn valid_until(&self) -> Instant {
        match self {
            Self::Lock(lock) | Self::Side(lock, _) => lock.valid_until(),
            Self::Permit(permit) => permit.valid_until(),
        }
    }

    fn remaining(&self) -> Duration {
        match self {
            Self::Lock(lock) | Self::Side(lock, _) => lock.remaining(),
            Self::Permit(permit) => permit.remaining(),
        }
    }

    fn token(&self) -> String {
        match self {
            Self::Lock(lock) | Self::Side(lock, _) => lock.token().expose().to_owned(),
            Self::Permit(permit) => permit.token().expose().to_owned(),
        }
    }

    fn index(&self) -> Option<u32> {
        match self {
            Self::Lock(_) | Self::Side(..) => None,
            Self::Permit(permit) => Some(permit.index()),
        }
    }

    /// Which side of a read-write lock (`Some(true)`: the write).
    fn write(&self) -> Option<bool> {
        match self {
            Self::Side(_, write) => Some(*write),
            _ => None,
        }
    }

    /// The key on the masters (a reader's: the readers' set, where its token is a member).
    fn key(&self) -> String {
        match (self.index(), self.write()) {
            (Some(index), _) => format!("redquorum:{{{RESOURCE}}}:permit:{index}"),
            (None, Some(false)) => format!("redquorum:{{{RESOURCE}}}:readers"),
            (None, _) => format!("redquorum:{{{RESOURCE}}}"),
        }
    }

    async fn release(self) -> Result<Report, Error> {
        match self {
            Self::Lock(lock) | Self::Side(lock, _) => lock.release().await,
            Self::Permit(permit) => permit.release().await,
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn contend(
    holder: usize,
    contender: Contender,
    probes: Vec<Probe>,
    ttl: Duration,
    seed: u64,
    record: Arc<Mutex<Record>>,
    health: Arc<Health>,
    holding: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut held = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let actions_before = health.actions();
        let majority_and_free =
            health.majority() && holding.load(Ordering::Acquire) < contender.capacity();
        let t = Instant::now();
        let result = contender.try_acquire(ttl).await;
        let latency = t.elapsed();
        // Not held against availability: the nemesis acted while the round ran.
        let majority_and_free =
            majority_and_free && health.actions() == actions_before && health.majority();
        match result {
            Ok(lock) => {
                let acquired = Instant::now();
                holding.fetch_add(1, Ordering::AcqRel);
                let majority_until =
                    majority_holds_key_until_at(&probes, &lock.key(), &lock.token()).await;
                if lock.valid_until() > majority_until {
                    record.lock().expect("record").figures.optimistic_validity += 1;
                }
                {
                    let mut r = record.lock().expect("record");
                    r.figures.attempts += 1;
                    r.figures.acquisitions += 1;
                    r.latencies.push(latency);
                    if majority_and_free {
                        r.figures.attempts_with_majority_and_free += 1;
                    }
                }
                // Most holds are short; one in twenty lasts until the deadline, so a deadline
                // later than the servers' expiry lets another contender in while this one
                // holds (rarely: each costs the others a ttl of waiting).
                // Counted, not drawn: each contender's first hold (and every 20th after) goes
                // to the deadline, so a run with any acquisition has one, however few.
                let to_deadline = held.is_multiple_of(20);
                held += 1;
                let hold = if to_deadline {
                    lock.remaining()
                } else {
                    Duration::from_millis(rng.random_range(0..20)).min(lock.remaining())
                };
                tokio::time::sleep(hold).await;
                let valid_until = lock.valid_until();
                let release_started = Instant::now();
                holding.fetch_sub(1, Ordering::AcqRel);
                let token = lock.token();
                let index = lock.index();
                let write = lock.write();
                let released = lock.release().await;
                let mut r = record.lock().expect("record");
                r.figures.holds_to_deadline += u64::from(to_deadline);
                let answered_everywhere = |report: &redquorum::Report| {
                    report.iter().all(|n| {
                        matches!(
                            n.outcome(),
                            NodeOutcome::Released
                                | NodeOutcome::Missing
                                | NodeOutcome::HeldByOther { .. }
                        )
                    })
                };
                let clean = match &released {
                    Ok(report) => answered_everywhere(report),
                    Err(e) => e.report().is_some_and(answered_everywhere),
                };
                if clean {
                    r.cleanly_released.insert(token);
                }
                let hold = Hold {
                    holder,
                    acquired,
                    valid_until,
                    release_started,
                };
                match (index, write) {
                    (Some(index), _) => r.permit_holds.push(PermitHold { index, hold }),
                    (None, Some(write)) => r.rw_holds.push((hold, write)),
                    (None, None) => r.holds.push(hold),
                }
                let report = match &released {
                    Ok(report) => Some(report),
                    Err(e) => {
                        if e.is_expired() {
                            r.figures.releases_after_expiry += 1;
                        }
                        e.report()
                    }
                };
                r.figures.foreign_release_refusals += report
                    .map(|rep| {
                        rep.iter()
                            .filter(|n| matches!(n.outcome(), NodeOutcome::HeldByOther { .. }))
                            .count() as u64
                    })
                    .unwrap_or(0);
            }
            Err(e) => {
                let mut r = record.lock().expect("record");
                r.figures.attempts += 1;
                match e {
                    Error::Conflict(_) => r.figures.conflicts += 1,
                    Error::NoQuorum(_) => r.figures.no_quorum += 1,
                    _ => r.figures.other_errors += 1,
                }
                // An attempt that found the lock free and a majority healthy, yet failed to
                // acquire for a reason other than another holder getting in first.
                if majority_and_free {
                    r.figures.attempts_with_majority_and_free += 1;
                    if !e.is_conflict() {
                        r.figures.failures_with_majority_and_free += 1;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(1..10))).await;
    }
}

/// When fewer than a majority of the masters will still hold our key, asked of the servers
/// directly (not through the proxies). A master that does not answer within 50 ms counts as
/// holding it for good: down or hung, it cannot grant the lock to anyone else either.
pub async fn majority_holds_until(ports: &[u16], token: &str) -> Instant {
    majority_holds_key_until(ports, &format!("redquorum:{{{RESOURCE}}}"), token).await
}

/// As [`majority_holds_until`], for any key (a permit's).
pub async fn majority_holds_key_until(ports: &[u16], key: &str, token: &str) -> Instant {
    let probes: Vec<Probe> = ports.iter().map(|port| Probe::Fixed(*port)).collect();
    majority_holds_key_until_at(&probes, key, token).await
}

/// The value and ttl `token` has in `KEYS[1]`: a string key's value and ttl, or, in a
/// read-write lock's readers' set, the token while its share is live and what is left of it.
const HOLDS_UNTIL: &str = "
if redis.call('TYPE', KEYS[1])['ok'] == 'zset' then
  local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not score or tonumber(score) <= now then return {false, -2} end
  return {ARGV[1], tonumber(score) - now}
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}";

/// Until when the server at `port` holds `key` with `token`: `Some(Some(t))`; `Some(None)`
/// when it does not have it (or a cluster master redirects: the key is not there);
/// `None` when it does not answer.
async fn holds_until(port: u16, key: &str, token: &str) -> Option<Option<Instant>> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let mut read = redis::pipe();
    // `ASKING` first, so a cluster master importing the slot answers for keys it has; a
    // standalone master (or a cluster one outside a migration) just says OK.
    read.ignore_errors()
        .cmd("ASKING")
        .ignore()
        .cmd("EVAL")
        .arg(HOLDS_UNTIL)
        .arg(1)
        .arg(key)
        .arg(token);
    let (answer,): (redis::Value,) = read.query_async(&mut conn).await.ok()?;
    let (value, pttl): (Option<String>, i64) = match answer.extract_error() {
        Ok(value) => redis::from_redis_value(value).ok()?,
        Err(err) if err.redirect_node().is_some() => return Some(None),
        Err(_) => return None,
    };
    // Measured after the reply: never earlier than the server's own expiry.
    let now = Instant::now();
    Some(match (value, u64::try_from(pttl)) {
        (Some(v), Ok(ms)) if redquorum_testkit::holds_token(v.as_bytes(), token) => {
            Some(now + Duration::from_millis(ms))
        }
        _ => None,
    })
}

/// The Redis Cluster voters of a run, and what the nemesis did to them.
struct Clusters {
    clusters: Vec<Arc<Mutex<RedisCluster>>>,
    /// Per cluster, the master killed or paused and not back yet.
    down: Mutex<Vec<Option<usize>>>,
    /// Per cluster, when a master last restarted (for the probe's quarantine).
    restarted: Vec<Arc<Mutex<Option<Instant>>>>,
    /// The voter index of cluster 0.
    first_voter: usize,
}

impl Clusters {
    async fn apply(&self, action: Action, health: &Arc<Health>, grace: Duration) -> Option<String> {
        let c = match action {
            Action::ShardKill(c)
            | Action::ShardRestart(c)
            | Action::ShardPause(c)
            | Action::ShardResume(c)
            | Action::Reshard(c) => c,
            _ => return None,
        };
        let voter = self.first_voter + c;
        let cluster = self.clusters[c].clone();
        let key = format!("redquorum:{{{RESOURCE}}}");
        let down = self.down.lock().expect("down")[c];
        let mark = |ok: bool| {
            if let Ok(mut h) = health.healthy.lock() {
                h[voter] = ok;
            }
            health.changed(voter)
        };
        let outcome = match action {
            Action::ShardKill(_) | Action::ShardPause(_) if down.is_none() => {
                let pause = matches!(action, Action::ShardPause(_));
                let owner = tokio::task::spawn_blocking(move || {
                    let mut cluster = cluster.lock().expect("cluster");
                    let owner = cluster.owner_of(key.as_bytes());
                    if pause {
                        cluster.servers_mut().pause(owner);
                    } else {
                        cluster.servers_mut().kill(owner);
                    }
                    owner
                })
                .await
                .expect("nemesis");
                self.down.lock().expect("down")[c] = Some(owner);
                mark(false);
                format!("master {owner} of the lock's slot")
            }
            Action::ShardRestart(_) | Action::ShardResume(_) if down.is_some() => {
                let owner = down.unwrap_or_default();
                let restart = matches!(action, Action::ShardRestart(_));
                tokio::task::spawn_blocking(move || {
                    let mut cluster = cluster.lock().expect("cluster");
                    if restart {
                        cluster.servers_mut().restart(owner);
                    } else {
                        cluster.servers_mut().resume(owner);
                    }
                })
                .await
                .expect("nemesis");
                self.down.lock().expect("down")[c] = None;
                if restart {
                    *self.restarted[c].lock().expect("restarted") = Some(Instant::now());
                    mark(false);
                    // The restarted master votes after the clients' grace.
                    health.healthy_after(voter, grace + Duration::from_secs(1));
                } else {
                    mark(true);
                }
                format!("master {owner} back")
            }
            Action::Reshard(_) if down.is_none() => {
                health.changed(voter);
                tokio::task::spawn_blocking(move || {
                    let cluster = cluster.lock().expect("cluster");
                    let from = cluster.owner_of(key.as_bytes());
                    let to = (from + 1) % 3;
                    cluster.move_slot(cluster.slot_of(key.as_bytes()), from, to);
                    format!("slot moved from master {from} to {to}")
                })
                .await
                .expect("nemesis")
            }
            _ => "skipped (a master is down)".to_owned(),
        };
        Some(outcome)
    }

    /// Brings every killed or paused master back.
    fn heal(&self) {
        let mut down = self.down.lock().expect("down");
        for (c, owner) in down.iter_mut().enumerate() {
            if let Some(owner) = owner.take() {
                let mut cluster = self.clusters[c].lock().expect("cluster");
                let servers = cluster.servers_mut();
                if servers.port_open(owner) {
                    servers.resume(owner);
                } else {
                    servers.restart(owner);
                }
            }
        }
    }
}

/// The port of the master a sentinel names now.
async fn named_master(sentinel: u16, name: &str) -> Option<u16> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{sentinel}")).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let (_, port): (String, u16) = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(name)
        .query_async(&mut conn)
        .await
        .ok()?;
    Some(port)
}

/// As [`majority_holds_key_until`], each voter found as `probes` say (a Sentinel group's
/// voter is the master its sentinel names at the moment of the probe).
pub async fn majority_holds_key_until_at(probes: &[Probe], key: &str, token: &str) -> Instant {
    let key = key.to_owned();
    let voters = probes.len();
    let probes = probes.iter().map(|probe| {
        let key = key.clone();
        async move {
            // A group within its grace after a failover, or a cluster after a shard restart,
            // grants to nobody else until then.
            let quarantined_until = match probe {
                Probe::Group {
                    failover: at,
                    grace,
                    ..
                }
                | Probe::Shards {
                    restarted: at,
                    grace,
                    ..
                } => at.lock().ok().and_then(|at| *at).map(|at| at + *grace),
                Probe::Fixed(_) => None,
            };
            let probe = async {
                let ports = match probe {
                    Probe::Fixed(port) => vec![*port],
                    Probe::Group { sentinel, name, .. } => {
                        vec![named_master(*sentinel, name).await?]
                    }
                    Probe::Shards { ports, .. } => ports.clone(),
                };
                // `None`: a server did not answer (it may have the key); `Some(None)`: not
                // there.
                let answers = futures::future::join_all(
                    ports.iter().map(|port| holds_until(*port, &key, token)),
                )
                .await;
                let mut until = None;
                for answer in answers {
                    if let Some(at) = answer? {
                        until = Some(until.map_or(at, |u: Instant| u.max(at)));
                    }
                }
                Some(until.unwrap_or_else(Instant::now))
            };
            let holds = tokio::time::timeout(Duration::from_millis(50), probe)
                .await
                .ok()
                .flatten()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            holds.max(quarantined_until.unwrap_or(holds))
        }
    });
    let mut until: Vec<Instant> = futures::future::join_all(probes).await;
    until.sort_unstable_by(|a, b| b.cmp(a));
    until[voters / 2]
}

/// A fault on a node and the action that heals it.
pub type FaultPair = fn(usize) -> (Action, Action);

/// A random schedule over `duration`: every `every`, faults on 1 to `max_down` random nodes,
/// healed after a random share (`heal_after`) of `every`. The same seed gives the same schedule.
pub fn random_schedule(
    seed: u64,
    duration: Duration,
    every: Duration,
    heal_after: std::ops::Range<f64>,
    max_down: usize,
    faults: &[FaultPair],
) -> Vec<(Duration, Action)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut schedule = Vec::new();
    let mut at = every;
    while at + every < duration {
        let mut nodes: Vec<usize> = (0..5).collect();
        let down = rng.random_range(1..=max_down);
        let mut heal = Vec::new();
        for _ in 0..down {
            let node = nodes.remove(rng.random_range(0..nodes.len()));
            let (fault, cure) = faults[rng.random_range(0..faults.len())](node);
            schedule.push((at, fault));
            heal.push(cure);
        }
        let heal_at = at + every.mul_f64(rng.random_range(heal_after.clone()));
        schedule.extend(heal.into_iter().map(|cure| (heal_at, cure)));
        at += every;
    }
    schedule
}
