//! `tests/MUTATIONS.md` names, for each safety test, the test and the code its mutation
//! changes. This test fails when a name it gives no longer exists in the code, so the table
//! cannot drift from what it describes: every `path::like::this` in the first two columns must
//! name modules that exist (a file, a folder or a `mod`) and end in a function or module
//! that does, and every type in it must still be declared.
//!
//! Mutation (run, caught): a row naming `node::supervise` (the function moved to
//! `server_link`) fails with "node::supervise: no fn supervise in module node".

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[path = "support/repo_files.rs"]
mod repo_files;

/// The test harnesses' own names, which are no module of a file: `integration::…` is
/// `tests/integration/main.rs`, the others are the file names of `tests/*.rs` and the CLI's.
const HARNESSES: &[&str] = &["integration", "cli", "chaos", "observability", "layers"];

/// Other crates' paths, which this test does not check.
const EXTERNAL: &[&str] = &["tokio", "prctl", "redis", "std", "futures", "nix", "libc"];

#[test]
fn every_name_in_the_table_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table = std::fs::read_to_string(root.join("tests/MUTATIONS.md")).expect("the table");
    let code = Code::read(root);
    let functions: usize = code.functions.values().map(BTreeSet::len).sum();
    assert!(functions > 1000, "only {functions} functions read");

    let mut problems = Vec::new();
    let mut checked = 0;
    for line in table.lines().filter(|l| l.starts_with("| ")) {
        let columns: Vec<&str> = line.split(" | ").take(2).collect();
        for path in columns
            .iter()
            .flat_map(|c| code_spans(c))
            .filter_map(|s| as_path(&s))
        {
            checked += 1;
            if let Err(problem) = code.resolve(&path) {
                problems.push(format!("{}: {problem}", path.join("::")));
            }
        }
    }
    assert!(checked > 150, "only {checked} names checked");
    assert!(
        problems.is_empty(),
        "tests/MUTATIONS.md names what the code no longer has:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_moved_function_is_found_missing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let code = Code::read(root);
    let path = |text: &str| as_path(text).expect("a path");
    assert_eq!(
        code.resolve(&path("node::supervise")),
        Err("no fn supervise in module node".to_owned())
    );
    assert_eq!(code.resolve(&path("supervisor::supervise")), Ok(()));
    assert_eq!(
        code.resolve(&path(
            "integration::fencing::a_failed_back_master_never_hands_out_a_token_again"
        )),
        Ok(())
    );
    assert!(
        code.resolve(&path("EncodedRequest::nothing_like_this"))
            .is_err()
    );
    assert!(code.resolve(&path("NoSuchType::send")).is_err());
}

/// What the code declares, by module: module names (files, folders, `mod` items) with the
/// functions and types each declares, its nested modules' included.
struct Code {
    /// Module name → the `fn` names in it.
    functions: BTreeMap<String, BTreeSet<String>>,
    /// Every type, trait, constant and enum variant name declared anywhere.
    types: BTreeSet<String>,
    /// Every struct field name declared anywhere (`name: Type` starting a line).
    fields: BTreeSet<String>,
}

impl Code {
    fn read(root: &Path) -> Self {
        let mut code = Code {
            functions: BTreeMap::new(),
            types: BTreeSet::new(),
            fields: BTreeSet::new(),
        };
        for dir in [
            "src", "tests", "cli", "lab", "testkit", "benches", "examples",
        ] {
            for file in repo_files::files_with_extension(&root.join(dir), "rs") {
                let text = std::fs::read_to_string(&file).expect("a source file");
                code.add(&file, &text);
            }
        }
        code
    }

    fn add(&mut self, file: &Path, text: &str) {
        // The file's own module: its stem, or its folder's name for `mod.rs` and `main.rs`.
        let stem = file
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let folder = file
            .parent()
            .and_then(Path::file_name)
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut modules = vec![stem.clone()];
        if stem == "mod" || stem == "main" || stem == "lib" {
            modules.push(folder);
        }
        // Nested modules (`mod tests {`): their functions count for the file's module and for
        // the nested module's own name.
        let mut current: Vec<String> = modules.clone();
        for line in text.lines() {
            let words: Vec<&str> = line
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .collect();
            for pair in words.windows(2) {
                let [keyword, name] = pair else { continue };
                match *keyword {
                    "fn" => {
                        for module in &current {
                            self.functions
                                .entry(module.clone())
                                .or_default()
                                .insert((*name).to_owned());
                        }
                    }
                    "mod" => {
                        self.functions.entry((*name).to_owned()).or_default();
                        current.push((*name).to_owned());
                    }
                    "struct" | "enum" | "trait" | "type" | "const" | "static" | "union" => {
                        self.types.insert((*name).to_owned());
                    }
                    _ => {}
                }
            }
            // A field: `name: Type` (after `pub` or `pub(crate)`) starting the line.
            let declared = line
                .trim_start()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if let Some((name, _)) = declared.split_once(':')
                && !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                self.fields.insert(name.to_owned());
            }
            // An enum variant or an associated item: a capitalised word that starts the line.
            if let Some(first) = words.first()
                && first.starts_with(|c: char| c.is_ascii_uppercase())
            {
                self.types.insert((*first).to_owned());
            }
        }
        for module in modules {
            self.functions.entry(module).or_default();
        }
    }

    /// Whether `path` names what exists: lower-case segments are modules (the last one a
    /// function or a module, or a field after a type), capitalised ones are types, traits,
    /// constants or variants. Other crates' paths pass.
    fn resolve(&self, path: &[String]) -> Result<(), String> {
        if path
            .first()
            .is_some_and(|first| EXTERNAL.contains(&first.as_str()))
        {
            return Ok(());
        }
        let mut module: Option<&str> = None;
        let mut after_type = false;
        for (i, segment) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            if segment.starts_with(|c: char| c.is_ascii_uppercase()) {
                if !self.types.contains(segment) {
                    return Err(format!("no type, trait, constant or variant {segment}"));
                }
                module = None;
                after_type = true;
                continue;
            }
            if last && after_type && self.fields.contains(segment) {
                return Ok(());
            }
            if last {
                let is_fn = match module {
                    Some(m) => self.functions.get(m).is_some_and(|f| f.contains(segment)),
                    None => self.functions.values().any(|f| f.contains(segment)),
                };
                if is_fn || self.functions.contains_key(segment.as_str()) {
                    return Ok(());
                }
                return Err(match module {
                    Some(m) => format!("no fn {segment} in module {m}"),
                    None => format!("no fn or module {segment}"),
                });
            }
            if HARNESSES.contains(&segment.as_str()) {
                module = None;
                continue;
            }
            if !self.functions.contains_key(segment.as_str()) {
                return Err(format!("no module {segment}"));
            }
            module = Some(segment);
        }
        Ok(())
    }
}

/// The text inside each pair of backticks of `column`.
fn code_spans(column: &str) -> Vec<String> {
    column
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// `a::b::c` as its segments, when the span is a bare path of two segments or more.
fn as_path(span: &str) -> Option<Vec<String>> {
    let segments: Vec<String> = span.split("::").map(str::to_owned).collect();
    let is_ident = |s: &String| {
        s.starts_with(|c: char| c.is_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_alphanumeric() || c == '_')
    };
    (segments.len() >= 2 && segments.iter().all(is_ident)).then_some(segments)
}
