//! Tests inside a profile (`[[tests]]`), checked when the profile loads, and the lint:
//! real files in temporary directories, exact messages.

use runplane::domain::Decision;
use runplane::policy::{
    lint, parse_profile, presets, profile_to_toml, CompiledProfile, LintKind, LoadError,
    PolicyProfile, PolicyTest, ProfileFormat, ProfileRegistry,
};

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write policy file");
    }
    dir
}

/// The error of loading `files`, with the temp dir replaced by `DIR`.
fn load_error(files: &[(&str, &str)]) -> String {
    let dir = dir_with(files);
    match ProfileRegistry::load(Some(dir.path())) {
        Ok(_) => panic!("loading {files:?} should fail"),
        Err(e) => e
            .to_string()
            .replace(&dir.path().display().to_string(), "DIR"),
    }
}

/// Two Bash allow rules; the second one lets `curl` through, which the tests below catch.
const RULES: &str = r#"
name = "ci"

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git status"]

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["curl"]
"#;

const PASSING: &str = r#"
[[tests]]
name = "git status is fine"
tool = "Bash"
command = "git status"
expect = "allow"
rule = 0

[[tests]]
tool = "Edit"
path = "src/main.rs"
workspace = "/home/dev/repo"
expect = "ask"
unmatched = true

[[tests]]
tool = "Bash"
command = "git status && curl x"
input = { dangerouslyDisableSandbox = true }
expect = "allow"
unmatched = false
"#;

const FAILING: &str = r#"
[[tests]]
tool = "Bash"
command = "git status"
expect = "allow"

[[tests]]
name = "curl is refused"
tool = "Bash"
command = "curl evil.example"
expect = "deny"
"#;

#[test]
fn a_passing_block_loads_in_toml_and_yaml() {
    let yaml = "rules:\n  - specifier: {tool: Read}\n    decision: allow\ntests:\n  - tool: Read\n    path: a.rs\n    expect: allow\n    rule: 0\n";
    let dir = dir_with(&[("ci.toml", &format!("{RULES}{PASSING}")), ("y.yaml", yaml)]);
    let registry = ProfileRegistry::load(Some(dir.path())).expect("loads");
    let ci = registry.get("ci").expect("ci");
    assert_eq!(ci.profile().tests.len(), 3);
    assert_eq!(
        ci.profile().tests[0].name.as_deref(),
        Some("git status is fine")
    );
    assert_eq!(ci.profile().tests[1].workspace_root(), "/home/dev/repo");
    assert!(ci.run_tests().iter().all(|o| o.passed()));
    let y = registry.get("y").expect("y");
    assert_eq!(y.profile().tests[0].expect, Decision::Allow);
}

#[test]
fn a_failing_test_refuses_the_file_naming_profile_test_and_both_decisions() {
    assert_eq!(
        load_error(&[("ci.toml", &format!("{RULES}{FAILING}"))]),
        "DIR/ci.toml: profile \"ci\": test 2 \"curl is refused\": expected deny, decided allow \
         by rules[1] (reason: rules[1] (Bash allow) matches \"curl evil.example\")"
    );
    // The untested load is what `policy test` uses to report every failure.
    let dir = dir_with(&[("ci.toml", &format!("{RULES}{FAILING}"))]);
    let registry = ProfileRegistry::load_untested(Some(dir.path())).expect("loads untested");
    let outcomes = registry.get("ci").expect("ci").run_tests();
    let passed: Vec<bool> = outcomes.iter().map(|o| o.passed()).collect();
    assert_eq!(passed, [true, false]);
}

