//! Running a profile's tests with the evaluation the server decides with.

use std::fmt;

use super::case::PolicyTest;
use super::compile::CompiledProfile;
use crate::policy::judge::eval::{ToolCall, Verdict};

/// One test and what the profile decided for its call.
#[derive(Debug, Clone, PartialEq)]
pub struct TestOutcome {
    /// The test's place in the profile, counted from 1.
    pub number: usize,
    /// The test as written.
    pub test: PolicyTest,
    /// What the profile decided.
    pub verdict: Verdict,
}

impl TestOutcome {
    /// Whether the decision, and the deciding rule where the test names one, are as
    /// expected.
    pub fn passed(&self) -> bool {
        let rule = self.verdict.rule_index;
        self.verdict.decision == self.test.expect
            && self.test.rule.is_none_or(|want| rule == Some(want))
            && self
                .test
                .unmatched
                .is_none_or(|want| want == rule.is_none())
    }

    /// `expected deny by rules[3]`: what the test asks for.
    pub fn expected(&self) -> String {
        let t = &self.test;
        let by = match (t.rule, t.unmatched) {
            (Some(rule), _) => format!(" by rules[{rule}]"),
            (None, Some(true)) => " by the mode default".to_string(),
            (None, Some(false)) => " by a rule".to_string(),
            (None, None) => String::new(),
        };
        format!("expected {}{by}", t.expect)
    }

    /// `decided allow by rules[1] (reason: …)`: what the profile did.
    pub fn decided(&self) -> String {
        let v = &self.verdict;
        let by = match v.rule_index {
            Some(rule) => format!("rules[{rule}]"),
            None => "the mode default".to_string(),
        };
        format!("decided {} by {by} (reason: {})", v.decision, v.reason)
    }
}

/// A test that failed, as the loader refuses a profile for it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("profile {profile:?}: {outcome}")]
pub struct TestFailure {
    /// The profile's name.
    pub profile: String,
    /// The failed test.
    pub outcome: TestOutcome,
}

impl fmt::Display for TestOutcome {
    /// `test 2 "rm is refused": expected deny, decided allow by rules[1] (reason: …)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}, {}",
            self.test.label(self.number),
            self.expected(),
            self.decided()
        )
    }
}

impl CompiledProfile {
    /// Decides every test's call, in order.
    pub fn run_tests(&self) -> Vec<TestOutcome> {
        self.profile
            .tests
            .iter()
            .enumerate()
            .map(|(i, test)| TestOutcome {
                number: i + 1,
                test: test.clone(),
                verdict: self.evaluate(&test_call(test, &input_text(test))),
            })
            .collect()
    }

    /// The first failing test, if any: what the loader refuses a profile for.
    pub fn check_tests(&self) -> Result<(), Box<TestFailure>> {
        match self.run_tests().into_iter().find(|o| !o.passed()) {
            Some(outcome) => Err(Box::new(TestFailure {
                profile: self.profile.name.clone(),
                outcome,
            })),
            None => Ok(()),
        }
    }
}

/// The test's input as the JSON text a worker sends; empty for none.
fn input_text(test: &PolicyTest) -> String {
    test.input
        .as_ref()
        .map(|fields| serde_json::Value::Object(fields.clone()).to_string())
        .unwrap_or_default()
}

fn test_call<'a>(test: &'a PolicyTest, input: &'a str) -> ToolCall<'a> {
    ToolCall {
        tool: &test.tool,
        command: &test.command,
        path: &test.path,
        resolved_path: "",
        paths: &[],
        url: &test.url,
        input,
        workspace_root: Some(test.workspace_root()),
    }
}
