//! Where the masters and the client's settings come from: flags, then the environment
//! (clap merges those two), then the configuration file; or, with `--dev`, the local dev
//! cluster alone.

use crate::args::{Global, Tuning};
use crate::config::{self, SearchPath};
use crate::dev_command::open_dev_cluster;
use crate::exit::CliError;

/// The node URLs and the tuning to use.
///
/// # Errors
/// A usage error (exit 64) for a broken configuration file, `--dev` without a dev cluster,
/// or no nodes anywhere.
pub(crate) fn resolve(global: &Global) -> Result<(Vec<String>, Tuning), CliError> {
    if global.dev {
        return dev_cluster().map(|nodes| (nodes, global.tuning.clone()));
    }
    let loaded = config::load(global.config.as_deref(), &SearchPath::standard())?;
    let mut tuning = global.tuning.clone();
    let mut from_file = None;
    if let Some(loaded) = loaded {
        let file = loaded.file;
        tuning.node_timeout = tuning.node_timeout.or(file.node_timeout);
        tuning.connect_timeout = tuning.connect_timeout.or(file.connect_timeout);
        tuning.restart_grace = tuning.restart_grace.or(file.restart_grace);
        tuning.key_prefix = tuning.key_prefix.or(file.key_prefix);
        tuning.drift_factor = tuning.drift_factor.or(file.drift_factor);
        tuning.key_layout = tuning.key_layout.or(file.key_layout);
        tuning.native_commands = tuning.native_commands.or(file.native_commands);
        tuning.kill_signal = file.kill_signal;
        from_file = file.nodes;
        tracing::debug!(path = %loaded.path.display(), "read the config file");
    }
    let given = clean(&global.nodes);
    if !given.is_empty() {
        return Ok((given, tuning));
    }
    if let Some(nodes) = from_file {
        return Ok((clean(&nodes), tuning));
    }
    let hint = match open_dev_cluster() {
        Ok(Some(cluster)) if !cluster.nodes.is_empty() => {
            " (a local dev cluster is running: add --dev to use it)"
        }
        _ => "",
    };
    Err(CliError::usage(format!(
        "no nodes given: pass --nodes url,url,…, set REDQUORUM_NODES, list them in \
         /etc/redquorum/config.toml or ~/.config/redquorum/config.toml (nodes = [\"redis://…\"]), \
         or use --dev for the local dev cluster (`redquorum dev up`){hint}"
    )))
}

/// The URLs of the running dev cluster.
fn dev_cluster() -> Result<Vec<String>, CliError> {
    match open_dev_cluster()? {
        Some(cluster) if !cluster.nodes.is_empty() => Ok(cluster.urls()),
        _ => Err(CliError::usage(
            "--dev: no local dev cluster is running; start one with `redquorum dev up`",
        )),
    }
}

/// The nodes, trimmed, empty ones dropped. The list arrives split at every comma, but a
/// Sentinel or Cluster voter's URL has commas of its own (`redis+sentinel://h1:p1,h2:p2/master`,
/// `redis+cluster://h1:p1,h2:p2`): a piece without a scheme continues a Sentinel URL before it
/// whose master name has not come yet, or a Cluster URL before it (anything else stays a node
/// of its own, and fails as the malformed URL it is).
fn clean(nodes: &[String]) -> Vec<String> {
    // A Sentinel URL whose path has not begun yet (its next piece is another sentinel), or a
    // Cluster URL (its next piece is another seed).
    let open_sentinel_list = |url: &str| {
        url.starts_with("redis+cluster://")
            || url
                .strip_prefix("redis+sentinel://")
                .is_some_and(|rest| !rest.contains('/'))
    };
    let mut joined: Vec<String> = Vec::new();
    for piece in nodes.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        match joined.last_mut() {
            Some(previous) if !piece.contains("://") && open_sentinel_list(previous) => {
                previous.push(',');
                previous.push_str(piece);
            }
            _ => joined.push(piece.to_owned()),
        }
    }
    joined
}

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn a_sentinel_voters_commas_do_not_split_it() {
        let given: Vec<String> =
            "redis://a:1, redis+sentinel://s1:26379,s2:26379/orders,rediss://b:2,redis+cluster://c1:7000, c2:7000,redis://d:4"
                .split(',')
                .map(str::to_owned)
                .collect();
        let stray: Vec<String> = ["redis+sentinel://s1:26379/orders", "s2:1"]
            .map(str::to_owned)
            .to_vec();
        assert_eq!(
            clean(&stray),
            stray,
            "a piece after the master name is no sentinel"
        );
        assert_eq!(
            clean(&given),
            [
                "redis://a:1",
                "redis+sentinel://s1:26379,s2:26379/orders",
                "rediss://b:2",
                "redis+cluster://c1:7000,c2:7000",
                "redis://d:4"
            ]
        );
    }
}
