//! Real `redis-server` or `valkey-server` processes on free loopback ports, owned by a test.
//!
//! Every server runs from its own temporary directory, listens only on 127.0.0.1, and is ended
//! (by its pid, SIGCONT then SIGKILL) when the [`Cluster`] is dropped, also when a test panics.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::ServerKind;

const START_ATTEMPTS: usize = 20;
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const INSPECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How a restarted server comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// No persistence: a restart comes back empty.
    None,
    /// AOF with `appendfsync always`: a restart comes back with every acknowledged write.
    AofAlways,
}

/// Certificate files for a server whose clients speak TLS (see [`Cluster::start_tls`]).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    /// The CA that signed the certificate (PEM), which clients must trust.
    pub ca: PathBuf,
}

/// One `redis-server` or `valkey-server` process.
#[derive(Debug)]
pub struct Server {
    kind: ServerKind,
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    persistence: Persistence,
    extra_args: Vec<String>,
    tls: Option<TlsFiles>,
    /// A TLS server's plain-text port, for inspecting it from the test (clients get the TLS
    /// port in [`Server::url`]); so the harness itself needs no TLS client.
    admin_port: Option<u16>,
    /// A config file to start from: then only the port, directory, log and daemonize are
    /// given on the command line, so the file's own settings are what runs.
    config: Option<PathBuf>,
    paused: bool,
    /// Environment variables of the server process (a preloaded fake clock).
    env: Vec<(String, String)>,
}

/// N independent masters.
#[derive(Debug)]
pub struct Cluster {
    servers: Vec<Server>,
}

/// Fails with the install command when the server is missing: never skip silently.
fn server_binary(kind: ServerKind) -> PathBuf {
    kind.binary().unwrap_or_else(|| {
        panic!(
            "{} not found on PATH. The tests start real Redis and Valkey servers: {}; or run \
             `bash .ci/test`, which installs both.",
            kind.program(),
            kind.how_to_install()
        )
    })
}

fn free_port() -> u16 {
    crate::free_port().expect("no free loopback port")
}

