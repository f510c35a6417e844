//! Other agents' permission settings as runplane profiles.
//!
//! An import is pure: it takes the settings as parsed JSON and returns the profile, the
//! test calls that prove it, and a report of everything that could not be carried over
//! exactly. It never widens: whatever has no exact runplane equivalent is dropped when it
//! allows, and becomes something stricter when it denies or asks — and says so.

mod claude;
mod claude_rule;
mod claude_sandbox;

use std::fmt::{self, Write as _};

pub use claude::{import_claude_code, ClaudeImport};

use super::compile::CompiledProfile;
use super::error::PolicyError;
use super::render::profile_to_toml;
use super::schema::PolicyProfile;
use crate::domain::Decision;
use crate::policy::judge::eval::{ToolCall, Verdict};

/// The strings of the list `key` of the settings object `map` (at `at`); an entry that
/// is not a string is reported and skipped, a list that is not an array is an error.
pub(crate) fn strings(
    map: &serde_json::Map<String, serde_json::Value>,
    at: &str,
    key: &str,
    notes: &mut Vec<ImportNote>,
) -> Result<Vec<String>, ImportError> {
    use serde_json::Value;
    let items = match map.get(key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(ImportError::Malformed {
                field: format!("{at}.{key}"),
                message: "expected an array of strings".into(),
            })
        }
    };
    Ok(items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| match item {
            Value::String(text) => Some(text.clone()),
            other => {
                notes.push(ImportNote {
                    rule: None,
                    message: format!("{at}.{key}[{i}] is not a string ({other}); skipped"),
                });
                None
            }
        })
        .collect())
}

/// The workspace root the generated tests place their paths under.
pub const TEST_WORKSPACE: &str = "/workspace";

/// One thing the report tells: what was approximated, dropped or made stricter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportNote {
    /// The rule as written in the settings, if the note is about one.
    pub rule: Option<String>,
    /// What happened to it.
    pub message: String,
}

impl fmt::Display for ImportNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.rule {
            Some(rule) => write!(f, "{rule}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// A call and the decision the imported profile must give it (a profile's `[[tests]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileTest {
    /// What the test is about (`deny Read(./.env)`).
    pub name: String,
    /// The tool called.
    pub tool: String,
    /// The command; empty: none.
    pub command: String,
    /// The file; empty: none.
    pub path: String,
    /// The URL; empty: none.
    pub url: String,
    /// The workspace root the path is placed under.
    pub workspace: Option<String>,
    /// The decision the profile must give.
    pub expect: Decision,
}

/// A call of one tool, before it becomes a test (the rule it came from names it later).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Probe {
    pub tool: String,
    pub command: String,
    pub path: String,
    pub url: String,
}

impl Probe {
    pub(crate) fn tool(tool: &str) -> Self {
        Probe {
            tool: tool.to_string(),
            ..Probe::default()
        }
    }
}

/// What an import produced.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The profile, valid and compiled once.
    pub profile: PolicyProfile,
    /// Test calls the profile passes, one per rule that has a concrete example.
    pub tests: Vec<ProfileTest>,
    /// The report: every rule not carried over exactly, and why.
    pub notes: Vec<ImportNote>,
}

