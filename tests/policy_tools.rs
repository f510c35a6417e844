//! Rules about tools by name: exact names ignoring case, and globs over names (every tool of
//! one MCP server), with unknown tools left to the mode — never allowed by accident.

use runplane::domain::Decision;
use runplane::policy::{parse_profile, CompiledProfile, ProfileFormat, ToolCall};

const PROFILE: &str = r#"
name = "tools"
mode = "default"

[[rules]]
specifier = { tool = "mcp__github__delete_*" }
decision = "deny"

[[rules]]
specifier = { tool = "mcp__github__*" }
decision = "allow"

[[rules]]
specifier = { tool = "mcp__*" }
decision = "ask"

[[rules]]
specifier = { tool = "Read" }
decision = "allow"
"#;

fn profile(text: &str) -> CompiledProfile {
    CompiledProfile::compile(parse_profile(text, ProfileFormat::Toml, "tools").unwrap()).unwrap()
}

fn decide(profile: &CompiledProfile, tool: &str) -> Decision {
    profile
        .evaluate(&ToolCall {
            tool,
            ..ToolCall::default()
        })
        .decision
}

#[test]
fn tool_globs_match_by_name_first_rule_first() {
    let p = profile(PROFILE);
    let cases = [
        ("mcp__github__create_issue", Decision::Allow),
        ("MCP__GitHub__create_issue", Decision::Allow),
        ("mcp__github__delete_repo", Decision::Deny),
        ("mcp__slack__post_message", Decision::Ask),
        ("mcp__github", Decision::Ask),
        ("Read", Decision::Allow),
        ("read", Decision::Allow),
        // A tool no rule names: the mode decides (default: ask), never an allow.
        ("Unknown", Decision::Ask),
        ("Readx", Decision::Ask),
        ("xmcp__github__create_issue", Decision::Ask),
    ];
    for (tool, wanted) in cases {
        assert_eq!(decide(&p, tool), wanted, "{tool}");
    }
    let reason = p
        .evaluate(&ToolCall {
            tool: "mcp__github__delete_repo",
            ..ToolCall::default()
        })
        .reason;
    assert_eq!(
        reason,
        "rules[0] (mcp__github__delete_* deny) matches mcp__github__delete_repo"
    );
}

#[test]
fn a_bad_tool_glob_is_refused_naming_the_field() {
    let text =
        "name = \"bad\"\n[[rules]]\nspecifier = { tool = \"mcp__[x\" }\ndecision = \"allow\"\n";
    let parsed = parse_profile(text, ProfileFormat::Toml, "bad").unwrap();
    let err = CompiledProfile::compile(parsed).unwrap_err().to_string();
    assert!(
        err.starts_with("rules[0].specifier.tool: invalid glob \"mcp__[x\""),
        "{err}"
    );
}

const EDITS: &str = r#"
name = "edits"
mode = "default"

[[rules]]
specifier = { tool = "MultiEdit" }
decision = "deny"
path_allow = ["**/.env"]

[[rules]]
specifier = { tool = "MultiEdit" }
decision = "allow"
path_allow = ["src/**"]
"#;

fn multi_edit(path: &str, paths: &[&str]) -> runplane::policy::Verdict {
    let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
    profile(EDITS).evaluate(&ToolCall {
        tool: "MultiEdit",
        path,
        paths: &paths,
        workspace_root: Some("/ws"),
        ..ToolCall::default()
    })
}

#[test]
fn every_path_of_a_multi_file_edit_is_judged_and_the_strictest_wins() {
    assert_eq!(
        multi_edit("", &["src/a.rs", "src/b.rs"]).decision,
        Decision::Allow
    );
    assert_eq!(
        multi_edit("src/a.rs", &["src/b.rs"]).decision,
        Decision::Allow
    );
    let env = multi_edit("src/a.rs", &[".env", "src/b.rs"]);
    assert_eq!(env.decision, Decision::Deny);
    assert_eq!(
        env.reason,
        "the path \".env\" decided: rules[0] (MultiEdit deny) matches MultiEdit of .env"
    );
    // Outside the workspace and not under src/: never allowed.
    assert_eq!(
        multi_edit("", &["src/a.rs", "/etc/passwd"]).decision,
        Decision::Ask
    );
    assert_eq!(
        multi_edit("", &["src/a.rs", "../x"]).decision,
        Decision::Ask
    );
    // The path itself still counts when paths are given too.
    assert_eq!(multi_edit(".env", &["src/a.rs"]).decision, Decision::Deny);
}
