//! `runplane policy import claude-code`: Claude Code rules imported with the real binary,
//! then every call decided by `runplane policy check` on the imported profile.

use std::path::Path;
use std::process::{Command, Output};

fn runplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(args)
        .env_remove("RUNPLANE_POLICY_DIR")
        .output()
        .expect("runs the binary")
}

/// A call: the tool, the flag carrying its argument (`--command`, `--path`, `--url`, or
/// none), the argument, and the decision it must get.
type Call = (&'static str, &'static str, &'static str, &'static str);

/// Imports `settings` as profile `name` into `dir/policies` (without the `[[tests]]`,
/// which this branch's loader does not read) and returns the import's output.
fn import(dir: &Path, name: &str, settings: &serde_json::Value) -> Output {
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, settings.to_string()).expect("write settings");
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).expect("policy dir");
    let output = policies.join(format!("{name}.toml"));
    runplane(&[
        "policy",
        "import",
        "claude-code",
        file.to_str().expect("utf-8"),
        "--name",
        name,
        "--no-tests",
        "--output",
        output.to_str().expect("utf-8"),
    ])
}

fn imported(dir: &Path, name: &str, settings: serde_json::Value) -> String {
    let out = import(dir, name, &settings);
    let report = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{report}");
    report
}

fn decide(dir: &Path, profile: &str, (tool, flag, value, _): Call) -> String {
    let policies = dir.join("policies");
    let mut args = vec![
        "policy",
        "check",
        "--policy-dir",
        policies.to_str().expect("utf-8"),
        "--profile",
        profile,
        "--tool",
        tool,
        "--workspace",
        "/workspace",
        "--json",
    ];
    if !flag.is_empty() {
        args.extend([flag, value]);
    }
    let out = runplane(&args);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["decision"].as_str().unwrap_or_default().to_string()
}

fn assert_calls(dir: &Path, profile: &str, rule: &str, calls: &[Call]) {
    for &call in calls {
        let got = decide(dir, profile, call);
        assert_eq!(
            got, call.3,
            "under {rule}: {} {} {:?}",
            call.0, call.1, call.2
        );
    }
}

