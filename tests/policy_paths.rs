//! Paths and tool names as the worker's filesystem and agent see them: case variants of a
//! path or a tool name, and a path that a symlink resolves elsewhere.

use std::sync::Arc;

use runplane::domain::Decision;
use runplane::policy::{
    parse_profile, CompiledProfile, ProfileFormat, ProfileRegistry, ToolCall, Verdict,
};

const ROOT: &str = "/work/repo";

fn preset(name: &str) -> Arc<CompiledProfile> {
    ProfileRegistry::builtin()
        .get(name)
        .unwrap_or_else(|| panic!("preset {name} is missing"))
}

fn custom(toml: &str) -> CompiledProfile {
    let profile = parse_profile(toml, ProfileFormat::Toml, "custom").expect("parses");
    CompiledProfile::compile(profile).expect("compiles")
}

fn decide(profile: &CompiledProfile, tool: &str, command: &str, path: &str) -> Verdict {
    profile.evaluate(&ToolCall {
        tool,
        command,
        path,
        workspace_root: Some(ROOT),
        ..Default::default()
    })
}

/// The presets' secrets are matched ignoring case: on a case-insensitive checkout `.ENV`
/// is `.env`, so the deny must reach it.
#[test]
fn case_variants_of_secret_paths_are_denied_by_the_presets() {
    for name in ["trusted-mount-autonomous", "headless-permissive-sandbox"] {
        let profile = preset(name);
        for (tool, path) in [
            ("Edit", ".ENV"),
            ("Edit", "config/.Env"),
            ("Write", "Secrets/key.pem"),
            ("Write", "SECRETS/x"),
        ] {
            let v = decide(&profile, tool, "", path);
            assert_eq!(
                v.decision,
                Decision::Deny,
                "{name} {tool} {path}: {}",
                v.reason
            );
            // The secrets decide before the rules, ignoring case.
            assert!(v.reason.starts_with("writes a secret: "), "{}", v.reason);
            assert_eq!(v.rule_index, None);
        }
        // A redirection is judged as Write: the same secret by another route.
        let v = decide(&profile, "Bash", "echo k > Secrets/key", "");
        assert_eq!(v.decision, Decision::Deny, "{name}: {}", v.reason);
        // The exact spelling of an ordinary file is still allowed.
        assert_eq!(
            decide(&profile, "Edit", "", "src/env.rs").decision,
            Decision::Allow
        );
    }
    // The default preset keeps secrets out of its Edit allow with `path_deny`.
    let safe = preset("headless-safe-sandbox");
    for path in [".ENV", "Secrets/x", "a/CREDENTIALS.json"] {
        let v = decide(&safe, "Edit", "", path);
        assert_ne!(v.decision, Decision::Allow, "{path}: {}", v.reason);
    }
    assert_eq!(
        decide(&safe, "Edit", "", "src/lib.rs").decision,
        Decision::Allow
    );
}

/// In an allow rule, `path_deny` ignores case and `path_allow` does not: the allow never
/// reaches further than written.
#[test]
fn an_allow_rule_excludes_case_variants_and_allows_only_exact_paths() {
    let profile = custom(
        r#"
mode = "plan"

[[rules]]
specifier = { tool = "Edit" }
decision = "allow"
path_allow = ["src/**"]
path_deny = ["**/.env", "src/secrets/**"]
"#,
    );
    assert_eq!(
        decide(&profile, "Edit", "", "src/a.rs").decision,
        Decision::Allow
    );
    for path in ["src/.ENV", "src/Secrets/k", "SRC/a.rs", "Src/a.rs"] {
        let v = decide(&profile, "Edit", "", path);
        assert_eq!(v.decision, Decision::Deny, "{path}: {}", v.reason);
        assert_eq!(v.rule_index, None, "{path}: the mode decides, not the rule");
    }
}

