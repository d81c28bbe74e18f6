//! The library's modules form layers that point one way (DEVELOPERS.md, "Layers point one
//! way"): pure core → I/O → fan-out engine → protocol → API. This test reads `src/*.rs`, takes
//! every `crate::` path outside `#[cfg(test)]` modules and comments (names re-exported by
//! `lib.rs` resolve to their module), and fails on an edge that points up a layer, on a cycle,
//! and on a module no layer lists.
//!
//! Mutation: `use crate::redlock::RedLock;` in `src/round.rs` (the engine taking the client,
//! as it once did) fails `modules_point_down_and_form_no_cycle` with "round (engine) uses
//! redlock (api)"; the self-tests below show the checker finds an upward edge and a cycle
//! inside one layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each layer and its modules, lowest first. A module may use its own layer's modules (as
/// long as no cycle forms) and any lower layer's.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "core",
        &[
            "quorum",
            "retry",
            "token",
            "scripts",
            "node_id",
            "node_error",
            "config_error",
            "resource",
            "report",
            "error",
            "verdict",
            "telemetry",
            "settings",
            "server_identity",
            "held_locks",
            "slot_map",
        ],
    ),
    (
        "io",
        &[
            "node_source",
            "server_link",
            "shards",
            "node",
            "waiting",
            "reseed",
            "fence_sweep",
            "tls",
        ],
    ),
    ("engine", &["request", "voter", "round", "query"]),
    (
        "protocol",
        &[
            "shared",
            "release",
            "confirm",
            "acquire",
            "acquire_many",
            "permit",
            "extend",
            "leader_info",
        ],
    ),
    (
        "api",
        &[
            "builder",
            "lock",
            "lease",
            "redlock",
            "election",
            "inspect",
            "fence_seeding",
            "semaphore",
            "multi_lock",
            "lock_service",
            "testing",
        ],
    ),
];

/// Modules outside the layering: the model checker is compiled for tests only.
const UNLAYERED: &[&str] = &["model"];

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn modules_point_down_and_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = read_graph(&src);
    let problems = check(&graph, LAYERS);
    assert!(
        problems.is_empty(),
        "the module graph breaks the layering:\n{}",
        problems.join("\n")
    );
    // The checker saw the real graph, not an empty one.
    assert!(graph.len() >= 30, "only {} modules read", graph.len());
    assert!(graph["acquire"].contains("round"));
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
            if !UNLAYERED.contains(&module.as_str()) {
                problems.push(format!("{module} is in no layer"));
            }
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

/// The `crate::` uses of every module in `src` (`lib.rs` itself excluded).
fn read_graph(src: &Path) -> Graph {
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(src).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let stem = path.file_stem().expect("a file name").to_string_lossy();
            if stem != "lib" {
                modules.insert(stem.into_owned());
            }
        }
    }
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs is readable");
    let reexported = reexports(&without_comments(&lib));
    modules
        .iter()
        .map(|module| {
            let text = std::fs::read_to_string(src.join(format!("{module}.rs")))
                .expect("a module is readable");
            let code = without_comments(&without_test_modules(&text));
            let uses = crate_paths(&code)
                .into_iter()
                .map(|name| reexported.get(&name).cloned().unwrap_or(name))
                .filter(|name| name != module && modules.contains(name))
                .collect();
            (module.clone(), uses)
        })
        .collect()
}

/// `pub use module::{A, B};` and `pub use module::A;` in `lib.rs`: name → module.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for statement in lib.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = rest.split_once("::") else {
            continue;
        };
        for item in items.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !item.is_empty() {
                names.insert(item.to_owned(), module.trim().to_owned());
            }
        }
    }
    names
}

/// The first segment after every `crate::` (in `crate::{a::X, b}` groups too).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: depth 0 only.
            let (mut depth, mut item) = (0usize, String::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.extend(first_ident(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
            found.extend(first_ident(&item));
        } else {
            found.extend(first_ident(rest));
        }
    }
    found
}

fn first_ident(text: &str) -> Option<String> {
    let ident: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!ident.is_empty()).then_some(ident)
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
