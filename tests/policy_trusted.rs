//! A profile's `trusted_tools`: the everyday forms of each trusted build and test tool are
//! allowed before the rules (a catch-all deny rule follows here), and each class of
//! option the option table refuses — programs, plugins, foreign configurations and
//! manifests, directory switches, outputs outside the workspace, environment prefixes and
//! variables — asks, naming why. Tools not trusted, and forms of a trusted tool outside
//! its vetted subcommands, go to the rules. Bad names are load errors.

use runplane::domain::Decision::{self, Allow, Ask, Deny};
use runplane::policy::{parse_profile, CompiledProfile, ProfileFormat, ToolCall};

fn profile(trusted: &str) -> Result<CompiledProfile, String> {
    let text = format!(
        "name = \"trusting\"\nmode = \"default\"\nnetwork = \"none\"\ntrusted_tools = {trusted}\n\
         [[rules]]\nspecifier = {{ tool = \"Bash\" }}\ndecision = \"deny\"\n"
    );
    let profile =
        parse_profile(&text, ProfileFormat::Toml, "trusting").map_err(|e| e.to_string())?;
    CompiledProfile::compile(profile).map_err(|e| e.to_string())
}

const ALL: &str = r#"["git", "cargo", "go", "npm", "pnpm", "yarn", "pytest", "make"]"#;

fn bash(profile: &CompiledProfile, command: &str) -> (Decision, String) {
    let v = profile.evaluate(&ToolCall {
        tool: "Bash",
        command,
        workspace_root: Some("/home/dev/repo"),
        ..ToolCall::default()
    });
    (v.decision, v.reason)
}

const EVERYDAY: &[&str] = &[
    "git status",
    "git diff --stat",
    "git log --oneline -10",
    "git show HEAD",
    "git blame -L 1,5 src/lib.rs",
    "cargo test",
    "cargo test -v",
    "cargo test --release",
    "cargo test parser::",
    "cargo test -p core --lib -- --nocapture",
    "cargo test -- --test-threads=1 --exact name",
    "cargo build --release",
    "cargo check --all-targets",
    "go test ./...",
    "go test -v -run TestX ./pkg",
    "go test -race -count=1 ./...",
    "npm test",
    "npm test -- -t name",
    "pnpm test",
    "yarn test --coverage",
    "pytest",
    "pytest -x -q tests/test_a.py",
    "pytest -k name -v",
    "python -m pytest -x",
    "python3 -m pytest --maxfail=1 tests",
    "make",
    "make test",
    "make -j4 test",
    "make lint V=1",
];

#[test]
fn everyday_forms_of_each_trusted_tool_are_allowed() {
    let profile = profile(ALL).expect("profile");
    for command in EVERYDAY {
        let (decision, reason) = bash(&profile, command);
        assert_eq!(decision, Allow, "{command}: {reason}");
        assert!(reason.contains("a trusted tool"), "{command}: {reason}");
    }
}

/// (class, command, what the reason says).
const REFUSED: &[(&str, &str, &str)] = &[
    (
        "program",
        "go test -exec ./x ./...",
        "through another program",
    ),
    (
        "program",
        "go test -toolexec=./x ./...",
        "through another program",
    ),
    (
        "program",
        "git diff --ext-diff",
        "runs the external diff program",
    ),
    ("program", "git -p log", "starts a pager"),
    (
        "plugin",
        "pytest -p evil",
        "loads other code or configuration",
    ),
    ("plugin", "npm test -- --require ./x.js", "loads other code"),
    (
        "configuration",
        "cargo --config build.rustc-wrapper=./x test",
        "cargo --config",
    ),
    ("configuration", "git -c core.pager=./x log", "git -c"),
    (
        "configuration",
        "pytest -c /tmp/pytest.ini",
        "loads other code or configuration",
    ),
    (
        "configuration",
        "make -f /tmp/Makefile test",
        "option not known to be harmless",
    ),
    (
        "manifest",
        "cargo test --manifest-path /tmp/x/Cargo.toml",
        "a manifest outside the workspace",
    ),
    (
        "directory",
        "make -C /tmp/x test",
        "option not known to be harmless",
    ),
    (
        "directory",
        "git -C /tmp/x status",
        "a repository outside the workspace",
    ),
    (
        "output",
        "go test -coverprofile=/tmp/c.out ./...",
        "outside the workspace",
    ),
    (
        "output",
        "cargo test --target-dir /tmp/t",
        "outside the workspace",
    ),
    ("variable", "make SHELL=./x test", "sets a make variable"),
    ("variable", "make CC=./x", "sets a make variable"),
    (
        "environment",
        "RUSTFLAGS=-Cx cargo test",
        "it sets shell variables",
    ),
    (
        "environment",
        "GOFLAGS=-toolexec=./x go test ./...",
        "it sets shell variables",
    ),
    ("toolchain", "cargo +nightly test", "another toolchain"),
    (
        "unknown",
        "cargo test --no-such-flag",
        "cargo test an option not known",
    ),
];

#[test]
fn each_refused_class_asks_with_its_reason() {
    let profile = profile(ALL).expect("profile");
    for (class, command, says) in REFUSED {
        let (decision, reason) = bash(&profile, command);
        assert_eq!(decision, Ask, "{class}: {command}: {reason}");
        assert!(
            reason.contains(says),
            "{class}: {command}: {reason}\n  want: {says}"
        );
    }
}

#[test]
fn other_forms_and_untrusted_tools_go_to_the_rules() {
    let only_git = profile(r#"["git"]"#).expect("profile");
    for command in [
        "cargo test",
        "git commit -m x",
        "git stash",
        "npm run build",
        "cargo run",
    ] {
        let (decision, reason) = bash(&only_git, command);
        assert_eq!(decision, Deny, "{command}: {reason}");
        assert!(
            reason.starts_with("rules[0] (Bash deny)"),
            "{command}: {reason}"
        );
    }
    // Connecting stays refused whatever is trusted.
    let all = profile(ALL).expect("profile");
    let (decision, reason) = bash(&all, "git fetch origin");
    assert_eq!(decision, Deny, "{reason}");
    assert!(reason.contains("network is \"none\""), "{reason}");
}

#[test]
fn a_tool_the_table_does_not_vet_is_a_load_error() {
    for (list, error) in [
        (
            r#"["bash"]"#,
            "trusted_tools[0]: \"bash\" is not a tool the option table vets",
        ),
        (
            r#"["git", "git"]"#,
            "trusted_tools[1]: \"git\" is named twice",
        ),
    ] {
        let Err(got) = profile(list) else {
            panic!("{list} loaded");
        };
        assert!(got.contains(error), "{list}: {got}");
    }
}