/// In a deny rule, `path_allow` (the files it is about) reaches every case, and
/// `path_deny` (its exceptions) holds only as written.
#[test]
fn a_deny_rule_reaches_case_variants_and_excepts_only_exact_paths() {
    let profile = custom(
        r#"
mode = "acceptEdits"

[[rules]]
specifier = { tool = "Edit" }
decision = "deny"
path_allow = ["private/**"]

[[rules]]
specifier = { tool = "Write" }
decision = "deny"
path_deny = ["docs/**"]
"#,
    );
    assert_eq!(
        decide(&profile, "Edit", "", "Private/x").decision,
        Decision::Deny
    );
    assert_eq!(
        decide(&profile, "Edit", "", "public/x").decision,
        Decision::Allow
    );
    assert_eq!(
        decide(&profile, "Write", "", "docs/a.md").decision,
        Decision::Allow
    );
    let v = decide(&profile, "Write", "", "DOCS/a.md");
    assert_eq!(v.decision, Decision::Deny, "{}", v.reason);
}

/// A tool name in another case is the same tool: judged by its rules, and a shell
/// command line whatever the case of `Bash`.
#[test]
fn tool_names_are_compared_ignoring_case() {
    let safe = preset("headless-safe-sandbox");
    for tool in ["bash", "BASH", "bAsH"] {
        let v = decide(&safe, tool, "rm -rf /", "");
        assert_eq!(v.decision, Decision::Deny, "{tool}: {}", v.reason);
        // Judged part by part: the allowed first part does not carry the line.
        let v = decide(&safe, tool, "git status && rm -rf /", "");
        assert_eq!(v.decision, Decision::Deny, "{tool}: {}", v.reason);
        assert_eq!(v.part.as_deref(), Some("rm -rf /"), "{tool}");
        assert_eq!(
            decide(&safe, tool, "git status", "").decision,
            Decision::Allow,
            "{tool}"
        );
    }
    for tool in ["edit", "EDIT"] {
        let v = decide(&safe, tool, "", ".env");
        assert_ne!(v.decision, Decision::Allow, "{tool}: {}", v.reason);
        assert_eq!(
            decide(&safe, tool, "", "src/a.rs").decision,
            Decision::Allow,
            "{tool}"
        );
    }
    let plan = preset("plan-readonly");
    assert_eq!(
        decide(&plan, "READ", "", "src/a.rs").decision,
        Decision::Allow
    );
    // A rule written in lower case applies to the canonical name too, and a redirection
    // (judged as `Write`) meets a `write` rule.
    let profile = custom(
        r#"
mode = "acceptEdits"

[[rules]]
specifier = { tool = "write" }
decision = "deny"
path_allow = ["locked/**"]
"#,
    );
    assert_eq!(
        decide(&profile, "Write", "", "locked/a").decision,
        Decision::Deny
    );
    let v = decide(&profile, "Bash", "echo x > locked/a", "");
    assert_eq!(v.decision, Decision::Deny, "{}", v.reason);
}

/// A symlink inside the workspace that points out of it: judged by the path the worker
/// resolved as well, the stricter decision wins and the reason says so.
#[test]
fn the_resolved_path_is_judged_too_and_the_stricter_decision_wins() {
    let trusted = preset("trusted-mount-autonomous");
    let call = |path, resolved_path| ToolCall {
        tool: "Edit",
        path,
        resolved_path,
        workspace_root: Some(ROOT),
        ..Default::default()
    };
    assert_eq!(
        trusted.evaluate(&call("link/passwd", "")).decision,
        Decision::Allow
    );
    let v = trusted.evaluate(&call("link/passwd", "/etc/passwd"));
    assert_eq!(v.decision, Decision::Ask, "{}", v.reason);
    assert!(
        v.reason
            .starts_with("the resolved path \"/etc/passwd\" of \"link/passwd\" decided"),
        "{}",
        v.reason
    );
    assert!(v.reason.contains("outside the workspace"), "{}", v.reason);
    // A link to a secret inside the workspace is denied by the secrets.
    let v = trusted.evaluate(&call("notes.txt", "/work/repo/.env"));
    assert_eq!((v.decision, v.rule_index), (Decision::Deny, None));
    assert_eq!(
        v.reason,
        r#"writes a secret: ".env" matches secrets ".env""#
    );
    // The stricter side wins from either side: a resolved path never buys an allow.
    let v = trusted.evaluate(&call(".env", "/work/repo/src/a.rs"));
    assert_eq!(v.decision, Decision::Deny, "{}", v.reason);
    assert!(!v.reason.contains("resolved path"), "{}", v.reason);
    // Resolving to itself, or inside, changes nothing.
    for resolved in ["/work/repo/src/a.rs", "src/a.rs"] {
        let v = trusted.evaluate(&call("src/a.rs", resolved));
        assert_eq!(v.decision, Decision::Allow, "{resolved}: {}", v.reason);
    }
    // A shell call with a path is judged with both too.
    let v = trusted.evaluate(&ToolCall {
        tool: "Bash",
        command: "cat x",
        ..call("link/x", "/etc/x")
    });
    assert_eq!(v.decision, Decision::Ask, "{}", v.reason);
}

