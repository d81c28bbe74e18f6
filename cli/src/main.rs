//! `redquorum`: Redlock from the shell. See `redquorum --help` and `cli/README.md`.

mod args;
mod child;
mod client;
mod config;
mod dev_command;
mod elect;
mod events;
mod exit;
mod exporter;
mod fence;
mod guard;
mod logging;
mod nodes;
mod observe;
mod out;
mod run;
mod status;
mod xdg;

use std::process::ExitCode;

use crate::args::{Cli, Command};
use crate::exit::CliError;

fn main() -> ExitCode {
    let parsed = args::command()
        .try_get_matches()
        .and_then(|matches| <Cli as clap::FromArgMatches>::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(mut e) => {
            if e.kind() == clap::error::ErrorKind::UnknownArgument && runs_a_command() {
                // `redquorum run R echo hi`: the command's words read as ours.
                let tip = "put `--` before the command and its arguments, as the usage below shows";
                e.insert(
                    clap::error::ContextKind::Suggested,
                    clap::error::ContextValue::StyledStrs(vec![tip.into()]),
                );
            }
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
    // The dev cluster's commands break masters on purpose: lost connections are not news.
    let breaks_masters = matches!(cli.command, Command::Dev { .. });
    // With --json, run, elect and observe write JSON events; their log lines follow suit.
    let events_as_json = cli.global.json
        && matches!(
            cli.command,
            Command::Run(_) | Command::Elect(_) | Command::Observe(_)
        );
    events::init(events_as_json, cli.global.quiet);
    logging::init(
        cli.global.verbose,
        cli.global.quiet || breaks_masters,
        events_as_json,
    );
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
    let quiet = cli.global.quiet;
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if events::json() {
                events::emit(events::Event::Error {
                    code: e.code,
                    message: e.message.clone(),
                });
            } else if !(e.skipped && (quiet || e.code == exit::OK)) {
                // A skip asked to be silent (`-q`, `-E 0`) prints nothing, as `flock -n`.
                eprintln!("redquorum: {e}");
            }
            ExitCode::from(e.code)
        }
    }
}

/// Whether the command line is a `run` or an `elect` without `--` (whose command follows it).
fn runs_a_command() -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs = args.iter().any(|a| a == "run" || a == "elect");
    runs && !args.iter().any(|a| a == "--")
}

async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    match cli.command {
        Command::Run(args) => {
            let (nodes, tuning) = nodes::resolve(&cli.global)?;
            run::run(nodes, args, &tuning).await
        }
        Command::Elect(args) => {
            let (nodes, tuning) = nodes::resolve(&cli.global)?;
            elect::elect(nodes, args, &tuning).await
        }
        Command::Status { resource } => {
            let (nodes, tuning) = nodes::resolve(&cli.global)?;
            status::status(nodes, &resource, cli.global.json, &tuning).await
        }
        Command::Fence { check } => {
            let (nodes, tuning) = nodes::resolve(&cli.global)?;
            fence::fence(nodes, check, cli.global.json, &tuning).await
        }
        Command::Observe(args) => {
            let (nodes, tuning) = nodes::resolve(&cli.global)?;
            observe::observe(nodes, args, &tuning).await
        }
        Command::Completions { shell } => {
            let mut cli = args::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cli, "redquorum", &mut script);
            // Not `generate` to stdout: it panics on a closed pipe.
            std::io::Write::write_all(&mut std::io::stdout().lock(), &script)?;
            Ok(exit::OK)
        }
        Command::Man { dir } => manual(dir.as_deref()),
        Command::Dev { action } => {
            tokio::task::spawn_blocking(move || dev_command::dev(action, cli.global.json))
                .await
                .map_err(|e| CliError::failure(e.to_string()))?
        }
        Command::Guard { .. } => Err(CliError::usage("the guard runs before the runtime")),
    }
}

/// `redquorum man`: the page on stdout, or one page per subcommand written into `dir`.
fn manual(dir: Option<&std::path::Path>) -> Result<u8, CliError> {
    let cli = args::command();
    match dir {
        Some(dir) => clap_mangen::generate_to(cli, dir).map_err(|e| {
            CliError::failure(format!(
                "cannot write manual pages into {}: {e}",
                dir.display()
            ))
        })?,
        None => clap_mangen::Man::new(cli).render(&mut std::io::stdout())?,
    }
    Ok(exit::OK)
}
