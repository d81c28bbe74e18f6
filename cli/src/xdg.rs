//! XDG base directories, with the standard fallbacks under `$HOME`.

use std::path::PathBuf;

/// `$var` when set and not empty, else `$HOME` joined with `fallback` (e.g. `.config`), else
/// `None`.
pub(crate) fn base_dir(var: &str, fallback: &[&str]) -> Option<PathBuf> {
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    set(var).map(PathBuf::from).or_else(|| {
        set("HOME").map(|home| fallback.iter().fold(PathBuf::from(home), |p, f| p.join(f)))
    })
}
