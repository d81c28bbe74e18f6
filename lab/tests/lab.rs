//! The lab's `redquorum-lab` binary, run for real: the demo on a local dev cluster it starts and
//! stops, the bench on memory-only masters it starts and stops (also when interrupted), and
//! the cross-process contention.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use redquorum_testkit::DevCluster;

const BIN: &str = env!("CARGO_BIN_EXE_redquorum-lab");

/// The binary with a private dev-cluster directory under `scratch`.
fn lab(scratch: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("RUST_LOG")
        .env("REDQUORUM_DEV_DIR", scratch.join("dev"))
        .current_dir(scratch)
        .stdin(Stdio::null());
    cmd
}

/// A running `redquorum-lab` that is stopped as a user stops it (SIGTERM: it stops its
/// masters, then exits) if it is dropped before it was waited for: a test that fails while
/// others still run leaves none of their servers behind. (Left running, a soak outlived its
/// test and found its state directory deleted, and its masters stayed.)
struct StopOnDrop(Option<Child>);

impl StopOnDrop {
    /// Waits for it to end, with its output.
    fn wait(mut self) -> Output {
        self.0
            .take()
            .expect("waited once")
            .wait_with_output()
            .expect("wait")
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let _ = child.wait();
        }
    }
}

fn output(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run redquorum-lab");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, signal).expect("signal redquorum-lab");
}

/// Stops a dev cluster left in the directory, also when the test fails.
struct DevGuard(PathBuf);

impl Drop for DevGuard {
    fn drop(&mut self) {
        if let Ok(Some(cluster)) = DevCluster::open(&self.0) {
            let _ = cluster.down();
        }
    }
}

#[test]
fn the_demo_elects_fails_over_and_never_has_two_leaders() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _guard = DevGuard(dir.path().join("dev"));
    let (code, out, err) = output(lab(dir.path()).args(["--json", "demo", "--quick"]));
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

/// The state directory an experiment made under `tmp` (its `TMPDIR`) for its masters
/// (`redquorum-<experiment>-<pid>`), while it exists.
fn masters_state(tmp: &Path, experiment: &str) -> Option<PathBuf> {
    let prefix = format!("redquorum-{experiment}-");
    std::fs::read_dir(tmp)
        .expect("tempdir")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
}

/// The state directory a bench made under `tmp` (its `TMPDIR`), while it exists.
fn bench_state(tmp: &Path) -> Option<PathBuf> {
    masters_state(tmp, "bench")
}

