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

const WEB: &str = r#"
name = "web"
mode = "default"

[[rules]]
specifier = { tool = "WebFetch" }
decision = "deny"
domain_allow = ["*.evil.example", "evil.example"]

[[rules]]
specifier = { tool = "WebFetch" }
decision = "allow"
domain_allow = ["docs.rs", "*.github.com", "github.com"]
domain_deny = ["gist.github.com"]

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
input_match = { dangerouslyDisableSandbox = true }

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git status"]
"#;

fn web(url: &str) -> runplane::policy::Verdict {
    profile(WEB).evaluate(&ToolCall {
        tool: "WebFetch",
        url,
        ..ToolCall::default()
    })
}

#[test]
fn web_tools_are_judged_by_the_host_their_url_reaches() {
    let cases = [
        ("https://docs.rs/tokio", Decision::Allow),
        ("https://api.github.com/repos", Decision::Allow),
        ("https://GitHub.com/x", Decision::Allow),
        ("https://gist.github.com/x", Decision::Ask),
        ("https://evil.example/x", Decision::Deny),
        ("https://a.b.evil.example/x", Decision::Deny),
        // The host is what a fetch reaches, not what the text starts with.
        ("https://docs.rs@evil.example/x", Decision::Deny),
        ("https://docs.rs.evil.example/", Decision::Deny),
        ("https://example.org/", Decision::Ask),
        // No readable host: a deny rule may match it, an allow rule never does.
        ("not a url", Decision::Deny),
        ("file:///etc/passwd", Decision::Deny),
    ];
    for (url, wanted) in cases {
        assert_eq!(web(url).decision, wanted, "{url}");
    }
    assert_eq!(
        web("https://evil.example/x").reason,
        "rules[0] (WebFetch deny) matches WebFetch of \"https://evil.example/x\""
    );
}

fn bash(command: &str, input: &str) -> Decision {
    profile(WEB)
        .evaluate(&ToolCall {
            tool: "Bash",
            command,
            input,
            ..ToolCall::default()
        })
        .decision
}

#[test]
fn a_rule_can_deny_a_flag_in_the_tools_input() {
    let sandboxed = r#"{"command":"git status","dangerouslyDisableSandbox":false}"#;
    let unsandboxed = r#"{"command":"git status","dangerouslyDisableSandbox":true}"#;
    assert_eq!(bash("git status", ""), Decision::Allow);
    assert_eq!(bash("git status", sandboxed), Decision::Allow);
    assert_eq!(bash("git status", unsandboxed), Decision::Deny);
    // Input that is not a JSON object may carry the flag: never allowed past the rule.
    assert_eq!(bash("git status", "{not json"), Decision::Deny);
    assert_eq!(bash("git status", "[true]"), Decision::Deny);
}

#[test]
fn domain_and_input_constraints_load_render_and_refuse_bad_values() {
    let shown = runplane::policy::profile_to_toml(profile(WEB).profile());
    assert!(
        shown.contains("domain_deny = [\"gist.github.com\"]"),
        "{shown}"
    );
    assert!(
        shown.contains("input_match = { \"dangerouslyDisableSandbox\" = true }"),
        "{shown}"
    );
    let again = parse_profile(&shown, ProfileFormat::Toml, "web").unwrap();
    assert_eq!(&again, profile(WEB).profile());
    let bad = "name = \"b\"\n[[rules]]\nspecifier = { tool = \"Bash\" }\ndecision = \"deny\"\ninput_match = { x = [1] }\n";
    let err = parse_profile(bad, ProfileFormat::Toml, "b")
        .unwrap_err()
        .to_string();
    assert!(err.contains("rules[0].input_match.x"), "{err}");
}
