//! `redquorum`: Redlock from the shell. See `redquorum --help` and the README.

mod args;
mod baseline;
mod bench;
mod child;
mod client;
mod cpu;
mod demo;
mod dev;
mod dev_command;
mod elect;
mod exit;
mod guard;
mod logging;
mod nodes;
mod run;
mod status;
mod xdg;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::exit::CliError;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    if let Command::Guard {
        parent,
        foreground,
        stop_signal,
        command,
    } = &cli.command
    {
        return ExitCode::from(guard::guard(*parent, *foreground, *stop_signal, command));
    }
    // The demo and the bench break masters on purpose: their lost connections are the show,
    // not news, so they log only errors unless asked for more.
    let breaks_masters = matches!(
        cli.command,
        Command::Demo { .. } | Command::Bench { .. } | Command::Dev { .. }
    );
    logging::init(cli.global.verbose, cli.global.quiet || breaks_masters);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redquorum: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("redquorum: {e}");
            ExitCode::from(e.code)
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    match cli.command {
        Command::Run(args) => {
            run::run(nodes::resolve(&cli.global)?, args, &cli.global.tuning).await
        }
        Command::Elect(args) => {
            elect::elect(nodes::resolve(&cli.global)?, args, &cli.global.tuning).await
        }
        Command::Status { resource } => {
            let nodes = nodes::resolve(&cli.global)?;
            status::status(nodes, &resource, cli.global.json, &cli.global.tuning).await
        }
        Command::Dev { action } => {
            tokio::task::spawn_blocking(move || dev_command::dev(action, cli.global.json))
                .await
                .map_err(|e| CliError::failure(e.to_string()))?
        }
        Command::Demo { quick } => demo::demo(quick, cli.global.json).await,
        Command::Bench { quick } => bench::bench(quick, cli.global.json).await,
        Command::Guard { .. } => Err(CliError::usage("the guard runs before the runtime")),
    }
}
