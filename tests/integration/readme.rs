//! The README keeps what newcomers and operators rely on (a section lost in an edit once).

const README: &str = include_str!("../../README.md");

#[test]
fn the_readme_keeps_its_commands_and_sections() {
    for required in [
        "bash .ci/demo",
        "bash .ci/test",
        "## Quick start",
        "## Command line",
        "deploy/README.md",
        "## Configuration",
        "## Guarantees and their assumptions",
        "## Safety, measured under chaos",
        "## Performance",
        "## Security",
        "## Observability",
        "## Operating Redis for Redlock",
        "cargo install --path cli",
        "DESIGN.md",
        "benches/README.md",
        "## License",
    ] {
        assert!(README.contains(required), "README.md lost {required:?}");
    }
}

#[test]
fn the_ci_script_runs_the_readmes_test_command() {
    let ci = include_str!("../../.ci/run");
    assert!(
        ci.contains("bash .ci/test"),
        ".ci/run must call the README's test command"
    );
}
