//! The `redquorum` binary, run for real against real `redis-server` processes: exit codes,
//! the command stopped on lock loss, concurrent runs that never overlap, elections across
//! processes, `status` and the dev cluster.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use redquorum::RedLock;
use redquorum_testkit::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_redquorum");

/// The binary with `--nodes` set to `cluster`, and no environment that could point it elsewhere.
///
/// Each request to a master may take 200 ms, not the 10 ms the tests' short ttls derive: on a
/// loaded machine (CI runs the model checker beside these tests) a round can take longer, and
/// a run would then fail to start.
fn redquorum(cluster: &Cluster, scratch: &Path) -> Command {
    let mut cmd = bare(scratch);
    cmd.arg("--nodes")
        .arg(cluster.urls().join(","))
        .env("REDQUORUM_NODE_TIMEOUT", "200ms");
    cmd
}

/// The binary with a private dev-cluster directory and no node configuration.
fn bare(scratch: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("REDQUORUM_NODES")
        .env_remove("REDQUORUM_CONFIG")
        .env_remove("REDQUORUM_NODE_TIMEOUT")
        .env_remove("REDQUORUM_RESTART_GRACE")
        .env_remove("REDQUORUM_KEY_PREFIX")
        .env_remove("REDQUORUM_DRIFT_FACTOR")
        .env_remove("REDQUORUM_KEY_LAYOUT")
        .env_remove("REDQUORUM_KILL_SIGNAL")
        .env_remove("REDQUORUM_DEV_SERVER")
        .env_remove("RUST_LOG")
        .env("XDG_CONFIG_HOME", scratch.join("config"))
        .env("REDQUORUM_DEV_DIR", scratch.join("dev"))
        .current_dir(scratch)
        .stdin(Stdio::null());
    cmd
}