/// `runplane policy check` as a user runs it, in `dir`.
fn check_in(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_runplane"))
        .current_dir(dir)
        .args([
            "policy",
            "check",
            "--profile",
            "trusted-mount-autonomous",
            "--json",
        ])
        .args(args)
        .env_remove("RUNPLANE_POLICY_DIR")
        .output()
        .expect("runs the binary");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// With a workspace that exists on this machine, `policy check` resolves the path the way
/// a worker would, so a symlink out of the workspace is caught offline too.
#[cfg(unix)]
#[test]
fn policy_check_resolves_paths_in_a_local_workspace() {
    use std::os::unix::fs::symlink;

    let dir = tempfile::tempdir().expect("temp dir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("ws");
    std::fs::write(ws.join("notes.txt"), "n").expect("file");
    symlink("/etc", ws.join("link")).expect("link");
    // A dangling link: a write through it creates its target, outside.
    std::fs::create_dir(dir.path().join("outside")).expect("outside");
    symlink(dir.path().join("outside/new"), ws.join("dangling")).expect("dangling");
    // The workspace itself reached through a symlink (like /tmp on macOS).
    symlink(&ws, dir.path().join("ws-link")).expect("ws link");
    let real_ws = std::fs::canonicalize(&ws).expect("canonical ws");

    let outside = [
        ("link/passwd", "/etc/passwd"),
        ("link/no-such-file", "/etc/no-such-file"),
    ];
    for (path, resolved) in outside {
        let v = check_in(
            dir.path(),
            &["--tool", "Edit", "--path", path, "--workspace", "ws"],
        );
        assert_eq!(v["decision"], "ask", "{path}: {v}");
        assert_eq!(v["resolved_path"], resolved, "{path}");
        assert!(
            v["reason"]
                .as_str()
                .is_some_and(|r| r.contains("resolved path")),
            "{v}"
        );
    }
    let v = check_in(
        dir.path(),
        &["--tool", "Write", "--path", "dangling", "--workspace", "ws"],
    );
    assert_eq!(v["decision"], "ask", "{v}");

    for path in ["notes.txt", "new-file.txt"] {
        let v = check_in(
            dir.path(),
            &["--tool", "Edit", "--path", path, "--workspace", "ws"],
        );
        assert_eq!(v["decision"], "allow", "{path}: {v}");
        let want = real_ws.join(path);
        assert_eq!(v["resolved_path"], want.to_str().expect("utf-8"), "{path}");
        let v = check_in(
            dir.path(),
            &["--tool", "Edit", "--path", path, "--workspace", "ws-link"],
        );
        assert_eq!(v["decision"], "allow", "through ws-link: {path}: {v}");
    }

    // Given explicitly, the resolved path is used as is, workspace or not.
    let v = check_in(
        dir.path(),
        &[
            "--tool",
            "Edit",
            "--path",
            "notes.txt",
            "--resolved-path",
            "/etc/passwd",
            "--workspace",
            "/no/such/workspace",
        ],
    );
    assert_eq!(v["decision"], "ask", "{v}");
    // A workspace that does not exist here is judged lexically, as before.
    let v = check_in(
        dir.path(),
        &[
            "--tool",
            "Edit",
            "--path",
            "link/passwd",
            "--workspace",
            "/no/such/ws",
        ],
    );
    assert_eq!(v["decision"], "allow", "{v}");
    assert_eq!(v["resolved_path"], "");
}
