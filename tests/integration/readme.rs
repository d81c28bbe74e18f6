//! The documentation holds together: the README gives the two commands and stays short, and
//! every relative link of every Markdown page of the repository resolves, to a file and, with
//! a `#fragment`, to a heading of it. The README's Rust examples are compiled as doc tests
//! (`src/lib.rs`, `ReadmeDoctests`).

use std::collections::BTreeSet;
use std::path::Path;

const README: &str = include_str!("../../README.md");

/// The README ends where a newcomer stops reading: the reference lives in its one home.
const README_MAX_BYTES: usize = 12 * 1024;

#[test]
fn the_readme_gives_the_two_commands_and_stays_short() {
    for command in ["bash .ci/demo", "bash .ci/test", "cargo install --path cli"] {
        assert!(README.contains(command), "README.md lost {command:?}");
    }
    assert!(
        README.len() <= README_MAX_BYTES,
        "README.md is {} bytes, over {README_MAX_BYTES}: move the reference to its home",
        README.len()
    );
}

#[test]
fn the_ci_script_runs_the_readmes_test_command() {
    let ci = include_str!("../../.ci/run");
    assert!(
        ci.contains("bash .ci/test"),
        ".ci/run must call the README's test command"
    );
}

/// Mutation (run, caught): a link to `DESIGN.md#8-the-assumption` (a heading renamed) fails
/// with "README.md: DESIGN.md#8-the-assumption: no such heading".
#[test]
fn every_relative_link_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages = crate::repo_files::files_with_extension(root, "md");
    assert!(pages.len() >= 8, "only {} pages read", pages.len());
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("a page");
        for link in links(&text) {
            if let Err(problem) = resolve(page, &link) {
                let name = page.strip_prefix(root).unwrap_or(page).display();
                broken.push(format!("{name}: {link}: {problem}"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_checker_finds_a_missing_heading_and_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = root.join("README.md");
    assert_eq!(resolve(&readme, "DESIGN.md#8-the-assumptions"), Ok(()));
    assert!(resolve(&readme, "DESIGN.md#8-the-assumption").is_err());
    assert!(resolve(&readme, "NO-SUCH-FILE.md").is_err());
    assert_eq!(
        links("[a](x.md) and [b](https://example.com) and [c](#here) ![d](y.png)"),
        ["x.md", "#here", "y.png"]
    );
    assert_eq!(slug("## 8. The assumptions"), "8-the-assumptions");
    assert_eq!(
        slug("### `redquorum run`: one host"),
        "redquorum-run-one-host"
    );
}

/// The targets of the relative links of `text` (`[text](target)`), outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            let external = target.contains("://") || target.starts_with("mailto:");
            if !target.is_empty() && !external {
                found.push(target.to_owned());
            }
            rest = &rest[end..];
        }
    }
    found
}

/// Whether `link` on `page` names an existing file and, with a fragment, a heading in it.
fn resolve(page: &Path, link: &str) -> Result<(), String> {
    let (path, fragment) = match link.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (link, None),
    };
    let target = if path.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap_or(Path::new(".")).join(path)
    };
    if !target.exists() {
        return Err("no such file".to_owned());
    }
    let Some(fragment) = fragment else {
        return Ok(());
    };
    if target.extension().is_none_or(|e| e != "md") {
        return Ok(());
    }
    let text = std::fs::read_to_string(&target).map_err(|e| e.to_string())?;
    let headings: BTreeSet<String> = text
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(slug)
        .collect();
    if headings.contains(fragment) {
        Ok(())
    } else {
        Err("no such heading".to_owned())
    }
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
