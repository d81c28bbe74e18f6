//! A local cluster of independent `redis-server` (or `valkey-server`) masters on 127.0.0.1 that
//! outlives the process that started it (`redquorum dev …`, the lab's demo and bench).
//!
//! Each node is a server started from `deploy/redis.conf` (compiled in), with its own port and
//! data directory under the state directory. The pid of every server started is kept in its
//! directory, and a signal goes to a pid only after `/proc` confirms it is still that server
//! program on that port: nothing else on the machine is ever touched.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::ServerKind;

/// The recommended configuration every dev node starts from: `deploy/redis.conf` (linked as
/// `testkit/redis.conf`, so the packaged crate carries a copy).
const REDIS_CONF: &str = include_str!("../redis.conf");
/// Ports tried first, so URLs stay the same from one `dev up` to the next.
const FIRST_PORT: u16 = 7101;
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a dev-cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// The request does not fit the cluster: a node index out of range, or a size other than
    /// the existing cluster's.
    #[error("{0}")]
    Usage(String),
    /// A server would not start or stop, or a state file could not be written.
    #[error("{0}")]
    Failure(String),
}

impl From<std::io::Error> for DevError {
    fn from(e: std::io::Error) -> Self {
        Self::Failure(e.to_string())
    }
}

/// A node's process state, as `/proc` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// The process runs.
    Running,
    /// The process is stopped (SIGSTOP): it accepts connections and answers nothing.
    Paused,
    /// No process.
    Down,
}

impl NodeState {
    /// `up`, `paused` or `down`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Running => "up",
            Self::Paused => "paused",
            Self::Down => "down",
        }
    }
}

/// One master of the dev cluster.
#[derive(Debug, Clone)]
pub struct DevNode {
    /// Its place in the cluster, from 0.
    pub index: usize,
    /// Its loopback port.
    pub port: u16,
    /// The server program it runs.
    pub kind: ServerKind,
    dir: PathBuf,
}

impl DevNode {
    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The pid recorded for this node, if it is still that server.
    pub fn pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.dir.join("pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        (cmdline.contains(self.kind.program()) && cmdline.contains(&self.port.to_string()))
            .then_some(pid)
    }

    /// Whether its process runs, is paused or is gone.
    pub fn state(&self) -> NodeState {
        let Some(pid) = self.pid() else {
            return NodeState::Down;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state letter follows the parenthesised command name.
        match stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
        {
            Some('T' | 't') => NodeState::Paused,
            Some('Z' | 'X') | None => NodeState::Down,
            Some(_) => NodeState::Running,
        }
    }

    /// Sends PING and says how long the answer took, or why there was none.
    pub fn ping(&self, timeout: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        stream.write_all(b"PING\r\n").map_err(|e| e.to_string())?;
        let mut reply = [0u8; 64];
        let n = stream
            .read(&mut reply)
            .map_err(|_| "no answer".to_owned())?;
        let reply = String::from_utf8_lossy(reply.get(..n).unwrap_or_default());
        if reply.starts_with("+PONG") {
            Ok(start.elapsed())
        } else {
            Err(reply.trim().to_owned())
        }
    }

    fn signal(&self, signal: Signal) -> Result<(), DevError> {
        let pid = self
            .pid()
            .ok_or_else(|| DevError::Failure(format!("node {} is not running", self.index)))?;
        let pid =
            i32::try_from(pid).map_err(|_| DevError::Failure("pid out of range".to_owned()))?;
        kill(Pid::from_raw(pid), signal)
            .map_err(|e| DevError::Failure(format!("cannot signal node {}: {e}", self.index)))
    }

    /// Whether the server on this node's port is process `pid`: a port free a moment ago can
    /// be another program's server by now (then ours fails to bind it and exits).
    fn is_process(&self, pid: u32) -> bool {
        let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{}", self.port)) else {
            return false;
        };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("INFO")
            .arg("server")
            .query::<String>(&mut con)
            .is_ok_and(|info| {
                info.lines()
                    .any(|line| line.trim() == format!("process_id:{pid}"))
            })
    }

