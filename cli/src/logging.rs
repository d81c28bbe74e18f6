//! Log lines on stderr: the library's warnings by default (lost connections, a lost lease, a
//! risky node list), more with `-v`, only errors with `-q`; `RUST_LOG`, when set, decides
//! alone (`tracing_subscriber`'s filter syntax).

use tracing_subscriber::EnvFilter;

/// Installs the subscriber for this process: `verbose` (a count of `-v`) wins over `quiet`;
/// with `json`, each log line is a JSON object (beside the JSON events of `--json`). Call
/// once, before the runtime starts.
pub(crate) fn init(verbose: u8, quiet: bool, json: bool) {
    let level = match (quiet, verbose) {
        (_, 1) => "info",
        (_, 2) => "debug",
        (_, 3..) => "trace",
        (true, 0) => "error",
        (false, 0) => "warn",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::new(spec),
        _ => EnvFilter::new(level),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