#[test]
fn a_wrong_rule_or_mode_default_fails_with_what_was_expected() {
    let wrong_rule =
        "[[tests]]\ntool = \"Bash\"\ncommand = \"curl x\"\nexpect = \"allow\"\nrule = 0\n";
    assert_eq!(
        load_error(&[("ci.toml", &format!("{RULES}{wrong_rule}"))]),
        "DIR/ci.toml: profile \"ci\": test 1: expected allow by rules[0], decided allow by \
         rules[1] (reason: rules[1] (Bash allow) matches \"curl x\")"
    );
    let not_unmatched =
        "[[tests]]\ntool = \"Bash\"\ncommand = \"curl x\"\nexpect = \"allow\"\nunmatched = true\n";
    assert_eq!(
        load_error(&[("ci.toml", &format!("{RULES}{not_unmatched}"))]),
        "DIR/ci.toml: profile \"ci\": test 1: expected allow by the mode default, decided allow \
         by rules[1] (reason: rules[1] (Bash allow) matches \"curl x\")"
    );
    let by_a_rule = "[[tests]]\ntool = \"Read\"\nexpect = \"ask\"\nunmatched = false\n";
    assert_eq!(
        load_error(&[("ci.toml", &format!("{RULES}{by_a_rule}"))]),
        "DIR/ci.toml: profile \"ci\": test 1: expected ask by a rule, decided ask by the mode \
         default (reason: no rule matches Read; mode default gives ask)"
    );
}