/// Why settings cannot be imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The settings are not shaped as the agent writes them.
    #[error("{field}: {message}")]
    Malformed {
        /// Where (`permissions.allow`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The profile made from them is not valid (a bad `--name`).
    #[error("the imported profile is not valid: {0}")]
    Invalid(#[from] PolicyError),
    /// A generated test gets a less strict decision than the settings give: the
    /// translation would widen, so nothing is written.
    #[error("generated test {name:?} expects {expected} but the profile gives {actual}: {reason}")]
    TestFailed {
        /// The test.
        name: String,
        /// What the settings give.
        expected: Decision,
        /// What the profile gives.
        actual: Decision,
        /// The profile's reason.
        reason: String,
    },
}

/// Decides a test's call with `profile`, the way `policy check` does.
pub fn run_test(profile: &CompiledProfile, test: &ProfileTest) -> Verdict {
    profile.evaluate(&ToolCall {
        tool: &test.tool,
        command: &test.command,
        path: &test.path,
        url: &test.url,
        workspace_root: test.workspace.as_deref(),
        ..ToolCall::default()
    })
}

/// Keeps the tests `profile` passes. A test it answers more strictly than expected is
/// dropped with a note (runplane judges more than the agent did: the file a command
/// writes, a wrapper); one it answers less strictly fails the import.
pub(crate) fn verify(
    profile: &CompiledProfile,
    tests: Vec<ProfileTest>,
    notes: &mut Vec<ImportNote>,
) -> Result<Vec<ProfileTest>, ImportError> {
    let mut kept = Vec::with_capacity(tests.len());
    for test in tests {
        let verdict = run_test(profile, &test);
        if verdict.decision == test.expect {
            kept.push(test);
        } else if verdict.decision > test.expect {
            notes.push(ImportNote {
                rule: None,
                message: format!(
                    "{:?} gets {} here where the settings give {} ({}); no test for it",
                    test.name, verdict.decision, test.expect, verdict.reason
                ),
            });
        } else {
            return Err(ImportError::TestFailed {
                name: test.name,
                expected: test.expect,
                actual: verdict.decision,
                reason: verdict.reason,
            });
        }
    }
    Ok(kept)
}

/// The profile as a policy file: the report as `# ` comments on top, then the profile,
/// then (with `with_tests`) its `[[tests]]`.
pub fn render(imported: &Imported, header: &str, with_tests: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}", one_line(header));
    for note in &imported.notes {
        let _ = writeln!(out, "# - {}", one_line(&note.to_string()));
    }
    out.push('\n');
    out.push_str(&profile_to_toml(&imported.profile));
    if with_tests {
        for test in &imported.tests {
            out.push_str("\n[[tests]]\n");
            for (key, value) in [
                ("name", test.name.as_str()),
                ("tool", &test.tool),
                ("command", &test.command),
                ("path", &test.path),
                ("url", &test.url),
                ("workspace", test.workspace.as_deref().unwrap_or_default()),
                ("expect", test.expect.as_str()),
            ] {
                if !value.is_empty() || key == "tool" {
                    let _ = writeln!(out, "{key} = {}", toml::Value::String(value.into()));
                }
            }
        }
    }
    out
}

/// A comment line must stay one line: settings text may hold line breaks.
fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let shown: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            shown
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PermissionRule;

    fn test(expect: Decision) -> ProfileTest {
        ProfileTest {
            name: "t".into(),
            tool: "Bash".into(),
            command: "ls".into(),
            path: String::new(),
            url: String::new(),
            workspace: None,
            expect,
        }
    }

    #[test]
    fn a_looser_answer_fails_and_a_stricter_one_drops_the_test() {
        let profile = PolicyProfile {
            name: "p".into(),
            rules: vec![PermissionRule::new("Bash", Decision::Ask)],
            ..PolicyProfile::default()
        };
        let compiled = CompiledProfile::compile(profile).expect("compiles");
        let mut notes = Vec::new();
        assert!(matches!(
            verify(&compiled, vec![test(Decision::Deny)], &mut notes),
            Err(ImportError::TestFailed {
                actual: Decision::Ask,
                ..
            })
        ));
        let kept = verify(
            &compiled,
            vec![test(Decision::Allow), test(Decision::Ask)],
            &mut notes,
        )
        .expect("no widening");
        assert_eq!(kept, vec![test(Decision::Ask)]);
        assert_eq!(notes.len(), 1);
    }

    #[test]
    fn comments_stay_one_line() {
        assert_eq!(one_line("a\nb = 1"), "a\\nb = 1");
    }
}
