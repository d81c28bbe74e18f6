//! `redquorum-lab`: the demo and the bench. See `redquorum-lab --help`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    },
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
            Experiment::Bench { quick } => redquorum_lab::bench(quick, lab.json).await,
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
