//! The repository's own files, for the tests that read them (the mutations table's names,
//! the documentation's links).

use std::path::{Path, PathBuf};

/// The files under `dir` whose names end in `.{extension}`, leaving out build output,
/// installed packages and git's own files.
pub(crate) fn files_with_extension(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if path.is_dir() {
            let skip = matches!(
                name.as_deref(),
                Some("target" | "node_modules" | ".venv" | ".git")
            );
            if !skip {
                files.extend(files_with_extension(&path, extension));
            }
        } else if path.extension().is_some_and(|e| e == extension) {
            files.push(path);
        }
    }
    files
}
