//! The quality gate, for real: the test and lint commands run in the workspace, each with
//! a time limit; exit status 0 passes.

use std::path::Path;
use std::time::Duration;

use super::agent::Launcher;
use super::process::run_shell;

/// What runplane asked the gate to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateRequest {
    /// Run the tests.
    pub run_tests: bool,
    /// Run the linter.
    pub run_lint: bool,
    /// The profile's test command; empty: the worker's default.
    pub test_command: String,
    /// The profile's lint command; empty: the worker's default.
    pub lint_command: String,
}

/// The worker's own commands, for a profile that names none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateDefaults {
    /// `runplane work --test-command`.
    pub test_command: Option<String>,
    /// `runplane work --lint-command`.
    pub lint_command: Option<String>,
    /// How long each command may run.
    pub limit: Duration,
}

/// The gate's outcome, as `QualityGateResult` carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateOutcome {
    /// Whether the tests passed; `None` when they were not run.
    pub tests_passed: Option<bool>,
    /// Whether the linter passed; `None` when it was not run.
    pub lint_passed: Option<bool>,
    /// The tail of the tests' output.
    pub test_output: String,
    /// The tail of the linter's output.
    pub lint_output: String,
    /// Why the gate could not run; not empty fails the gate.
    pub error: String,
}

/// Runs the requested checks in `dir`, tests first, started by `launcher` (in the
/// agent's sandbox when it has one).
pub async fn run_gate(
    request: &GateRequest,
    defaults: &GateDefaults,
    dir: &Path,
    launcher: &Launcher,
) -> GateOutcome {
    let mut outcome = GateOutcome::default();
    let checks = [
        (
            "tests",
            request.run_tests,
            &request.test_command,
            &defaults.test_command,
        ),
        (
            "lint",
            request.run_lint,
            &request.lint_command,
            &defaults.lint_command,
        ),
    ];
    for (name, wanted, asked, default) in checks {
        if !wanted {
            continue;
        }
        let command = if asked.is_empty() {
            match default {
                Some(command) => command.as_str(),
                None => {
                    outcome.error = format!(
                        "the gate asks for {name} but neither the profile nor the worker \
                         names a command (runplane work --{}-command)",
                        if name == "tests" { "test" } else { "lint" }
                    );
                    return outcome;
                }
            }
        } else {
            asked.as_str()
        };
        let (passed, output) = match run_shell(command, dir, defaults.limit, launcher).await {
            Ok(finished) => (finished.success, finished.output),
            Err(err) => {
                outcome.error = err.to_string();
                return outcome;
            }
        };
        if name == "tests" {
            outcome.tests_passed = Some(passed);
            outcome.test_output = output;
        } else {
            outcome.lint_passed = Some(passed);
            outcome.lint_output = output;
        }
    }
    outcome
}