/// `bench --counts --quick --json` counts the work per pair of each side: the counting
/// allocator is the binary's, the tasks are the library's own count, the servers' commands
/// are what each side sends (the baseline's `SET` and script, never a task), and nothing
/// counted is negative or missing. System calls need `perf`, which may be absent: `null`
/// then, and a number when it ran.
///
/// Mutation: the binary without its `#[global_allocator]`: allocations are `null` (run,
/// caught); the counts' reading of the servers before the pairs left out: every command's
/// calls per pair include the warm-up's (run, caught by the `SET` count).
#[test]
fn the_bench_counts_the_work_per_pair_of_each_side() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = output(
        lab(dir.path())
            .env("TMPDIR", dir.path())
            .args(["--json", "bench", "--quick", "--counts"]),
    );
    assert_eq!(code, 0, "{err}");
    let figures: serde_json::Value = serde_json::from_str(&out).expect("JSON figures");
    let runs = figures["counts"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{figures}");
    assert_eq!(runs[0]["tasks"], 1, "{figures}");
    assert_eq!(runs[0]["pairs"], 150, "{figures}");
    assert_eq!(runs[1]["tasks"], 64, "{figures}");
    for (run, side) in runs
        .iter()
        .flat_map(|run| ["baseline", "redquorum", "scripts_only"].map(|side| (run, side)))
    {
        let counts = &run[side];
        // A pair may fail on a loaded machine (a master slower than the 50 ms timeout); most
        // must not.
        let failed = counts["failed_pairs"].as_u64().expect("failed pairs");
        let pairs = run["pairs"].as_u64().unwrap_or(0);
        assert!(failed * 10 <= pairs, "{side}: {counts}");
        assert!(
            counts["allocations"].as_f64() > Some(10.0),
            "{side}: {counts}"
        );
        assert!(
            counts["bytes_to_servers"].as_f64() > Some(100.0),
            "{side}: {counts}"
        );
        assert!(counts["syscalls"].is_null() || counts["syscalls"].as_f64() > Some(0.0));
        // One SET NX PX per master and pair, whatever else each side sends; the baseline
        // drops the requests still queued when it returns, so it runs fewer at 64 tasks.
        let set = counts["commands"]["set"]["calls_per_pair"].as_f64();
        let expected = if side == "baseline" {
            3.0..=5.05
        } else {
            4.95..=5.05
        };
        assert!(
            set.is_some_and(|n| expected.contains(&n)),
            "{side}: {counts}"
        );
        // What reading the servers' totals sends is not counted as the pairs' work.
        for read in ["hello", "client|setinfo", "info"] {
            assert!(counts["commands"][read].is_null(), "{side}: {counts}");
        }
        if side != "baseline" {
            // An acquire's stragglers and a release's other deletes: about one task a round.
            let tasks = counts["tasks_spawned"].as_f64().unwrap_or(0.0);
            assert!((0.5..=3.0).contains(&tasks), "{side}: {counts}");
        }
        if side == "redquorum" {
            // Nobody waits for these locks, so a release looks for no queue and wakes nobody:
            // the server's `DELIFEQ`, or on a server without it the release script's own
            // shortcut for an unmarked token. (Scripts only, tokens are not marked: the full
            // release, which looks for waiters to hand to and publishes.)
            //
            // Mutation: the shortcut removed from `lua/release.lua` makes a Redis 7.0 run send
            // an `EXISTS` and a `PUBLISH` per master and pair.
            for waiters_work in ["exists", "publish"] {
                assert!(
                    counts["commands"][waiters_work].is_null(),
                    "{side}: {counts}"
                );
            }
        }
    }
    for run in runs {
        assert_eq!(run["baseline"]["tasks_spawned"], 0.0, "{run}");
    }
    assert!(
        bench_state(dir.path()).is_none(),
        "the bench left its masters' state behind"
    );
}

/// `bench --quick --json` measures every section on its own memory-only masters and stops them.
/// No figure is checked against a speed: only that each was measured and is consistent.
#[test]
fn the_bench_measures_every_section_and_stops_its_masters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = output(
        lab(dir.path())
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
    assert_eq!(handoff.len(), 4, "{figures}");
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

/// `contend` runs worker processes against each other on its own masters: every process got
/// the lock, no two held it at once (an overlap is a safety failure, not a speed figure), and
/// its masters are gone afterwards.
#[test]
fn processes_contending_for_one_lock_never_overlap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = output(lab(dir.path()).env("TMPDIR", dir.path()).args([
        "--json",
        "contend",
        "--processes",
        "3",
        "--seconds",
        "2",
    ]));
    assert_eq!(code, 0, "{err}");
    let figures: serde_json::Value = serde_json::from_str(&out).expect("JSON figures");
    let ours = &figures[0];
    assert_eq!(ours["client"], "redquorum", "{figures}");
    assert_eq!(ours["overlaps"], 0, "{figures}");
    // Counted, not fatal: under a loaded machine a release may miss the 50 ms timeout.
    assert!(ours["failed_releases"].is_u64(), "{figures}");
    let per_process: Vec<u64> = ours["per_process"]
        .as_array()
        .expect("per-process counts")
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    assert_eq!(per_process.len(), 3, "{figures}");
    assert!(per_process.iter().all(|&n| n > 0), "{figures}");
    let busy = ours["busy"].as_f64().unwrap_or(-1.0);
    assert!((0.0..=1.0).contains(&busy), "{figures}");
    assert_eq!(
        masters_state(dir.path(), "contend"),
        None,
        "contend left its masters' state behind"
    );
}

