//! The configuration file: the masters and the client's settings in one TOML file, looked up
//! at `--config PATH` (or `REDQUORUM_CONFIG`), else `$XDG_CONFIG_HOME/redquorum/config.toml`,
//! else `/etc/redquorum/config.toml`. The environment and flags override it, setting by
//! setting. A key the file does not know is an error (a typo must not silently fall back to a
//! default), and so is a malformed value.
//!
//! ```toml
//! nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
//! node-timeout = "50ms"
//! restart-grace = "1m"
//! key-prefix = "redquorum:"
//! drift-factor = 0.01
//! kill-signal = "INT"     # run and elect
//! ```
//!
//! A one-URL-per-line nodes file (`$XDG_CONFIG_HOME/redquorum/nodes`, or given with
//! `--config`) is read too, with a warning that shows the TOML to write instead.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::exit::CliError;

/// The settings a configuration file holds; every one optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct ConfigFile {
    /// The masters' URLs.
    #[serde(default)]
    pub(crate) nodes: Option<Vec<String>>,
    /// `--node-timeout`.
    #[serde(default, deserialize_with = "duration")]
    pub(crate) node_timeout: Option<Duration>,
    /// `--connect-timeout`.
    #[serde(default, deserialize_with = "duration")]
    pub(crate) connect_timeout: Option<Duration>,
    /// `--restart-grace`.
    #[serde(default, deserialize_with = "duration")]
    pub(crate) restart_grace: Option<Duration>,
    /// `--key-prefix`.
    #[serde(default)]
    pub(crate) key_prefix: Option<String>,
    /// `--drift-factor`.
    #[serde(default)]
    pub(crate) drift_factor: Option<f64>,
    /// `--key-layout` (`tagged` or `shared`).
    #[serde(default)]
    pub(crate) key_layout: Option<crate::args::Layout>,
    /// `--native-commands`.
    #[serde(default)]
    pub(crate) native_commands: Option<bool>,
    /// `--kill-signal` of `run` and `elect`.
    #[serde(default, deserialize_with = "signal")]
    pub(crate) kill_signal: Option<nix::sys::signal::Signal>,
}

/// A configuration file that was found and read.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) path: PathBuf,
    pub(crate) file: ConfigFile,
}

/// Where a configuration file is looked for, in order, when `--config` is not given.
#[derive(Debug)]
pub(crate) struct SearchPath {
    /// `$XDG_CONFIG_HOME/redquorum` (or `~/.config/redquorum`).
    pub(crate) user: Option<PathBuf>,
    /// `/etc/redquorum`.
    pub(crate) system: PathBuf,
}

impl SearchPath {
    /// The standard places.
    pub(crate) fn standard() -> Self {
        Self {
            user: crate::xdg::base_dir("XDG_CONFIG_HOME", &[".config"])
                .map(|base| base.join("redquorum")),
            system: PathBuf::from("/etc/redquorum"),
        }
    }

    /// The files to try, in order: the user's TOML file, the user's legacy nodes file, the
    /// system's TOML file.
    fn candidates(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        if let Some(user) = &self.user {
            files.push(user.join("config.toml"));
            files.push(user.join("nodes"));
        }
        files.push(self.system.join("config.toml"));
        files
    }
}

/// Reads the configuration file: `explicit` (which must exist), else the first of the search
/// path that exists; `None` when there is none.
///
/// # Errors
/// A usage error (exit 64) naming the file for one that cannot be read, is not valid TOML,
/// has a key it does not know, a bad value, or an empty node list.
pub(crate) fn load(
    explicit: Option<&Path>,
    search: &SearchPath,
) -> Result<Option<Loaded>, CliError> {
    let path = match explicit {
        Some(path) => path.to_owned(),
        None => match search.candidates().into_iter().find(|p| p.exists()) {
            Some(path) => path,
            None => return Ok(None),
        },
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        // A system file this user may not read (0640, group redquorum) must not lock out
        // users who give their nodes otherwise; one asked for by name must be readable.
        Err(e) if explicit.is_none() && e.kind() == std::io::ErrorKind::PermissionDenied => {
            tracing::warn!("skipping the config file {}: {e}", path.display());
            return Ok(None);
        }
        Err(e) => {
            return Err(CliError::usage(format!(
                "cannot read the config file {}: {e}",
                path.display()
            )));
        }
    };
    let file = parse(&text, &path)?;
    if let Some(nodes) = &file.nodes {
        if nodes.iter().all(|n| n.trim().is_empty()) {
            return Err(CliError::usage(format!(
                "the config file {} lists no nodes (nodes = [\"redis://host:port\", …])",
                path.display()
            )));
        }
        warn_if_readable_passwords(&path, nodes);
    }
    Ok(Some(Loaded { path, file }))
}

