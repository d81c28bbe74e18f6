//! The library's layers point one way (DESIGN.md §1, "The shape"): pure core → voters
//! (I/O) → fan-out engine → protocol → API. Each
//! layer is a folder of `src/`, so a module's layer is the folder it is in, and a new file
//! needs no edit here. This test reads every module, takes every `crate::` path outside
//! `#[cfg(test)]` modules and comments (names re-exported by `lib.rs` resolve to their
//! module), and fails on an edge that points up a layer, on a cycle, and on a file in no
//! layer's folder.
//!
//! Mutation: `use crate::api::redlock::RedLock;` in `src/engine/round.rs` (the engine taking
//! the client, as it once did) fails `modules_point_down_and_form_no_cycle` with "round
//! (engine) uses redlock (api)"; the self-tests below show the checker finds an upward edge
//! and a cycle inside one layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each layer and its folders of `src/`, lowest first. A module may use its own layer's
/// modules (as long as no cycle forms) and any lower layer's. A folder with a `mod.rs` and
/// nothing else (`scripts/`) is one module; in the others, each file is one.
const LAYERS: &[(&str, &[&str])] = &[
    ("core", &["core", "errors", "scripts"]),
    ("voters", &["voters"]),
    ("engine", &["engine"]),
    ("protocol", &["protocol"]),
    ("api", &["api", "testing"]),
];

/// Folders outside the layering: the model checker is compiled for tests only.
const UNLAYERED: &[&str] = &["model"];

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn modules_point_down_and_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = read_modules(&src);
    let mut graph = read_graph(&src, &modules);
    graph.retain(|name, _| {
        modules
            .get(name)
            .is_none_or(|module| !UNLAYERED.contains(&module.folder.as_str()))
    });
    let by_layer: Vec<(&str, Vec<&str>)> = LAYERS
        .iter()
        .map(|(layer, folders)| {
            let in_layer = modules
                .iter()
                .filter(|(_, module)| folders.contains(&module.folder.as_str()))
                .map(|(name, _)| name.as_str())
                .collect();
            (*layer, in_layer)
        })
        .collect();
    let layers: Vec<(&str, &[&str])> = by_layer
        .iter()
        .map(|(layer, modules)| (*layer, modules.as_slice()))
        .collect();
    let problems = check(&graph, &layers);
    assert!(
        problems.is_empty(),
        "the module graph breaks the layering:\n{}",
        problems.join("\n")
    );
    // The checker saw the real graph, not an empty one.
    assert!(graph.len() >= 40, "only {} modules read", graph.len());
    assert!(graph["acquire"].contains("round"));
    assert!(graph["redlock"].contains("acquire"));
}

#[test]
fn the_checker_finds_an_upward_edge() {
    let graph = graph_of(&[("a", &["b"]), ("b", &[])]);
    let layers: &[(&str, &[&str])] = &[("low", &["a"]), ("high", &["b"])];
    assert_eq!(check(&graph, layers), ["a (low) uses b (high)"]);
}

#[test]
fn the_checker_finds_a_cycle_inside_a_layer() {
    let graph = graph_of(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]);
    let layers: &[(&str, &[&str])] = &[("one", &["a", "b", "c", "d"])];
    assert_eq!(check(&graph, layers), ["cycle: a → b → c → a"]);
}

#[test]
fn the_checker_finds_an_unlisted_module() {
    let graph = graph_of(&[("a", &[]), ("stray", &["a"])]);
    let layers: &[(&str, &[&str])] = &[("one", &["a"])];
    assert_eq!(check(&graph, layers), ["stray is in no layer"]);
}

#[test]
fn use_groups_are_expanded() {
    let paths = crate_paths(
        "use crate::core::{quorum::{Awake, Tally}, retry};\nlet x = crate::Error::NoRuntime;",
    );
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        [
            "core::quorum::Awake",
            "core::quorum::Tally",
            "core::retry",
            "Error::NoRuntime"
        ]
    );
}

fn graph_of(edges: &[(&str, &[&str])]) -> Graph {
    edges
        .iter()
        .map(|(from, to)| {
            let to = to.iter().map(|t| (*t).to_owned()).collect();
            ((*from).to_owned(), to)
        })
        .collect()
}

/// Every problem with `graph` under `layers`, in a stable order.
fn check(graph: &Graph, layers: &[(&str, &[&str])]) -> Vec<String> {
    let layer_of: BTreeMap<&str, (usize, &str)> = layers
        .iter()
        .enumerate()
        .flat_map(|(rank, (name, modules))| modules.iter().map(move |m| (*m, (rank, *name))))
        .collect();
    let mut problems = Vec::new();
    for (module, uses) in graph {
        let Some(&(rank, layer)) = layer_of.get(module.as_str()) else {
            problems.push(format!("{module} is in no layer"));
            continue;
        };
        for used in uses {
            if let Some(&(used_rank, used_layer)) = layer_of.get(used.as_str())
                && used_rank > rank
            {
                problems.push(format!("{module} ({layer}) uses {used} ({used_layer})"));
            }
        }
    }
    if let Some(cycle) = find_cycle(graph) {
        problems.push(format!("cycle: {}", cycle.join(" → ")));
    }
    problems
}

