//! A server alone in a network namespace this crate creates, reached over a veth pair whose
//! host end a test takes down and up: a real network partition, where [`Proxy`](crate::Proxy)
//! only imitates one. Linux, as root, with `ip` (iproute2); where a namespace cannot be made
//! here (no root, no `ip`, a container without `CAP_NET_ADMIN`), [`NetnsServer::start`] says
//! why and the test falls back to the proxy.
//!
//! Each server gets a namespace and a veth pair named after a port from [`free_port`] (so
//! unique across concurrent tests and processes), and a `/30` of 198.18.0.0/15, the block set
//! aside for network tests (RFC 2544): the server listens on its end, inside the namespace,
//! and traffic is sent only there. Dropped (also when the test panics), the server is killed
//! by its pid and the namespace deleted, which deletes the pair with it.

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
    /// The host end of the veth pair: down is a partition.
    host_end: String,
    /// The server's address, inside the namespace.
    address: String,
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
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let block = u32::from(port) % 16_384;
        let base = (198u32 << 24) | (18 << 16) | (block * 4);
        let dotted = |a: u32| {
            format!(
                "{}.{}.{}.{}",
                a >> 24,
                (a >> 16) & 255,
                (a >> 8) & 255,
                a & 255
            )
        };
        let mut server = Self {
            namespace: format!("rq{port}"),
            host_end: format!("rqh{port}"),
            address: dotted(base + 2),
            port,
            child: None,
            _dir: tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?,
        };
        // From here on, `Drop` removes whatever was made.
        let host = format!("{}/30", dotted(base + 1));
        let inside = format!("{}/30", server.address);
        let (ns, host_end) = (server.namespace.clone(), server.host_end.clone());
        let peer = format!("rqn{port}");
        ip(&["netns", "add", &ns])?;
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
        ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"])?;
        let binary = kind
            .binary()
            .ok_or_else(|| format!("{} not found on PATH", kind.program()))?;
        // `ip netns exec` enters the namespace and execs the server: the child's pid is the
        // server's.
        let child = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(binary)
            .args(["--bind", &server.address, "--port", &port.to_string()])
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
            let answered = redis::Client::open(self.url())
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

    /// Its URL: its address inside the namespace.
    pub fn url(&self) -> String {
        format!("redis://{}:{}", self.address, self.port)
    }

    /// Takes the host end of its link down: nothing passes either way, and nothing tells
    /// either side (no reset, no error), as when a cable is pulled.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn cut(&self) {
        ip(&["link", "set", &self.host_end, "down"]).expect("link down");
    }

    /// Brings the link up again; what was sent meanwhile is retransmitted by TCP.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn heal(&self) {
        ip(&["link", "set", &self.host_end, "up"]).expect("link up");
    }

    /// Runs `cmd` on the server (a test's inspection), over the link.
    ///
    /// # Panics
    /// When the server does not answer.
    pub fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let client = redis::Client::open(self.url()).expect("url");
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
        let _ = ip(&["link", "del", &self.host_end]);
    }
}