/// TOML, or the legacy list of URLs (with a warning that shows the TOML to write).
fn parse(text: &str, path: &Path) -> Result<ConfigFile, CliError> {
    match toml::from_str::<ConfigFile>(text) {
        Ok(file) => Ok(file),
        Err(e) => match legacy_nodes(text) {
            Some(nodes) => {
                tracing::warn!(
                    "{} is a nodes file of an earlier version (one URL per line); it is read \
                     for now, but write it as TOML, e.g. to {}:\n{}",
                    path.display(),
                    path.with_file_name("config.toml").display(),
                    migrated(&nodes)
                );
                Ok(ConfigFile {
                    nodes: Some(nodes),
                    ..ConfigFile::default()
                })
            }
            None => Err(CliError::usage(format!(
                "the config file {} is not valid: {}",
                path.display(),
                e.to_string().trim_end()
            ))),
        },
    }
}

/// The URLs of a legacy nodes file (one per line; `#` at the start of a line or after a
/// space starts a comment, a `#` inside a URL such as `rediss://host:6380#insecure` does not),
/// or `None` if `text` is not one: some line is not a `redis://` or `rediss://` URL, or there
/// is none.
fn legacy_nodes(text: &str) -> Option<Vec<String>> {
    let nodes: Vec<String> = text
        .lines()
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
        .collect();
    let urls = nodes.iter().all(|n| {
        n.starts_with("redis://")
            || n.starts_with("rediss://")
            || n.starts_with("redis+sentinel://")
            || n.starts_with("redis+cluster://")
    });
    (urls && !nodes.is_empty()).then_some(nodes)
}

/// The TOML that replaces a legacy nodes file.
fn migrated(nodes: &[String]) -> String {
    let list: Vec<String> = nodes.iter().map(|n| format!("  {n:?},")).collect();
    format!("nodes = [\n{}\n]", list.join("\n"))
}

/// A password in a file anyone on the host can read is worth a warning.
fn warn_if_readable_passwords(path: &Path, nodes: &[String]) {
    let has_password = nodes.iter().any(|n| {
        n.split_once("://")
            .and_then(|(_, rest)| rest.split_once('@'))
            .is_some_and(|(user_info, _)| user_info.contains(':'))
    });
    let world_readable = std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0);
    if has_password && world_readable {
        tracing::warn!(
            "{} holds a password and every user of this host can read it (chmod 600 or 640)",
            path.display()
        );
    }
}

/// A humantime duration (`"50ms"`, `"1m"`).
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    match humantime::parse_duration(&text) {
        Ok(value) => Ok(Some(value)),
        Err(e) => Err(serde::de::Error::custom(format!(
            "{text:?}: {e} (try \"30s\", \"500ms\" or \"2m\")"
        ))),
    }
}