/// The soak's smoke run (the published soak runs for 30 minutes and more: `docs/testing.md`):
/// fenced holders in three processes under the seeded nemesis; no check fails, the nemesis
/// struck, availability is reported per fault kind, the figures file says the same as stdout,
/// and its masters' state is gone. The checks themselves are tested on made-up holds in
/// `soak::tests` (each finds the violation it looks for).
#[test]
fn a_short_soak_under_the_nemesis_passes_its_checks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("soak.json");
    let plot = dir.path().join("soak.svg");
    let (code, stdout, err) = output(
        lab(dir.path())
            .env("TMPDIR", dir.path())
            .args([
                "--json",
                "soak",
                "--processes",
                "3",
                "--seconds",
                "4",
                "--seed",
                "1",
            ])
            .arg("--out")
            .arg(&out)
            .arg("--plot")
            .arg(&plot),
    );
    assert_eq!(code, 0, "{stdout}{err}");
    let figures: serde_json::Value = serde_json::from_str(&stdout).expect("JSON figures");
    assert_eq!(figures["passed"], true, "{figures}");
    // How many is the machine's business (a loaded one managed 74 in 4 s): some, is the test's.
    assert!(
        figures["acquisitions"].as_u64().unwrap_or(0) > 0,
        "{figures}"
    );
    assert_eq!(figures["overlaps_both_writes_accepted"], 0, "{figures}");
    assert_eq!(figures["token_regressions"], 0, "{figures}");
    assert_eq!(figures["false_expired"], 0, "{figures}");
    assert_eq!(figures["keys_left"], 0, "{figures}");
    assert!(
        !figures["fault_log"].as_array().expect("faults").is_empty(),
        "{figures}"
    );
    assert!(
        figures["availability"]
            .as_array()
            .expect("availability")
            .iter()
            .any(|a| a["fault"] == "none"),
        "{figures}"
    );
    assert!(err.contains("soak: "), "a progress line: {err}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("--out")).expect("JSON");
    assert_eq!(written, figures);
    let svg = std::fs::read_to_string(&plot).expect("--plot");
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert_eq!(
        svg.matches("<polyline").count(),
        2,
        "rates and tokens: {svg}"
    );
    assert_eq!(
        masters_state(dir.path(), "soak"),
        None,
        "soak left its masters' state behind"
    );
}

