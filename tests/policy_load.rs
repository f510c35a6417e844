//! Loading a policy directory: real files in a temporary directory, exact errors.

use runplane::domain::Decision;
use runplane::policy::{
    parse_profile, presets, profile_to_toml, LoadError, PermissionRule, PolicyMode, PolicyProfile,
    ProfileFormat, ProfileRegistry, ProfileSource, ToolCall,
};
use std::path::Path;

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

const CUSTOM: &str = r#"
name = "ci"
description = "CI runs"
mode = "plan"

[[rules]]
specifier = { tool = "Read" }
decision = "allow"

[[rules]]
specifier = { tool = "Bash", sub_pattern = "cargo *" }
decision = "allow"
command_deny = ["cargo publish"]

[termination]
max_steps = 10
"#;

#[test]
fn loads_a_custom_profile_with_defaults() {
    let dir = dir_with(&[
        ("ci.toml", CUSTOM),
        ("README.md", "not a profile"),
        (".hidden.toml", "junk"),
    ]);
    let registry = ProfileRegistry::load(Some(dir.path())).expect("loads");
    assert_eq!(registry.names().len(), 5);
    let ci = registry.get("ci").expect("ci");
    let p = ci.profile();
    assert_eq!(p.mode, PolicyMode::Plan);
    assert_eq!(p.termination.max_steps, 10);
    assert_eq!(p.termination.ask_timeout_seconds, 300);
    assert!(!p.quality_gate.is_enabled());
    assert_eq!(
        registry.source("ci"),
        Some(&ProfileSource::File(dir.path().join("ci.toml")))
    );
    let decide = |command| {
        ci.evaluate(&ToolCall {
            tool: "Bash",
            command,
            ..Default::default()
        })
        .decision
    };
    assert_eq!(decide("cargo build --release"), Decision::Allow);
    assert_eq!(decide("cargo publish"), Decision::Deny);
    assert_eq!(decide("cargo test && make"), Decision::Deny);
}

#[test]
fn custom_profile_overrides_a_preset() {
    let text = "name = \"plan-readonly\"\nmode = \"delegate\"\n";
    let dir = dir_with(&[("mine.toml", text)]);
    let registry = ProfileRegistry::load(Some(dir.path())).expect("loads");
    assert_eq!(registry.names().len(), 4);
    let p = registry.get("plan-readonly").expect("present");
    assert_eq!(p.profile().mode, PolicyMode::Delegate);
    assert!(p.profile().rules.is_empty());
    assert!(matches!(
        registry.source("plan-readonly"),
        Some(ProfileSource::File(_))
    ));
    let verdict = p.evaluate(&ToolCall {
        tool: "Edit",
        path: "a",
        ..Default::default()
    });
    assert_eq!(verdict.decision, Decision::Allow);
}

#[test]
fn yaml_uses_the_same_schema_and_the_name_defaults_to_the_stem() {
    let yaml = "mode: acceptEdits\nrules:\n  - specifier: {tool: Bash}\n    decision: deny\n    command_allow: [curl]\n    path_deny:\n";
    let dir = dir_with(&[("net.yaml", yaml)]);
    let registry = ProfileRegistry::load(Some(dir.path())).expect("loads");
    let p = registry.get("net").expect("named after the file");
    assert_eq!(p.profile().rules.len(), 1);
    assert_eq!(p.profile().rules[0].command_allow, ["curl"]);
}

#[test]
fn duplicate_name_across_two_files() {
    let err = load_error(&[("a.toml", "name = \"x\""), ("b.yml", "name: x")]);
    assert_eq!(
        err,
        "DIR/b.yml: profile \"x\" is already defined in DIR/a.toml"
    );
}

#[test]
fn unknown_fields_are_named() {
    let rule = "name = \"x\"\n[[rules]]\nspecifier = { tool = \"Read\" }\ndecision = \"allow\"\n\n[[rules]]\nspecifier = { tool = \"Edit\" }\ndecision = \"allow\"\npathallow = [\"a\"]\n";
    assert_eq!(
        load_error(&[("x.toml", rule)]),
        "DIR/x.toml: rules[1].pathallow: unknown field (expected one of specifier, decision, \
         path_allow, path_deny, command_allow, command_deny, domain_allow, domain_deny, input_match)"
    );
    assert_eq!(
        load_error(&[("x.toml", "name = \"x\"\nmodes = \"plan\"")]),
        "DIR/x.toml: modes: unknown field (expected one of name, description, mode, rules, \
         quality_gate, termination, secrets, protected, writable, trusted_tools, network, sandbox, tests)"
    );
    let spec =
        "[[rules]]\nspecifier = { tool = \"Bash\", pattern = \"x\" }\ndecision = \"allow\"\n";
    assert_eq!(
        load_error(&[("x.toml", spec)]),
        "DIR/x.toml: rules[0].specifier.pattern: unknown field (expected one of tool, sub_pattern)"
    );
    let err = load_error(&[("x.toml", "[termination]\nmax_step = 3\n")]);
    assert!(
        err.starts_with(
            "DIR/x.toml: termination.max_step: unknown field `max_step`, expected one of"
        ),
        "{err}"
    );
}