/// One cycle of `graph`, starting and ending at its smallest module, if there is any.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        graph: &Graph,
        module: &str,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(module) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|m| m == module)?;
                let mut cycle = path[start..].to_vec();
                cycle.push(module.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(module.to_owned(), Mark::Open);
        path.push(module.to_owned());
        for used in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(graph, used, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(module.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|module| visit(graph, module, &mut marks, &mut Vec::new()))
}

/// A module of `src/`: its file and the layer folder it is in.
struct Module {
    file: std::path::PathBuf,
    folder: String,
}

/// Every module of `src/` by name (module names are unique across folders): each file of a
/// folder, and the folder's `mod.rs` under the folder's name. `lib.rs` is left out. A file directly in `src/` has the folder `""`,
/// which no layer lists.
fn read_modules(src: &Path) -> BTreeMap<String, Module> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        let name = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if path.is_dir() {
            let files: Vec<_> = std::fs::read_dir(&path)
                .expect("a folder is readable")
                .map(|e| e.expect("a directory entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "rs"))
                .collect();
            for file in files {
                let stem = file
                    .file_stem()
                    .expect("a name")
                    .to_string_lossy()
                    .into_owned();
                // A folder's `mod.rs` is the module of the folder's name: its declarations,
                // and in some folders (`scripts/`, `testing/`) code of its own.
                let module = if stem == "mod" { name.clone() } else { stem };
                let folder = name.clone();
                assert!(
                    modules
                        .insert(module.clone(), Module { file, folder })
                        .is_none(),
                    "two modules named {module}"
                );
            }
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" {
            let folder = String::new();
            modules.insert(name, Module { file: path, folder });
        }
    }
    modules
}

/// The `crate::` uses of every module.
fn read_graph(src: &Path, modules: &BTreeMap<String, Module>) -> Graph {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs is readable");
    let reexported = reexports(&without_comments(&lib));
    let folders: BTreeSet<&str> = modules.values().map(|m| m.folder.as_str()).collect();
    modules
        .iter()
        .map(|(name, module)| {
            let text = std::fs::read_to_string(&module.file).expect("a module is readable");
            let code = without_comments(&without_test_modules(&text));
            let uses = crate_paths(&code)
                .into_iter()
                .filter_map(|path| {
                    let first = path.first()?;
                    if folders.contains(first.as_str()) {
                        // `folder::module::…`, or an item of the folder's own `mod.rs`.
                        match path.get(1) {
                            Some(second)
                                if modules.get(second).is_some_and(|m| m.folder == *first) =>
                            {
                                Some(second.clone())
                            }
                            _ => Some(first.clone()),
                        }
                    } else if modules.contains_key(first) {
                        Some(first.clone())
                    } else {
                        reexported.get(first).cloned()
                    }
                })
                .filter(|used| used != name && modules.contains_key(used))
                .collect();
            (name.clone(), uses)
        })
        .collect()
}

/// `pub use a::b::{C, D};` and `pub use self::a::b;` in `lib.rs`: each name → the module
/// it comes from (the last segment before the names; a re-exported module is its own).
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for statement in lib.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let rest = rest.strip_prefix("self::").unwrap_or(rest);
        let segments: Vec<&str> = rest.split("::").map(str::trim).collect();
        let Some((items, path)) = segments.split_last() else {
            continue;
        };
        let Some(module) = path.last() else {
            continue;
        };
        for item in items.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !item.is_empty() {
                let from = if path.len() == 1 && !items.contains('{') {
                    // `pub use self::core::telemetry;`: the module itself.
                    item
                } else {
                    module
                };
                names.insert(item.to_owned(), from.to_owned());
            }
        }
    }
    names
}

/// Every path after `crate::`, as its segments, with use groups expanded
/// (`crate::a::{b::C, d}` is `a::b::C` and `a::d`).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        expand(&code[at + "crate::".len()..], &[], &mut found);
    }
    found
}

/// Reads the use tree at the start of `text` below `prefix`, adds each of its paths to
/// `found`, and returns the text after it.
fn expand<'a>(text: &'a str, prefix: &[String], found: &mut Vec<Vec<String>>) -> &'a str {
    let text = text.trim_start();
    if let Some(mut rest) = text.strip_prefix('{') {
        loop {
            let after = expand(rest, prefix, found).trim_start();
            let after = after.strip_prefix(',').unwrap_or(after).trim_start();
            if let Some(closed) = after.strip_prefix('}') {
                return closed;
            }
            if after.len() == rest.len() {
                // Not a use tree after all: stop here.
                return after;
            }
            rest = after;
        }
    }
    let ident = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    if ident == 0 {
        // `*`, or the end of the path.
        if !prefix.is_empty() {
            found.push(prefix.to_vec());
        }
        return text.strip_prefix('*').unwrap_or(text);
    }
    let mut path = prefix.to_vec();
    path.push(text[..ident].to_owned());
    let rest = &text[ident..];
    match rest.strip_prefix("::") {
        Some(below) => expand(below, &path, found),
        None => {
            found.push(path);
            rest
        }
    }
}

/// The text without `#[cfg(test)] mod name { … }` blocks.
fn without_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        let is_module = after.starts_with("mod ")
            || after.starts_with("pub(crate) mod ")
            || after.starts_with("pub mod ");
        let Some(open) = after.find(['{', ';']).filter(|_| is_module) else {
            // An item other than a module: keep it.
            out.push_str("#[cfg(test)]");
            rest = &rest[at + "#[cfg(test)]".len()..];
            continue;
        };
        if after.as_bytes()[open] == b';' {
            rest = &after[open + 1..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The text without `//` comments (doc comments included: their links are not uses).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            // `"redis://…"` in a string is not a comment.
            Some(at) if !line[..at].ends_with(':') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}
