//! A test inside a profile (`[[tests]]`): one call and the decision the profile's author
//! expects for it. Checked whenever the profile loads (see `check`), so a profile that
//! stops saying what its author meant does not load.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::PolicyError;
use crate::domain::Decision;

/// The workspace root a test's call is judged under when the test names none. Fixed, so
/// that a test decides the same on every machine.
pub const DEFAULT_TEST_WORKSPACE: &str = "/workspace";

/// One expected decision. docs/POLICY.md ("Tests inside a profile") describes the fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyTest {
    /// What reports call the test; `None`: `test N`, counted from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The tool of the call.
    pub tool: String,
    /// The call's command (a shell command line for `Bash`); empty: none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// The call's path; empty: none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The call's URL; empty: none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// The call's input, for rules' `input_match`; `None`: no input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Map<String, Value>>,
    /// The workspace root (absolute); `None`: [`DEFAULT_TEST_WORKSPACE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The decision the call must get.
    pub expect: Decision,
    /// The rule that must decide, numbered from 0 as `policy check` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<usize>,
    /// `true`: no rule may decide (the mode default does); `false`: some rule must.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmatched: Option<bool>,
}

impl PolicyTest {
    /// A test of a call to `tool` with nothing else set.
    pub fn new(tool: &str, expect: Decision) -> Self {
        Self {
            name: None,
            tool: tool.to_string(),
            command: String::new(),
            path: String::new(),
            url: String::new(),
            input: None,
            workspace: None,
            expect,
            rule: None,
            unmatched: None,
        }
    }

    /// The workspace root the call is judged under.
    pub fn workspace_root(&self) -> &str {
        self.workspace.as_deref().unwrap_or(DEFAULT_TEST_WORKSPACE)
    }

    /// How reports name the test: `test 2 "rm is refused"`, or `test 2` without a name.
    /// `number` counts from 1.
    pub fn label(&self, number: usize) -> String {
        match &self.name {
            Some(name) => format!("test {number} {name:?}"),
            None => format!("test {number}"),
        }
    }
}

/// Checks every test's fields; `rules` is how many rules the profile has.
pub(crate) fn validate_tests(tests: &[PolicyTest], rules: usize) -> Result<(), PolicyError> {
    for (i, test) in tests.iter().enumerate() {
        validate_test(i, test, rules)?;
    }
    Ok(())
}

fn validate_test(i: usize, test: &PolicyTest, rules: usize) -> Result<(), PolicyError> {
    let at = |field: &str| format!("tests[{i}].{field}");
    if test.name.as_deref() == Some("") {
        return Err(PolicyError::new(
            at("name"),
            "must not be empty (leave it out for \"test N\")",
        ));
    }
    if test.tool.is_empty() || test.tool.chars().any(char::is_whitespace) {
        return Err(PolicyError::new(
            at("tool"),
            format!("{:?} must be a tool name without whitespace", test.tool),
        ));
    }
    if let Some(root) = &test.workspace {
        // A relative root would be taken from wherever the profile is loaded.
        if !root.starts_with('/') {
            return Err(PolicyError::new(
                at("workspace"),
                format!("{root:?} must be an absolute path"),
            ));
        }
    }
    if let Some(input) = &test.input {
        // TOML has no null, and `policy show` must print what loads back the same.
        if input.values().any(holds_null) {
            return Err(PolicyError::new(
                at("input"),
                "must not hold null (leave the field out)",
            ));
        }
    }
    if let Some(rule) = test.rule {
        if rule >= rules {
            return Err(PolicyError::new(
                at("rule"),
                format!(
                    "there is no rules[{rule}] (the profile has {rules} rules, counted from 0)"
                ),
            ));
        }
        if test.unmatched == Some(true) {
            return Err(PolicyError::new(
                at("unmatched"),
                "cannot be true together with rule (a rule deciding is a match)",
            ));
        }
    }
    Ok(())
}

fn holds_null(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.iter().any(holds_null),
        Value::Object(fields) => fields.values().any(holds_null),
        Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
    }
}