/// Each Claude Code rule, the list it is in, and calls with the decision Claude Code's
/// semantics give them under all these rules together (mode default) — or a stricter one
/// where runplane cannot say the same, never a looser one.
const TABLE: &[(&str, &str, &[Call])] = &[
    (
        "deny",
        "Read(./.env)",
        &[
            ("Read", "--path", ".env", "deny"),
            ("Read", "--path", "config/.env", "deny"),
            ("Grep", "--path", ".env", "deny"),
        ],
    ),
    (
        "deny",
        "Read(~/.ssh/**)",
        &[("Read", "--path", "~/.ssh/id_rsa", "deny")],
    ),
    (
        "deny",
        "Read(//etc/shadow)",
        &[
            ("Read", "--path", "/etc/shadow", "deny"),
            ("Read", "--path", "/etc/passwd", "ask"),
        ],
    ),
    (
        "deny",
        "Edit(/secrets/**)",
        &[
            ("Edit", "--path", "secrets/key", "deny"),
            ("Write", "--path", "secrets/key", "deny"),
            ("MultiEdit", "--path", "/workspace/secrets/key", "deny"),
        ],
    ),
    (
        "deny",
        "Bash(rm -rf:*)",
        &[
            ("Bash", "--command", "rm -rf build", "deny"),
            ("Bash", "--command", "git diff && rm -rf /", "deny"),
        ],
    ),
    (
        "deny",
        "Bash(curl *)",
        &[
            ("Bash", "--command", "curl https://example.com", "deny"),
            ("Bash", "--command", "curl", "deny"),
            ("Bash", "--command", "git diff; curl evil", "deny"),
        ],
    ),
    (
        "deny",
        "Bash(git push --force:*)",
        &[("Bash", "--command", "git push --force origin", "deny")],
    ),
    (
        "deny",
        "Bash(cargo publish)",
        &[
            ("Bash", "--command", "cargo publish", "deny"),
            ("Bash", "--command", "cargo publish --dry-run", "allow"),
        ],
    ),
    (
        "deny",
        "WebFetch(domain:evil.com)",
        &[
            ("WebFetch", "--url", "https://evil.com/x", "deny"),
            ("WebFetch", "--url", "https://a.evil.com/", "deny"),
        ],
    ),
    (
        "deny",
        "mcp__dangerous",
        &[("mcp__dangerous__drop_table", "", "", "deny")],
    ),
    // No runplane equivalent: the whole tool is denied.
    ("deny", "Task(Explore)", &[("Task", "", "", "deny")]),
    // Shell quoting in a deny: every command of the program is denied.
    (
        "deny",
        "Bash(sudo \"rm\":*)",
        &[("Bash", "--command", "sudo ls", "deny")],
    ),
    (
        "ask",
        "Bash(git push:*)",
        &[
            // Ask before the allow `Bash(git * main)`.
            ("Bash", "--command", "git push origin main", "ask"),
        ],
    ),
    (
        "ask",
        "Edit(/docs/**)",
        &[("Edit", "--path", "docs/a.md", "ask")],
    ),
    (
        "ask",
        "WebFetch(domain:github.com)",
        &[("WebFetch", "--url", "https://github.com/x", "ask")],
    ),
    // Quoting in an ask: every docker command asks.
    (
        "ask",
        "Bash(docker \"run\":*)",
        &[("Bash", "--command", "docker ps", "ask")],
    ),
    (
        "allow",
        "Bash(git diff:*)",
        &[
            ("Bash", "--command", "git diff", "allow"),
            ("Bash", "--command", "git diff --stat", "allow"),
            ("Bash", "--command", "git diffx", "ask"),
            ("Bash", "--command", "git diff && make", "ask"),
            ("Bash", "--command", "git diff | sh", "ask"),
        ],
    ),
    (
        "allow",
        "Bash(npm run test *)",
        &[
            ("Bash", "--command", "npm run test", "allow"),
            ("Bash", "--command", "npm run test -- --watch", "allow"),
            ("Bash", "--command", "npm run testx", "ask"),
        ],
    ),
    (
        "allow",
        "Bash(npm run build)",
        &[
            ("Bash", "--command", "npm run build", "allow"),
            ("Bash", "--command", "npm run build --prod", "ask"),
        ],
    ),
    (
        "allow",
        "Bash(git * main)",
        &[
            ("Bash", "--command", "git checkout main", "allow"),
            ("Bash", "--command", "git checkout dev", "ask"),
        ],
    ),
    (
        "allow",
        "Bash(ls*)",
        &[
            ("Bash", "--command", "ls -la", "allow"),
            ("Bash", "--command", "lsof", "allow"),
        ],
    ),
    (
        "allow",
        "Bash(cargo:*)",
        &[("Bash", "--command", "cargo test", "allow")],
    ),
    // runplane does not look through wrappers for an allow: stricter than Claude Code.
    (
        "allow",
        "Bash(git status)",
        &[
            ("Bash", "--command", "git status", "allow"),
            ("Bash", "--command", "timeout 5 git status", "ask"),
        ],
    ),
    (
        "allow",
        "Read",
        &[
            ("Read", "--path", "src/main.rs", "allow"),
            // A path outside the workspace is never allowed.
            ("Read", "--path", "../other/x", "ask"),
        ],
    ),
    (
        "allow",
        "Edit(/src/**/*.ts)",
        &[
            ("Edit", "--path", "src/a/b.ts", "allow"),
            ("Write", "--path", "src/x.ts", "allow"),
            ("Edit", "--path", "src/a.js", "ask"),
        ],
    ),
    (
        "allow",
        "Edit(docs/*.md)",
        &[("Edit", "--path", "docs/b.md", "ask")],
    ),
    (
        "allow",
        "WebFetch(domain:docs.rs)",
        &[
            ("WebFetch", "--url", "https://docs.rs/serde", "allow"),
            ("WebFetch", "--url", "https://docs.rs.evil.org/", "ask"),
        ],
    ),
    (
        "allow",
        "mcp__github",
        &[
            ("mcp__github__create_issue", "", "", "allow"),
            ("mcp__gitlab__create_issue", "", "", "ask"),
        ],
    ),
    (
        "allow",
        "mcp__slack__post_message",
        &[
            ("mcp__slack__post_message", "", "", "allow"),
            ("mcp__slack__delete_channel", "", "", "ask"),
        ],
    ),
    ("allow", "WebSearch", &[("WebSearch", "", "", "allow")]),
    // Never widen: allows with no exact equivalent are dropped.
    (
        "allow",
        "Bash(echo \"hi\")",
        &[("Bash", "--command", "echo hi", "ask")],
    ),
    (
        "allow",
        "Read(~/notes/**)",
        &[("Read", "--path", "~/notes/a", "ask")],
    ),
    (
        "allow",
        "Write(/build/**)",
        &[("Write", "--path", "build/x", "ask")],
    ),
    (
        "allow",
        "Bash(./deploy.sh:*)",
        &[("Bash", "--command", "./deploy.sh prod", "ask")],
    ),
];

fn table_settings() -> serde_json::Value {
    let list = |name: &str| -> Vec<&str> {
        TABLE
            .iter()
            .filter(|(l, _, _)| *l == name)
            .map(|(_, rule, _)| *rule)
            .collect()
    };
    serde_json::json!({"permissions": {
        "allow": list("allow"),
        "ask": list("ask"),
        "deny": list("deny"),
    }})
}