impl Server {
    fn start(
        kind: ServerKind,
        persistence: Persistence,
        extra_args: &[&str],
        tls: Option<&TlsFiles>,
        config: Option<&std::path::Path>,
    ) -> Self {
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            let mut server = Self {
                kind,
                port: free_port(),
                child: None,
                dir: tempfile::tempdir().expect("temp dir"),
                persistence,
                extra_args: extra_args.iter().map(|a| (*a).to_owned()).collect(),
                tls: tls.cloned(),
                admin_port: tls.map(|_| free_port()),
                config: config.map(std::path::Path::to_path_buf),
                paused: false,
                env: Vec::new(),
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!(
            "could not start {} after {START_ATTEMPTS} attempts: {last_error}",
            kind.program()
        );
    }

    /// Starts the process on `self.port`; Err when it exits (port taken) or never answers.
    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(server_binary(self.kind));
        if let Some(config) = &self.config {
            cmd.arg(config)
                .arg("--port")
                .arg(self.port.to_string())
                .args(["--daemonize", "no"])
                .arg("--dir")
                .arg(self.dir.path())
                .arg("--logfile")
                .arg(self.dir.path().join("redis.log"))
                .args(&self.extra_args);
            return self.launch(cmd);
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args([
                "--bind",
                "127.0.0.1",
                "--protected-mode",
                "yes",
                "--save",
                "",
            ])
            .args(["--daemonize", "no", "--maxmemory-policy", "noeviction"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"));
        match self.persistence {
            Persistence::None => cmd.args(["--appendonly", "no"]),
            Persistence::AofAlways => cmd.args(["--appendonly", "yes", "--appendfsync", "always"]),
        };
        if let (Some(tls), Some(admin_port)) = (&self.tls, self.admin_port) {
            cmd.args(["--port", &admin_port.to_string()])
                .args(["--tls-port", &self.port.to_string()])
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca)
                .args(["--tls-auth-clients", "no"]);
        }
        cmd.args(&self.extra_args);
        self.launch(cmd)
    }

    /// Spawns `cmd` and waits until the server answers.
    fn launch(&mut self, mut cmd: Command) -> Result<(), String> {
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.kind.program()))?;
        let deadline = Instant::now() + READY_TIMEOUT;
        let ready_before = self.ready_lines();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let log =
                    std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
                return Err(format!(
                    "{} on port {} exited with {status}: {log}",
                    self.kind.program(),
                    self.port
                ));
            }
            if self.answers_as(child.id(), ready_before) {
                self.child = Some(child);
                self.paused = false;
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} on port {} never answered PING",
                    self.kind.program(),
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// How many times this server's log (in its own directory) says it accepts connections:
    /// once more with each start.
    fn ready_lines(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("redis.log"))
            .unwrap_or_default()
            .matches("Ready to accept connections")
            .count()
    }

    /// Ready when the server on its port is the process just started (`pid`): its `INFO`
    /// says so, or, where `INFO` is refused (a server that wants a password), its own log
    /// says it accepts connections once more than `ready_before`. A TLS server's log must say
    /// so too. Answering alone is not enough: a port that was free a moment ago can be
    /// another test's server's by now (ours then fails to bind it and exits), and a test
    /// whose clients talk to another test's server sees keys it never wrote (a flake seen in
    /// CI, keys of one semaphore test left on another's master).
    fn answers_as(&self, pid: u32, ready_before: usize) -> bool {
        let logged_ready = || self.ready_lines() > ready_before;
        if self.tls.is_some() && !logged_ready() {
            return false;
        }
        let Ok(client) = redis::Client::open(self.admin_url()) else {
            return false;
        };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        match redis::cmd("INFO").arg("server").query::<String>(&mut con) {
            Ok(info) => info
                .lines()
                .any(|line| line.trim() == format!("process_id:{pid}")),
            Err(e) => e.code().is_some() && logged_ready(),
        }
    }

    /// The server's process id, while it runs (to measure its CPU time).
    pub fn process_id(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    fn pid(&self) -> Option<Pid> {
        self.child.as_ref().map(|c| Pid::from_raw(c.id() as i32))
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            kill(pid, signal).expect("signal our own server");
        }
    }

    /// The URL clients use: `redis://127.0.0.1:PORT`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Which server program it runs.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The port clients use.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Started, not killed and not paused.
    pub fn is_running(&self) -> bool {
        self.child.is_some() && !self.paused
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = Pid::from_raw(child.id() as i32);
            let _ = kill(pid, Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// The plain-text URL for inspecting the server, with the `--requirepass` password if it
    /// was started with one.
    fn admin_url(&self) -> String {
        let password = self
            .extra_args
            .windows(2)
            .find(|w| w[0] == "--requirepass")
            .map(|w| w[1].clone());
        let port = self.admin_port.unwrap_or(self.port);
        match password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{port}"),
            None => format!("redis://127.0.0.1:{port}"),
        }
    }

    /// The harness's own client: it skips the redis crate's `CLIENT SETINFO`, which Redis
    /// 7.0 answers with `ERR`, so a test can count the errors the code under test caused.
    fn admin_client(&self) -> redis::Client {
        use redis::IntoConnectionInfo;
        let info = self.admin_url().into_connection_info().expect("url");
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        redis::Client::open(info.set_redis_settings(settings)).expect("url")
    }

    /// A synchronous connection for inspecting the server from a test.
    ///
    /// # Panics
    /// When the server is stopped or paused, or does not accept the connection in 2 s.
    pub fn inspect(&self) -> redis::Connection {
        assert!(
            self.is_running(),
            "cannot inspect a stopped or paused server"
        );
        let client = self.admin_client();
        let con = client
            .get_connection_with_timeout(INSPECT_TIMEOUT)
            .expect("connect to inspect");
        con.set_read_timeout(Some(INSPECT_TIMEOUT))
            .expect("timeout");
        con.set_write_timeout(Some(INSPECT_TIMEOUT))
            .expect("timeout");
        con
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Cluster {
    /// Starts `n` masters without persistence, of the kinds `REDQUORUM_TEST_SERVER` gives
    /// ([`ServerKind::of_master`]).
    pub fn start(n: usize) -> Self {
        Self::start_with(n, Persistence::None)
    }

    /// Starts `n` masters with the given persistence.
    pub fn start_with(n: usize, persistence: Persistence) -> Self {
        Self::start_with_args(n, persistence, &[])
    }

    /// Starts `n` masters, each with `extra_args` appended to its command line.
    pub fn start_with_args(n: usize, persistence: Persistence, extra_args: &[&str]) -> Self {
        let kinds: Vec<ServerKind> = (0..n).map(ServerKind::of_master).collect();
        Self::start_kinds(&kinds, persistence, extra_args)
    }

    /// Starts one server of each of `kinds`, in that order (a list of masters mixing Redis and
    /// Valkey, whatever `REDQUORUM_TEST_SERVER` says).
    pub fn start_kinds(
        kinds: &[ServerKind],
        persistence: Persistence,
        extra_args: &[&str],
    ) -> Self {
        Self {
            servers: kinds
                .iter()
                .map(|kind| Server::start(*kind, persistence, extra_args, None, None))
                .collect(),
        }
    }

    /// Starts `n` Valkey masters whose wall clocks can be jumped while they run: each runs
    /// with libfaketime (`libfaketime`, the preload library's path) reading its offset from a
    /// file of its own at every call, its monotonic clock left real, so `PX` expiries and
    /// `TIME` follow the jumps ([`jump_clock`](Self::jump_clock)). Valkey only: Debian's
    /// `redis-server` (jemalloc) does not start under libfaketime.
    pub fn start_with_fake_clocks(n: usize, libfaketime: &std::path::Path) -> Self {
        let servers = (0..n)
            .map(|_| {
                let mut last_error = String::new();
                for _ in 0..START_ATTEMPTS {
                    let dir = tempfile::tempdir().expect("temp dir");
                    let clock = dir.path().join("faketime");
                    std::fs::write(&clock, "+0").expect("the clock's file");
                    let mut server = Server {
                        kind: ServerKind::Valkey,
                        port: free_port(),
                        child: None,
                        dir,
                        persistence: Persistence::None,
                        extra_args: Vec::new(),
                        tls: None,
                        admin_port: None,
                        config: None,
                        paused: false,
                        env: crate::fake_clock_env(libfaketime, &clock),
                    };
                    match server.spawn() {
                        Ok(()) => return server,
                        Err(e) => last_error = e,
                    }
                }
                panic!("could not start valkey-server under libfaketime: {last_error}");
            })
            .collect();
        Self { servers }
    }

    /// Sets server `i`'s wall clock to `offset` from the real one (libfaketime's syntax:
    /// `+20s`, `-5m`, `+0`), at once; only for a cluster of
    /// [`start_with_fake_clocks`](Self::start_with_fake_clocks).
    pub fn jump_clock(&self, i: usize, offset: &str) {
        crate::write_clock(&self.servers[i].dir.path().join("faketime"), offset)
            .expect("the clock's file");
    }

    /// Adds one more server, with its own extra arguments, of the first server's kind (a
    /// replica of it can replicate), or of [`ServerKind::of_group`]'s in an empty cluster;
    /// returns its index.
    pub fn add(&mut self, extra_args: &[&str]) -> usize {
        self.push(extra_args, None)
    }

    /// Starts one more server (see [`add`](Self::add)), from `config` if given.
    fn push(&mut self, extra_args: &[&str], config: Option<&std::path::Path>) -> usize {
        let kind = self
            .servers
            .first()
            .map_or_else(ServerKind::of_group, Server::kind);
        let server = Server::start(kind, Persistence::None, extra_args, None, config);
        self.servers.push(server);
        self.servers.len() - 1
    }

    /// Starts `n` masters from the config file at `path` (port, data directory and log set on
    /// the command line, everything else as the file says). Restarts keep their data on disk.
    pub fn start_from_config(n: usize, path: &std::path::Path) -> Self {
        Self {
            servers: (0..n)
                .map(|i| {
                    let kind = ServerKind::of_master(i);
                    Server::start(kind, Persistence::AofAlways, &[], None, Some(path))
                })
                .collect(),
        }
    }

    /// Adds one server started from the config file at `path` with `extra_args` after it
    /// (`--sentinel` for a sentinel), of the kind [`add`](Self::add) gives; returns its index.
    pub fn add_from_config(&mut self, path: &std::path::Path, extra_args: &[&str]) -> usize {
        self.push(extra_args, Some(path))
    }

    /// Starts `n` Redis servers whose clients speak TLS, with the given certificate files
    /// (Redis whatever `REDQUORUM_TEST_SERVER` says: the tests' Valkey has no TLS). Each also
    /// listens on a plain-text port of its own that only the harness uses, to inspect it.
    pub fn start_tls(n: usize, tls: &TlsFiles) -> Self {
        Self {
            servers: (0..n)
                .map(|_| Server::start(ServerKind::Redis, Persistence::None, &[], Some(tls), None))
                .collect(),
        }
    }

    /// How many servers there are (killed ones included).
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// True when there are no servers.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Every server's URL, in index order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(Server::url).collect()
    }

    /// Every server's URL with `userinfo` (`user:password`, or `:password`) in it.
    pub fn urls_with(&self, userinfo: &str) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| s.url().replacen("://", &format!("://{userinfo}@"), 1))
            .collect()
    }

    /// Server `i`.
    pub fn server(&self, i: usize) -> &Server {
        &self.servers[i]
    }

    /// SIGKILL: the process is gone, its port refuses connections.
    pub fn kill(&mut self, i: usize) {
        self.servers[i].kill();
    }

    /// SIGSTOP: the kernel still accepts connections, nothing is answered.
    pub fn pause(&mut self, i: usize) {
        let server = &mut self.servers[i];
        server.signal(Signal::SIGSTOP);
        server.paused = true;
    }

    /// SIGCONT after [`Cluster::pause`].
    pub fn resume(&mut self, i: usize) {
        let server = &mut self.servers[i];
        server.signal(Signal::SIGCONT);
        server.paused = false;
    }

    /// Kills (if running) and starts the server again on the same port; with
    /// [`Persistence::None`] it comes back empty.
    pub fn restart(&mut self, i: usize) {
        let kind = self.servers[i].kind;
        self.restart_as(i, kind);
    }

    /// [`restart`](Self::restart), as a server of `kind` (an upgrade from Redis to Valkey at
    /// one address, or a failover to an older server there).
    pub fn restart_as(&mut self, i: usize, kind: ServerKind) {
        let server = &mut self.servers[i];
        server.kill();
        server.kind = kind;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match server.spawn() {
                Ok(()) => return,
                // The port can linger briefly after a kill; never move to another port here.
                Err(e) if Instant::now() > deadline => panic!("restart failed: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Every key on every running server, as (server index, key).
    pub fn keys(&self) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        for (i, s) in self
            .servers
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_running())
        {
            let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
                .arg("*")
                .query(&mut s.inspect())
                .expect("KEYS");
            out.extend(keys.into_iter().map(|k| (i, k)));
        }
        out
    }

    /// The value of `key` on server `i`.
    pub fn get(&self, i: usize, key: &[u8]) -> Option<Vec<u8>> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.servers[i].inspect())
            .expect("GET")
    }

    /// The remaining ttl of `key` on server `i`, in ms (-1 no expiry, -2 missing).
    pub fn pttl(&self, i: usize, key: &[u8]) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut self.servers[i].inspect())
            .expect("PTTL")
    }

    /// Sets `key` to `value` on server `i`, with a ttl.
    pub fn set(&self, i: usize, key: &[u8], value: &[u8], ttl: Duration) {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query(&mut self.servers[i].inspect())
            .expect("SET");
    }

    /// Runs any command on server `i`.
    pub fn run<T: redis::FromRedisValue>(&self, i: usize, cmd: &redis::Cmd) -> T {
        cmd.query(&mut self.servers[i].inspect()).expect("command")
    }

    /// Panics listing the keys if any running server holds a key under `prefix`, each with
    /// what it holds (a string's value, another type's name) and its remaining ttl, which
    /// usually says who left it.
    pub fn assert_no_keys_under(&self, prefix: &[u8]) {
        let left: Vec<_> = self
            .keys()
            .into_iter()
            .filter(|(_, k)| k.starts_with(prefix))
            .map(|(i, k)| {
                let kind: String = self.run(i, redis::cmd("TYPE").arg(&k));
                let held = if kind == "string" {
                    self.get(i, &k)
                        .unwrap_or_default()
                        .escape_ascii()
                        .to_string()
                } else if kind == "zset" {
                    let members: Vec<String> =
                        self.run(i, redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1));
                    format!("a zset of {members:?}")
                } else if kind == "hash" {
                    let fields: Vec<String> = self.run(i, redis::cmd("HKEYS").arg(&k));
                    format!("a hash of {fields:?}")
                } else {
                    format!("a {kind}")
                };
                let ttl = self.pttl(i, &k);
                format!("server {i}: {} = {held} (ttl {ttl} ms)", k.escape_ascii())
            })
            .collect();
        assert!(left.is_empty(), "keys left behind: {left:?}");
    }

    /// True if a TCP connection to server `i`'s port is accepted (a paused server still accepts).
    pub fn port_open(&self, i: usize) -> bool {
        TcpStream::connect(("127.0.0.1", self.servers[i].port)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server started on a port another server already listens on fails to bind it and
    /// exits: that start must fail (its caller then tries another port), never pass for
    /// ready because the other server answers. Two tests whose free ports collided talked to
    /// one server that way, each finding keys the other left.
    ///
    /// Mutation: readiness by `PING` alone (the harness before, `answers_ping`; run, caught):
    /// the second start succeeds on the first server's port.
    #[test]
    fn a_start_on_a_port_another_server_holds_fails() {
        let cluster = Cluster::start(1);
        let first = &cluster.servers[0];
        let mut second = Server {
            kind: first.kind,
            port: first.port,
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            persistence: Persistence::None,
            extra_args: Vec::new(),
            tls: None,
            admin_port: None,
            config: None,
            paused: false,
            env: Vec::new(),
        };
        let started = second.spawn();
        assert!(started.is_err(), "started on a port already taken");
        assert!(
            cluster.servers[0].answers_as(cluster.servers[0].process_id().expect("running"), 0)
        );
    }
}
