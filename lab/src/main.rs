//! `redquorum-lab`: the demo and the bench. See `redquorum-lab --help`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Counts every allocation, for `bench --counts`.
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// redquorum's lab: the live demo and the performance table, each on local masters it starts
/// and stops itself.
#[derive(Debug, Parser)]
#[command(name = "redquorum-lab", version)]
struct Lab {
    /// The demo's summary or the bench's figures as JSON on stdout; the running text goes to
    /// stderr.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    experiment: Experiment,
}

#[derive(Debug, Subcommand)]
enum Experiment {
    /// A live demo: three candidates elect a leader on five local masters while masters are
    /// killed, paused and restarted. Ends by itself with a summary (about 50 s, 25 s with
    /// --quick). Uses the dev cluster (`redquorum dev up`) when one runs, and leaves it as it
    /// found it; otherwise starts one and stops it at the end.
    Demo {
        /// A shorter schedule (about 25 s).
        #[arg(long)]
        quick: bool,
    },
    /// The performance table: latency, throughput, hand-off to waiters, fencing and a hung
    /// master, each next to a raw baseline (plain SET NX PX and compare-and-delete on the
    /// redis crate) measured in the same run on five memory-only masters it starts itself.
    /// About 40 s (10 s with --quick).
    Bench {
        /// Smaller samples (about 10 s): for a smoke test, not for figures.
        #[arg(long)]
        quick: bool,
        /// Only the work per acquire+release pair, counted (allocations, system calls with
        /// `perf`, tasks spawned, bytes to and from the servers, the servers' commands and
        /// their µs per call), for the raw baseline, redquorum and redquorum with scripts
        /// only. About 10 s (3 s with --quick).
        #[arg(long)]
        counts: bool,
        /// Also measure BIN's 64-task row on the same masters, right after redquorum's (BIN
        /// speaks `lab/rslock-contender`'s `--pairs` mode: build it with `cargo build
        /// --release --manifest-path lab/rslock-contender/Cargo.toml`).
        #[arg(long, conflicts_with = "counts")]
        against: Option<std::path::PathBuf>,
    },
    /// What Redis Cluster voters buy: distinct-resource throughput (64 tasks) and the CPU per
    /// acquire+release pair of the client, the servers and the busiest server, with three
    /// standalone voters, three 1-master Cluster voters (as many servers) and three 3-master
    /// Cluster voters, next to the raw baseline; all started and stopped by the lab itself.
    /// About 15 s (5 s with --quick).
    Scale {
        /// Shorter runs (about 5 s): for a smoke test, not for figures.
        #[arg(long)]
        quick: bool,
    },
    /// One lock handed around between separate processes: each worker process takes it in a
    /// loop, holds it 0..=--hold-max-ms and releases it, for --seconds. Prints acquisitions,
    /// how busy the lock was, per-process counts, the longest wait and overlaps (must be 0).
    /// With --against BIN, BIN's workers (same arguments, same output: see
    /// lab/rslock-contender) are measured after redquorum's, on the same masters.
    Contend {
        #[arg(long, default_value_t = 4)]
        processes: usize,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        #[arg(long, default_value_t = 5.0)]
        hold_max_ms: f64,
        #[arg(long)]
        against: Option<std::path::PathBuf>,
    },
    /// Fenced holders in separate processes take one lock in turn on five local masters for
    /// --seconds while a seeded nemesis kills, pauses and restarts masters one at a time;
    /// each holder writes its token to a fenced store. Prints a progress line, then
    /// acquisitions, overlaps, writes the store rejected, token regressions, false
    /// `Expired`, keys left and availability by fault kind (--json, or --out FILE, as JSON;
    /// --plot FILE.svg draws them). Exits 1 when a check failed.
    Soak {
        #[arg(long, default_value_t = 4)]
        processes: usize,
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        #[arg(long, default_value_t = 5.0)]
        hold_max_ms: f64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// mutex (fenced), rwlock (fenced; three reads in four), semaphore or election (terms
        /// as tokens).
        #[arg(long, default_value = "mutex")]
        primitive: String,
        /// A semaphore's permits.
        #[arg(long, default_value_t = 2)]
        permits: u32,
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Where to write the plot (SVG): acquisitions per second with the faults shaded,
        /// and the fencing tokens over time.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
        /// The faults the nemesis draws from, comma-separated: kill (SIGKILL, an empty
        /// restart later), pause (SIGSTOP, SIGCONT later), restart (empty, at once), jump
        /// (one master's wall clock 2 s forward, past the ttl, and back later; the masters
        /// are then Valkey under libfaketime), jump2 (two masters' clocks at once, still a
        /// minority), jump3 (three at once, a majority: the negative control, where overlaps
        /// must appear and the fenced store must reject the stale writes), cut (a network
        /// partition: the voters run in network namespaces, as root with `ip`, and one's link
        /// goes down for a while; with pause only).
        #[arg(long, value_delimiter = ',', default_value = "kill,pause,restart")]
        nemesis: Vec<String>,
    },
    /// One worker of `soak` (run by it, not by hand).
    #[command(hide = true)]
    SoakWorker {
        #[command(flatten)]
        worker: WorkerArgs,
        #[arg(long)]
        store: String,
        #[arg(long)]
        primitive: String,
        #[arg(long)]
        permits: u32,
        #[arg(long)]
        restart_grace_ms: u64,
    },
    /// One worker of `contend` (run by it, not by hand).
    #[command(hide = true)]
    ContendWorker {
        #[command(flatten)]
        worker: WorkerArgs,
    },
}