#[test]
fn every_rule_of_the_table_decides_its_calls() {
    assert!(TABLE.len() >= 30);
    let dir = tempfile::tempdir().expect("temp dir");
    let report = imported(dir.path(), "table", table_settings());
    for (_, rule, calls) in TABLE {
        assert_calls(dir.path(), "table", rule, calls);
    }
    // Every rule not carried over exactly is in the report.
    for rule in [
        "Task(Explore)",
        "Bash(sudo \"rm\":*)",
        "Bash(docker \"run\":*)",
        "Bash(echo \"hi\")",
        "Read(~/notes/**)",
        "Write(/build/**)",
        "Bash(./deploy.sh:*)",
        "Read(//etc/shadow)",
    ] {
        assert!(report.contains(rule), "{rule} not reported:\n{report}");
    }
    assert!(report.contains("dropped"), "{report}");
    assert!(report.contains("made stricter"), "{report}");
}

#[test]
fn generated_tests_are_written_and_hold_under_policy_check() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("settings.json");
    std::fs::write(&file, table_settings().to_string()).expect("write");
    let out = runplane(&[
        "policy",
        "import",
        "claude-code",
        file.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    // The report leads the file as comments.
    assert!(
        text.starts_with("# runplane policy import claude-code"),
        "{text}"
    );
    assert!(text.contains("# - Task(Explore)"), "{text}");
    let doc: toml::Table = toml::from_str(&text).expect("toml");
    let tests = doc["tests"].as_array().expect("[[tests]]");
    assert!(tests.len() >= 20, "{}", tests.len());
    let names: Vec<&str> = tests.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"deny Read(./.env)"), "{names:?}");

    // Without them the profile loads here; each test is decided through `policy check`.
    let policies = dir.path().join("policies");
    std::fs::create_dir_all(&policies).expect("dir");
    let (profile, _) = text
        .split_once("\n[[tests]]")
        .expect("tests follow the profile");
    std::fs::write(policies.join("claude-code.toml"), profile).expect("write");
    for test in tests {
        let field = |key: &str| test.get(key).and_then(|v| v.as_str()).unwrap_or_default();
        let mut args = vec!["policy", "check", "--policy-dir"];
        let dir_arg = policies.to_str().expect("utf-8");
        args.extend([
            dir_arg,
            "--profile",
            "claude-code",
            "--tool",
            field("tool"),
            "--json",
        ]);
        for key in ["command", "path", "url", "workspace"] {
            if !field(key).is_empty() {
                args.extend([
                    match key {
                        "command" => "--command",
                        "path" => "--path",
                        "url" => "--url",
                        _ => "--workspace",
                    },
                    field(key),
                ]);
            }
        }
        let out = runplane(&args);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["decision"], field("expect"), "{}: {v}", field("name"));
    }
}

#[test]
fn default_modes_map_to_no_wider_modes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let accept = imported(
        d,
        "accept",
        serde_json::json!({"permissions": {
            "defaultMode": "acceptEdits",
            "deny": ["Edit(/secrets/**)"],
        }}),
    );
    assert!(accept.contains("acceptEdits"), "{accept}");
    assert_calls(
        d,
        "accept",
        "acceptEdits",
        &[
            ("Edit", "--path", "src/a.rs", "allow"),
            ("Write", "--path", "new.txt", "allow"),
            ("Edit", "--path", "secrets/k", "deny"),
            // Commands still ask: runplane's own acceptEdits would allow them.
            ("Bash", "--command", "ls", "ask"),
        ],
    );

    imported(
        d,
        "plan",
        serde_json::json!({"permissions": {
            "defaultMode": "plan",
            "allow": ["Read", "Bash(git diff:*)"],
            "ask": ["Bash(docker \"x\":*)"],
        }}),
    );
    assert_calls(
        d,
        "plan",
        "plan",
        &[
            ("Read", "--path", "src/a.rs", "allow"),
            ("Bash", "--command", "git diff", "deny"),
            // The wider ask that stands for the quoted rule denies under plan.
            ("Bash", "--command", "docker ps", "deny"),
            ("Edit", "--path", "a.txt", "deny"),
        ],
    );

    imported(
        d,
        "dontask",
        serde_json::json!({"permissions": {
            "defaultMode": "dontAsk",
            "allow": ["Bash(git diff:*)"],
            "ask": ["Bash(git push:*)"],
        }}),
    );
    assert_calls(
        d,
        "dontask",
        "dontAsk",
        &[
            ("Bash", "--command", "git diff", "allow"),
            ("Bash", "--command", "git push", "deny"),
            ("Bash", "--command", "ls", "deny"),
        ],
    );

    let bypass = imported(
        d,
        "bypass",
        serde_json::json!({"permissions": {
            "defaultMode": "bypassPermissions",
        }}),
    );
    assert!(bypass.contains("bypassPermissions"), "{bypass}");
    assert_calls(
        d,
        "bypass",
        "bypassPermissions",
        &[("Bash", "--command", "ls", "ask")],
    );
    let shown = runplane(&[
        "policy",
        "show",
        "bypass",
        "--policy-dir",
        d.join("policies").to_str().expect("utf-8"),
    ]);
    assert!(String::from_utf8_lossy(&shown.stdout).contains("mode = \"default\""));
}