    fn start(&self, conf: &Path) -> Result<(), DevError> {
        std::fs::create_dir_all(&self.dir)?;
        let log = std::fs::File::create(self.dir.join("redis.log"))?;
        let program = self.kind.program();
        let mut command = Command::new(program);
        // A node of a cluster with fake clocks (`DevCluster::start_memory_only_with_fake_clocks`)
        // runs under libfaketime, reading its offset from its `faketime` file at every call.
        if let Ok(preload) = std::fs::read_to_string(self.dir.join("preload")) {
            command.envs(crate::fake_clock_env(
                Path::new(preload.trim()),
                &self.dir.join("faketime"),
            ));
        }
        let mut child = command
            .arg(conf)
            .args(["--port", &self.port.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--bind", "127.0.0.1", "--daemonize", "no", "--logfile", ""])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C meant for redquorum does not reach it.
            .process_group(0)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => DevError::Failure(format!(
                    "{program} is not installed: {}",
                    self.kind.how_to_install()
                )),
                _ => DevError::Failure(format!("cannot start {program}: {e}")),
            })?;
        std::fs::write(self.dir.join("pid"), child.id().to_string())?;
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.ping(Duration::from_millis(200)).is_ok() && self.is_process(child.id()) {
                return Ok(());
            }
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        Err(DevError::Failure(format!(
            "node {} (port {}) did not start; its log ends with:\n{}",
            self.index,
            self.port,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )))
    }
}

/// The dev cluster: its state directory and its nodes.
#[derive(Debug, Clone)]
pub struct DevCluster {
    dir: PathBuf,
    /// Its nodes, in index order.
    pub nodes: Vec<DevNode>,
}