/// What every worker process is told: the masters, its number, its window and its holds.
#[derive(Debug, clap::Args)]
struct WorkerArgs {
    #[arg(long, value_delimiter = ',')]
    nodes: Vec<String>,
    #[arg(long)]
    process: usize,
    #[arg(long)]
    start_ns: u64,
    #[arg(long)]
    seconds: u64,
    #[arg(long)]
    hold_max_us: u64,
}

impl From<WorkerArgs> for redquorum_lab::Worker {
    fn from(args: WorkerArgs) -> Self {
        Self {
            nodes: args.nodes,
            process: args.process,
            start_ns: args.start_ns,
            seconds: args.seconds,
            hold_max_us: args.hold_max_us,
        }
    }
}

fn main() -> ExitCode {
    let lab = Lab::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redquorum-lab: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match lab.experiment {
            Experiment::Demo { quick } => redquorum_lab::demo(quick, lab.json).await,
            Experiment::Bench {
                quick,
                counts,
                against,
            } => {
                // Checked before any master starts: a wrong path should not cost a whole run.
                if let Some(bin) = against.as_deref().filter(|bin| !bin.is_file()) {
                    eprintln!(
                        "redquorum-lab: bench --against {}: no such file",
                        bin.display()
                    );
                    return Ok(64);
                }
                redquorum_lab::bench(quick, counts, against.as_deref(), lab.json).await
            }
            Experiment::Scale { quick } => redquorum_lab::scale(quick, lab.json).await,
            Experiment::Contend {
                processes,
                seconds,
                hold_max_ms,
                against,
            } => {
                let run = redquorum_lab::Contention {
                    processes,
                    seconds,
                    hold_max: std::time::Duration::try_from_secs_f64(hold_max_ms / 1e3)
                        .unwrap_or_default(),
                    against,
                };
                redquorum_lab::contend(run, lab.json).await
            }
            Experiment::Soak {
                processes,
                seconds,
                hold_max_ms,
                seed,
                primitive,
                permits,
                out,
                plot,
                nemesis,
            } => {
                let primitive = match redquorum_lab::Primitive::parse(&primitive, permits) {
                    Ok(primitive) => primitive,
                    Err(e) => {
                        eprintln!("redquorum-lab: {e}");
                        return Ok(64);
                    }
                };
                let nemesis = match redquorum_lab::nemesis_kinds(&nemesis) {
                    Ok(kinds) => kinds,
                    Err(e) => {
                        eprintln!("redquorum-lab: {e}");
                        return Ok(64);
                    }
                };
                let run = redquorum_lab::Soak {
                    primitive,
                    processes,
                    seconds,
                    hold_max: std::time::Duration::try_from_secs_f64(hold_max_ms / 1e3)
                        .unwrap_or_default(),
                    seed,
                    out,
                    plot,
                    nemesis,
                };
                redquorum_lab::soak(run, lab.json).await
            }
            Experiment::SoakWorker {
                worker,
                store,
                primitive,
                permits,
                restart_grace_ms,
            } => {
                redquorum_lab::soak_worker(redquorum_lab::SoakWorker {
                    worker: worker.into(),
                    store,
                    primitive,
                    permits,
                    restart_grace: std::time::Duration::from_millis(restart_grace_ms),
                })
                .await
            }
            Experiment::ContendWorker { worker } => redquorum_lab::worker(worker.into()).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("redquorum-lab: {e}");
            ExitCode::FAILURE
        }
    }
}
