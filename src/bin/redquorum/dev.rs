//! A local cluster of independent `redis-server` masters on 127.0.0.1 (`redquorum dev …`).
//!
//! Each node is a `redis-server` started from `deploy/redis.conf` (compiled in), with its own
//! port and data directory under the state directory. The pid of every server started is kept
//! in its directory, and a signal goes to a pid only after `/proc` confirms it is still that
//! `redis-server` on that port: nothing else on the machine is ever touched.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::exit::CliError;

/// The recommended configuration every dev node starts from.
const REDIS_CONF: &str = include_str!("../../../deploy/redis.conf");
/// Ports tried first, so URLs stay the same from one `dev up` to the next.
const FIRST_PORT: u16 = 7101;
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A node's process state, as `/proc` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeState {
    Running,
    Paused,
    Down,
}

impl NodeState {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Running => "up",
            Self::Paused => "paused",
            Self::Down => "down",
        }
    }
}

/// One master of the dev cluster.
#[derive(Debug, Clone)]
pub(crate) struct DevNode {
    pub(crate) index: usize,
    pub(crate) port: u16,
    dir: PathBuf,
}

impl DevNode {
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The pid recorded for this node, if it is still that redis-server.
    pub(crate) fn pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.dir.join("pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        (cmdline.contains("redis-server") && cmdline.contains(&self.port.to_string()))
            .then_some(pid)
    }