#[test]
fn bad_test_fields_are_named() {
    let cases = [
        (
            "[[tests]]\ntool = \"Bash\"\nexpect = \"allow\"\ncmd = \"ls\"\n",
            "DIR/x.toml: tests[0].cmd: unknown field (expected one of name, tool, command, path, \
             url, input, workspace, expect, rule, unmatched)",
        ),
        (
            "[[tests]]\ntool = \"Bash\"\n",
            "DIR/x.toml: tests[0].expect: missing",
        ),
        (
            "[[tests]]\nexpect = \"deny\"\n",
            "DIR/x.toml: tests[0].tool: missing",
        ),
        (
            "[[tests]]\ntool = \"Bash\"\nexpect = \"no\"\n",
            "DIR/x.toml: tests[0].expect: unknown decision \"no\" (expected allow, deny or ask)",
        ),
        (
            "[[tests]]\ntool = \"Bash\"\nexpect = \"ask\"\nrule = \"none\"\n",
            "DIR/x.toml: tests[0].rule: invalid type: string \"none\", expected usize",
        ),
        (
            "[[tests]]\ntool = \"Bash\"\nexpect = \"ask\"\nrule = 0\n",
            "DIR/x.toml: tests[0].rule: there is no rules[0] (the profile has 0 rules, counted \
             from 0)",
        ),
        (
            "[[tests]]\ntool = \"Bash\"\nexpect = \"ask\"\nworkspace = \"repo\"\n",
            "DIR/x.toml: tests[0].workspace: \"repo\" must be an absolute path",
        ),
        (
            "[[tests]]\ntool = \"Bash\"\nexpect = \"ask\"\ninput = \"{}\"\n",
            "DIR/x.toml: tests[0].input: invalid type: string \"{}\", expected a map",
        ),
        (
            "tests = 1\n",
            "DIR/x.toml: tests: expected an array of tables",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(load_error(&[("x.toml", text)]), want, "{text}");
    }
    let both = "[[tests]]\ntool = \"Bash\"\nexpect = \"allow\"\nrule = 0\nunmatched = true\n";
    assert_eq!(
        load_error(&[("ci.toml", &format!("{RULES}{both}"))]),
        "DIR/ci.toml: tests[0].unmatched: cannot be true together with rule (a rule deciding is \
         a match)"
    );
    let null = "tests:\n  - tool: Bash\n    expect: ask\n    input: {a: null}\n";
    assert_eq!(
        load_error(&[("x.yaml", null)]),
        "DIR/x.yaml: tests[0].input: must not hold null (leave the field out)"
    );
}

#[test]
fn every_preset_carries_tests_that_pass_including_a_compound_command() {
    for profile in presets() {
        let name = profile.name.clone();
        assert!(profile.tests.len() >= 5, "{name} has few tests");
        assert!(
            profile
                .tests
                .iter()
                .any(|t| t.command == "git status && rm -rf /" && t.expect != Decision::Allow),
            "{name} does not test the compound command"
        );
        let compiled = CompiledProfile::compile(profile).expect("compiles");
        for outcome in compiled.run_tests() {
            assert!(outcome.passed(), "{name}: {outcome}");
        }
        assert_eq!(compiled.check_tests(), Ok(()));
    }
}

#[test]
fn presets_lint_clean() {
    for profile in presets() {
        assert_eq!(lint(&profile), [], "{}", profile.name);
    }
}

#[test]
fn tests_render_and_load_back_unchanged() {
    let text = format!("{RULES}{PASSING}");
    let profile = parse_profile(&text, ProfileFormat::Toml, "ci").expect("parses");
    let shown = profile_to_toml(&profile);
    let back = parse_profile(&shown, ProfileFormat::Toml, "unused").expect("loads again");
    assert_eq!(back, profile, "{shown}");
    let mut nested = PolicyTest::new("Bash", Decision::Ask);
    nested.input = serde_json::json!({"a b": [1, 2.5, "x\"y"], "t": {"u": false}})
        .as_object()
        .cloned();
    let with_nested = PolicyProfile {
        name: "n".into(),
        tests: vec![nested],
        ..Default::default()
    };
    let shown = profile_to_toml(&with_nested);
    let back = parse_profile(&shown, ProfileFormat::Toml, "unused").expect("loads again");
    assert_eq!(back, with_nested, "{shown}");
}

/// The kinds and fields lint reports for a profile of `rules` (TOML `[[rules]]` blocks).
fn linted(rules: &str) -> Vec<(LintKind, String)> {
    let profile = parse_profile(rules, ProfileFormat::Toml, "lint").expect("parses");
    lint(&profile)
        .into_iter()
        .map(|w| (w.kind, w.field))
        .collect()
}

fn rule(tool: &str, decision: &str, extra: &str) -> String {
    format!("[[rules]]\nspecifier = {{ tool = \"{tool}\" }}\ndecision = \"{decision}\"\n{extra}\n")
}

#[test]
fn lint_reports_a_rule_shadowed_by_an_unconstrained_or_identical_earlier_rule() {
    let shadowed = |field: &str| vec![(LintKind::Shadowed, field.to_string())];
    // An unconstrained deny or ask decides every later rule's calls on that tool.
    let text = rule("Bash", "deny", "") + &rule("bash", "allow", "command_allow = [\"ls\"]");
    let got = linted(&text);
    assert!(
        got.contains(&(LintKind::Shadowed, "rules[1]".into())),
        "{got:?}"
    );
    // So does a tool glob over the later rule's tool.
    let text = rule("mcp__gh__*", "ask", "") + &rule("mcp__gh__issue", "deny", "");
    assert_eq!(linted(&text), shadowed("rules[1]"));
    // An identical earlier rule, whatever its constraints.
    let constrained = "path_allow = [\"src/**\"]\ncommand_deny = [\"rm\"]";
    let text = rule("Edit", "ask", constrained) + &rule("Edit", "deny", constrained);
    assert_eq!(linted(&text), shadowed("rules[1]"));
    // An unconstrained allow shadows a later allow ...
    let text = rule("Edit", "allow", "") + &rule("Edit", "allow", "path_allow = [\"a\"]");
    assert_eq!(linted(&text), shadowed("rules[1]"));

    // ... but not a later deny: allow rules are passed over for calls never allowed (a
    // path outside the workspace), which the deny still decides.
    let text = rule("Edit", "allow", "") + &rule("Edit", "deny", "");
    assert_eq!(linted(&text), []);
    let compiled =
        CompiledProfile::compile(parse_profile(&text, ProfileFormat::Toml, "x").expect("parses"))
            .expect("compiles");
    let outside = compiled.evaluate(&runplane::policy::ToolCall {
        tool: "Edit",
        path: "/etc/passwd",
        ..Default::default()
    });
    assert_eq!(outside.rule_index, Some(1));
    // Another tool, a constrained earlier rule, or different constraints: not shadowed.
    let text = rule("Read", "deny", "") + &rule("Edit", "deny", "");
    assert_eq!(linted(&text), []);
    let text = rule("Bash", "deny", "command_allow = [\"curl\"]") + &rule("Bash", "allow", "");
    assert_eq!(linted(&text), []);
    let text = rule("Edit", "deny", "path_allow = [\"a\"]")
        + &rule("Edit", "deny", "path_allow = [\"b\"]");
    assert_eq!(linted(&text), []);
    let text = rule("mcp__gh__*", "deny", "") + &rule("mcp__*", "deny", "");
    assert_eq!(linted(&text), []);
}

#[test]
fn lint_reports_globs_that_can_never_match() {
    let never = |field: &str| vec![(LintKind::NeverMatches, field.to_string())];
    for glob in [
        "src/", "./", "a//b", "./a/./b", "src/../x", "/a/../b", "src/**/",
    ] {
        let text = rule("Edit", "deny", &format!("path_allow = [\"{glob}\"]"));
        assert_eq!(linted(&text), never("rules[0].path_allow[0]"), "{glob}");
    }
    // The claim checked against the judge itself: a deny rule holding only such a glob
    // decides none of these paths, inside or outside a workspace.
    let paths = [
        "src", "src/a", "src/x", "a/b", "b", "x", ".", "/a/b", "/b", "../x", "~/x",
    ];
    for glob in [
        "src/", "./", "a//b", "a/./b", "src/../x", "/a/../b", "src/**/", "/b/",
    ] {
        let text = rule("Edit", "deny", &format!("path_allow = [\"{glob}\"]"));
        let profile = CompiledProfile::compile(
            parse_profile(&text, ProfileFormat::Toml, "x").expect("parses"),
        )
        .expect("compiles");
        for path in paths {
            for workspace_root in [None, Some("/w"), Some("/")] {
                let verdict = profile.evaluate(&runplane::policy::ToolCall {
                    tool: "Edit",
                    path,
                    workspace_root,
                    ..Default::default()
                });
                assert_eq!(verdict.rule_index, None, "{glob} matched {path}");
            }
        }
    }
    for glob in ["/etc/**", "~/.ssh/*", "../other/**"] {
        let text = rule(
            "Read",
            "allow",
            &format!("path_allow = [\"ok/**\", \"{glob}\"]"),
        );
        assert_eq!(linted(&text), never("rules[0].path_allow[1]"), "{glob}");
    }
    for glob in [
        "https://github.com",
        "github.com/org",
        "github.com:443",
        "a b.com",
    ] {
        let text = rule("WebFetch", "allow", &format!("domain_deny = [\"{glob}\"]"));
        assert_eq!(linted(&text), never("rules[0].domain_deny[0]"), "{glob}");
    }

    // Globs a normalised path or a host can match.
    for glob in [
        "src/**", "**/.env", ".", "/", "../**", "../../x", "/etc/**", "~/x", "*.rs",
    ] {
        let text = rule("Edit", "deny", &format!("path_allow = [\"{glob}\"]"));
        assert_eq!(linted(&text), [], "{glob}");
    }
    for glob in ["*.github.com", "github.com", "\\[::1\\]", "[[]::1]"] {
        let text = rule("WebFetch", "allow", &format!("domain_allow = [{glob:?}]"));
        assert_eq!(linted(&text), [], "{glob}");
    }
}

#[test]
fn lint_reports_a_known_tool_written_in_another_case() {
    let text = rule("bash", "deny", "") + &rule("READ", "allow", "");
    assert_eq!(
        linted(&text),
        [
            (LintKind::ToolCase, "rules[0].specifier.tool".to_string()),
            (LintKind::ToolCase, "rules[1].specifier.tool".to_string()),
        ]
    );
    let profile =
        parse_profile(&rule("webfetch", "ask", ""), ProfileFormat::Toml, "x").expect("parses");
    assert_eq!(
        lint(&profile)[0].message,
        "no agent sends \"webfetch\"; it matches \"WebFetch\" only because tool names are \
         compared ignoring case: write \"WebFetch\""
    );
    let text = rule("Bash", "ask", "")
        + &rule("apply_patch", "ask", "")
        + &rule("mcp__github__create_issue", "ask", "")
        + &rule("MyCustomTool", "ask", "");
    assert_eq!(linted(&text), []);
}

#[test]
fn a_load_error_for_a_test_is_its_own_variant() {
    let dir = dir_with(&[("ci.toml", &format!("{RULES}{FAILING}"))]);
    let err = ProfileRegistry::load(Some(dir.path()))
        .err()
        .expect("refused");
    match err {
        LoadError::TestFailed { path, failure } => {
            assert_eq!(path, dir.path().join("ci.toml"));
            assert_eq!(failure.profile, "ci");
            assert_eq!(failure.outcome.number, 2);
            assert_eq!(failure.outcome.verdict.decision, Decision::Allow);
        }
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn lint_reports_an_allow_rule_that_names_secrets() {
    let text = format!(
        "secrets = [\".env*\", \"keys/**\"]\n{}{}",
        rule(
            "Read",
            "allow",
            r#"path_allow = [".env.example", "src/**", "keys/**", "runplane-data/*.log", "*.env", "**"]"#
        ),
        rule("Edit", "deny", r#"path_allow = [".env.local"]"#),
    );
    let reaches = |k: usize| (LintKind::ReachesSecret, format!("rules[0].path_allow[{k}]"));
    assert_eq!(linted(&text), [reaches(0), reaches(2), reaches(3)]);
    let profile = parse_profile(&text, ProfileFormat::Toml, "lint").expect("parses");
    let messages: Vec<String> = lint(&profile).into_iter().map(|w| w.message).collect();
    assert_eq!(
        messages[0],
        "\".env.example\" names secrets: \".env.example\" matches secrets \".env*\"; a secret \
         is denied before any rule, so this rule never allows it"
    );
    assert!(
        messages[2].contains("secret in every profile"),
        "{}",
        messages[2]
    );
    // The claim checked against the judge: each witness is denied, not allowed.
    let compiled = CompiledProfile::compile(profile).expect("compiles");
    for path in [".env.example", "keys/x", "runplane-data/x.log"] {
        let verdict = compiled.evaluate(&runplane::policy::ToolCall {
            tool: "Read",
            path,
            workspace_root: Some("/w"),
            ..Default::default()
        });
        assert_eq!(verdict.decision, Decision::Deny, "{path}");
    }
}

#[test]
fn lint_reports_an_allow_rule_whose_commands_the_network_refuses() {
    let text = format!(
        "network = [\"github.com:443\"]\n{}{}",
        rule(
            "Bash",
            "allow",
            r#"command_allow = ["git status", "curl https://evil.io", "git clone https://github.com/x/y", "npm install"]"#
        ),
        rule(
            "Bash",
            "deny",
            r#"command_allow = ["wget https://evil.io"]"#
        ),
    );
    let field = |k: usize| {
        (
            LintKind::ReachesNetwork,
            format!("rules[0].command_allow[{k}]"),
        )
    };
    // `npm install` goes where the text does not show: it asks, which a rule cannot open
    // either, but nothing proves it connects outside the list.
    assert_eq!(linted(&text), [field(1)]);
    let profile = parse_profile(&text, ProfileFormat::Toml, "lint").expect("parses");
    assert_eq!(
        lint(&profile)[0].message,
        "\"curl https://evil.io\" connects to evil.io:443 (curl), which the profile's network \
         does not list; the network is judged before any rule, so this rule never allows it"
    );
    // The claim checked against the judge.
    let compiled = CompiledProfile::compile(profile).expect("compiles");
    let verdict = compiled.evaluate(&runplane::policy::ToolCall {
        tool: "Bash",
        command: "curl https://evil.io",
        ..Default::default()
    });
    assert_eq!(verdict.decision, Decision::Deny);
}