fn output(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run redquorum");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A fenced library client, connected: a first request on fresh connections would include
/// connecting to every node (and loading the scripts) within one 50 ms per-node timeout, which
/// a loaded machine misses.
async fn library_client(cluster: &Cluster) -> RedLock {
    let rl = RedLock::builder(cluster.urls())
        .fencing(true)
        .build()
        .expect("config");
    rl.connect().await.expect("connected");
    rl
}

/// Keys under the prefix other than fence counters and an election's leader record (both
/// outlive locks by design: one small key each per resource).
fn lock_keys(cluster: &Cluster) -> Vec<String> {
    cluster
        .keys()
        .into_iter()
        .map(|(_, k)| String::from_utf8_lossy(&k).into_owned())
        .filter(|k| {
            k.starts_with("redquorum:")
                && !k.ends_with(":fence")
                && !k.ends_with(":seeded")
                && !k.ends_with(":leader")
        })
        .collect()
}

fn wait_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// Waits for a child process with a bound, killing it if it does not exit in time.
fn wait_exit(child: &mut Child, within: Duration) -> i32 {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redquorum did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True while `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
        .unwrap_or(false)
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The arguments `run --ttl 1s --node-timeout 200ms --kill-grace 300ms r -- sh -c SCRIPT`.
fn short_run_args(script: &str) -> [&str; 12] {
    [
        "run",
        "--ttl",
        "1s",
        // As `redquorum` sets it, for the runs started without it.
        "--node-timeout",
        "200ms",
        "--kill-grace",
        "300ms",
        "r",
        "--",
        "sh",
        "-c",
        script,
    ]
}

/// `redquorum run --ttl 1s --node-timeout 200ms --kill-grace 300ms r -- sh -c SCRIPT`, its
/// stderr piped.
fn short_run(cluster: &Cluster, scratch: &Path, script: &str) -> Child {
    redquorum(cluster, scratch)
        .args(short_run_args(script))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Waits (up to 10 s) for the command `run` started to write its pid to `file`; panics with
/// what `run` said on stderr if it did not.
fn started(run: &mut Child, file: &Path) -> u32 {
    if !wait_until(Duration::from_secs(10), || read_pid(file).is_some()) {
        let _ = run.kill();
        let _ = run.wait();
        panic!("the command did not start within 10 s: {}", stderr_of(run));
    }
    read_pid(file).expect("pid")
}

/// Pauses three of the five masters, so no renewal can succeed and the lock is lost at its
/// deadline; returns how `supervisor` then exited (within 20 s) and what it wrote on stderr.
fn lose_the_majority(cluster: &mut Cluster, supervisor: &mut Child) -> (i32, String) {
    for node in 0..3 {
        cluster.pause(node);
    }
    let code = wait_exit(supervisor, Duration::from_secs(20));
    (code, stderr_of(supervisor))
}

/// Everything a finished child wrote on its piped stderr.
fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
        .expect("read");
    err
}

fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, signal).expect("signal redquorum");
}

#[test]
fn run_passes_the_exit_code_and_a_growing_fencing_token_through_and_releases() {
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let script = r#"echo "$REDQUORUM_RESOURCE $REDQUORUM_FENCING_TOKEN"; exit 7"#;
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let (code, out, err) =
            output(redquorum(&cluster, dir.path()).args(["run", "job", "--", "sh", "-c", script]));
        assert_eq!(code, 7, "{err}");
        let (resource, token) = out.trim().split_once(' ').expect("two words");
        assert_eq!(resource, "job");
        tokens.push(token.parse::<u64>().expect("a number"));
        assert!(lock_keys(&cluster).is_empty(), "released after the command");
    }
    assert!(tokens[1] > tokens[0], "{tokens:?}");
}

#[tokio::test]
async fn a_busy_lock_exits_75_after_waiting_and_never_runs_the_command() {
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let library = library_client(&cluster).await;
    let lock = library
        .try_acquire("busy", Duration::from_secs(30))
        .await
        .expect("hold it");
    let marker = dir.path().join("ran");
    let (code, _, err) = output(redquorum(&cluster, dir.path()).args([
        "run",
        "--wait",
        "300ms",
        "busy",
        "--",
        "touch",
        marker.to_str().expect("utf-8"),
    ]));
    assert_eq!(code, 75, "{err}");
    // One short line (issue 31: it was about 400 characters of per-master detail).
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("busy is held by another owner for another 2"),
        "{err}"
    );
    assert!(!marker.exists(), "the command ran without the lock");
    // A skip asked to be silent is: with -q (exit 75), and with -E 0 (exit 0).
    // Mutation: printing every error in `main` (no `skipped` check): both print the line.
    for (flags, expected) in [
        (&["-q", "run", "-n"][..], 75),
        (&["run", "-n", "-E", "0"], 0),
    ] {
        let (code, out, err) = output(redquorum(&cluster, dir.path()).args(flags).args([
            "busy",
            "--",
            "touch",
            marker.to_str().expect("utf-8"),
        ]));
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (expected, "", ""),
            "{flags:?}"
        );
    }
    assert!(!marker.exists(), "the command ran without the lock");
    lock.release().await.expect("release");
    // Decided at the majority: the other deletes finish in the background.
    assert!(library.settle(Duration::from_secs(5)).await);
    assert!(lock_keys(&cluster).is_empty());
}

#[tokio::test]
async fn run_waits_for_the_holder_to_release() {
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = library_client(&cluster)
        .await
        .try_acquire("queue", Duration::from_secs(30))
        .await
        .expect("hold it");
    let mut waiting = redquorum(&cluster, dir.path())
        .args(["run", "-w", "20s", "queue", "--", "true"]) // -w: flock's short form of --wait
        .spawn()
        .expect("spawn");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(waiting.try_wait().expect("try_wait").is_none(), "it waits");
    lock.release().await.expect("release");
    assert_eq!(wait_exit(&mut waiting, Duration::from_secs(15)), 0);
}

use redquorum_testkit::libfaketime;

/// A waiter's place in a lock's queue comes from the servers' clocks, never its host's
/// (`DESIGN.md` §7): a `redquorum run --wait` on a host whose wall clock is an hour ahead
/// (libfaketime, `FAKETIME=+1h`, its monotonic clock real) queues first, a library waiter
/// with a true clock second, and the released lock goes to the `run` first. Each waiter's
/// place is within a minute of the servers' `TIME`.
///
/// Mutation: `queue::place_now` returning `server_clock::host_now()` (the host's wall clock,
/// as before) places the `run` an hour late: the library waiter is served first and the
/// `run`'s place is 3,600 s off the servers' clocks (run, caught).
// Two worker threads: the library waiter runs while the test waits with `std::thread::sleep`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_clock_an_hour_ahead_keeps_its_turn_in_the_queue() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let order = dir.path().join("order");
    let queued = |n: usize| {
        (0..cluster.len()).all(|i| {
            let waiters: usize = cluster.run(i, redis::cmd("ZCARD").arg("redquorum:{turn}:queue"));
            waiters == n
        })
    };
    let holder = library_client(&cluster).await;
    let lock = holder
        .try_acquire("turn", Duration::from_secs(30))
        .await
        .expect("hold it");
    // Killed if the test fails before it exits.
    let mut ahead = Reaped(
        redquorum(&cluster, dir.path())
            .args(["run", "--wait", "30s", "turn", "--", "sh", "-c"])
            .arg(format!("echo run >> {}", order.display()))
            .env("LD_PRELOAD", libfaketime())
            .env("FAKETIME", "+1h")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .spawn()
            .expect("spawn"),
    );
    assert!(
        wait_until(Duration::from_secs(10), || queued(1)),
        "the run queued on every master"
    );
    let waiter = library_client(&cluster).await;
    let log = order.clone();
    let behind = tokio::spawn(async move {
        let lock = waiter
            .acquire_within("turn", Duration::from_secs(10), Duration::from_secs(30))
            .await
            .expect("its turn comes");
        std::fs::write(
            &log,
            std::fs::read_to_string(&log).unwrap_or_default() + "library\n",
        )
        .expect("write");
        lock.release().await.expect("release");
        waiter.settle(Duration::from_secs(5)).await
    });
    assert!(
        wait_until(Duration::from_secs(10), || queued(2)),
        "the library waiter queued behind it on every master: {:?}",
        (0..cluster.len())
            .map(|i| -> Vec<String> {
                cluster.run(
                    i,
                    redis::cmd("ZRANGE")
                        .arg("redquorum:{turn}:queue")
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES"),
                )
            })
            .collect::<Vec<_>>()
    );
    for i in 0..cluster.len() {
        let (seconds, micros): (u64, u64) = cluster.run(i, &redis::cmd("TIME"));
        let server_now = seconds * 1_000_000 + micros;
        let places: Vec<(String, f64)> = cluster.run(
            i,
            redis::cmd("ZRANGE")
                .arg("redquorum:{turn}:queue")
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES"),
        );
        assert_eq!(places.len(), 2);
        for (waiter, place) in places {
            // Below 2^53: exact in a double, as the sorted set keeps it.
            let off = server_now.abs_diff(place as u64) / 1_000_000;
            assert!(
                off < 60,
                "master {i}: waiter {waiter}'s place {place} is {off} s off the server's clock"
            );
        }
    }
    lock.release().await.expect("release");
    assert_eq!(wait_exit(&mut ahead, Duration::from_secs(20)), 0);
    assert!(behind.await.expect("library waiter"), "settled");
    assert_eq!(
        std::fs::read_to_string(&order).expect("order"),
        "run\nlibrary\n",
        "the run, which queued first, is served first"
    );
    assert!(holder.settle(Duration::from_secs(5)).await);
    assert!(lock_keys(&cluster).is_empty(), "{:?}", lock_keys(&cluster));
}

/// A closed pipe (`redquorum status R | head -1`) ends the output quietly: no panic, the
/// usual exit code. The reader is gone before anything is written.
///
/// Mutation: `status` printing with `println!` (as before this test) panics, exit 101,
/// "failed printing to stdout: Broken pipe" (run, caught).
#[test]
fn a_closed_stdout_is_no_panic() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [&["status", "nightly"][..], &["fence"][..]] {
        let mut child = redquorum(&cluster, dir.path())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    }
}

#[test]
fn too_few_masters_exit_69_and_name_the_failed_nodes() {
    let mut cluster = Cluster::start(5);
    for node in 0..3 {
        cluster.kill(node);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, _, err) = output(redquorum(&cluster, dir.path()).args(["run", "r", "--", "true"]));
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("no quorum"), "{err}");
    assert!(err.contains("node 0") && err.contains("refused"), "{err}");
}

/// One master of five stopped (SIGSTOP: it accepts connections, answers nothing): `run` and
/// `status` go on once the others connected and answered, not after the 60 s connect timeout
/// given here. (Before issue 31 each waited out the whole connect timeout, 1 s by default.)
///
/// Mutation: `RedLock::connect` waiting for every node (`connect_until(false)`): `run` waits
/// 60 s, past the 30 s allowed below; `inspect`'s `settles` always false does the same to
/// `status`.
#[test]
fn a_hung_master_costs_run_and_status_a_grace_not_the_connect_timeout() {
    let mut cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    // A first run with every master up seeds `r`'s fence counters: a new deployment seeds
    // only from a reading of every master (`DESIGN.md` §5).
    let (code, _, err) = output(redquorum(&cluster, dir.path()).args(["run", "r", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    cluster.pause(4);
    for args in [&["run", "r", "--", "true"][..], &["status", "r"]] {
        let mut child = redquorum(&cluster, dir.path())
            .args(["--connect-timeout", "60s"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let code = wait_exit(&mut child, Duration::from_secs(30));
        assert_eq!(code, 0, "{args:?}: {}", stderr_of(&mut child));
    }
    cluster.resume(4);
}

/// `-q` keeps only what went wrong: an election's campaigning, elected and resigned lines
/// and a run's acquired and released lines are not printed.
///
/// Mutation: `events::emit` ignoring `-q` prints "campaigning for e" and the rest.
#[test]
fn quiet_run_and_elect_print_nothing_when_all_goes_well() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [
        &["-q", "run", "r", "--", "true"][..],
        &["-q", "elect", "--id", "a", "e", "--", "true"],
    ] {
        let (code, out, err) = output(redquorum(&cluster, dir.path()).args(args));
        assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""), "{args:?}");
    }
    let (_, _, err) =
        output(redquorum(&cluster, dir.path()).args(["elect", "--id", "a", "e", "--", "true"]));
    assert!(err.contains("campaigning"), "without -q: {err}");
}

/// A node URL the redis crate refuses is named, with its password hidden, and why, in words
/// an operator can act on (issue 31: "node 0 is invalid", nothing more, even with -vv).
///
/// Mutation: printing the library's error alone (`e.into()` in `client::redlock`) fails
/// every case.
#[test]
fn an_invalid_node_is_named_with_its_url_and_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (node, shown, why) in [
        ("127.0.0.1:7601", "127.0.0.1:7601", "no scheme"),
        (
            "http://127.0.0.1:7601",
            "http://127.0.0.1:7601",
            "http:// is not a Redis",
        ),
        (
            "redis://127.0.0.1:99999",
            "redis://127.0.0.1:99999",
            "invalid port",
        ),
        (
            "redis://u:secret@h:99999",
            "redis://u:***@h:99999",
            "invalid port",
        ),
    ] {
        let nodes = format!("{node},redis://127.0.0.1:7602,redis://127.0.0.1:7603");
        let (code, _, err) = output(bare(dir.path()).args(["--nodes", &nodes, "status", "r"]));
        assert_eq!(code, 64, "{err}");
        assert!(
            err.contains(&format!("node 0 ({shown}) is invalid: {why}")),
            "{err}"
        );
        assert!(!err.contains("secret"), "{err}");
    }
}

/// Refused credentials and a peer that is no Redis server name their cause (issue 31 §3): a
/// wrong password exits 77 with "authentication failed", never "unreachable" (a retry would
/// not heal it), and never shows the password; an HTTP server listed as a node is "not a
/// Redis server" (it answered, in another protocol).
///
/// Mutation: `NodeError::connecting` taking every failure for `Unreachable`: exit 69, and
/// "unreachable" for both (run, caught).
#[test]
fn a_wrong_password_exits_77_and_an_http_server_is_not_a_redis_server() {
    let cluster = Cluster::start_with_args(
        3,
        redquorum_testkit::Persistence::None,
        &["--requirepass", "right"],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = cluster.urls_with(":s3cret-but-wrong").join(",");
    let (code, _, err) = output(
        bare(dir.path())
            .args(["--nodes", &nodes, "--node-timeout", "200ms"])
            .args(["run", "r", "--", "true"]),
    );
    assert_eq!(code, 77, "{err}");
    assert!(err.contains("authentication failed"), "{err}");
    assert!(!err.contains("unreachable"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");

    let port = redquorum_testkit::free_port().expect("a free port");
    let http = HttpServer::start(port, dir.path());
    let node = format!("redis://127.0.0.1:{port}");
    let (code, _, err) = output(
        bare(dir.path())
            .args(["--nodes", &node, "--node-timeout", "200ms"])
            .args(["run", "r", "--", "true"]),
    );
    drop(http);
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("not a Redis server"), "{err}");
    assert!(!err.contains("unreachable"), "{err}");
}

/// Python's HTTP server on `127.0.0.1:port`, stopped (by its pid) when dropped.
struct HttpServer(Child);

impl HttpServer {
    fn start(port: u16, dir: &Path) -> Self {
        let child = Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m http.server");
        let server = Self(child);
        assert!(
            wait_until(Duration::from_secs(20), || {
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            }),
            "the HTTP server never listened"
        );
        server
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Help that reads like flock's (issue 31 §6): each subcommand's help separates its own
/// options from the global ones and the connection settings, ends with the exit codes, shows
/// `-w` for `--wait`, and never an empty `[env: X=]` (values hidden: they may be secrets);
/// `completions`, `man` and `dev` do not list the connection options they ignore.
///
/// Mutations: `hide_env_values` dropped from `--node-timeout` shows `[env: REDQUORUM_NODE_TIMEOUT=]`
/// with the variable set but empty (run, caught); `args::OFFLINE` empty lists `--nodes` in
/// `completions --help`.
#[test]
fn each_subcommands_help_has_its_sections_and_exit_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in ["run", "elect", "status", "observe", "fence"] {
        let (code, help, err) = output(
            bare(dir.path())
                .env("REDQUORUM_NODE_TIMEOUT", "")
                .args([sub, "--help"]),
        );
        assert_eq!(code, 0, "{sub}: {err}");
        for part in [
            "Global options:",
            "Connection and tuning",
            "Exit codes:",
            "77 ",
        ] {
            assert!(help.contains(part), "{sub} --help lacks {part:?}:\n{help}");
        }
        assert!(
            !help.contains("=]"),
            "{sub} --help shows an env value:\n{help}"
        );
    }
    let (_, help, _) = output(bare(dir.path()).args(["run", "--help"]));
    assert!(help.contains("-w, --wait"), "{help}");
    // The subcommands that never reach a master do not list the connection options (still
    // accepted, as global options are, and ignored).
    for sub in [&["completions"][..], &["man"], &["dev"], &["dev", "up"]] {
        let (code, help, err) = output(bare(dir.path()).args(sub).arg("--help"));
        assert_eq!(code, 0, "{sub:?}: {err}");
        for flag in ["--nodes", "--node-timeout", "--key-prefix", "--dev "] {
            assert!(!help.contains(flag), "{sub:?} --help lists {flag}:\n{help}");
        }
    }
    let (code, _, err) = output(bare(dir.path()).args(["dev", "status", "--nodes", "x"]));
    assert!(err.contains("no dev cluster"), "{code}: {err}");
}

/// `run R echo hi` (no `--`) is a usage error with a tip that says where the command goes.
///
/// Mutation: no tip (`runs_a_command` false) fails the first assertion.
#[test]
fn a_command_without_the_separator_gets_a_tip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3";
    let (code, _, err) =
        output(bare(dir.path()).args(["--nodes", nodes, "run", "r", "echo", "hi"]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("tip: put `--` before the command"), "{err}");
}

/// Defaults never bite (issue 31 §4): an error names only the flags the user set, says what is
/// wrong with the value given, and where a setting came from.
///
/// Mutations: `child::kill_grace` without its no-`--kill-grace` branch blames
/// `--kill-grace 0s`; `client::lease_ttl` without its set-timeout branch drops the
/// variable's name; `--permits` parsed as `range(1..)` says 4294967295.
#[test]
fn errors_name_the_settings_the_user_gave() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3";
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = bare(dir.path());
        cmd.envs(env.iter().copied())
            .args(["--nodes", nodes, "run"])
            .args(args);
        output(cmd.args(["r", "--", "true"]))
    };
    let (code, _, err) = run(&[], &["--ttl", "0s"]);
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("--ttl 0s is too short") && !err.contains("--kill-grace"),
        "{err}"
    );
    let (code, _, err) = run(&[], &["--permits", "0"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("1..=256"), "{err}");
    let (code, _, err) = run(&[("REDQUORUM_NODE_TIMEOUT", "1s")], &["--ttl", "1s"]);
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("per-node timeout is 1s") && err.contains("REDQUORUM_NODE_TIMEOUT"),
        "{err}"
    );
    // A ttl the library takes but a lease cannot survive a renewal with: refused up front
    // (it used to run, and exit 76 at once). Mutation: `client::lease_ttl` not called: the
    // command starts against masters that are not there and exits 69 (run, caught).
    let (code, _, err) = run(&[], &["--ttl", "13ms"]);
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("--ttl 13ms is too short for a lease") && err.contains("100ms or more"),
        "{err}"
    );
    assert!(!err.contains("--node-timeout"), "not set, not named: {err}");
    let (code, _, err) = run(&[("REDQUORUM_NODE_TIMEOUT", "1s")], &["--ttl", "3s"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("4s or more"), "{err}");
}

#[test]
fn usage_and_configuration_errors_exit_64() {
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: [&[&str]; 7] = [
        &["run", "r"], // no command
        // a grace that leaves renewals too little of the ttl, or none at all
        &[
            "run",
            "--ttl",
            "1s",
            "--kill-grace",
            "600ms",
            "r",
            "--",
            "true",
        ],
        &[
            "elect",
            "--id",
            "a",
            "--kill-grace",
            "0s",
            "r",
            "--",
            "true",
        ],
        &["run", "--ttl", "5 parsecs", "r", "--", "true"], // bad duration
        &["run", "--ttl", "0s", "r", "--", "true"],        // ttl too short
        &["frobnicate"],                                   // unknown subcommand
        &["status", ""],                                   // empty resource
    ];
    for args in cases {
        let (code, _, err) = output(redquorum(&cluster, dir.path()).args(args));
        assert_eq!(code, 64, "{args:?}: {err}");
        if args.contains(&"--kill-grace") {
            assert!(err.contains("at most half of --ttl"), "{err}");
        }
    }
    let (code, _, err) =
        output(bare(dir.path()).args(["--nodes", "not a url", "run", "r", "--", "true"]));
    assert_eq!(code, 64, "{err}");
    // One server under two names (the address check cannot tell `127.1`): found by its
    // run_id at connect, before any lock; the command never runs. Mutation: `connect_first`
    // ignoring every error (as it did): the round runs, one vote short, and the
    // misconfiguration is reported as an outage (69).
    let ran = dir.path().join("ran");
    let aliases = format!(
        "{},redis://127.1:{}",
        cluster.server(0).url(),
        cluster.server(0).port()
    );
    let (code, _, err) = output(
        bare(dir.path())
            .args(["--nodes", &aliases, "run", "r", "--"])
            .arg("touch")
            .arg(&ran),
    );
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("names the same server as"), "{err}");
    assert!(!ran.exists());
    // No nodes anywhere, and no dev cluster: say what to do.
    let (code, _, err) = output(bare(dir.path()).args(["status", "r"]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("redquorum dev up"), "{err}");
    assert!(err.contains("--dev"), "{err}");
    // --dev without a dev cluster.
    let (code, _, err) = output(bare(dir.path()).args(["--dev", "status", "r"]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("no local dev cluster"), "{err}");
    assert!(cluster.keys().is_empty());
}

#[test]
fn nodes_come_from_the_environment_or_a_legacy_nodes_file_with_a_migration_message() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, _, err) = output(
        bare(dir.path())
            .env("REDQUORUM_NODES", cluster.urls().join(","))
            .args(["run", "r", "--", "true"]),
    );
    assert_eq!(code, 0, "{err}");
    let file = dir.path().join("nodes");
    std::fs::write(&file, format!("# test\n{}\n", cluster.urls().join("\n"))).expect("write");
    let (code, _, err) = output(
        bare(dir.path())
            .arg("--config")
            .arg(&file)
            .args(["run", "r", "--", "true"]),
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("write it as TOML"), "{err}");
    assert!(
        err.contains("nodes = ["),
        "the warning shows the TOML: {err}"
    );
    // At its old default place too.
    let config = dir.path().join("config/redquorum");
    std::fs::create_dir_all(&config).expect("mkdir");
    std::fs::rename(&file, config.join("nodes")).expect("move");
    let (code, _, err) = output(bare(dir.path()).args(["run", "r", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("write it as TOML"), "{err}");
    assert!(lock_keys(&cluster).is_empty());
}

#[test]
fn a_missing_command_exits_127_and_releases_the_lock() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, _, err) =
        output(redquorum(&cluster, dir.path()).args(["run", "r", "--", "no-such-command-here"]));
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("not found"), "{err}");
    assert!(lock_keys(&cluster).is_empty());
}

#[test]
fn losing_the_lock_stops_the_whole_command_and_exits_76() {
    let mut cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("sleep.pid");
    // The shell ignores SIGTERM (and so does the sleep it starts): only the SIGKILL after the
    // grace period can stop them, and it must reach the grandchild too (process group).
    let script = format!(
        "trap '' TERM; sleep 60 & echo $! > {}; wait",
        pids.display()
    );
    let mut run = short_run(&cluster, dir.path(), &script);
    let sleep_pid = started(&mut run, &pids);
    assert!(alive(sleep_pid));
    let (code, err) = lose_the_majority(&mut cluster, &mut run);
    assert_eq!(code, 76, "{err}");
    assert!(err.contains("lost the lock"), "{err}");
    assert!(err.contains("SIGKILL"), "{err}");
    assert!(
        wait_until(Duration::from_secs(5), || !alive(sleep_pid)),
        "the command's grandchild survived"
    );
}

/// The process group of `pid`, from `/proc/PID/stat`.
fn process_group(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// `--foreground` keeps the command in redquorum's process group (the terminal's, when run
/// from a shell, so an interactive command can read it instead of being stopped by SIGTTIN);
/// without it the command has a group of its own. Either way, losing the lock stops the
/// command and its grandchild, both ignoring SIGTERM, and redquorum exits 76 and lives on to
/// say so (a group SIGKILL in the foreground would have killed redquorum too).
///
/// Mutation: a guard that kills its group in the foreground (as in the background) kills
/// redquorum with the command: no exit code 76.
#[test]
fn foreground_shares_redquorums_group_and_still_stops_the_command_on_loss() {
    use std::os::unix::process::CommandExt;
    for foreground in [false, true] {
        let mut cluster = Cluster::start(5);
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("pids");
        let script = stubborn_script(&pids);
        let mut args = vec!["run", "--ttl", "1s", "--kill-grace", "300ms"];
        if foreground {
            args.push("--foreground");
        }
        args.extend(["r", "--", "sh", "-c", &script]);
        let mut run = redquorum(&cluster, dir.path())
            .args(&args)
            .process_group(0)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        assert!(wait_until(Duration::from_secs(10), || read_pids(&pids).is_some()));
        let (shell, grandchild) = read_pids(&pids).expect("pids");
        let redquorum_group = i32::try_from(run.id()).expect("pid");
        assert_eq!(
            process_group(shell) == Some(redquorum_group),
            foreground,
            "foreground {foreground}: the command's group"
        );
        let (code, err) = lose_the_majority(&mut cluster, &mut run);
        assert_eq!(code, 76, "foreground {foreground}: {err}");
        assert!(err.contains("SIGKILL"), "{err}");
        assert!(
            wait_until(Duration::from_secs(5), || !alive(shell)
                && !alive(grandchild)),
            "foreground {foreground}: the command or its grandchild survived"
        );
    }
}

/// A shell script that ignores SIGTERM and starts a grandchild that ignores it too, writing
/// "SHELL_PID GRANDCHILD_PID" to `pids` once both run.
fn stubborn_script(pids: &Path) -> String {
    format!(
        "trap '' TERM; sleep 60 & echo \"$$ $!\" > {}.tmp; mv {0}.tmp {0}; wait",
        pids.display()
    )
}

fn read_pids(path: &Path) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(path).ok()?;
    let (a, b) = text.trim().split_once(' ')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// redquorum SIGKILLed (the OOM killer, `kill -9`) while its command runs: the command, which
/// ignores SIGTERM, and its grandchild are gone at once, for `run` and for `elect`, with and
/// without `--foreground`; before the guard they ran on with no lock for as long as they
/// liked.
///
/// Mutation: spawning the command directly instead of behind the guard (or a guard without
/// `set_pdeathsig`) makes this fail: both processes outlive redquorum.
#[test]
fn a_sigkilled_redquorum_takes_its_command_and_grandchildren_with_it() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    for (mode, foreground) in [
        ("run", false),
        ("elect", false),
        ("run", true),
        ("elect", true),
    ] {
        let pids = dir.path().join(format!("{mode}-{foreground}.pids"));
        let script = stubborn_script(&pids);
        // A resource of its own: the SIGKILLed supervisor's lock lives on until its ttl.
        let resource = format!("{mode}-{foreground}");
        let mut args = vec![mode];
        if mode == "elect" {
            args.extend(["--id", "candidate"]);
        }
        if foreground {
            args.push("--foreground");
        }
        args.extend(["--ttl", "20s", &resource, "--", "sh", "-c", &script]);
        let mut supervisor = redquorum(&cluster, dir.path())
            .args(&args)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        assert!(wait_until(Duration::from_secs(10), || read_pids(&pids).is_some()));
        let (shell, grandchild) = read_pids(&pids).expect("pids");
        assert!(alive(shell) && alive(grandchild));
        supervisor.kill().expect("SIGKILL redquorum");
        let killed = Instant::now();
        supervisor.wait().expect("reap redquorum");
        assert!(
            wait_until(Duration::from_secs(5), || !alive(shell)
                && !alive(grandchild)),
            "{mode}: the command outlived its SIGKILLed supervisor"
        );
        println!(
            "{mode}: command and grandchild gone {:?} after the SIGKILL",
            killed.elapsed()
        );
    }
}

/// The next holder never overlaps a command that ignores SIGTERM. redquorum reaches the
/// masters through proxies that then black-hole, so it cannot renew, while another client,
/// connected directly, takes the lock the moment the servers let it. By then the command and
/// its grandchild must be dead: the stop starts --kill-grace before the deadline and the
/// SIGKILL comes a quarter of the grace before it, while the servers' keys live until at least
/// the deadline plus the drift.
///
/// Mutation: the old timing (SIGTERM at the deadline, SIGKILL --kill-grace later) makes this
/// fail: the command still runs when the next holder is granted the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_holder_never_overlaps_a_command_that_ignores_sigterm() {
    use redquorum_testkit::{Fault, Proxy};
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut proxies = Vec::new();
    for node in 0..3 {
        proxies.push(Proxy::start(cluster.server(node).port()).await);
    }
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let pids = dir.path().join("run.pids");
    let script = stubborn_script(&pids);
    let mut supervisor = bare(dir.path())
        .args(["--nodes", &urls.join(",")])
        .args(["run", "--ttl", "4s", "--kill-grace", "2s", "r", "--"])
        .args(["sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let until = Instant::now() + Duration::from_secs(10);
    while read_pids(&pids).is_none() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (shell, grandchild) = read_pids(&pids).expect("the command started");
    for proxy in &proxies {
        proxy.set(Fault::BlackHole);
    }
    let next = library_client(&cluster).await;
    let granted = loop {
        match next.try_acquire("r", Duration::from_secs(5)).await {
            Ok(lock) => break lock,
            Err(e) if e.is_conflict() => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => panic!("the next holder: {e}"),
        }
    };
    let shell_alive = alive(shell);
    let grandchild_alive = alive(grandchild);
    assert!(
        !shell_alive && !grandchild_alive,
        "the next holder got the lock while the command ran (shell {shell_alive}, grandchild {grandchild_alive})"
    );
    granted.release().await.expect("release");
    for proxy in &proxies {
        proxy.set(Fault::None);
    }
    let code = tokio::task::spawn_blocking(move || {
        let code = wait_exit(&mut supervisor, Duration::from_secs(20));
        let mut err = String::new();
        let _ =
            std::io::Read::read_to_string(&mut supervisor.stderr.take().expect("stderr"), &mut err);
        (code, err)
    })
    .await
    .expect("join");
    assert_eq!(code.0, 76, "{}", code.1);
    assert!(code.1.contains("SIGKILL"), "{}", code.1);
}

/// On a normal exit the lock is held until every process the command started has exited,
/// as flock holds it while any inheritor does.
///
/// Mutation: releasing when the direct child exits (waiting on the command, not the guard)
/// makes this fail: the lock is free while the background process runs.
#[test]
fn the_lock_is_held_until_the_commands_background_processes_exit() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("background.pid");
    let script = format!(
        "sh -c 'echo $$ > {0}.tmp; mv {0}.tmp {0}; sleep 1.5' & exit 0",
        marker.display()
    );
    let mut supervisor = redquorum(&cluster, dir.path())
        .args(["run", "--ttl", "5s", "r", "--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    assert!(wait_until(Duration::from_secs(10), || read_pid(&marker).is_some()));
    let background = read_pid(&marker).expect("pid");
    // The command itself exited at once; its background process runs on, and so does the lock.
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(background), "the background process is still running");
    assert!(
        !lock_keys(&cluster).is_empty(),
        "the lock was released while it ran"
    );
    assert_eq!(wait_exit(&mut supervisor, Duration::from_secs(10)), 0);
    assert!(!alive(background));
    assert!(lock_keys(&cluster).is_empty(), "{:?}", lock_keys(&cluster));
}

/// A checker for the log the overlap test writes, tested on its own first.
fn overlaps(log: &str) -> usize {
    let mut open: Option<&str> = None;
    let mut bad = 0;
    for line in log.lines() {
        match line.split_once(' ') {
            Some(("start", who)) => {
                if open.is_some() {
                    bad += 1;
                }
                open = Some(who);
            }
            Some(("end", who)) => {
                if open != Some(who) {
                    bad += 1;
                }
                open = None;
            }
            _ => bad += 1,
        }
    }
    bad
}

#[test]
fn the_overlap_checker_sees_overlaps() {
    assert_eq!(overlaps("start a\nend a\nstart b\nend b\n"), 0);
    assert!(overlaps("start a\nstart b\nend a\nend b\n") > 0);
}

#[test]
fn two_concurrent_runs_never_overlap() {
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "echo \"start $WHO\" >> {log}; sleep 0.05; echo \"end $WHO\" >> {log}",
        log = log.display()
    );
    std::thread::scope(|s| {
        for who in ["a", "b", "c"] {
            let (cluster, dir, script) = (&cluster, dir.path(), &script);
            s.spawn(move || {
                for _ in 0..4 {
                    let (code, _, err) = output(
                        redquorum(cluster, dir)
                            .env("WHO", who)
                            .args(["run", "--wait", "30s", "shared", "--", "sh", "-c", script]),
                    );
                    assert_eq!(code, 0, "{err}");
                }
            });
        }
    });
    let log = std::fs::read_to_string(&log).expect("log");
    assert_eq!(log.lines().count(), 24, "{log}");
    assert_eq!(overlaps(&log), 0, "{log}");
}

/// `status` of a held lock: the holder on every master, in the table and as JSON, with what
/// each master runs (`redis 7.0.15`, `valkey 9.1.2`).
///
/// Mutation: `ServerAge::parse` reading no `software`: every master's `server` is null (run,
/// caught).
#[tokio::test]
async fn status_shows_the_holder_on_every_node_and_as_json() {
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = library_client(&cluster)
        .await
        .try_acquire("seen", Duration::from_secs(30))
        .await
        .expect("hold it");
    let holder = lock.token().to_string();
    let holder = holder.trim_end_matches('…');
    // The acquire was decided at the majority; the slower nodes' SETs land in the background
    // (on a loaded machine, after the status below would read them).
    let key = b"redquorum:{seen}";
    // Polled asynchronously: the stragglers run on this test's own (single-threaded) runtime.
    let everywhere = || {
        (0..5).all(|i| {
            cluster
                .get(i, key)
                .is_some_and(|v| redquorum_testkit::holds_token(&v, lock.token().expose()))
        })
    };
    let until = Instant::now() + Duration::from_secs(3);
    while !everywhere() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(everywhere(), "every node holds the key");
    let (code, out, err) = output(redquorum(&cluster, dir.path()).args(["status", "seen"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("held by {holder}")), "{out}");
    let (code, out, err) =
        output(redquorum(&cluster, dir.path()).args(["--json", "status", "seen"]));
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["majority_holder"], holder, "{json}");
    assert_eq!(json["reachable"], 5);
    assert_eq!(json["highest_fence"], lock.fencing_token().expect("fenced"));
    for (i, node) in json["nodes"].as_array().expect("nodes").iter().enumerate() {
        let ttl = node["ttl_ms"].as_u64().expect("a ttl");
        assert!(ttl > 20_000 && ttl <= 30_000, "{node}");
        // Which server each master runs, as it said at the connection (Redis or Valkey, as
        // the test kit started it).
        let server = node["server"].as_str().expect("the server");
        let kind = cluster.server(i).kind();
        let name = match kind {
            redquorum_testkit::ServerKind::Redis => "redis ",
            redquorum_testkit::ServerKind::Valkey => "valkey ",
        };
        assert!(server.starts_with(name), "{kind:?}: {node}");
    }
    lock.release().await.expect("release");
    let (_, out, _) = output(redquorum(&cluster, dir.path()).args(["--json", "status", "seen"]));
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["free"], true, "{json}");
}

/// `status` of a semaphore in use: each master's permits and who holds which on a majority,
/// in the table and as JSON (it said "free": the lock of that name is); once its permits are
/// released, no semaphore is shown.
///
/// Mutation: `status` not reading the semaphore's record (`semaphore_permits` always `None`):
/// run, the output says "free" and names no permit.
#[tokio::test]
async fn status_shows_a_semaphores_permits() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let rl = library_client(&cluster).await;
    let pool = rl.semaphore("pool", 2).expect("semaphore");
    let permit = pool
        .try_acquire(Duration::from_secs(30))
        .await
        .expect("a permit");
    let holder = permit.token().to_string();
    let holder = holder.trim_end_matches('…');
    let index = permit.index();
    let mut key = b"redquorum:{pool}:permit:".to_vec();
    key.extend_from_slice(index.to_string().as_bytes());
    let token = permit.token().expose().as_bytes();
    let everywhere = || (0..3).all(|i| cluster.get(i, &key).as_deref() == Some(token));
    let until = Instant::now() + Duration::from_secs(3);
    while !everywhere() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(everywhere(), "every node holds the permit");
    let (code, out, err) = output(redquorum(&cluster, dir.path()).args(["status", "pool"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "pool: semaphore of 2 permits, 1 held: permit {index} by {holder} (quorum 2 of 3)"
        )),
        "{out}"
    );
    assert!(out.contains(&format!("{index}:{holder} ")), "{out}");
    assert!(!out.contains("free"), "{out}");
    let (code, out, err) =
        output(redquorum(&cluster, dir.path()).args(["--json", "status", "pool"]));
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let semaphore = &json["semaphore"];
    assert_eq!(semaphore["permits"], 2, "{json}");
    assert_eq!(semaphore["held_on_majority"][0]["permit"], index, "{json}");
    assert_eq!(semaphore["held_on_majority"][0]["holder"], holder, "{json}");
    permit.release().await.expect("release");
    assert!(rl.settle(Duration::from_secs(5)).await);
    let (_, out, _) = output(redquorum(&cluster, dir.path()).args(["--json", "status", "pool"]));
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["semaphore"], serde_json::Value::Null, "{json}");
    assert_eq!(json["free"], true, "{json}");
}

/// `status` of each resource of a multi-resource lock shows the set's one holder (the set is
/// one token on every resource's key), and each is free once the set is released.
#[tokio::test]
async fn status_shows_each_resource_of_a_set_held_by_its_holder() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    // Unfenced: a multi-resource lock carries no fencing token.
    let rl = RedLock::builder(cluster.urls())
        .per_node_timeout(Duration::from_millis(200))
        .build()
        .expect("config");
    rl.connect_all().await.expect("connected");
    let set = rl
        .try_acquire_many(&["left", "right"], Duration::from_secs(30))
        .await
        .expect("the set");
    let holder = set.token().to_string();
    let holder = holder.trim_end_matches('…');
    let token = set.token().expose().as_bytes();
    let everywhere = || {
        ["left", "right"].iter().all(|r| {
            let key = format!("redquorum:{{{r}}}");
            (0..3).all(|i| cluster.get(i, key.as_bytes()).as_deref() == Some(token))
        })
    };
    let until = Instant::now() + Duration::from_secs(3);
    while !everywhere() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(everywhere(), "every node holds the set");
    for resource in ["left", "right"] {
        let (code, out, err) = output(redquorum(&cluster, dir.path()).args(["status", resource]));
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains(&format!("{resource}: held by {holder}")),
            "{out}"
        );
    }
    set.release().await.expect("release");
    assert!(rl.settle(Duration::from_secs(5)).await);
    for resource in ["left", "right"] {
        let (_, out, _) =
            output(redquorum(&cluster, dir.path()).args(["--json", "status", resource]));
        let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(json["free"], true, "{json}");
    }
}

/// Starts `redquorum elect` for candidate `id`; its command records the term and sleeps.
fn candidate(cluster: &Cluster, dir: &Path, id: &str) -> (Child, PathBuf) {
    let record = dir.join(format!("{id}.term"));
    let script = format!(
        "echo \"$REDQUORUM_TERM $$\" > {}; exec sleep 60",
        record.display()
    );
    let child = redquorum(cluster, dir)
        .args([
            "elect",
            "--id",
            id,
            "--ttl",
            "1s",
            "--kill-grace",
            "300ms",
            "leader",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    (child, record)
}

/// The term and pid a candidate's command recorded.
fn recorded(record: &Path) -> Option<(u64, u32)> {
    let text = std::fs::read_to_string(record).ok()?;
    let (term, pid) = text.trim().split_once(' ')?;
    Some((term.parse().ok()?, pid.parse().ok()?))
}

#[test]
fn elect_hands_over_when_the_leader_is_stopped() {
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut a, a_record) = candidate(&cluster, dir.path(), "a");
    assert!(wait_until(Duration::from_secs(10), || recorded(&a_record).is_some()));
    let (a_term, _) = recorded(&a_record).expect("a leads");
    let (mut b, b_record) = candidate(&cluster, dir.path(), "b");
    std::thread::sleep(Duration::from_millis(500));
    assert!(recorded(&b_record).is_none(), "b leads while a does");
    // SIGTERM to a: forwarded to its command, which ends; a resigns and exits 128+15.
    signal(&a, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(wait_exit(&mut a, Duration::from_secs(10)), 143);
    assert!(wait_until(Duration::from_secs(5), || recorded(&b_record).is_some()));
    let (b_term, _) = recorded(&b_record).expect("b leads");
    assert!(b_term > a_term, "{b_term} after {a_term}");
    signal(&b, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(wait_exit(&mut b, Duration::from_secs(10)), 143);
    assert!(lock_keys(&cluster).is_empty(), "{:?}", lock_keys(&cluster));
}

/// A leader process frozen (SIGSTOP) for longer than its ttl: another candidate takes over in a
/// higher term; when the frozen one wakes up it finds its term over and stops its command.
#[test]
fn a_frozen_leader_is_replaced_and_stops_its_command_when_it_wakes() {
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut a, a_record) = candidate(&cluster, dir.path(), "a");
    assert!(wait_until(Duration::from_secs(10), || recorded(&a_record).is_some()));
    let (a_term, a_command) = recorded(&a_record).expect("a leads");
    let (mut b, b_record) = candidate(&cluster, dir.path(), "b");
    signal(&a, nix::sys::signal::Signal::SIGSTOP);
    assert!(
        wait_until(Duration::from_secs(10), || recorded(&b_record).is_some()),
        "b never took over from the frozen a"
    );
    let (b_term, _) = recorded(&b_record).expect("b leads");
    assert!(b_term > a_term, "{b_term} after {a_term}");
    // a's command ran on while a was frozen: that is what the term (fencing token) is for.
    assert!(alive(a_command));
    signal(&a, nix::sys::signal::Signal::SIGCONT);
    assert!(
        wait_until(Duration::from_secs(10), || !alive(a_command)),
        "the woken leader did not stop its command"
    );
    for child in [&mut a, &mut b] {
        signal(child, nix::sys::signal::Signal::SIGTERM);
        let code = wait_exit(child, Duration::from_secs(10));
        assert!(code == 143 || code == 0, "exit {code}");
    }
}

/// Runs `redquorum dev down` when dropped, so a failing test leaves no server behind.
struct DevGuard<'a>(&'a Path);

impl Drop for DevGuard<'_> {
    fn drop(&mut self) {
        let _ = bare(self.0).args(["dev", "down"]).output();
    }
}

fn dev_status(dir: &Path) -> serde_json::Value {
    let (code, out, err) = output(bare(dir).args(["--json", "dev", "status"]));
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("JSON")
}

fn states(status: &serde_json::Value) -> Vec<String> {
    status["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["state"].as_str().expect("state").to_owned())
        .collect()
}

/// `dev up --server valkey`: the dev cluster runs `valkey-server`, `dev status` says so, the
/// recorded pid is checked against that program (a kill reaches it), a later `dev up` without
/// `--server` keeps the running kind, one with another kind is refused, and `dev down` stops it.
///
/// Mutation: the pid check looking for `redis-server`: the node reads as down (run, caught).
#[test]
fn the_dev_cluster_runs_valkey_on_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _guard = DevGuard(dir.path());
    let up = ["dev", "up", "--count", "1"];
    let (code, _, err) = output(bare(dir.path()).args(up).args(["--server", "valkey"]));
    assert_eq!(code, 0, "{err}");
    let status = dev_status(dir.path());
    assert_eq!(states(&status), ["up"]);
    assert_eq!(status["nodes"][0]["server"], "valkey-server", "{status}");
    let (code, _, err) = output(bare(dir.path()).args(up));
    assert_eq!(code, 0, "the running kind kept: {err}");
    let (code, _, err) = output(bare(dir.path()).args(up).args(["--server", "redis"]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("valkey-server exists already"), "{err}");
    let (code, _, err) = output(bare(dir.path()).args(["dev", "kill", "0"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(states(&dev_status(dir.path())), ["down"]);
    let (code, _, err) = output(bare(dir.path()).args(["dev", "down"]));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn the_dev_cluster_starts_breaks_heals_serves_locks_and_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _guard = DevGuard(dir.path());
    let (code, _, err) = output(bare(dir.path()).args(["dev", "up", "--count", "3"]));
    assert_eq!(code, 0, "{err}");
    let status = dev_status(dir.path());
    assert_eq!(states(&status), ["up", "up", "up"]);
    let pids: Vec<u32> = status["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| u32::try_from(n["pid"].as_u64().expect("pid")).expect("pid"))
        .collect();

    for (action, expect) in [
        ("kill", ["up", "down", "up"]),
        ("restart", ["up", "up", "up"]),
        ("pause", ["up", "paused", "up"]),
        ("resume", ["up", "up", "up"]),
    ] {
        let (code, _, err) = output(bare(dir.path()).args(["dev", action, "1"]));
        assert_eq!(code, 0, "{action}: {err}");
        assert_eq!(states(&dev_status(dir.path())), expect, "after {action}");
    }
    let (code, _, err) = output(bare(dir.path()).args(["dev", "kill", "7"]));
    assert_eq!(code, 64, "{err}");

    // The dev cluster serves commands only when asked (--dev); without nodes and without
    // --dev, the error says it is there. Mutation: resolve nodes from the dev cluster when
    // none are given (the old implicit fallback) and the first assertion fails.
    let (code, _, err) = output(bare(dir.path()).args(["run", "r", "--", "true"]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("add --dev"), "{err}");
    let (code, _, err) = output(bare(dir.path()).args(["--dev", "run", "r", "--", "true"]));
    assert_eq!(code, 0, "{err}");

    let restarted: Vec<u32> = dev_status(dir.path())["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter_map(|n| n["pid"].as_u64())
        .filter_map(|p| u32::try_from(p).ok())
        .collect();
    let (code, _, err) = output(bare(dir.path()).args(["dev", "down"]));
    assert_eq!(code, 0, "{err}");
    for pid in pids.iter().chain(&restarted) {
        assert!(
            wait_until(Duration::from_secs(5), || !alive(*pid)),
            "redis-server {pid} survived dev down"
        );
    }
    assert!(!dir.path().join("dev").exists(), "dev down left files");
}

/// The state letter of `pid` in /proc (R, S, T for stopped, Z…).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Whether the command's shell `pid` is stopped: in state T, or caught by the stop between
/// `vfork` and its child's `exec` (a loop's `sleep`), where it waits uninterruptibly (D) for a
/// child stopped before its `exec`, and stays there until that child is continued. Waiting
/// for T alone failed a test now and then on a loaded machine.
fn shell_stopped(pid: u32) -> bool {
    match state(pid) {
        Some('T') => true,
        Some('D') => children(pid).into_iter().any(|c| state(c) == Some('T')),
        _ => false,
    }
}

/// Ctrl-Z (SIGTSTP) stops the command together with redquorum, so it never runs on while
/// nobody renews its lock; resumed after the lock lapsed, the command is killed without
/// running again, and redquorum exits 76.
///
/// Mutation: no SIGTSTP handling (redquorum alone stops, as before) makes this fail: the
/// command keeps writing while redquorum is stopped.
#[test]
fn ctrl_z_stops_the_command_too_and_a_lapsed_lock_never_lets_it_run_again() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pid");
    let ticks = dir.path().join("ticks");
    let script = format!(
        "echo $$ > {0}.tmp; mv {0}.tmp {0}; while true; do echo tick >> {1}; sleep 0.02; done",
        pids.display(),
        ticks.display()
    );
    let mut supervisor = short_run(&cluster, dir.path(), &script);
    let shell = started(&mut supervisor, &pids);
    let lines = || {
        std::fs::read_to_string(&ticks)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    assert!(wait_until(Duration::from_secs(5), || lines() > 2));
    signal(&supervisor, nix::sys::signal::Signal::SIGTSTP);
    assert!(
        wait_until(Duration::from_secs(5), || state(supervisor.id())
            == Some('T')
            && shell_stopped(shell)),
        "redquorum and its command are both stopped"
    );
    let stopped_at = lines();
    // Past the lock's deadline (1 s ttl) while stopped: nobody renews, nothing runs.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        lines(),
        stopped_at,
        "the command ran while nobody renewed its lock"
    );
    signal(&supervisor, nix::sys::signal::Signal::SIGCONT);
    let code = wait_exit(&mut supervisor, Duration::from_secs(10));
    let err = stderr_of(&mut supervisor);
    assert_eq!(code, 76, "{err}");
    assert!(err.contains("lapsed while stopped"), "{err}");
    assert!(!alive(shell));
    assert_eq!(
        lines(),
        stopped_at,
        "the command ran again after the lock lapsed"
    );
}

/// The pids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Ctrl-Z, then redquorum SIGKILLed while stopped: the guard, kept awake while the command is
/// stopped, kills the stopped command at once. redquorum runs under a subreaper here (as under
/// `systemd --user`), so the command's group is not orphaned when redquorum dies and the
/// kernel does not continue it. Mutation: drop the guard's SIGCONT in `Child::suspend` and
/// the command is left behind, stopped for ever.
#[test]
fn a_redquorum_killed_while_stopped_leaves_no_stopped_command_behind() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pid");
    let script = format!(
        "echo $$ > {0}.tmp; mv {0}.tmp {0}; trap '' HUP TERM; while true; do sleep 0.02; done",
        pids.display()
    );
    // redquorum's own guard, used here as a subreaper above redquorum.
    let reaper = Reaped(
        bare(dir.path())
            .args([
                "__guard",
                "--parent",
                &std::process::id().to_string(),
                "--",
                BIN,
            ])
            .arg("--nodes")
            .arg(cluster.urls().join(","))
            .args(short_run_args(&script))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn"),
    );
    assert!(wait_until(Duration::from_secs(10), || read_pid(&pids).is_some()));
    let shell = read_pid(&pids).expect("pid");
    assert!(wait_until(Duration::from_secs(5), || !children(
        reaper.id()
    )
    .is_empty()));
    let supervisor = children(reaper.id())[0];
    let send = |pid: u32, sig| {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
        nix::sys::signal::kill(pid, sig).expect("signal");
    };
    send(supervisor, nix::sys::signal::Signal::SIGTSTP);
    assert!(
        wait_until(Duration::from_secs(5), || state(supervisor) == Some('T')
            && shell_stopped(shell)),
        "redquorum and its command are both stopped"
    );
    send(supervisor, nix::sys::signal::Signal::SIGKILL);
    let killed_at = Instant::now();
    let gone = wait_until(Duration::from_secs(5), || !alive(shell));
    if !gone {
        // Clean up what the failure left: the stopped group.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(shell).expect("pid")),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    drop(reaper);
    assert!(gone, "the stopped command outlived redquorum");
    eprintln!(
        "stopped command gone {:?} after redquorum's SIGKILL",
        killed_at.elapsed()
    );
}

/// The waiting flags operators know from flock and consul lock: `-n` tries once, `-E N` makes a
/// busy lock exit N instead of 75, `--wait forever` waits until the holder releases (woken by
/// its release), and `-n` with `--wait` is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonblock_conflict_exit_code_and_waiting_forever() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let library = library_client(&cluster).await;
    let holder = library
        .try_acquire("w", Duration::from_secs(60))
        .await
        .expect("the library holds w");
    let (code, _, err) =
        output(redquorum(&cluster, dir.path()).args(["run", "-n", "w", "--", "true"]));
    assert_eq!(code, 75, "{err}");
    let (code, _, err) =
        output(redquorum(&cluster, dir.path()).args(["run", "-E", "3", "w", "--", "true"]));
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = output(
        redquorum(&cluster, dir.path()).args(["run", "-n", "--wait", "1s", "w", "--", "true"]),
    );
    assert_eq!(code, 64, "{err}");
    let ran = dir.path().join("ran");
    let mut waiter = redquorum(&cluster, dir.path())
        .args(["run", "--wait", "forever", "w", "--", "touch"])
        .arg(&ran)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!ran.exists(), "it must wait while the lock is held");
    assert_eq!(waiter.try_wait().expect("try_wait"), None, "still waiting");
    holder.release().await.expect("release");
    let code = wait_exit(&mut waiter, Duration::from_secs(10));
    assert_eq!(code, 0, "{}", stderr_of(&mut waiter));
    assert!(ran.exists());
    assert!(library.settle(Duration::from_secs(5)).await);
    assert!(lock_keys(&cluster).is_empty());
}

/// `--key-prefix`, `--node-timeout`, `--drift-factor` and `--restart-grace` reach the client
/// (and come from the environment too); bad values exit 64 before anything is started.
#[test]
fn tuning_flags_reach_the_client_and_bad_values_exit_64() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    // The command holds the lock until told to finish; meanwhile its key is under the prefix.
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        ready.display(),
        go.display()
    );
    let mut run = redquorum(&cluster, dir.path())
        .args([
            "--key-prefix",
            "myapp:",
            "--node-timeout",
            "200ms",
            "--drift-factor",
            "0.02",
        ])
        .args(["run", "r", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    assert!(wait_until(Duration::from_secs(10), || ready.exists()));
    let keys: Vec<Vec<u8>> = cluster.keys().into_iter().map(|(_, k)| k).collect();
    assert!(keys.iter().any(|k| k == b"myapp:{r}"), "{keys:?}");
    assert!(
        keys.iter().all(|k| !k.starts_with(b"redquorum:")),
        "{keys:?}"
    );
    std::fs::write(&go, "").expect("go");
    let code = wait_exit(&mut run, Duration::from_secs(10));
    assert_eq!(code, 0, "{}", stderr_of(&mut run));
    // From the environment, like the nodes.
    let (code, _, err) = output(
        redquorum(&cluster, dir.path())
            .env("REDQUORUM_KEY_PREFIX", "envapp:")
            .args(["status", "r", "--json"]),
    );
    assert_eq!(code, 0, "{err}");
    // Every master here started seconds ago: with a one-hour restart grace none may vote.
    let (code, _, err) = output(redquorum(&cluster, dir.path()).args([
        "--restart-grace",
        "1h",
        "run",
        "r",
        "--",
        "true",
    ]));
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("restart grace"), "{err}");
    for bad in [
        &["--drift-factor", "0.7"][..],
        &["--drift-factor", "-1"],
        &["--node-timeout", "0s"],
        &["--node-timeout", "soon"],
    ] {
        let (code, _, err) = output(
            redquorum(&cluster, dir.path())
                .args(bad)
                .args(["run", "r", "--", "true"]),
        );
        assert_eq!(code, 64, "{bad:?}: {err}");
    }
    let (code, _, err) = output(redquorum(&cluster, dir.path()).args([
        "run",
        "--kill-signal",
        "KILL",
        "r",
        "--",
        "true",
    ]));
    assert_eq!(code, 64, "{err}");
    assert!(lock_keys(&cluster).is_empty());
}

/// `--kill-signal` is what the command gets first when the lock is lost, in its own group and
/// in the foreground (where the guard relays it); it also comes from REDQUORUM_KILL_SIGNAL and
/// the config file's `kill-signal`. Mutation: ignore the file's value (`tuning.kill_signal`
/// never set) and the config case gets SIGTERM, which the command ignores, then SIGKILL.
#[test]
fn the_kill_signal_is_what_the_command_gets_first() {
    for (foreground, from) in [
        (false, "flag"),
        (true, "flag"),
        (false, "env"),
        (false, "config"),
    ] {
        let mut cluster = Cluster::start(5);
        let dir = tempfile::tempdir().expect("tempdir");
        let got = dir.path().join("got");
        let ready = dir.path().join("ready");
        let script = format!(
            "trap 'echo INT > {}; exit 0' INT; trap '' TERM; touch {}; while :; do sleep 0.05; done",
            got.display(),
            ready.display()
        );
        let mut args = vec!["run", "--ttl", "1s", "--kill-grace", "300ms"];
        let mut cmd = redquorum(&cluster, dir.path());
        match from {
            "flag" => args.extend(["--kill-signal", "INT"]),
            "env" => {
                cmd.env("REDQUORUM_KILL_SIGNAL", "INT");
            }
            _ => {
                let config = dir.path().join("config/redquorum");
                std::fs::create_dir_all(&config).expect("mkdir");
                std::fs::write(config.join("config.toml"), "kill-signal = \"SIGINT\"\n")
                    .expect("write config");
            }
        }
        if foreground {
            args.push("--foreground");
        }
        args.extend(["r", "--", "sh", "-c", &script]);
        let mut run = cmd
            .args(&args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        assert!(wait_until(Duration::from_secs(10), || ready.exists()));
        let (code, err) = lose_the_majority(&mut cluster, &mut run);
        assert_eq!(code, 76, "foreground {foreground}, {from}: {err}");
        assert_eq!(
            std::fs::read_to_string(&got).ok().as_deref(),
            Some("INT\n"),
            "foreground {foreground}, {from}: {err}"
        );
        assert!(!err.contains("SIGKILL"), "it stopped on SIGINT: {err}");
    }
}

/// The library's warnings reach stderr by default (here: an even number of masters), `-q`
/// hides them, `-vv` adds debug lines, and `RUST_LOG` decides alone when set.
#[test]
fn warnings_show_by_default_and_verbosity_flags_change_them() {
    let cluster = Cluster::start(4);
    let dir = tempfile::tempdir().expect("tempdir");
    let status = |extra: &[&str], rust_log: Option<&str>| {
        let mut cmd = redquorum(&cluster, dir.path());
        if let Some(spec) = rust_log {
            cmd.env("RUST_LOG", spec);
        }
        output(cmd.args(extra).args(["status", "r"]))
    };
    let (code, _, err) = status(&[], None);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("even number of nodes"), "{err}");
    assert!(!err.contains("DEBUG"), "{err}");
    let (_, _, err) = status(&["-q"], None);
    assert!(!err.contains("even number of nodes"), "{err}");
    let (_, _, err) = status(&["-vv"], None);
    assert!(err.contains("DEBUG"), "{err}");
    let (_, _, err) = status(&[], Some("error"));
    assert!(!err.contains("even number of nodes"), "{err}");
}

/// `elect --once` leads at most once: on a lost leadership it stops the command and exits 76
/// rather than campaigning again (systemd's `Restart=` decides what follows).
///
/// Mutation: ignoring `--once` (campaigning again) makes redquorum run on: no exit within the
/// bound.
#[test]
fn elect_once_exits_76_when_leadership_is_lost() {
    let mut cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready");
    let script = format!("touch {}; sleep 60", ready.display());
    let mut elect = redquorum(&cluster, dir.path())
        .args([
            "elect",
            "--once",
            "--id",
            "a",
            "--ttl",
            "1s",
            "--kill-grace",
            "300ms",
        ])
        .args(["once", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    assert!(wait_until(Duration::from_secs(10), || ready.exists()));
    let (code, err) = lose_the_majority(&mut cluster, &mut elect);
    assert_eq!(code, 76, "{err}");
    assert!(err.contains("lost leadership"), "{err}");
    assert_eq!(err.matches("campaigning for").count(), 1, "{err}");
}

/// A child process killed and reaped when dropped, so a failing test leaves nothing running
/// (a redquorum that campaigns for ever would also hold the test's stdout open).
struct Reaped(Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines a child writes on one pipe, read by a thread as they come.
struct Lines(std::sync::mpsc::Receiver<String>);

impl Lines {
    fn of(pipe: impl std::io::Read + Send + 'static) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(pipe)) {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self(rx)
    }

    /// The first line (from now) that `wanted` accepts, within `within`; every line read
    /// meanwhile is in `seen`.
    fn until(
        &self,
        within: Duration,
        seen: &mut Vec<String>,
        mut wanted: impl FnMut(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let line = self.0.recv_timeout(left).ok()?;
            seen.push(line.clone());
            if wanted(&line) {
                return Some(line);
            }
        }
    }
}

/// One JSON event line.
fn event(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
}

fn events_named<'a>(lines: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|e| e["event"] == name).collect()
}

/// Every stderr line of `run --json` is a JSON event: acquired (with the fencing token),
/// renewed, exited, released; on a lost lock, lost; a usage error is an `error` event with
/// its exit code. Mutation: emit `renewed` nowhere (drop the select arm in `run_guarded`) and
/// the renewal assertion fails; print the old sentences instead of JSON and every line fails
/// to parse.
#[test]
fn run_writes_one_json_event_per_line_on_stderr() {
    let mut cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = output(
        redquorum(&cluster, dir.path())
            .args(["--json", "run", "--ttl", "900ms", "j", "--", "sleep", "1"]),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty(), "the events stay off stdout: {out}");
    let lines: Vec<_> = err.lines().map(event).collect();
    let names: Vec<&str> = lines.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names.first(), Some(&"acquired"), "{err}");
    assert_eq!(names.last(), Some(&"released"), "{err}");
    assert!(names.contains(&"exited"), "{err}");
    assert!(
        !events_named(&lines, "renewed").is_empty(),
        "a 1 s command under a 900 ms ttl is renewed: {err}"
    );
    let acquired = events_named(&lines, "acquired")[0];
    assert!(acquired["fencing_token"].as_u64().is_some(), "{acquired}");
    assert_eq!(acquired["resource"], "j");
    assert!(
        acquired["ts"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{acquired}"
    );
    assert_eq!(events_named(&lines, "exited")[0]["code"], 0);

    // A usage error: one `error` event with the exit code.
    let (code, _, err) = output(
        redquorum(&cluster, dir.path()).args(["--json", "run", "--ttl", "0s", "j", "--", "true"]),
    );
    assert_eq!(code, 64);
    let last = event(err.lines().last().expect("a line"));
    assert_eq!(last["event"], "error", "{err}");
    assert_eq!(last["code"], 64, "{err}");

    // A lost lock.
    let ready = dir.path().join("ready");
    let script = format!("touch {}; exec sleep 30", ready.display());
    let mut run = Reaped(
        redquorum(&cluster, dir.path())
            .args([
                "--json",
                "run",
                "--ttl",
                "1s",
                "--kill-grace",
                "300ms",
                "j",
                "--",
            ])
            .args(["sh", "-c", &script])
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    assert!(wait_until(Duration::from_secs(10), || ready.exists()));
    let (code, err) = lose_the_majority(&mut cluster, &mut run);
    assert_eq!(code, 76, "{err}");
    let lines: Vec<_> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(event)
        .collect();
    let lost = events_named(&lines, "lost");
    assert_eq!(lost.len(), 1, "{err}");
    assert!(
        lost[0]["why"].as_str().is_some_and(|w| !w.is_empty()),
        "{err}"
    );
    assert!(lost[0]["term"].is_null(), "a lock has no term: {err}");
}

/// `elect --json`: a campaigning candidate reports who leads (a `leader` event naming the
/// other candidate and its term), then `elected` once the leader steps down, and `resigned`
/// when its command exits. Mutation: drop the observer from `campaign` and no `leader` event
/// names the other candidate.
#[test]
fn elect_reports_the_leader_while_campaigning_and_its_own_terms_as_json() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, a_record) = candidate(&cluster, dir.path(), "a");
    let mut a = Reaped(a);
    assert!(wait_until(Duration::from_secs(10), || recorded(&a_record).is_some()));
    let (a_term, _) = recorded(&a_record).expect("a leads");
    let mut b = Reaped(
        redquorum(&cluster, dir.path())
            .args([
                "--json",
                "elect",
                "--id",
                "b",
                "--ttl",
                "1s",
                "--kill-grace",
                "300ms",
            ])
            .args(["leader", "--", "sleep", "1"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let lines = Lines::of(b.stderr.take().expect("stderr"));
    let mut seen = Vec::new();
    let leader = lines
        .until(Duration::from_secs(10), &mut seen, |l| {
            event(l)["event"] == "leader"
        })
        .unwrap_or_else(|| panic!("no leader event: {seen:?}"));
    let leader = event(&leader);
    assert_eq!(leader["leader"], "a", "{leader}");
    assert_eq!(leader["term"], a_term, "{leader}");
    signal(&a, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut a, Duration::from_secs(10));
    let elected = lines
        .until(Duration::from_secs(10), &mut seen, |l| {
            event(l)["event"] == "elected"
        })
        .unwrap_or_else(|| panic!("b never elected: {seen:?}"));
    let elected = event(&elected);
    assert_eq!(elected["id"], "b");
    assert!(elected["term"].as_u64() > Some(a_term), "{elected}");
    assert!(
        lines
            .until(Duration::from_secs(10), &mut seen, |l| event(l)["event"]
                == "resigned")
            .is_some(),
        "{seen:?}"
    );
    assert_eq!(wait_exit(&mut b, Duration::from_secs(10)), 0);
    assert!(lock_keys(&cluster).is_empty());
}

/// `observe` prints the leader now and at every change, on stdout; `--once` exits 0 when a
/// majority tells and 69 when too few masters answer. Mutation: print only when someone leads
/// and the "nobody leads" line after the hand-back never comes.
#[test]
fn observe_follows_the_leader_and_once_tells_no_quorum_apart() {
    let mut cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut observer = Reaped(
        redquorum(&cluster, dir.path())
            .args(["--json", "observe", "--every", "100ms", "leader"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn"),
    );
    let lines = Lines::of(observer.stdout.take().expect("stdout"));
    let mut seen = Vec::new();
    let first = lines
        .until(Duration::from_secs(10), &mut seen, |_| true)
        .expect("a first line at once");
    assert!(
        event(&first)["leader"].is_null(),
        "nobody leads yet: {first}"
    );
    let (a, a_record) = candidate(&cluster, dir.path(), "a");
    let mut a = Reaped(a);
    assert!(wait_until(Duration::from_secs(10), || recorded(&a_record).is_some()));
    let (a_term, _) = recorded(&a_record).expect("a leads");
    let leads = lines
        .until(Duration::from_secs(10), &mut seen, |l| {
            event(l)["leader"] == "a"
        })
        .unwrap_or_else(|| panic!("observe never saw a: {seen:?}"));
    assert_eq!(event(&leads)["term"], a_term);
    let (code, out, err) =
        output(redquorum(&cluster, dir.path()).args(["observe", "--once", "leader"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("leader: a leads in term {a_term}"));
    signal(&a, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut a, Duration::from_secs(10));
    assert!(
        lines
            .until(Duration::from_secs(10), &mut seen, |l| event(l)["leader"]
                .is_null())
            .is_some(),
        "the resignation is seen: {seen:?}"
    );
    signal(&observer, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(wait_exit(&mut observer, Duration::from_secs(10)), 128 + 15);
    cluster.kill(0);
    cluster.kill(1);
    let (code, out, err) =
        output(redquorum(&cluster, dir.path()).args(["--json", "observe", "--once", "leader"]));
    assert_eq!(code, 69, "{out} {err}");
    let line = event(out.trim());
    assert!(
        line["unknown"].as_str().is_some_and(|u| u.contains("node")),
        "{line}"
    );
    let (code, _, err) =
        output(redquorum(&cluster, dir.path()).args(["observe", "--every", "0s", "leader"]));
    assert_eq!(code, 64, "{err}");
}

/// Completion scripts and manual pages come from the clap definitions: the bash script is
/// valid bash, the pages are roff with a page per subcommand (none for the hidden guard).
#[test]
fn completions_and_manual_pages_are_generated_from_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, script, err) = output(bare(dir.path()).args(["completions", "bash"]));
    assert_eq!(code, 0, "{err}");
    assert!(script.contains("observe") && script.contains("--kill-grace"));
    let file = dir.path().join("redquorum.bash");
    std::fs::write(&file, &script).expect("write");
    let check = Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .expect("bash -n");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let (code, script, err) = output(bare(dir.path()).args(["completions", shell]));
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(script.contains("redquorum"), "{shell}");
    }
    let (code, _, _) = output(bare(dir.path()).args(["completions", "tcsh"]));
    assert_eq!(code, 64);
    let (code, page, err) = output(bare(dir.path()).args(["man"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        page.starts_with(".ie") || page.contains(".TH redquorum"),
        "{page}"
    );
    assert!(page.contains("observe"));
    let pages = dir.path().join("man");
    std::fs::create_dir_all(&pages).expect("mkdir");
    let (code, _, err) = output(bare(dir.path()).arg("man").arg("--dir").arg(&pages));
    assert_eq!(code, 0, "{err}");
    for page in [
        "redquorum.1",
        "redquorum-run.1",
        "redquorum-elect.1",
        "redquorum-observe.1",
    ] {
        assert!(pages.join(page).exists(), "{page}");
    }
    assert!(!pages.join("redquorum-__guard.1").exists());
    let (code, _, _) = output(bare(dir.path()).args(["man", "--dir", "/nonexistent/dir"]));
    assert_eq!(code, 1);
}

/// A free port on 127.0.0.1 (free when asked; the exporter binds it right after).
fn free_port() -> u16 {
    redquorum_testkit::free_port().expect("a free port")
}

/// `GET /metrics` on 127.0.0.1:`port`; the body, or `None` while nothing answers.
fn scrape(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

/// `elect --metrics` serves the leadership gauge (1 while leading, 0 after a loss), the terms
/// won and the leaderships lost, beside the library's metrics; an address that cannot be
/// bound exits 64 before campaigning. Mutation: never call `gauges.lost()` and the gauge
/// stays 1 after the loss.
#[test]
fn elect_serves_leadership_metrics_for_prometheus() {
    let mut cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut leader = Reaped(
        redquorum(&cluster, dir.path())
            .args(["elect", "--id", "a", "--ttl", "1s", "--kill-grace", "300ms"])
            .arg("--metrics")
            .arg(format!("127.0.0.1:{port}"))
            .args(["m", "--", "sleep", "60"])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn"),
    );
    let leading = "redquorum_cli_leader{resource=\"m\"} 1";
    assert!(
        wait_until(Duration::from_secs(10), || scrape(port)
            .is_some_and(|body| body.contains(leading))),
        "{:?}",
        scrape(port)
    );
    let body = scrape(port).expect("served");
    assert!(
        body.contains("redquorum_cli_terms_won_total{resource=\"m\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("redquorum_operations_total"),
        "the library's too: {body}"
    );
    for node in 0..3 {
        cluster.pause(node);
    }
    let lost = "redquorum_cli_leadership_lost_total{resource=\"m\"} 1";
    assert!(
        wait_until(Duration::from_secs(10), || scrape(port)
            .is_some_and(|body| body.contains(lost)
                && body.contains("redquorum_cli_leader{resource=\"m\"} 0"))),
        "{:?}",
        scrape(port)
    );
    for node in 0..3 {
        cluster.resume(node);
    }
    signal(&leader, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut leader, Duration::from_secs(10));

    // An address in use: a usage error, and no campaign.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = taken.local_addr().expect("addr").to_string();
    let ran = dir.path().join("ran");
    let (code, _, err) = output(
        redquorum(&cluster, dir.path())
            .args([
                "elect",
                "--id",
                "b",
                "--metrics",
                &address,
                "m2",
                "--",
                "touch",
            ])
            .arg(&ran),
    );
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--metrics"), "{err}");
    assert!(!ran.exists());
    assert!(lock_keys(&cluster).is_empty(), "{:?}", lock_keys(&cluster));
    let (code, _, err) = output(redquorum(&cluster, dir.path()).args([
        "elect",
        "--id",
        "b",
        "--metrics",
        "localhost",
        "m2",
        "--",
        "true",
    ]));
    assert_eq!(code, 64, "{err}");
}

/// The config file (`$XDG_CONFIG_HOME/redquorum/config.toml` here, or `--config`) supplies the
/// nodes and the settings; the environment and flags override it setting by setting; an
/// unknown key or a bad value exits 64 naming the file, before anything is started.
/// Mutation: drop `deny_unknown_fields` and the misspelt key is silently ignored (exit 0).
#[test]
fn a_config_file_supplies_nodes_and_settings_and_flags_override_it() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config/redquorum");
    std::fs::create_dir_all(&config).expect("mkdir");
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let write = |extra: &str| {
        std::fs::write(
            config.join("config.toml"),
            format!(
                "nodes = [{}]\nkey-prefix = \"file:\"\n{extra}",
                nodes.join(", ")
            ),
        )
        .expect("write config")
    };
    write("node-timeout = \"200ms\"\n");
    // The command lists the keys of one master while the lock is held.
    let port = cluster.server(0).port().to_string();
    let keys = ["redis-cli", "-p", &port, "--raw", "keys", "*"];
    let held = |cmd: &mut Command| {
        let (code, out, err) = output(cmd.args(["run", "r", "--"]).args(keys));
        assert_eq!(code, 0, "{err}");
        out
    };
    assert!(held(&mut bare(dir.path())).contains("file:{r}"));
    assert!(
        held(bare(dir.path()).env("REDQUORUM_KEY_PREFIX", "env:")).contains("env:{r}"),
        "the environment overrides the file"
    );
    assert!(
        held(
            bare(dir.path())
                .env("REDQUORUM_KEY_PREFIX", "env:")
                .args(["--key-prefix", "flag:"])
        )
        .contains("flag:{r}"),
        "a flag overrides the environment"
    );
    // --nodes overrides the file's nodes: here, a list with a dead master fails a majority.
    let (code, _, err) = output(
        bare(dir.path())
            .arg("--nodes")
            .arg(format!(
                "{},redis://127.0.0.1:1,redis://127.0.0.1:2",
                cluster.urls()[0]
            ))
            .args(["run", "r", "--", "true"]),
    );
    assert_eq!(code, 69, "{err}");
    // An explicit --config elsewhere.
    let elsewhere = dir.path().join("other.toml");
    std::fs::write(&elsewhere, format!("nodes = [{}]\n", nodes.join(", "))).expect("write");
    let (code, _, err) = output(
        bare(dir.path())
            .arg("--config")
            .arg(&elsewhere)
            .args(["status", "r"]),
    );
    assert_eq!(code, 0, "{err}");

    let ran = dir.path().join("ran");
    for (extra, names) in [
        ("node_timeout = \"5ms\"\n", "node_timeout"), // a misspelt key
        ("node-timeout = \"soon\"\n", "soon"),        // a bad duration
        ("drift-factor = 0.7\n", "0.7"),              // out of range
        ("[run]\nttl = \"5s\"\n", "run"),             // a table it does not know
    ] {
        write(extra);
        let (code, _, err) = output(bare(dir.path()).args(["run", "r", "--", "touch"]).arg(&ran));
        assert_eq!(code, 64, "{extra}: {err}");
        assert!(err.contains(names), "{extra}: {err}");
        assert!(!ran.exists(), "{extra}: nothing may start");
    }
    write("node-timeout = \"5ms\"\n");
    std::fs::write(config.join("config.toml"), "nodes = []\n").expect("write");
    let (code, _, err) = output(bare(dir.path()).args(["status", "r"]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("lists no nodes"), "{err}");
    let (code, _, err) = output(
        bare(dir.path())
            .args(["--config", "/nonexistent/redquorum.toml"])
            .args(["status", "r"]),
    );
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("/nonexistent/redquorum.toml"), "{err}");
    assert!(lock_keys(&cluster).is_empty());
}

/// `Key=Value` settings of a systemd unit, by key (the last one wins, as in systemd).
fn unit_settings(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// The value after `flag` in a command line.
fn flag_value<'a>(words: &'a [String], flag: &str) -> &'a str {
    let at = words
        .iter()
        .position(|w| w == flag)
        .unwrap_or_else(|| panic!("{flag} missing from {words:?}"));
    &words[at + 1]
}

/// Runs a deploy example's redquorum command line as written, against `cluster` (through a
/// config file, as deployed), with the real command replaced by `true` and `swap`'s entries
/// applied so it fits a test: `("--flag", value)` replaces the flag's value (a ten-minute
/// hold), `(word, other)` a word (a host name, a fixed port).
fn run_as_written(
    cluster: &Cluster,
    dir: &Path,
    words: &[String],
    swap: &[(&str, &str)],
) -> Command {
    assert!(words[0].ends_with("redquorum"), "{words:?}");
    let cut = words
        .iter()
        .position(|w| w == "--")
        .expect("a command after --");
    let mut args: Vec<String> = words[1..cut].to_vec();
    for (from, to) in swap {
        let at = args
            .iter()
            .position(|w| w == from)
            .unwrap_or_else(|| panic!("{from} is not in {words:?}"));
        let at = if from.starts_with("--") { at + 1 } else { at };
        args[at] = (*to).to_owned();
    }
    args.extend(["--".to_owned(), "true".to_owned()]);
    let config = dir.join("deployed.toml");
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    std::fs::write(&config, format!("nodes = [{}]\n", nodes.join(", "))).expect("config");
    let mut cmd = bare(dir);
    cmd.arg("--config").arg(&config).args(args);
    cmd
}

/// The deploy examples for redquorum itself (systemd units, Kubernetes CronJob and
/// Deployment, the config file) run as written against real masters, and give the command
/// time to stop: every stop timeout and termination grace exceeds the kill grace, systemd
/// signals redquorum alone first, and the job's losers count as a success. The `--min-hold`
/// they use makes a second host skip a run the first one already finished. Mutation: set the
/// CronJob's terminationGracePeriodSeconds to 30 (not above its 30 s kill grace) and the
/// grace assertion fails.
#[test]
fn the_deploy_examples_for_redquorum_run_as_written() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let read = |p: &str| std::fs::read_to_string(deploy.join(p)).expect(p);
    let secs = |text: &str| humantime::parse_duration(text).expect("a duration");
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");

    // The example config file is valid as shipped (its nodes replaced by the test's).
    let (code, _, err) = output(
        redquorum(&cluster, dir.path())
            .arg("--config")
            .arg(deploy.join("redquorum/config.toml"))
            .args(["status", "r"]),
    );
    assert_eq!(code, 0, "{err}");

    // The job: exactly one host per run.
    let job = unit_settings(&read("systemd/redquorum-job.service"));
    let words: Vec<String> = job["ExecStart"]
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert!(secs(&job["TimeoutStopSec"]) > secs(flag_value(&words, "--kill-grace")));
    assert_eq!(job["KillMode"], "mixed");
    assert!(
        job["SuccessExitStatus"]
            .split_whitespace()
            .any(|c| c == "75")
    );
    // The hold stays longer than the wait, as in the unit, both shortened.
    let hold = [("--min-hold", "4s"), ("--wait", "300ms")];
    let mut first = Reaped(
        run_as_written(&cluster, dir.path(), &words, &hold)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let lines = Lines::of(first.stderr.take().expect("stderr"));
    let mut seen = Vec::new();
    assert!(
        lines
            .until(Duration::from_secs(10), &mut seen, |l| l
                .contains("--min-hold"))
            .is_some(),
        "{seen:?}"
    );
    // The command (`true`) is done; the hold keeps the late host out.
    let (late, _, err) = output(&mut run_as_written(&cluster, dir.path(), &words, &hold));
    assert_eq!(late, 75, "{err}");
    assert_eq!(wait_exit(&mut first, Duration::from_secs(10)), 0);
    assert!(lock_keys(&cluster).is_empty(), "released after the hold");
    assert!(
        job["SuccessExitStatus"]
            .split_whitespace()
            .any(|c| c == "143")
    );
    // A stop (SIGTERM, forwarded to the job) ends the hold: systemctl stop does not hang.
    let ready = dir.path().join("job-ready");
    let script = format!("touch {}; exec sleep 30", ready.display());
    let mut stopped = Reaped(
        redquorum(&cluster, dir.path())
            .args([
                "run",
                "--min-hold",
                "1h",
                "stopped",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn"),
    );
    assert!(wait_until(Duration::from_secs(10), || ready.exists()));
    signal(&stopped, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(wait_exit(&mut stopped, Duration::from_secs(10)), 128 + 15);
    assert!(lock_keys(&cluster).is_empty(), "released at once");
    let timer = unit_settings(&read("systemd/redquorum-job.timer"));
    assert!(timer.contains_key("OnCalendar"));
    assert!(
        !timer.contains_key("RandomizedDelaySec"),
        "hosts must try together"
    );

    // The leader service.
    let leader = unit_settings(&read("systemd/redquorum-leader.service"));
    let words: Vec<String> = leader["ExecStart"]
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert!(secs(&leader["TimeoutStopSec"]) > secs(flag_value(&words, "--kill-grace")));
    assert_eq!(leader["KillMode"], "mixed");
    assert_eq!(leader["Restart"], "always");
    assert!(words.contains(&"--once".to_owned()));
    let port = free_port().to_string();
    let address = format!("127.0.0.1:{port}");
    let (code, _, err) = output(&mut run_as_written(
        &cluster,
        dir.path(),
        &words,
        &[("%H", "host-a"), ("127.0.0.1:9464", &address)],
    ));
    assert_eq!(code, 0, "{err}");

    // Kubernetes.
    let docs = yaml_rust2::YamlLoader::load_from_str(&read("kubernetes/redquorum.yaml"))
        .expect("kubernetes/redquorum.yaml parses");
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(k))
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let secret = kind("Secret");
    let shipped = dir.path().join("secret.toml");
    std::fs::write(
        &shipped,
        secret["stringData"]["config.toml"]
            .as_str()
            .expect("config.toml"),
    )
    .expect("write");
    let (code, _, err) = output(
        redquorum(&cluster, dir.path())
            .arg("--config")
            .arg(&shipped)
            .args(["status", "r"]),
    );
    assert_eq!(code, 0, "the Secret's config is valid: {err}");
    let secret_name = secret["metadata"]["name"].as_str().expect("name");
    for (pod, swap) in [
        (
            &kind("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            vec![("--min-hold", "100ms"), ("--wait", "50ms")],
        ),
        (
            &kind("Deployment")["spec"]["template"]["spec"],
            vec![("$(POD_NAME)", "pod-a"), ("0.0.0.0:9464", address.as_str())],
        ),
    ] {
        let container = &pod["containers"][0];
        let words: Vec<String> = container["command"]
            .as_vec()
            .expect("command")
            .iter()
            .map(|w| w.as_str().expect("a word").to_owned())
            .collect();
        let grace = pod["terminationGracePeriodSeconds"]
            .as_i64()
            .expect("grace");
        let kill_grace = secs(flag_value(&words, "--kill-grace"));
        assert!(
            Duration::from_secs(u64::try_from(grace).expect("positive")) > kill_grace,
            "{grace} s must exceed the kill grace {kill_grace:?}"
        );
        let mount = &container["volumeMounts"][0];
        assert_eq!(mount["mountPath"].as_str(), Some("/etc/redquorum"));
        let volume = &pod["volumes"][0];
        assert_eq!(volume["name"], mount["name"]);
        assert_eq!(volume["secret"]["secretName"].as_str(), Some(secret_name));
        let (code, _, err) = output(&mut run_as_written(&cluster, dir.path(), &words, &swap));
        assert_eq!(code, 0, "{words:?}: {err}");
        assert!(
            err.lines().all(|l| l.starts_with('{')),
            "--json: one event per line: {err}"
        );
        if words.contains(&"-E".to_owned()) {
            assert_eq!(flag_value(&words, "-E"), "0", "losers must not be retried");
        }
    }
    assert!(lock_keys(&cluster).is_empty());
}

/// A signal that cancels `run`'s acquire mid-round leaves no key behind: redquorum waits for
/// the cancelled round's compare-and-delete before it exits, instead of leaving the key to its
/// ttl. Master 0 is held by another client, master 1 hangs (paused) and master 2 grants: the
/// SIGTERM comes while the round waits for master 1, and master 2 is behind a proxy that
/// delays every chunk 400 ms, so its delete is still on the way when an unsettled redquorum
/// would have exited. Mutation: skip `client::settle` and the key is still on master 2 when
/// redquorum has exited (run: fails).
///
/// Master 1 was paused before `run` started, so `run` never connects to it: its one connection
/// attempt hangs for the connect timeout, and once that attempt has failed, a request to master
/// 1 fails at once (a master known to be down costs a round nothing, `ServerLink`). With the
/// default 1 s connect timeout, `run`'s first round came just as that attempt failed, and
/// every round after it was lost in under a millisecond (seen with `MONITOR` on master 2: each
/// round's key lived 0.2-0.6 ms), too briefly for this test to see it, which failed the test
/// about once in six. A connect timeout longer than the test keeps master 1's attempt under
/// way, so each round waits its whole per-node timeout on master 1, as the test means it to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_during_an_acquire_leaves_no_key_behind() {
    use redquorum_testkit::{Fault, Proxy};
    let mut cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let slow = Proxy::start(cluster.server(2).port()).await;
    let urls = [cluster.server(0).url(), cluster.server(1).url(), slow.url()].join(",");
    let key = b"redquorum:{busy}";
    // A first run while every master is up seeds the fence counter's slot everywhere.
    let (code, _, err) =
        output(bare(dir.path()).args(["--nodes", &urls, "run", "busy", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    cluster.set(0, key, b"someone-else", Duration::from_secs(60));
    cluster.pause(1);
    let mut run = Reaped(
        bare(dir.path())
            .args(["--nodes", &urls, "--node-timeout", "1500ms"])
            .args(["--connect-timeout", "60s"])
            .args(["run", "--wait", "forever", "busy", "--", "true"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    // The round's SET reached master 2 and waits for master 1.
    assert!(
        wait_until(Duration::from_secs(10), || cluster.get(2, key).is_some()),
        "the round never reached master 2"
    );
    slow.set(Fault::Delay(Duration::from_millis(400)));
    signal(&run, nix::sys::signal::Signal::SIGTERM);
    let code = wait_exit(&mut run, Duration::from_secs(10));
    assert_eq!(code, 128 + 15, "{}", stderr_of(&mut run));
    assert_eq!(
        cluster.get(2, key),
        None,
        "the cancelled round's key is still on master 2"
    );
    cluster.resume(1);
}

/// A skipped run names who holds (host, pid, command), and so do `status` and its JSON: `run`
/// describes itself in its lock's value (`Builder::holder_info`), so nothing of it is left
/// once it is done.
///
/// Mutation: `run` building its client without `holder_info`: run, the skip says "held by
/// another owner".
#[test]
fn a_skip_and_status_name_the_holders_host_pid_and_command() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let held = dir.path().join("held");
    let mut holder = Reaped(
        redquorum(&cluster, dir.path())
            .args(["run", "job", "--", "sh", "-c"])
            .arg(format!("touch {}; sleep 10", held.display()))
            .spawn()
            .expect("spawn"),
    );
    assert!(wait_until(Duration::from_secs(10), || held.exists()));
    let host = nix::unistd::gethostname()
        .expect("hostname")
        .into_string()
        .expect("utf-8");
    // The program's name, never its arguments (they may carry secrets).
    let about = format!("{host} pid {} sh", holder.id());
    let (code, _, err) =
        output(redquorum(&cluster, dir.path()).args(["run", "-n", "job", "--", "true"]));
    assert_eq!(code, 75, "{err}");
    assert!(err.contains(&format!("job is held by {about}")), "{err}");
    assert!(err.contains(" for another "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, out, err) = output(redquorum(&cluster, dir.path()).args(["status", "job"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("({about}")), "{out}");
    assert!(out.contains(", since 20"), "{out}");
    let (_, out, _) = output(redquorum(&cluster, dir.path()).args(["--json", "status", "job"]));
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let shown = json["majority_holder_about"].as_str().expect("described");
    assert_eq!(shown, about, "{json}");
    assert!(
        !out.contains("touch"),
        "the command's arguments are never stored: {out}"
    );
    let since = json["nodes"][0]["held_since_ms"].as_u64().expect("since");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    assert!(since <= now && now - since < 60_000, "{since} {now}");
    signal(&holder, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut holder, Duration::from_secs(10));
    assert!(wait_until(Duration::from_secs(5), || cluster
        .keys()
        .iter()
        .all(|(_, k)| !k.starts_with(b"redquorum:{job}")
            || k.ends_with(b":fence")
            || k.ends_with(b":seeded"))));
}

/// `run --permits 3` while runs with `--permits 2` hold the semaphore: refused on the servers
/// (exit 64, one line naming both numbers), the command never runs, and nothing of the refused
/// run is left; once the holder is done, any number may use the name.
///
/// Mutation: `ACQUIRE_PERMIT` without its check of the record of the number of permits: run,
/// the command runs with permit 2.
#[test]
fn run_with_other_permits_than_the_holders_is_refused() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let held = dir.path().join("held");
    // Reaped: ended even when an assertion below fails (its command then ends by itself).
    let mut holder = Reaped(
        redquorum(&cluster, dir.path())
            .args(["run", "--permits", "2", "pool", "--", "sh", "-c"])
            .arg(format!("touch {}; sleep 10", held.display()))
            .spawn()
            .expect("spawn"),
    );
    assert!(wait_until(Duration::from_secs(10), || held.exists()));
    let ran = dir.path().join("ran");
    let (code, _, err) = output(
        redquorum(&cluster, dir.path())
            .args(["run", "-n", "--permits", "3", "pool", "--", "touch"])
            .arg(&ran),
    );
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("pool is in use with --permits 2, not 3: every run of one semaphore must give the same --permits"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!ran.exists());
    signal(&holder, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut holder, Duration::from_secs(10));
    assert!(
        wait_until(Duration::from_secs(5), || lock_keys(&cluster).is_empty()),
        "{:?}",
        lock_keys(&cluster)
    );
    let (code, _, err) = output(
        redquorum(&cluster, dir.path())
            .args(["run", "-n", "--permits", "3", "pool", "--", "touch"])
            .arg(&ran),
    );
    assert_eq!(code, 0, "{err}");
    assert!(ran.exists());
}

/// `run --permits 2`: three commands that each run 1.5 s, started together, run at most two
/// at a time (each logs its start and end from its own shell), each with its permit's number
/// in `REDQUORUM_PERMIT` (two at once never share one) and no fencing token; a fourth with
/// `-n` while two run exits 75 and never runs; nothing is left once they are done.
///
/// Mutation: `run` ignoring `--permits` (taking the lock): run, fails (the fourth is refused
/// as a busy lock, and the three run one at a time).
#[test]
fn run_with_permits_runs_at_most_n_commands_at_once() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "echo \"start $REDQUORUM_PERMIT ${{REDQUORUM_FENCING_TOKEN:-none}} $(date +%s%N)\" >> {log}; \
         sleep 1.5; echo \"end $REDQUORUM_PERMIT x $(date +%s%N)\" >> {log}",
        log = log.display()
    );
    let mut runs: Vec<Child> = (0..3)
        .map(|_| {
            redquorum(&cluster, dir.path())
                .args([
                    "run",
                    "--permits",
                    "2",
                    "--wait",
                    "20s",
                    "pool",
                    "--",
                    "sh",
                    "-c",
                ])
                .arg(&script)
                .spawn()
                .expect("spawn")
        })
        .collect();
    // While two run, a non-blocking fourth is refused.
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.matches("start").count() >= 2)
    }));
    let ran = dir.path().join("fourth-ran");
    let (code, _, err) = output(
        redquorum(&cluster, dir.path())
            .args(["run", "-n", "--permits", "2", "pool", "--", "touch"])
            .arg(&ran),
    );
    // (A command may have ended in between; then the fourth legitimately ran.)
    if code == 75 {
        assert!(err.contains("all 2 permits of pool are held"), "{err}");
        assert!(!ran.exists());
    } else {
        assert_eq!(code, 0, "{err}");
    }
    for run in &mut runs {
        assert_eq!(wait_exit(run, Duration::from_secs(20)), 0);
    }
    let log = std::fs::read_to_string(&log).expect("log");
    // (time, +1 or -1, permit): the most commands running at once, and permits shared.
    let mut events: Vec<(u128, i32, String)> = log
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(parts.len(), 4, "{line}");
            if parts[0] == "start" {
                assert_eq!(parts[2], "none", "a permit's holder gets no fencing token");
            }
            let delta = if parts[0] == "start" { 1 } else { -1 };
            (parts[3].parse().expect("ns"), delta, parts[1].to_owned())
        })
        .collect();
    events.sort_by_key(|(at, delta, _)| (*at, *delta));
    let (mut running, mut most) = (Vec::<String>::new(), 0);
    for (_, delta, permit) in events {
        if delta > 0 {
            assert!(
                !running.contains(&permit),
                "permit {permit} twice at once: {log}"
            );
            assert!(permit == "0" || permit == "1", "{log}");
            running.push(permit);
        } else {
            let at = running.iter().position(|p| *p == permit).expect("started");
            running.remove(at);
        }
        most = most.max(running.len());
    }
    assert_eq!(most, 2, "{log}");
    assert!(lock_keys(&cluster).is_empty(), "{:?}", lock_keys(&cluster));
    let (code, _, err) = output(redquorum(&cluster, dir.path()).args([
        "run",
        "--permits",
        "0",
        "pool",
        "--",
        "true",
    ]));
    assert_eq!(code, 64, "{err}");
    let (code, _, err) = output(redquorum(&cluster, dir.path()).args([
        "run",
        "--permits",
        "257",
        "pool",
        "--",
        "true",
    ]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("1..=256"), "{err}");
}

/// `--key-layout shared --key-prefix ""`: the lock key is exactly the resource, as
/// node-redlock and redsync name it (the command sees it on the masters while it runs), the
/// command gets no fencing token, and the lock is released after it; `--permits` and `elect`
/// are refused as usage errors, and the config file's `key-layout` is read.
///
/// Mutation: `--key-layout` ignored in `client::redlock`: the key is `redquorum:{nightly}`,
/// and the command sees a fencing token.
#[test]
fn the_shared_key_layout_names_the_lock_as_other_clients_do() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = cluster.server(0).port().to_string();
    let script = format!(
        r#"echo "${{REDQUORUM_FENCING_TOKEN-none}}"; redis-cli -p {port} --raw EXISTS nightly"#
    );
    let shared = ["--key-layout", "shared", "--key-prefix", ""];
    // The command ran under the key `nightly` itself, with no fencing token.
    let ran_shared = |settings: &[&std::ffi::OsStr]| {
        let (code, out, err) = output(
            redquorum(&cluster, dir.path())
                .args(settings)
                .args(["run", "nightly", "--", "sh", "-c", &script]),
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            out.split_whitespace().collect::<Vec<_>>(),
            ["none", "1"],
            "{out}"
        );
    };
    ran_shared(&shared.map(std::ffi::OsStr::new));
    assert!(
        cluster.keys().is_empty(),
        "released, nothing else written: {:?}",
        cluster.keys()
    );

    for refused in [
        vec!["run", "--permits", "2", "pool", "--", "true"],
        vec!["elect", "--id", "a", "leader", "--", "true"],
    ] {
        let (code, _, err) = output(redquorum(&cluster, dir.path()).args(shared).args(&refused));
        assert_eq!(code, 64, "{refused:?}: {err}");
        assert!(err.contains("key layout"), "{refused:?}: {err}");
    }

    let config = dir.path().join("shared.toml");
    std::fs::write(&config, "key-layout = \"shared\"\nkey-prefix = \"\"\n").expect("write");
    ran_shared(&[std::ffi::OsStr::new("--config"), config.as_os_str()]);
}

/// `redquorum fence` seeds every master and says so; `--check` only looks; `status` ends with
/// the same line. A restarted master is shown not seeded (exit 69) until `fence` seeds it,
/// the operator's check in a rolling restart. A `run` with one master down then fences a job
/// name nobody used before (issue 29: that failed for almost every new name).
///
/// Mutation: `fence --check` answering from a sweep instead of the records (`seed_fencing`
/// for both): the first `--check` says seeded, exit 0 (not run: the check is the same code
/// path as `RedLock::fence_seeding`, whose integration test catches a seeding read-only
/// mutation).
#[tokio::test]
async fn fence_seeds_every_master_and_status_and_check_show_it() {
    let mut cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = output(redquorum(&cluster, dir.path()).args(["fence", "--check"]));
    assert_eq!(code, 69, "a new deployment is not seeded yet: {out}{err}");
    assert!(out.contains("not seeded on master 0 (not seeded)"), "{out}");
    let (code, out, err) = output(redquorum(&cluster, dir.path()).args(["fence"]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("fencing: seeded on every master"), "{out}");
    let (code, out, err) = output(redquorum(&cluster, dir.path()).args(["status", "job"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("fencing: seeded on every master"), "{out}");

    cluster.restart(1);
    let (code, out, _) =
        output(redquorum(&cluster, dir.path()).args(["--json", "fence", "--check"]));
    assert_eq!(code, 69, "{out}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["complete"], false, "{json}");
    assert_eq!(json["nodes"][1]["fencing"], "not seeded", "{json}");
    let (code, out, err) = output(redquorum(&cluster, dir.path()).args(["fence"]));
    assert_eq!(code, 0, "{out}{err}");

    cluster.kill(2);
    let (code, out, err) =
        output(redquorum(&cluster, dir.path()).args(["run", "never-used-before", "--", "true"]));
    assert_eq!(code, 0, "{out}{err}");
}

/// `run --shared` is `flock -s`: two shared runs of one name run at once, each with a fencing
/// token (the last exclusive run's); an exclusive run (`-x`, or no flag) of the name is
/// refused while they run, saying readers hold it, and runs once they are done with a higher
/// token than theirs; a shared run is refused while it runs. `status` counts the two readers.
/// Nothing is left after.
///
/// Mutations: `run` ignoring `--shared` (taking the lock): run, fails (the two shared runs do
/// not overlap); `status` not counting readers (`readers_on_majority` answering 0): run, fails.
#[test]
fn shared_runs_run_together_and_an_exclusive_one_alone() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "echo \"start ${{REDQUORUM_FENCING_TOKEN:-none}} $(date +%s%N)\" >> {log}; \
         sleep 3; echo \"end x $(date +%s%N)\" >> {log}",
        log = log.display()
    );
    let mut runs: Vec<Child> = (0..2)
        .map(|_| {
            redquorum(&cluster, dir.path())
                .args([
                    "run", "--shared", "--wait", "20s", "catalog", "--", "sh", "-c",
                ])
                .arg(&script)
                .spawn()
                .expect("spawn")
        })
        .collect();
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.matches("start").count() >= 2)
    }));
    let (code, out, err) = output(redquorum(&cluster, dir.path()).args(["status", "catalog"]));
    assert_eq!(code, 0, "{err}");
    let (code, json, err) =
        output(redquorum(&cluster, dir.path()).args(["--json", "status", "catalog"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        !std::fs::read_to_string(&log).expect("log").contains("end"),
        "a shared run ended before `status` was asked (each holds 3 s)"
    );
    assert!(out.contains("catalog: held by 2 readers (shared)"), "{out}");
    // Each master counts its own shares: a read is decided at the majority, so one master
    // may not have a reader's share (yet, or at all: its request may have timed out), as a
    // clean-clone CI run showed (`readers:1` on master 0). The readers that hold are those
    // on a majority.
    assert_eq!(out.matches("readers:").count(), 3, "{out}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(json["majority_holder"], "readers", "{json}");
    assert_eq!(json["readers_on_majority"], 2, "{json}");
    assert!(
        json["nodes"][0]["readers"].as_u64().is_some_and(|n| n >= 1),
        "{json}"
    );
    let ran = dir.path().join("exclusive-ran");
    let (code, _, err) = output(
        redquorum(&cluster, dir.path())
            .args(["run", "-n", "-x", "catalog", "--", "touch"])
            .arg(&ran),
    );
    // (A shared run may have ended in between; then the exclusive one legitimately ran.)
    if code == 75 {
        assert!(err.contains("catalog is held by readers"), "{err}");
        assert!(!ran.exists());
    } else {
        assert_eq!(code, 0, "{err}");
    }
    for run in &mut runs {
        assert_eq!(wait_exit(run, Duration::from_secs(20)), 0);
    }
    let log = std::fs::read_to_string(&log).expect("log");
    let starts: Vec<(u128, u64)> = log
        .lines()
        .filter(|l| l.starts_with("start"))
        .map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            (
                parts[2].parse().expect("ns"),
                parts[1].parse().expect("a reader's fencing token"),
            )
        })
        .collect();
    let first_end: u128 = log
        .lines()
        .filter(|l| l.starts_with("end"))
        .map(|l| {
            l.split_whitespace()
                .nth(2)
                .expect("ns")
                .parse()
                .expect("ns")
        })
        .min()
        .expect("an end");
    assert!(
        starts.iter().all(|(at, _)| *at < first_end),
        "the shared runs did not overlap: {log}"
    );
    // An exclusive run now: its token is above the readers'.
    let token_file = dir.path().join("token");
    let (code, _, err) = output(
        redquorum(&cluster, dir.path())
            .args(["run", "catalog", "--", "sh", "-c"])
            .arg(format!(
                "echo $REDQUORUM_FENCING_TOKEN > {}",
                token_file.display()
            )),
    );
    assert_eq!(code, 0, "{err}");
    let token: u64 = std::fs::read_to_string(&token_file)
        .expect("token")
        .trim()
        .parse()
        .expect("a writer's token");
    assert!(
        starts.iter().all(|(_, read)| *read < token),
        "a writer's token {token} not above the readers': {starts:?}"
    );
    // --shared with --permits is a usage error.
    let (code, _, _) = output(redquorum(&cluster, dir.path()).args([
        "run",
        "--shared",
        "--permits",
        "2",
        "catalog",
        "--",
        "true",
    ]));
    assert_eq!(code, 64);
    assert!(lock_keys(&cluster).is_empty(), "{:?}", lock_keys(&cluster));
}

/// `observe --holders` follows who holds the lock: free, then the two `--shared` runs
/// together ("held by 2 readers"), then an exclusive run (its token's digits), then free
/// again; `--once` says "free" and exits 0, and 69 when too few masters answer. Mutation:
/// reading the readers' mark as an exclusive holder (the `READERS_MARK` arm dropped): the
/// line with 2 readers never comes (run, caught).
#[test]
fn observe_holders_shows_the_readers_and_the_writer() {
    let mut cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut observer = Reaped(
        redquorum(&cluster, dir.path())
            .args(["--json", "observe", "--holders", "--every", "50ms", "shelf"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn"),
    );
    let lines = Lines::of(observer.stdout.take().expect("stdout"));
    let mut seen = Vec::new();
    let first = lines
        .until(Duration::from_secs(10), &mut seen, |_| true)
        .expect("a first line at once");
    assert!(
        event(&first)["writer"].is_null() && event(&first)["readers"] == 0,
        "free at first: {first}"
    );
    let shared = || {
        Reaped(
            redquorum(&cluster, dir.path())
                .args(["run", "--shared", "shelf", "--", "sleep", "2"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn"),
        )
    };
    let (mut r1, mut r2) = (shared(), shared());
    assert!(
        lines
            .until(Duration::from_secs(10), &mut seen, |l| event(l)["readers"]
                == 2)
            .is_some(),
        "both readers seen at once: {seen:?}"
    );
    assert_eq!(wait_exit(&mut r1, Duration::from_secs(10)), 0);
    assert_eq!(wait_exit(&mut r2, Duration::from_secs(10)), 0);
    let mut writer = Reaped(
        redquorum(&cluster, dir.path())
            .args(["run", "shelf", "--", "sleep", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn"),
    );
    assert!(
        lines
            .until(Duration::from_secs(10), &mut seen, |l| event(l)["writer"]
                .as_str()
                .is_some())
            .is_some(),
        "the exclusive run seen: {seen:?}"
    );
    assert_eq!(wait_exit(&mut writer, Duration::from_secs(10)), 0);
    assert!(
        lines
            .until(Duration::from_secs(10), &mut seen, |l| event(l)["writer"]
                .is_null()
                && event(l)["readers"] == 0
                && event(l)["unknown"].is_null())
            .is_some(),
        "free again: {seen:?}"
    );
    signal(&observer, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(wait_exit(&mut observer, Duration::from_secs(10)), 128 + 15);
    let (code, out, err) =
        output(redquorum(&cluster, dir.path()).args(["observe", "--holders", "--once", "shelf"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "shelf: free");
    cluster.kill(0);
    cluster.kill(1);
    let (code, out, err) =
        output(redquorum(&cluster, dir.path()).args(["observe", "--holders", "--once", "shelf"]));
    assert_eq!(code, 69, "{out} {err}");
}