impl DevCluster {
    /// Where `redquorum dev` keeps its cluster: `$REDQUORUM_DEV_DIR`, or
    /// `$XDG_STATE_HOME/redquorum/dev`, or `~/.local/state/redquorum/dev`.
    ///
    /// # Errors
    /// [`DevError::Usage`] when none of these variables is set.
    pub fn default_dir() -> Result<PathBuf, DevError> {
        let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(dir) = set("REDQUORUM_DEV_DIR") {
            return Ok(PathBuf::from(dir));
        }
        let state = set("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| set("HOME").map(|home| PathBuf::from(home).join(".local").join("state")))
            .ok_or_else(|| {
                DevError::Usage(
                    "neither REDQUORUM_DEV_DIR nor HOME is set: where would state go?".to_owned(),
                )
            })?;
        Ok(state.join("redquorum").join("dev"))
    }

    /// The cluster recorded in the state directory `dir`, if there is one.
    ///
    /// # Errors
    /// When the recorded ports are corrupt.
    pub fn open(dir: &Path) -> Result<Option<Self>, DevError> {
        let dir = dir.to_path_buf();
        let Ok(ports) = std::fs::read_to_string(dir.join("ports")) else {
            return Ok(None);
        };
        // Clusters recorded before the file existed are Redis.
        let kind = match std::fs::read_to_string(dir.join("server")) {
            Ok(name) => ServerKind::from_name(name.trim()).ok_or_else(|| {
                DevError::Failure(format!("corrupt {}", dir.join("server").display()))
            })?,
            Err(_) => ServerKind::Redis,
        };
        let nodes = ports
            .split_whitespace()
            .enumerate()
            .map(|(index, port)| {
                let port = port.parse().map_err(|_| {
                    DevError::Failure(format!("corrupt {}", dir.join("ports").display()))
                })?;
                Ok(DevNode {
                    index,
                    port,
                    kind,
                    dir: dir.join(format!("node-{index}")),
                })
            })
            .collect::<Result<_, DevError>>()?;
        Ok(Some(Self { dir, nodes }))
    }

    /// Starts a cluster of `count` nodes of `kind` with its state in `dir`, or the nodes of the
    /// one already there that are down. Without a `kind`, the one already there keeps its
    /// own, and a new one is Redis. Returns the cluster and whether it was created now.
    ///
    /// # Errors
    /// [`DevError::Usage`] when the cluster in `dir` has another size or server;
    /// [`DevError::Failure`] when a server does not start (the ones this call started are
    /// stopped again).
    pub fn up(
        dir: &Path,
        count: usize,
        kind: Option<ServerKind>,
    ) -> Result<(Self, bool), DevError> {
        if let Some(cluster) = Self::open(dir)? {
            if cluster.nodes.len() != count {
                return Err(DevError::Usage(format!(
                    "a dev cluster of {} nodes exists already (`redquorum dev down` first)",
                    cluster.nodes.len()
                )));
            }
            let running = cluster.kind();
            if kind.is_some_and(|kind| kind != running) {
                return Err(DevError::Usage(format!(
                    "a dev cluster of {} exists already (`--server {}` for it, or `redquorum \
                     dev down` first)",
                    running.program(),
                    running.name()
                )));
            }
            for node in &cluster.nodes {
                if node.state() == NodeState::Down {
                    node.start(&cluster.conf())?;
                }
            }
            return Ok((cluster, false));
        }
        let kind = kind.unwrap_or(ServerKind::Redis);
        let preferred = preferred_ports(count)?;
        let cluster =
            match Self::create(dir.to_path_buf(), preferred.clone(), REDIS_CONF, kind, None) {
                Ok(cluster) => cluster,
                // Another process bound a preferred port between the check and the start (two dev
                // clusters starting at once: the CLI's tests found it, one failing with "Address
                // already in use" on 7101): any free ports then. `create` stopped what it started.
                Err(_) if preferred.first() == Some(&FIRST_PORT) => Self::create(
                    dir.to_path_buf(),
                    crate::free_ports(count)?,
                    REDIS_CONF,
                    kind,
                    None,
                )?,
                Err(e) => return Err(e),
            };
        Ok((cluster, true))
    }

    /// The server program its nodes run.
    pub fn kind(&self) -> ServerKind {
        self.nodes
            .first()
            .map_or(ServerKind::Redis, |node| node.kind)
    }

    /// A cluster of `count` memory-only nodes (no AOF, no snapshots, no memory limit) on any
    /// free ports, with its state in `dir`: for measuring the client, not the disk. With
    /// `maxmemory` set, 64 concurrent pairs ran at about 0.6 × the rate and varied twice as
    /// much between runs, for the baseline and redquorum alike. Stop it with [`down`](Self::down).
    ///
    /// # Errors
    /// When a server does not start (the ones this call started are stopped again).
    pub fn start_memory_only(
        dir: PathBuf,
        count: usize,
        kind: ServerKind,
    ) -> Result<Self, DevError> {
        Self::create_on_free_ports(dir, count, &memory_only_conf(), kind, None)
    }

    /// [`create`](Self::create) on ports from [`crate::free_ports`], tried again on fresh ones
    /// (twice at most) when a node could not bind its port: another process (one that is not
    /// this crate's, or one with its own cursor) can take a port between the allocator's check
    /// and the server's start.
    fn create_on_free_ports(
        dir: PathBuf,
        count: usize,
        conf: &str,
        kind: ServerKind,
        fake_clocks: Option<&Path>,
    ) -> Result<Self, DevError> {
        let mut tries = 0;
        loop {
            match Self::create(
                dir.clone(),
                crate::free_ports(count)?,
                conf,
                kind,
                fake_clocks,
            ) {
                Err(e) if tries < 2 && e.to_string().contains("Address already in use") => {
                    tries += 1;
                }
                result => return result,
            }
        }
    }

    /// As [`start_memory_only`](Self::start_memory_only), on Valkey servers whose wall clocks
    /// can be jumped while they run ([`jump_clock`](Self::jump_clock)): each runs under
    /// libfaketime (`libfaketime`, the preload library's path), its monotonic clock left real,
    /// so `PX` expiries and `TIME` follow the jumps; a restarted node keeps its offset. Valkey
    /// only: Debian's `redis-server` (jemalloc) does not start under libfaketime.
    ///
    /// # Errors
    /// As [`start_memory_only`](Self::start_memory_only).
    pub fn start_memory_only_with_fake_clocks(
        dir: PathBuf,
        count: usize,
        libfaketime: &Path,
    ) -> Result<Self, DevError> {
        Self::create_on_free_ports(
            dir,
            count,
            &memory_only_conf(),
            ServerKind::Valkey,
            Some(libfaketime),
        )
    }

    /// Sets node `index`'s wall clock to `offset` from the real one (libfaketime's syntax:
    /// `+2s`, `-5m`, `+0`), at once; only for a cluster of
    /// [`start_memory_only_with_fake_clocks`](Self::start_memory_only_with_fake_clocks).
    ///
    /// # Errors
    /// When there is no such node, or its clock cannot be jumped (a cluster without fake
    /// clocks).
    pub fn jump_clock(&self, index: usize, offset: &str) -> Result<(), DevError> {
        let node = self.node(index)?;
        if !node.dir.join("preload").exists() {
            return Err(DevError::Failure(format!(
                "node {index}'s clock cannot be jumped: it does not run under libfaketime"
            )));
        }
        crate::write_clock(&node.dir.join("faketime"), offset)?;
        Ok(())
    }

    /// Writes the configuration and starts one node per port; on failure, stops what started.
    fn create(
        dir: PathBuf,
        ports: Vec<u16>,
        conf: &str,
        kind: ServerKind,
        fake_clocks: Option<&Path>,
    ) -> Result<Self, DevError> {
        std::fs::create_dir_all(&dir)?;
        let cluster = Self {
            nodes: ports
                .into_iter()
                .enumerate()
                .map(|(index, port)| DevNode {
                    index,
                    port,
                    kind,
                    dir: dir.join(format!("node-{index}")),
                })
                .collect(),
            dir,
        };
        std::fs::write(cluster.conf(), conf)?;
        std::fs::write(cluster.dir.join("server"), kind.name())?;
        let ports: Vec<String> = cluster.nodes.iter().map(|n| n.port.to_string()).collect();
        std::fs::write(cluster.dir.join("ports"), ports.join(" "))?;
        for node in &cluster.nodes {
            if let Some(libfaketime) = fake_clocks {
                std::fs::create_dir_all(&node.dir)?;
                std::fs::write(node.dir.join("preload"), libfaketime.display().to_string())?;
                std::fs::write(node.dir.join("faketime"), "+0")?;
            }
            if let Err(e) = node.start(&cluster.conf()) {
                let _ = cluster.down();
                return Err(e);
            }
        }
        Ok(cluster)
    }

    /// Stops every node (SIGTERM, then SIGKILL after 5 s) and deletes the files it made.
    ///
    /// # Errors
    /// When a node cannot be killed or a file cannot be removed.
    pub fn down(&self) -> Result<(), DevError> {
        for node in &self.nodes {
            if node.state() != NodeState::Down {
                let _ = node.signal(Signal::SIGCONT);
                let _ = node.signal(Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.nodes.iter().any(|n| n.state() != NodeState::Down) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for node in &self.nodes {
            if node.state() != NodeState::Down {
                node.signal(Signal::SIGKILL)?;
            }
        }
        // Only what `up` created: the state directory may be one the user named.
        for node in &self.nodes {
            remove_if_present(std::fs::remove_dir_all(&node.dir))?;
        }
        remove_if_present(std::fs::remove_file(self.conf()))?;
        remove_if_present(std::fs::remove_file(self.dir.join("ports")))?;
        remove_if_present(std::fs::remove_file(self.dir.join("server")))?;
        let _ = std::fs::remove_dir(&self.dir);
        Ok(())
    }

    /// Every node's URL, in index order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(DevNode::url).collect()
    }

    /// Node `index`.
    ///
    /// # Errors
    /// [`DevError::Usage`] when there is no such node.
    pub fn node(&self, index: usize) -> Result<&DevNode, DevError> {
        self.nodes.get(index).ok_or_else(|| {
            DevError::Usage(format!(
                "no node {index}: the dev cluster has nodes 0 to {}",
                self.nodes.len().saturating_sub(1)
            ))
        })
    }

    /// SIGKILL: a crash. Waits until the process is gone.
    ///
    /// # Errors
    /// When there is no such node or it cannot be signalled (or, for a restart, started).
    pub fn kill(&self, index: usize) -> Result<(), DevError> {
        let node = self.node(index)?;
        node.signal(Signal::SIGKILL)?;
        wait_for(|| node.state() == NodeState::Down);
        Ok(())
    }

    /// SIGSTOP: a hung master. Waits until the process is stopped.
    ///
    /// # Errors
    /// When there is no such node or it cannot be signalled (or, for a restart, started).
    pub fn pause(&self, index: usize) -> Result<(), DevError> {
        let node = self.node(index)?;
        node.signal(Signal::SIGSTOP)?;
        wait_for(|| node.state() != NodeState::Running);
        Ok(())
    }

    /// SIGCONT. Waits until the process runs again.
    ///
    /// # Errors
    /// When there is no such node or it cannot be signalled (or, for a restart, started).
    pub fn resume(&self, index: usize) -> Result<(), DevError> {
        let node = self.node(index)?;
        node.signal(Signal::SIGCONT)?;
        wait_for(|| node.state() != NodeState::Paused);
        Ok(())
    }

    /// Starts node `index` again on its port and data, killing it first if it runs.
    ///
    /// # Errors
    /// When there is no such node or it cannot be signalled (or, for a restart, started).
    pub fn restart(&self, index: usize) -> Result<(), DevError> {
        let node = self.node(index)?;
        if node.state() != NodeState::Down {
            let _ = node.signal(Signal::SIGCONT);
            self.kill(index)?;
        }
        node.start(&self.conf())
    }

    fn conf(&self) -> PathBuf {
        self.dir.join("redis.conf")
    }
}

/// The configuration of memory-only nodes (no AOF, no snapshots, no memory limit): for
/// measuring the client, not the disk or the memory limit.
fn memory_only_conf() -> String {
    format!("{REDIS_CONF}\n# redquorum lab: memory only.\nappendonly no\nsave \"\"\nmaxmemory 0\n")
}

/// Polls `done` every 5 ms for up to 5 s.
fn wait_for(done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn remove_if_present(result: std::io::Result<()>) -> Result<(), DevError> {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// `count` ports: 7101, 7102, … when all of them are free, otherwise any free ones.
fn preferred_ports(count: usize) -> Result<Vec<u16>, DevError> {
    let preferred: Vec<u16> = (0..count)
        .filter_map(|i| u16::try_from(i).ok())
        .map(|i| FIRST_PORT + i)
        .collect();
    if preferred.len() == count
        && preferred
            .iter()
            .all(|&p| TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok())
    {
        return Ok(preferred);
    }
    Ok(crate::free_ports(count)?)
}
