//! A profile as a TOML file that loads back to the same profile (for `policy show`).

use std::fmt::Write as _;

use super::case::PolicyTest;
use super::containment::Network;
use super::schema::{PermissionRule, PolicyProfile};

/// The profile as TOML in the policy-file format, rules in order.
pub fn profile_to_toml(p: &PolicyProfile) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "name = {}", string(&p.name));
    let _ = writeln!(out, "description = {}", string(&p.description));
    let _ = writeln!(out, "mode = {}", string(p.mode.as_str()));
    // Left out when empty, so the versions of profiles written before these keys stay.
    if !p.secrets.is_empty() {
        let _ = writeln!(out, "secrets = {}", string_list(&p.secrets));
    }
    for (key, list) in [
        ("protected", &p.protected),
        ("writable", &p.writable),
        ("trusted_tools", &p.trusted_tools),
    ] {
        if !list.is_empty() {
            let _ = writeln!(out, "{key} = {}", string_list(list));
        }
    }
    match &p.network {
        Network::Unstated => {}
        Network::Nothing => out.push_str("network = \"none\"\n"),
        Network::Endpoints(list) => {
            let _ = writeln!(out, "network = {}", string_list(list));
        }
    }
    for rule in &p.rules {
        out.push('\n');
        write_rule(&mut out, rule);
    }
    let g = &p.quality_gate;
    let _ = writeln!(out, "\n[quality_gate]");
    let _ = writeln!(out, "require_tests_pass = {}", g.require_tests_pass);
    let _ = writeln!(out, "require_lint_pass = {}", g.require_lint_pass);
    let _ = writeln!(out, "rollback_on_gate_fail = {}", g.rollback_on_gate_fail);
    for (key, value) in [
        ("test_command", &g.test_command),
        ("lint_command", &g.lint_command),
    ] {
        if !value.is_empty() {
            let _ = writeln!(out, "{key} = {}", string(value));
        }
    }
    let t = &p.termination;
    let _ = writeln!(out, "\n[termination]");
    let _ = writeln!(out, "max_steps = {}", t.max_steps);
    let _ = writeln!(out, "timeout_seconds = {}", t.timeout_seconds);
    let _ = writeln!(out, "max_cost = {}", float(t.max_cost));
    let _ = writeln!(out, "stall_detection = {}", t.stall_detection);
    let _ = writeln!(out, "stall_threshold = {}", t.stall_threshold);
    let _ = writeln!(out, "ask_timeout_seconds = {}", t.ask_timeout_seconds);
    if !p.sandbox.is_default() {
        let _ = writeln!(out, "\n[sandbox]");
        let _ = writeln!(out, "required = {}", p.sandbox.required);
        if !p.sandbox.egress.is_empty() {
            let _ = writeln!(out, "egress = {}", string_list(&p.sandbox.egress));
        }
    }
    for test in &p.tests {
        out.push('\n');
        write_test(&mut out, test);
    }
    out
}

fn write_test(out: &mut String, test: &PolicyTest) {
    let _ = writeln!(out, "[[tests]]");
    if let Some(name) = &test.name {
        let _ = writeln!(out, "name = {}", string(name));
    }
    let _ = writeln!(out, "tool = {}", string(&test.tool));
    for (key, text) in [
        ("command", &test.command),
        ("path", &test.path),
        ("url", &test.url),
    ] {
        if !text.is_empty() {
            let _ = writeln!(out, "{key} = {}", string(text));
        }
    }
    if let Some(input) = &test.input {
        let _ = writeln!(out, "input = {}", table(input));
    }
    if let Some(root) = &test.workspace {
        let _ = writeln!(out, "workspace = {}", string(root));
    }
    let _ = writeln!(out, "expect = {}", string(test.expect.as_str()));
    if let Some(rule) = test.rule {
        let _ = writeln!(out, "rule = {rule}");
    }
    if let Some(unmatched) = test.unmatched {
        let _ = writeln!(out, "unmatched = {unmatched}");
    }
}

/// One rule as the policy file writes it: a `[[rules]]` table, one line per key.
pub fn rule_to_toml(rule: &PermissionRule) -> String {
    let mut out = String::new();
    write_rule(&mut out, rule);
    out
}

fn write_rule(out: &mut String, rule: &PermissionRule) {
    let s = &rule.specifier;
    let _ = writeln!(out, "[[rules]]");
    match &s.sub_pattern {
        Some(p) => {
            let _ = writeln!(
                out,
                "specifier = {{ tool = {}, sub_pattern = {} }}",
                string(&s.tool),
                string(p)
            );
        }
        None => {
            let _ = writeln!(out, "specifier = {{ tool = {} }}", string(&s.tool));
        }
    }
    let _ = writeln!(out, "decision = {}", string(rule.decision.as_str()));
    for (key, list) in [
        ("path_allow", &rule.path_allow),
        ("path_deny", &rule.path_deny),
        ("command_allow", &rule.command_allow),
        ("command_deny", &rule.command_deny),
        ("domain_allow", &rule.domain_allow),
        ("domain_deny", &rule.domain_deny),
    ] {
        if !list.is_empty() {
            let _ = writeln!(out, "{key} = {}", string_list(list));
        }
    }
    if !rule.input_match.is_empty() {
        let fields: Vec<String> = rule
            .input_match
            .iter()
            .map(|(key, value)| format!("{} = {}", string(key), scalar(value)))
            .collect();
        let _ = writeln!(out, "input_match = {{ {} }}", fields.join(", "));
    }
}

/// A JSON value in TOML: the scalars `input_match` holds, and the arrays and tables of a
/// test's input. Validation refuses null in both, which TOML cannot write.
fn scalar(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => string(text),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) => float(f),
            (None, None) => n.to_string(),
        },
        serde_json::Value::Array(items) => {
            let items: Vec<String> = items.iter().map(scalar).collect();
            format!("[{}]", items.join(", "))
        }
        serde_json::Value::Object(fields) => table(fields),
        other => other.to_string(),
    }
}

/// A TOML inline table; keys are always quoted, so any key reads back as itself.
fn table(fields: &serde_json::Map<String, serde_json::Value>) -> String {
    if fields.is_empty() {
        return "{}".to_string();
    }
    // Sorted: a JSON object's key order means nothing, and the canonical form (and so a
    // profile's hash) must not depend on it.
    let mut fields: Vec<(&String, &serde_json::Value)> = fields.iter().collect();
    fields.sort_by_key(|(key, _)| *key);
    let fields: Vec<String> = fields
        .iter()
        .map(|(key, value)| format!("{} = {}", string(key), scalar(value)))
        .collect();
    format!("{{ {} }}", fields.join(", "))
}

/// A TOML basic string.
/// A TOML array of strings.
fn string_list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| string(i)).collect();
    format!("[{}]", items.join(", "))
}

fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML float (always with a fraction or exponent, so it reads back as a float).
fn float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    format!("{f:?}")
}