    pub(crate) fn state(&self) -> NodeState {
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
    pub(crate) fn ping(&self, timeout: Duration) -> Result<Duration, String> {
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

    fn signal(&self, signal: Signal) -> Result<(), CliError> {
        let pid = self
            .pid()
            .ok_or_else(|| CliError::failure(format!("node {} is not running", self.index)))?;
        let pid = i32::try_from(pid).map_err(|_| CliError::failure("pid out of range"))?;
        kill(Pid::from_raw(pid), signal)
            .map_err(|e| CliError::failure(format!("cannot signal node {}: {e}", self.index)))
    }

    fn start(&self, conf: &Path) -> Result<(), CliError> {
        std::fs::create_dir_all(&self.dir)?;
        let log = std::fs::File::create(self.dir.join("redis.log"))?;
        let mut child = Command::new("redis-server")
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
                std::io::ErrorKind::NotFound => CliError::failure(
                    "redis-server is not installed: sudo apt-get install -y redis-server",
                ),
                _ => CliError::failure(format!("cannot start redis-server: {e}")),
            })?;
        std::fs::write(self.dir.join("pid"), child.id().to_string())?;
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.ping(Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        Err(CliError::failure(format!(
            "node {} (port {}) did not start; its log ends with:\n{}",
            self.index,
            self.port,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )))
    }
}

/// The dev cluster: its state directory and its nodes.
#[derive(Debug, Clone)]
pub(crate) struct DevCluster {
    dir: PathBuf,
    pub(crate) nodes: Vec<DevNode>,
}

impl DevCluster {
    /// `$REDQUORUM_DEV_DIR`, or `$XDG_STATE_HOME/redquorum/dev`, or `~/.local/state/redquorum/dev`.
    pub(crate) fn state_dir() -> Result<PathBuf, CliError> {
        if let Some(dir) = std::env::var_os("REDQUORUM_DEV_DIR").filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(dir));
        }
        let base =
            crate::xdg::base_dir("XDG_STATE_HOME", &[".local", "state"]).ok_or_else(|| {
                CliError::usage("neither REDQUORUM_DEV_DIR nor HOME is set: where would state go?")
            })?;
        Ok(base.join("redquorum").join("dev"))
    }

    /// The cluster recorded in the state directory, if there is one.
    pub(crate) fn open() -> Result<Option<Self>, CliError> {
        let dir = Self::state_dir()?;
        let Ok(ports) = std::fs::read_to_string(dir.join("ports")) else {
            return Ok(None);
        };
        let nodes = ports
            .split_whitespace()
            .enumerate()
            .map(|(index, port)| {
                let port = port.parse().map_err(|_| {
                    CliError::failure(format!("corrupt {}", dir.join("ports").display()))
                })?;
                Ok(DevNode {
                    index,
                    port,
                    dir: dir.join(format!("node-{index}")),
                })
            })
            .collect::<Result<_, CliError>>()?;
        Ok(Some(Self { dir, nodes }))
    }

    /// Starts a cluster of `count` nodes, or the nodes of the existing one that are down.
    /// Returns the cluster and whether it was created now.
    pub(crate) fn up(count: usize) -> Result<(Self, bool), CliError> {
        if let Some(cluster) = Self::open()? {
            if cluster.nodes.len() != count {
                return Err(CliError::usage(format!(
                    "a dev cluster of {} nodes exists already (`redquorum dev down` first)",
                    cluster.nodes.len()
                )));
            }
            for node in &cluster.nodes {
                if node.state() == NodeState::Down {
                    node.start(&cluster.conf())?;
                }
            }
            return Ok((cluster, false));
        }
        let cluster = Self::create(Self::state_dir()?, free_ports(count)?, REDIS_CONF)?;
        Ok((cluster, true))
    }

    /// A cluster of `count` memory-only nodes (no AOF, no snapshots, no memory limit) on any
    /// free ports, with its state in `dir`: for measuring the client, not the disk. With
    /// `maxmemory` set, 64 concurrent pairs ran at about 0.6 × the rate and varied twice as
    /// much between runs, for the baseline and redquorum alike. Stop it with [`down`](Self::down).
    pub(crate) fn start_memory_only(dir: PathBuf, count: usize) -> Result<Self, CliError> {
        let conf = format!(
            "{REDIS_CONF}\n# redquorum bench: measure the client, not the disk or the memory limit.\n\
             appendonly no\nsave \"\"\nmaxmemory 0\n"
        );
        Self::create(dir, any_free_ports(count)?, &conf)
    }

    /// Writes the configuration and starts one node per port; on failure, stops what started.
    fn create(dir: PathBuf, ports: Vec<u16>, conf: &str) -> Result<Self, CliError> {
        std::fs::create_dir_all(&dir)?;
        let cluster = Self {
            nodes: ports
                .into_iter()
                .enumerate()
                .map(|(index, port)| DevNode {
                    index,
                    port,
                    dir: dir.join(format!("node-{index}")),
                })
                .collect(),
            dir,
        };
        std::fs::write(cluster.conf(), conf)?;
        let ports: Vec<String> = cluster.nodes.iter().map(|n| n.port.to_string()).collect();
        std::fs::write(cluster.dir.join("ports"), ports.join(" "))?;
        for node in &cluster.nodes {
            if let Err(e) = node.start(&cluster.conf()) {
                let _ = cluster.down();
                return Err(e);
            }
        }
        Ok(cluster)
    }

    /// Stops every node (SIGTERM, then SIGKILL after 5 s) and deletes the files it made.
    pub(crate) fn down(&self) -> Result<(), CliError> {
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
        let _ = std::fs::remove_dir(&self.dir);
        Ok(())
    }

    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(DevNode::url).collect()
    }

    pub(crate) fn node(&self, index: usize) -> Result<&DevNode, CliError> {
        self.nodes.get(index).ok_or_else(|| {
            CliError::usage(format!(
                "no node {index}: the dev cluster has nodes 0 to {}",
                self.nodes.len().saturating_sub(1)
            ))
        })
    }

    /// SIGKILL: a crash. Waits until the process is gone.
    pub(crate) fn kill(&self, index: usize) -> Result<(), CliError> {
        let node = self.node(index)?;
        node.signal(Signal::SIGKILL)?;
        wait_for(|| node.state() == NodeState::Down);
        Ok(())
    }

    /// SIGSTOP: a hung master. Waits until the process is stopped.
    pub(crate) fn pause(&self, index: usize) -> Result<(), CliError> {
        let node = self.node(index)?;
        node.signal(Signal::SIGSTOP)?;
        wait_for(|| node.state() != NodeState::Running);
        Ok(())
    }

    /// SIGCONT. Waits until the process runs again.
    pub(crate) fn resume(&self, index: usize) -> Result<(), CliError> {
        let node = self.node(index)?;
        node.signal(Signal::SIGCONT)?;
        wait_for(|| node.state() != NodeState::Paused);
        Ok(())
    }

    /// Starts node `index` again on its port and data, killing it first if it runs.
    pub(crate) fn restart(&self, index: usize) -> Result<(), CliError> {
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

/// Polls `done` every 5 ms for up to 5 s.
fn wait_for(done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn remove_if_present(result: std::io::Result<()>) -> Result<(), CliError> {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// `count` ports: 7101, 7102, … when all of them are free, otherwise any free ones.
fn free_ports(count: usize) -> Result<Vec<u16>, CliError> {
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
    any_free_ports(count)
}

/// `count` distinct free ports, wherever the kernel finds them.
fn any_free_ports(count: usize) -> Result<Vec<u16>, CliError> {
    // Hold every listener until all are chosen, so the kernel hands out distinct ports.
    let listeners = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}
