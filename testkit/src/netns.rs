//! A server alone in a network namespace this crate creates, reached over a veth pair whose
//! host end a test takes down and up: a real network partition, where [`Proxy`](crate::Proxy)
//! only imitates one. Linux, as root, with `ip` (iproute2); where a namespace cannot be made
//! here (no root, no `ip`, a container without `CAP_NET_ADMIN`), [`NetnsServer::start`] says
//! why and the test falls back to the proxy.
//!
//! Each server gets a namespace and one veth pair per link, named after a port from
//! [`free_port`] (so unique across concurrent tests and processes), each with a `/30` of
//! 198.18.0.0/15, the block set aside for network tests (RFC 2544): the server listens on its
//! ends, inside the namespace, and traffic is sent only there. Two links make an asymmetric
//! partition: one client reaches the server over one, another over the other, and only one is
//! cut. Dropped (also when the test panics), the server is killed by its pid and the
//! namespace deleted, which deletes the pairs with it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ServerKind;
use crate::free_port;

/// How long a server in a namespace has to answer after it is started.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// One server in its own network namespace.
#[derive(Debug)]
pub struct NetnsServer {
    namespace: String,
    /// The host end of each link's veth pair: down is a partition.
    host_ends: Vec<String>,
    /// The server's address on each link, inside the namespace.
    addresses: Vec<String>,
    port: u16,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

/// Runs `ip` with `args`; its error output when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetnsServer {
    /// A `kind` server (memory only) in a new namespace, answering on its address there.
    ///
    /// # Errors
    /// Why a namespace or the server could not be made here (the caller falls back to the
    /// proxy and says so); whatever was made is removed.
    pub fn start(kind: ServerKind) -> Result<Self, String> {
        Self::start_with_links(kind, 1)
    }

    /// [`start`](Self::start) with `links` links (at most 2), each cut on its own.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_with_links(kind: ServerKind, links: usize) -> Result<Self, String> {
        let links = links.clamp(1, 2);
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let dotted = |a: u32| {
            format!(
                "{}.{}.{}.{}",
                a >> 24,
                (a >> 16) & 255,
                (a >> 8) & 255,
                a & 255
            )
        };
        // Two /30 blocks per port, one per link.
        let base = |link: usize| {
            let block = (u32::from(port) % 8_192) * 2 + u32::try_from(link).unwrap_or(0);
            (198u32 << 24) | (18 << 16) | (block * 4)
        };
        let mut server = Self {
            namespace: format!("rq{port}"),
            host_ends: (0..links).map(|l| format!("rqh{port}l{l}")).collect(),
            addresses: (0..links).map(|l| dotted(base(l) + 2)).collect(),
            port,
            child: None,
            _dir: tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?,
        };
        // From here on, `Drop` removes whatever was made.
        let ns = server.namespace.clone();
        ip(&["netns", "add", &ns])?;
        ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"])?;
        for link in 0..links {
            let host_end = server.host_ends[link].clone();
            let peer = format!("rqn{port}l{link}");
            let host = format!("{}/30", dotted(base(link) + 1));
            let inside = format!("{}/30", server.addresses[link]);
            ip(&[
                "link", "add", &host_end, "type", "veth", "peer", "name", &peer,
            ])?;
            ip(&["link", "set", &peer, "netns", &ns])?;
            ip(&["addr", "add", &host, "dev", &host_end])?;
            ip(&["link", "set", &host_end, "up"])?;
            ip(&[
                "netns", "exec", &ns, "ip", "addr", "add", &inside, "dev", &peer,
            ])?;
            ip(&["netns", "exec", &ns, "ip", "link", "set", &peer, "up"])?;
        }
        let binary = kind
            .binary()
            .ok_or_else(|| format!("{} not found on PATH", kind.program()))?;
        // `ip netns exec` enters the namespace and execs the server: the child's pid is the
        // server's.
        let child = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(binary)
            .arg("--bind")
            .args(&server.addresses)
            .args(["--port", &port.to_string()])
            .args(["--protected-mode", "no", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--maxmemory-policy", "noeviction"])
            .arg("--dir")
            .arg(server._dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("ip netns exec {}: {e}", kind.program()))?;
        server.child = Some(child);
        server.wait_until_it_answers()?;
        Ok(server)
    }

    fn wait_until_it_answers(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(format!("the server in {} exited: {status}", self.namespace));
            }
            let answered = redis::Client::open(self.url_on(0))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
            if answered.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the server in {} never answered", self.namespace));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its URL on its first link: its address there, inside the namespace.
    pub fn url(&self) -> String {
        self.url_on(0)
    }

    /// Its URL on `link`.
    ///
    /// # Panics
    /// When it has no such link.
    pub fn url_on(&self, link: usize) -> String {
        format!("redis://{}:{}", self.addresses[link], self.port)
    }

    /// The server's process id (`ip netns exec` execs the server), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Takes the host end of every link down: nothing passes either way, and nothing tells
    /// either side (no reset, no error), as when a cable is pulled.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn cut(&self) {
        (0..self.host_ends.len()).for_each(|l| self.cut_link(l));
    }

    /// Brings every link up again; what was sent meanwhile is retransmitted by TCP.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn heal(&self) {
        for host_end in &self.host_ends {
            ip(&["link", "set", host_end, "up"]).expect("link up");
        }
    }

    /// Takes `link` down alone: whoever reaches the server over the other still does.
    ///
    /// # Panics
    /// When `ip` fails, or it has no such link.
    pub fn cut_link(&self, link: usize) {
        ip(&["link", "set", &self.host_ends[link], "down"]).expect("link down");
    }

    /// Runs `cmd` on the server (a test's inspection), over the link.
    ///
    /// # Panics
    /// When the server does not answer.
    pub fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let client = redis::Client::open(self.url_on(self.host_ends.len() - 1)).expect("url");
        let mut con = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect");
        cmd.query(&mut con).expect("command")
    }
}

impl Drop for NetnsServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Deleting the namespace deletes its end of the pair, and with it the host end.
        let _ = ip(&["netns", "del", &self.namespace]);
        for host_end in &self.host_ends {
            let _ = ip(&["link", "del", host_end]);
        }
    }
}