/// The soak of the other primitives, short: a fenced read-write lock (readers together, no
/// write beside anyone, readers' tokens between the writes'), a semaphore of 2 permits (never
/// one permit twice) and an election (one leader at a time, rising terms); each passes, and
/// readers and permits were held together. And the fenced lock under clock jumps only (one
/// Valkey master's wall clock 2 s forward, past the ttl, then back): it passes, and the
/// nemesis jumped; and under network partitions (`cut`: voters in network namespaces, one's
/// link taken down at a time): it passes and the nemesis cut, or, where no namespace can be
/// made (no root, no `ip`), the soak says so and fails; and with its voters in Sentinel groups
/// under forced failovers: it passes and the nemesis failed over. An unknown primitive or
/// fault, or `cut` beside a fault the namespaces' voters cannot take, is a usage error.
#[test]
fn short_soaks_of_the_read_write_lock_the_semaphore_and_the_election_pass() {
    // The four at once, each on masters of its own: CI's time, not four soaks in a row.
    let runs: Vec<_> = [
        ("rwlock", true, "kill,pause,restart"),
        ("semaphore", true, "kill,pause,restart"),
        ("election", false, "kill,pause,restart"),
        ("mutex", false, "jump"),
        ("mutex", false, "cut"),
        ("mutex", false, "failover"),
    ]
    .into_iter()
    .map(|(primitive, together, nemesis)| {
        let dir = tempfile::tempdir().expect("tempdir");
        let child = lab(dir.path())
            .env("TMPDIR", dir.path())
            .args(["--json", "soak", "--primitive", primitive, "--permits", "2"])
            .args(["--nemesis", nemesis])
            // Holds of up to 20 ms: readers and permits meet however slow the machine.
            .args(["--hold-max-ms", "20"])
            .args(["--processes", "3", "--seed", "2"])
            // With `cut` no fault is in force in the last 2 s: 6 s make one surely start.
            .args(["--seconds", if nemesis == "cut" { "6" } else { "4" }])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run redquorum-lab");
        // Stopped before its directory goes, should the test fail first (fields drop in
        // order).
        (primitive, together, nemesis, StopOnDrop(Some(child)), dir)
    })
    .collect();
    for (primitive, together, nemesis, child, _dir) in runs {
        let Output {
            status,
            stdout,
            stderr,
        } = child.wait();
        let (stdout, err) = (
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr),
        );
        if nemesis == "cut" && status.code() == Some(1) && err.contains("cannot be made here") {
            eprintln!("no network namespaces here, the cut soak did not run: {err}");
            continue;
        }
        assert_eq!(
            status.code(),
            Some(0),
            "{primitive} {nemesis}: {stdout}{err}"
        );
        let figures: serde_json::Value = serde_json::from_str(&stdout).expect("JSON figures");
        assert_eq!(figures["primitive"], primitive, "{figures}");
        assert_eq!(figures["passed"], true, "{figures}");
        assert!(
            figures["acquisitions"].as_u64().unwrap_or(0) > 0,
            "{figures}"
        );
        if matches!(nemesis, "jump" | "cut" | "failover") {
            assert_eq!(
                figures["nemesis"],
                serde_json::json!([nemesis]),
                "{figures}"
            );
            assert!(
                figures["fault_log"]
                    .as_array()
                    .is_some_and(|faults| faults.iter().any(|f| f["fault"] == nemesis)),
                "the nemesis never struck ({nemesis}): {figures}"
            );
            if nemesis == "failover" {
                assert!(
                    figures["fault_log"].as_array().is_some_and(|faults| faults
                        .iter()
                        .filter(|f| f["fault"] == "failover")
                        .all(|f| f["detail"]
                            .as_str()
                            .is_some_and(|d| d.starts_with("master moved from port")))),
                    "a failover that moved no master: {figures}"
                );
            }
            assert_eq!(figures["keys_left"], 0, "{figures}");
        }
        let most = figures["most_held_at_once"].as_u64().unwrap_or(0);
        if together {
            assert!(most >= 2, "{primitive}: never two at once: {figures}");
        } else {
            assert_eq!(most, 1, "{figures}");
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, _, err) = output(lab(dir.path()).args(["soak", "--primitive", "queue"]));
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("mutex, rwlock, semaphore or election"),
        "{err}"
    );
    let (code, _, err) = output(lab(dir.path()).args(["soak", "--nemesis", "kill,flood"]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("unknown fault \"flood\""), "{err}");
    let (code, _, err) = output(lab(dir.path()).args(["soak", "--nemesis", "cut,kill"]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("`cut` goes with `pause` only"), "{err}");
}

/// `bench --against` with a path that is not there is refused at once (64), before any master
/// starts, and names the path.
///
/// Mutation: the check removed: the bench starts its masters and fails at its 64-task row,
/// exit 1 (run, caught).
#[test]
fn a_bench_against_a_missing_client_is_refused_before_it_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-contender");
    let (code, _, err) = output(
        lab(dir.path())
            .env("TMPDIR", dir.path())
            .args(["bench", "--quick", "--against"])
            .arg(&missing),
    );
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("no such file") && err.contains("no-such-contender"),
        "{err}"
    );
    assert!(bench_state(dir.path()).is_none(), "masters were started");
}

/// The servers (`redis-server`, `valkey-server`, sentinels too) whose working directory is
/// under `dir`: every server the lab starts runs in a directory of its own under its
/// `TMPDIR` (a dev cluster's node, a Sentinel group's servers), whatever kind it is.
fn servers_under(dir: &Path) -> Vec<String> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)))
        .filter(|e| {
            // A zombie (exited, not yet reaped by init here) runs nothing.
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| !s.contains(") Z "))
        })
        .map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).replace('\0', " ")
        })
        .filter(|cmdline| cmdline.contains("redis-server") || cmdline.contains("valkey-server"))
        .collect()
}