#[test]
fn bad_input_exits_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let missing = d.join("missing.json");
    let out = runplane(&[
        "policy",
        "import",
        "claude-code",
        missing.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    for (name, text) in [
        ("bad", "{not json"),
        ("array", "[]"),
        ("perms", "{\"permissions\": 3}"),
    ] {
        let file = d.join(format!("{name}.json"));
        std::fs::write(&file, text).expect("write");
        let out = runplane(&[
            "policy",
            "import",
            "claude-code",
            file.to_str().expect("utf-8"),
        ]);
        assert_eq!(out.status.code(), Some(2), "{name}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "));
    }
    let out = import(d, "x", &serde_json::json!({}));
    assert_eq!(out.status.code(), Some(0));
    let file = d.join("x.json");
    let out = runplane(&[
        "policy",
        "import",
        "claude-code",
        file.to_str().expect("utf-8"),
        "--name",
        "a b",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// Claude Code's `sandbox` settings and `Read(…)` denies become the profile's intent: the
/// allowed domains its `network` (which the judge holds commands and WebFetch to), the
/// denied reads its `secrets` (refused to every tool, writes too), the denied writes a
/// deny of the write tools.
#[test]
fn sandbox_settings_and_read_denies_become_network_and_secrets() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let report = imported(
        d,
        "boxed",
        serde_json::json!({
            "permissions": {"allow": ["Bash", "Edit", "WebFetch"], "deny": ["Read(./.env)"]},
            "sandbox": {
                "enabled": true,
                "network": {"allowedDomains": ["github.com", "bad domain"], "allowLocalBinding": true},
                "filesystem": {"denyRead": ["~/.aws/**", "./keys/**"], "denyWrite": ["config/**", "Makefile"], "allowWrite": ["/opt/x", "build/*"]},
                "autoAllowBashIfSandboxed": true,
            },
        }),
    );
    for expected in [
        "\"bad domain\" skipped",
        "sandbox.network.allowLocalBinding is not imported",
        "sandbox.filesystem.allowWrite: \"build/*\" is not imported",
        "sandbox.autoAllowBashIfSandboxed is not imported",
    ] {
        assert!(report.contains(expected), "{expected}: {report}");
    }
    let toml = std::fs::read_to_string(d.join("policies/boxed.toml")).expect("written");
    assert!(
        toml.contains("network = [\"github.com:443\", \"github.com:80\"]"),
        "{toml}"
    );
    assert!(
        toml.contains("secrets = [\"~/.aws/**\", \"keys/**\", \"**/.env\"]"),
        "{toml}"
    );
    assert!(toml.contains("protected = [\"Makefile\"]"), "{toml}");
    assert!(toml.contains("writable = [\"/opt/x\"]"), "{toml}");
    assert_calls(
        d,
        "boxed",
        "the sandbox settings",
        &[
            (
                "Bash",
                "--command",
                "git clone https://github.com/x/y",
                "allow",
            ),
            ("Bash", "--command", "curl https://evil.io", "deny"),
            ("WebFetch", "--url", "https://evil.io/", "deny"),
            ("WebFetch", "--url", "https://github.com/x", "allow"),
            ("Read", "--path", "keys/id", "deny"),
            ("Edit", "--path", ".env", "deny"),
            ("Bash", "--command", "cat config/.env", "deny"),
            ("Edit", "--path", "config/app.toml", "deny"),
            ("Bash", "--command", "echo x > Makefile", "deny"),
            ("Edit", "--path", "/opt/x/cache", "allow"),
            ("Edit", "--path", "src/main.rs", "allow"),
        ],
    );
    // Not enabled: Claude Code enforces none of it, and nothing is imported.
    let report = imported(
        d,
        "off",
        serde_json::json!({"sandbox": {"enabled": false, "network": {"allowedDomains": ["x.io"]}}}),
    );
    assert!(report.contains("sandbox.enabled is not true"), "{report}");
    let toml = std::fs::read_to_string(d.join("policies/off.toml")).expect("written");
    assert!(!toml.contains("network"), "{toml}");
}
