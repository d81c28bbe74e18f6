//! The `redquorum` binary, run for real against real `redis-server` processes: exit codes,
//! the command stopped on lock loss, concurrent runs that never overlap, elections across
//! processes, `status`, the dev cluster and the demo.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/proxy.rs"]
mod proxy;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cluster::Cluster;
use redquorum::RedLock;

const BIN: &str = env!("CARGO_BIN_EXE_redquorum");

/// The binary with `--nodes` set to `cluster`, and no environment that could point it elsewhere.
fn redquorum(cluster: &Cluster, scratch: &Path) -> Command {
    let mut cmd = bare(scratch);
    cmd.arg("--nodes").arg(cluster.urls().join(","));
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

fn library_client(cluster: &Cluster) -> RedLock {
    RedLock::builder(cluster.urls())
        .fencing(true)
        .build()
        .expect("config")
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

/// `redquorum run --ttl 1s --kill-grace 300ms r -- sh -c SCRIPT`, its stderr piped.
fn short_run(cluster: &Cluster, scratch: &Path, script: &str) -> Child {
    redquorum(cluster, scratch)
        .args([
            "run",
            "--ttl",
            "1s",
            "--kill-grace",
            "300ms",
            "r",
            "--",
            "sh",
            "-c",
            script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
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
    let lock = library_client(&cluster)
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
    assert!(err.contains("busy"), "{err}");
    assert!(!marker.exists(), "the command ran without the lock");
    lock.release().await.expect("release");
    assert!(lock_keys(&cluster).is_empty());
}

#[tokio::test]
async fn run_waits_for_the_holder_to_release() {
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = library_client(&cluster)
        .try_acquire("queue", Duration::from_secs(30))
        .await
        .expect("hold it");
    let mut waiting = redquorum(&cluster, dir.path())
        .args(["run", "--wait", "20s", "queue", "--", "true"])
        .spawn()
        .expect("spawn");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(waiting.try_wait().expect("try_wait").is_none(), "it waits");
    lock.release().await.expect("release");
    assert_eq!(wait_exit(&mut waiting, Duration::from_secs(15)), 0);
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
    // No nodes anywhere, and no dev cluster: say what to do.
    let (code, _, err) = output(bare(dir.path()).args(["status", "r"]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("redquorum dev up"), "{err}");
    assert!(cluster.keys().is_empty());
}

#[test]
fn nodes_come_from_the_environment_or_a_nodes_file() {
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
    assert!(wait_until(Duration::from_secs(10), || read_pid(&pids).is_some()));
    let sleep_pid = read_pid(&pids).expect("pid");
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
    use proxy::{Fault, Proxy};
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
    let next = library_client(&cluster);
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

#[tokio::test]
async fn status_shows_the_holder_on_every_node_and_as_json() {
    let cluster = Cluster::start(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = library_client(&cluster)
        .try_acquire("seen", Duration::from_secs(30))
        .await
        .expect("hold it");
    let holder = &lock.token().expose()[..8];
    // The acquire was decided at the majority; the slower nodes' SETs land in the background
    // (on a loaded machine, after the status below would read them).
    let key = b"redquorum:{seen}";
    let token = lock.token().expose().as_bytes();
    // Polled asynchronously: the stragglers run on this test's own (single-threaded) runtime.
    let everywhere = || (0..5).all(|i| cluster.get(i, key).as_deref() == Some(token));
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
    for node in json["nodes"].as_array().expect("nodes") {
        let ttl = node["ttl_ms"].as_u64().expect("a ttl");
        assert!(ttl > 20_000 && ttl <= 30_000, "{node}");
    }
    lock.release().await.expect("release");
    let (_, out, _) = output(redquorum(&cluster, dir.path()).args(["--json", "status", "seen"]));
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["free"], true, "{json}");
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

    // With no nodes given, commands use the dev cluster, and say so.
    let (code, _, err) = output(bare(dir.path()).args(["run", "r", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("dev cluster"), "{err}");

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

#[test]
fn the_demo_elects_fails_over_and_never_has_two_leaders() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _guard = DevGuard(dir.path());
    let (code, out, err) = output(bare(dir.path()).args(["--json", "demo", "--quick"]));
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&out).expect("JSON summary");
    assert_eq!(summary["overlaps"], 0, "{summary}\n{err}");
    assert_eq!(summary["terms_increase"], true, "{summary}\n{err}");
    assert!(
        summary["leaderships"].as_u64() >= Some(3),
        "{summary}\n{err}"
    );
    // The majority outage met a leader, and it stepped down by its deadline.
    assert!(summary["lost"].as_u64() >= Some(1), "{summary}\n{err}");
    assert!(err.contains("steps down"), "{err}");
    assert!(
        !dir.path().join("dev").exists(),
        "the demo left its cluster behind"
    );
}

/// The state directory a bench made under `tmp` (its `TMPDIR`), while it exists.
fn bench_state(tmp: &Path) -> Option<PathBuf> {
    std::fs::read_dir(tmp)
        .expect("tempdir")
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("redquorum-bench-")
        })
        .map(|e| e.path())
}

/// `bench --quick --json` measures every section on its own memory-only masters and stops them.
/// No figure is checked against a speed: only that each was measured and is consistent.
#[test]
fn the_bench_measures_every_section_and_stops_its_masters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = output(
        bare(dir.path())
            .env("TMPDIR", dir.path())
            .args(["--json", "bench", "--quick"]),
    );
    assert_eq!(code, 0, "{err}");
    let figures: serde_json::Value = serde_json::from_str(&out).expect("JSON figures");
    let spread_ok = |s: &serde_json::Value| {
        let (p50, p99, max) = (
            s["p50_us"].as_f64().unwrap_or(0.0),
            s["p99_us"].as_f64().unwrap_or(0.0),
            s["max_us"].as_f64().unwrap_or(0.0),
        );
        0.0 < p50 && p50 <= p99 && p99 <= max
    };
    let sequential = &figures["sequential"];
    assert_eq!(sequential["pairs"], 300, "{figures}");
    assert!(spread_ok(&sequential["baseline"]), "{figures}");
    assert!(spread_ok(&sequential["redquorum"]), "{figures}");
    let tasks: Vec<u64> = figures["throughput"]
        .as_array()
        .expect("throughput rows")
        .iter()
        .map(|row| {
            for side in ["baseline", "redquorum"] {
                assert!(row[side]["pairs_per_s"].as_f64() > Some(0.0), "{row}");
                // The servers' CPU time was found through their pids.
                assert!(
                    row[side]["servers_cpu_us_per_pair"].as_f64() > Some(0.0),
                    "{row}"
                );
            }
            row["tasks"].as_u64().unwrap_or(0)
        })
        .collect();
    assert_eq!(tasks, [1, 16, 64]);
    let handoff = figures["handoff"].as_array().expect("hand-off rows");
    assert_eq!(handoff.len(), 2, "{figures}");
    for run in handoff {
        assert!(spread_ok(&run["handoff"]), "{run}");
        let fairness = run["fairness"].as_f64().unwrap_or(0.0);
        assert!((0.125..=1.0 + 1e-9).contains(&fairness), "{run}");
        assert!(run["wasted_rounds_per_acquisition"].as_f64() >= Some(0.0));
    }
    assert!(spread_ok(&figures["fencing"]["on"]), "{figures}");
    assert!(spread_ok(&figures["hung_master"]["hung"]), "{figures}");
    assert!(err.contains("targets:"), "the table goes to stderr: {err}");
    assert!(
        bench_state(dir.path()).is_none(),
        "the bench left its masters' state behind"
    );
}

/// Interrupted mid-way, the bench still stops the masters it started, and exits 130.
#[test]
fn an_interrupted_bench_stops_its_masters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = bare(dir.path())
        .env("TMPDIR", dir.path())
        .args(["bench", "--quick"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the bench");
    // Wait until its masters run (their pid files exist), then interrupt it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let pids: Vec<i32> = loop {
        let pids: Vec<i32> = bench_state(dir.path())
            .map(|s| {
                (0..5)
                    .filter_map(|i| {
                        std::fs::read_to_string(s.join(format!("node-{i}/pid")))
                            .ok()?
                            .trim()
                            .parse()
                            .ok()
                    })
                    .collect()
            })
            .unwrap_or_default();
        if pids.len() == 5 {
            break pids;
        }
        assert!(
            Instant::now() < deadline,
            "the bench never started its masters"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, nix::sys::signal::Signal::SIGINT);
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(130));
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "redis-server {pid} outlived the interrupted bench"
        );
    }
    assert!(
        bench_state(dir.path()).is_none(),
        "the bench left its masters' state behind"
    );
}

/// The state letter of `pid` in /proc (R, S, T for stopped, Z…).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
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
    assert!(wait_until(Duration::from_secs(10), || read_pid(&pids).is_some()));
    let shell = read_pid(&pids).expect("pid");
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
            && state(shell) == Some('T')),
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

/// The waiting flags operators know from flock and consul lock: `-n` tries once, `-E N` makes a
/// busy lock exit N instead of 75, `--wait forever` waits until the holder releases (woken by
/// its release), and `-n` with `--wait` is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonblock_conflict_exit_code_and_waiting_forever() {
    let cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let holder = library_client(&cluster)
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
/// in the foreground (where the guard relays it).
#[test]
fn the_kill_signal_is_what_the_command_gets_first() {
    for foreground in [false, true] {
        let mut cluster = Cluster::start(5);
        let dir = tempfile::tempdir().expect("tempdir");
        let got = dir.path().join("got");
        let ready = dir.path().join("ready");
        let script = format!(
            "trap 'echo INT > {}; exit 0' INT; trap '' TERM; touch {}; while :; do sleep 0.05; done",
            got.display(),
            ready.display()
        );
        let mut args = vec![
            "run",
            "--ttl",
            "1s",
            "--kill-grace",
            "300ms",
            "--kill-signal",
            "INT",
        ];
        if foreground {
            args.push("--foreground");
        }
        args.extend(["r", "--", "sh", "-c", &script]);
        let mut run = redquorum(&cluster, dir.path())
            .args(&args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        assert!(wait_until(Duration::from_secs(10), || ready.exists()));
        let (code, err) = lose_the_majority(&mut cluster, &mut run);
        assert_eq!(code, 76, "foreground {foreground}: {err}");
        assert_eq!(
            std::fs::read_to_string(&got).ok().as_deref(),
            Some("INT\n"),
            "foreground {foreground}: {err}"
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