/// Stopped by SIGTERM while its nemesis fails Sentinel groups over, a soak stops every server
/// it started (the groups' masters, replicas and sentinels, and its store) before it exits.
/// (Before, its nemesis thread still held the groups when the process exited, so their `Drop`
/// never ran: 15 servers stayed each time.)
///
/// Mutations: the soak not telling its nemesis to halt when stopped (run: 15 servers left, its
/// groups'); not waiting for the nemesis to let go of the masters (run: not caught, the nemesis
/// lets go while the groups are resumed, but nothing then makes it so).
#[test]
fn a_soak_stopped_mid_failover_leaves_no_server_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = dir.path().canonicalize().expect("tempdir path");
    let child = lab(&tmp)
        .env("TMPDIR", &tmp)
        .args(["soak", "--nemesis", "failover", "--processes", "2"])
        .args(["--seconds", "30", "--seed", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redquorum-lab");
    let child = StopOnDrop(Some(child));
    // Its groups run (five masters, five replicas, five sentinels, and the store); then the
    // groups settle (a few seconds), the window opens (3 s later) and the nemesis fails a group
    // over (1 to 3 s into it).
    let deadline = Instant::now() + Duration::from_secs(30);
    while servers_under(&tmp).len() < 16 {
        assert!(
            Instant::now() < deadline,
            "the soak never started its servers"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(10));
    signal(
        child.0.as_ref().expect("running"),
        nix::sys::signal::Signal::SIGTERM,
    );
    let out = child.wait();
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = servers_under(&tmp);
    assert!(left.is_empty(), "left running: {left:#?}");
}

/// Interrupted mid-way, the bench still stops the masters it started, and exits 130.
#[test]
fn an_interrupted_bench_stops_its_masters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = lab(dir.path())
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

/// `scale --quick --json` measures the four configurations (three voters each: standalone with
/// the raw baseline, 1-master and 3-master clusters) on servers it starts itself. No figure is
/// checked against a speed: only that each was measured, with every server's CPU found.
#[test]
fn the_scale_experiment_measures_every_configuration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, out, err) = output(lab(dir.path()).args(["--json", "scale", "--quick"]));
    assert_eq!(code, 0, "{err}");
    let figures: serde_json::Value = serde_json::from_str(&out).expect("JSON figures");
    let rows = figures["rows"].as_array().expect("rows");
    let processes: Vec<u64> = rows
        .iter()
        .map(|row| {
            assert!(row["pairs_per_s"].as_f64() > Some(0.0), "{row}");
            let busiest = row["busiest_server_us_per_pair"].as_f64().unwrap_or(0.0);
            let all = row["servers_us_per_pair"].as_f64().unwrap_or(0.0);
            assert!(0.0 < busiest && busiest <= all, "{row}");
            // Counted by the binary's counting allocator and redquorum's spawn counter.
            assert!(
                row["client_allocations_per_pair"].as_f64() > Some(0.0),
                "{row}"
            );
            assert!(row["tasks_spawned_per_pair"].as_f64().is_some(), "{row}");
            row["server_processes"].as_u64().unwrap_or(0)
        })
        .collect();
    assert_eq!(processes, [3, 3, 3, 9], "{figures}");
    // The baseline spawns nothing of redquorum's; redquorum's pairs do.
    let tasks: Vec<f64> = rows
        .iter()
        .map(|row| row["tasks_spawned_per_pair"].as_f64().unwrap_or(-1.0))
        .collect();
    assert!(
        tasks[0] == 0.0 && tasks[1..].iter().all(|t| *t > 0.0),
        "{tasks:?}"
    );
    assert!(
        err.contains("busiest server"),
        "the table goes to stderr: {err}"
    );
}