/// A signal a command can catch, by name or number (`"INT"`, `"SIGHUP"`, `15`).
fn signal<'de, D: Deserializer<'de>>(d: D) -> Result<Option<nix::sys::signal::Signal>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NameOrNumber {
        Name(String),
        Number(i64),
    }
    let text = match NameOrNumber::deserialize(d)? {
        NameOrNumber::Name(name) => name,
        NameOrNumber::Number(number) => number.to_string(),
    };
    crate::args::stop_signal(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<ConfigFile, String> {
        parse(text, Path::new("/etc/redquorum/config.toml")).map_err(|e| e.message)
    }

    #[test]
    fn a_toml_file_holds_nodes_and_settings() {
        let file = parsed(
            "nodes = [\"redis://a:1\", \"redis://b:1\"]\nnode-timeout = \"80ms\"\n\
             restart-grace = \"1m\"\nkey-prefix = \"app:\"\ndrift-factor = 0.02\n\
             kill-signal = \"INT\"\n",
        )
        .expect("valid");
        assert_eq!(
            file.nodes.as_deref(),
            Some(&["redis://a:1".to_owned(), "redis://b:1".to_owned()][..])
        );
        assert_eq!(file.node_timeout, Some(Duration::from_millis(80)));
        assert_eq!(file.restart_grace, Some(Duration::from_secs(60)));
        assert_eq!(file.key_prefix.as_deref(), Some("app:"));
        assert_eq!(file.drift_factor, Some(0.02));
        assert_eq!(file.kill_signal, Some(nix::sys::signal::Signal::SIGINT));
        let numbered = parsed("kill-signal = 1\n").expect("a number");
        assert_eq!(numbered.kill_signal, Some(nix::sys::signal::Signal::SIGHUP));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors_naming_the_file() {
        let typo =
            parsed("nodes = [\"redis://a:1\"]\nnode_timeout = \"80ms\"\n").expect_err("an error");
        assert!(
            typo.contains("unknown field") && typo.contains("node_timeout"),
            "{typo}"
        );
        assert!(typo.contains("/etc/redquorum/config.toml"), "{typo}");
        let bad = parsed("node-timeout = \"soon\"\n").expect_err("an error");
        assert!(bad.contains("soon"), "{bad}");
        let uncatchable = parsed("kill-signal = \"KILL\"\n").expect_err("an error");
        assert!(uncatchable.contains("cannot be caught"), "{uncatchable}");
        let wrong_type = parsed("nodes = \"redis://a:1\"\n").expect_err("an error");
        assert!(wrong_type.contains("nodes"), "{wrong_type}");
    }

    #[test]
    fn a_legacy_nodes_file_still_works_and_anything_else_is_not_taken_for_one() {
        let text = "# masters\nredis://10.0.0.1:6379\n\n  redis://10.0.0.2:6379  # rack b\n#redis://x:1\nrediss://10.0.0.3:6380#insecure # self-signed\n";
        assert_eq!(
            parsed(text).expect("legacy").nodes.as_deref(),
            Some(
                &[
                    "redis://10.0.0.1:6379".to_owned(),
                    "redis://10.0.0.2:6379".to_owned(),
                    "rediss://10.0.0.3:6380#insecure".to_owned()
                ][..]
            )
        );
        assert!(parsed("redis://a:1\nnode-timeout 5\n").is_err());
        assert!(legacy_nodes("# nothing\n").is_none());
        assert_eq!(
            migrated(&["redis://a:1".into(), "redis://b:1".into()]),
            "nodes = [\n  \"redis://a:1\",\n  \"redis://b:1\",\n]"
        );
        let round_trip: ConfigFile =
            toml::from_str(&migrated(&["redis://a:1".into()])).expect("the migration is TOML");
        assert_eq!(
            round_trip.nodes.as_deref(),
            Some(&["redis://a:1".to_owned()][..])
        );
    }

    #[test]
    fn the_user_file_comes_before_the_legacy_file_and_the_system_file() {
        let search = SearchPath {
            user: Some(PathBuf::from("/home/u/.config/redquorum")),
            system: PathBuf::from("/etc/redquorum"),
        };
        assert_eq!(
            search.candidates(),
            [
                PathBuf::from("/home/u/.config/redquorum/config.toml"),
                PathBuf::from("/home/u/.config/redquorum/nodes"),
                PathBuf::from("/etc/redquorum/config.toml"),
            ]
        );
    }

    #[test]
    fn the_system_file_is_read_when_the_user_has_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let system = dir.path().join("etc");
        std::fs::create_dir_all(&system).expect("mkdir");
        std::fs::write(system.join("config.toml"), "nodes = [\"redis://s:1\"]\n").expect("write");
        let search = SearchPath {
            user: Some(dir.path().join("home")),
            system,
        };
        let loaded = load(None, &search).expect("valid").expect("found");
        assert_eq!(loaded.path, dir.path().join("etc/config.toml"));
        let empty = SearchPath {
            user: None,
            system: dir.path().join("nowhere"),
        };
        assert!(load(None, &empty).expect("nothing to read").is_none());
        let missing = load(Some(&dir.path().join("missing.toml")), &empty).expect_err("an error");
        assert!(
            missing.message.contains("missing.toml"),
            "{}",
            missing.message
        );
    }
}
