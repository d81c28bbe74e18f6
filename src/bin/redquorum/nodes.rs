//! Where the masters come from: --nodes, REDQUORUM_NODES, a nodes file, or the dev cluster.

use std::path::{Path, PathBuf};

use crate::args::Global;
use crate::dev::DevCluster;
use crate::exit::CliError;

/// The node URLs to use, saying on stderr where they came from when it is not explicit.
pub(crate) fn resolve(global: &Global) -> Result<Vec<String>, CliError> {
    let given: Vec<String> = global
        .nodes
        .iter()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect();
    if !given.is_empty() {
        return Ok(given);
    }
    if let Some(path) = &global.config {
        return read_file(path);
    }
    if let Some(path) = default_file().filter(|p| p.exists()) {
        return read_file(&path);
    }
    let dev = DevCluster::open()?;
    match dev {
        Some(cluster) if !cluster.nodes.is_empty() => {
            eprintln!(
                "redquorum: no nodes given; using the local dev cluster ({} masters, see `redquorum dev status`)",
                cluster.nodes.len()
            );
            Ok(cluster.urls())
        }
        _ => Err(CliError::usage(
            "no nodes given: pass --nodes url,url,… or set REDQUORUM_NODES, \
             or start a local cluster with `redquorum dev up`",
        )),
    }
}

/// `$XDG_CONFIG_HOME/redquorum/nodes`, or `~/.config/redquorum/nodes`.
fn default_file() -> Option<PathBuf> {
    let base = crate::xdg::base_dir("XDG_CONFIG_HOME", &[".config"])?;
    Some(base.join("redquorum").join("nodes"))
}

fn read_file(path: &Path) -> Result<Vec<String>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read nodes file {}: {e}", path.display())))?;
    let nodes = parse(&text);
    if nodes.is_empty() {
        return Err(CliError::usage(format!(
            "nodes file {} lists no nodes",
            path.display()
        )));
    }
    Ok(nodes)
}

/// One URL per line; `#` at the start of a line or after a space starts a comment (a `#`
/// inside a URL, as in `rediss://host:6380#insecure`, does not); blank lines are ignored.
fn parse(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| {
            let line = line.trim();
            let end = line
                .char_indices()
                .find(|&(i, c)| c == '#' && (i == 0 || line[..i].ends_with(char::is_whitespace)))
                .map_or(line.len(), |(i, _)| i);
            line[..end].trim()
        })
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn nodes_file_takes_one_url_per_line_and_skips_comments() {
        let text = "# masters\nredis://10.0.0.1:6379\n\n  redis://10.0.0.2:6379  # rack b\n#redis://x:1\nrediss://10.0.0.3:6380#insecure # self-signed\n";
        assert_eq!(
            parse(text),
            [
                "redis://10.0.0.1:6379",
                "redis://10.0.0.2:6379",
                "rediss://10.0.0.3:6380#insecure"
            ]
        );
    }
}