#[test]
fn bad_decision_mode_and_types_are_named() {
    let rule = "[[rules]]\nspecifier = { tool = \"Bash\" }\ndecision = \"maybe\"\n";
    assert_eq!(
        load_error(&[("x.toml", rule)]),
        "DIR/x.toml: rules[0].decision: unknown decision \"maybe\" (expected allow, deny or ask)"
    );
    assert_eq!(
        load_error(&[("x.toml", "mode = \"yolo\"")]),
        "DIR/x.toml: mode: unknown mode \"yolo\" (expected default, acceptEdits, plan or delegate)"
    );
    let rule = "[[rules]]\nspecifier = { tool = \"Edit\" }\ndecision = \"allow\"\npath_allow = \"src/**\"\n";
    assert_eq!(
        load_error(&[("x.toml", rule)]),
        "DIR/x.toml: rules[0].path_allow: invalid type: string \"src/**\", expected a sequence"
    );
    assert_eq!(
        load_error(&[("x.toml", "[[rules]]\ndecision = \"allow\"\n")]),
        "DIR/x.toml: rules[0].specifier: missing"
    );
    assert_eq!(
        load_error(&[("x.toml", "[quality_gate]\nrequire_tests_pass = \"yes\"\n")]),
        "DIR/x.toml: quality_gate.require_tests_pass: invalid type: string \"yes\", expected a boolean"
    );
}

#[test]
fn bad_glob_is_named() {
    let rule = "[[rules]]\nspecifier = { tool = \"Read\" }\ndecision = \"allow\"\n\n[[rules]]\nspecifier = { tool = \"Edit\" }\ndecision = \"deny\"\npath_deny = [\"ok/**\", \"[\"]\n";
    assert_eq!(
        load_error(&[("x.toml", rule)]),
        "DIR/x.toml: rules[1].path_deny[1]: invalid glob \"[\": unclosed character class; missing ']'"
    );
    let rule =
        "[[rules]]\nspecifier = { tool = \"Bash\", sub_pattern = \"a{b\" }\ndecision = \"deny\"\n";
    assert_eq!(
        load_error(&[("x.toml", rule)]),
        "DIR/x.toml: rules[0].specifier.sub_pattern: invalid glob \"a{b\": unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)"
    );
}

#[test]
fn validation_errors_are_named() {
    let cases = [
        ("name = \"\"", "DIR/x.toml: name: must not be empty"),
        ("name = \"a b\"", "DIR/x.toml: name: \"a b\" may only contain ASCII letters, digits, '-', '_' and '.'"),
        ("[[rules]]\nspecifier = { tool = \"\" }\ndecision = \"ask\"", "DIR/x.toml: rules[0].specifier.tool: must not be empty"),
        ("[[rules]]\nspecifier = { tool = \"Bash\" }\ndecision = \"ask\"\ncommand_deny = [\" \"]", "DIR/x.toml: rules[0].command_deny[0]: must not be empty"),
        ("[termination]\nmax_steps = -1", "DIR/x.toml: termination.max_steps: must not be negative (0 means no limit)"),
        ("[termination]\nmax_cost = nan", "DIR/x.toml: termination.max_cost: has no value (numbers must be finite)"),
        ("[termination]\nask_timeout_seconds = -5", "DIR/x.toml: termination.ask_timeout_seconds: must not be negative (0 means no limit)"),
    ];
    for (text, want) in cases {
        assert_eq!(load_error(&[("x.toml", text)]), want, "{text}");
    }
}

#[test]
fn syntax_and_io_errors_name_the_file() {
    let err = load_error(&[("x.toml", "name = ")]);
    assert!(
        err.starts_with("DIR/x.toml: TOML parse error at line 1"),
        "{err}"
    );
    let err = load_error(&[("x.yaml", "rules: [")]);
    assert!(err.starts_with("DIR/x.yaml: "), "{err}");
    let missing = Path::new("/nonexistent/policies");
    let err = ProfileRegistry::load(Some(missing))
        .err()
        .expect("missing dir fails");
    assert!(matches!(err, LoadError::Io { .. }));
    assert!(
        err.to_string().starts_with("/nonexistent/policies: "),
        "{err}"
    );
}

#[test]
fn shown_profiles_load_again_unchanged() {
    let mut tricky = PolicyProfile {
        name: "tricky".into(),
        description: "quotes \" and \\ and\nnewlines\t\u{1}".into(),
        ..Default::default()
    };
    tricky.rules.push(PermissionRule {
        command_deny: vec!["rm -rf".into(), "git push --force".into()],
        path_deny: vec!["**/*.pem".into()],
        ..PermissionRule::new("Bash", Decision::Ask)
    });
    tricky.rules[0].specifier.sub_pattern = Some("git *".into());
    tricky.quality_gate.test_command = "cargo test --all".into();
    tricky.termination.max_cost = 0.1;
    for profile in presets().into_iter().chain([tricky]) {
        let text = profile_to_toml(&profile);
        let back = parse_profile(&text, ProfileFormat::Toml, "unused").expect("loads again");
        assert_eq!(back, profile, "{text}");
    }
}

#[test]
fn validate_refuses_non_finite_and_negative_limits() {
    let mut p = PolicyProfile {
        name: "x".into(),
        ..Default::default()
    };
    p.termination.max_cost = f64::INFINITY;
    let err = p.validate().expect_err("infinite cost");
    assert_eq!(
        err.to_string(),
        "termination.max_cost: must be a finite number, not inf"
    );
    p.termination.max_cost = -1.0;
    let err = p.validate().expect_err("negative cost");
    assert_eq!(
        err.to_string(),
        "termination.max_cost: must not be negative (0 means no limit)"
    );
}
