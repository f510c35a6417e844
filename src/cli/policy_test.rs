//! `runplane policy test`: runs the tests inside profiles and lints them.
//!
//! Loading a file refuses it at its first failing test; here the files are loaded with
//! their tests deferred (`ProfileRegistry::load_untested`) and every test is run, so one
//! report shows all that fail.

use std::io::Write;

use anyhow::Context as _;
use serde_json::json;

use super::escape::Escaped;
use super::policy::{lookup, source_text, PolicySource};
use crate::policy::{lint, LintWarning, ProfileRegistry, TestOutcome};

/// The profiles to test and how to report.
#[derive(Debug, Clone, clap::Args)]
pub struct TestArgs {
    /// Profiles to test; all of them (presets included) when none is named.
    #[arg(value_name = "PROFILE")]
    pub profiles: Vec<String>,
    /// Where custom profiles come from.
    #[command(flatten)]
    pub source: PolicySource,
    /// Print one JSON object instead of a report.
    #[arg(long)]
    pub json: bool,
    /// Lint warnings fail the run too (exit 1), like failing tests.
    #[arg(long)]
    pub strict: bool,
}

/// One profile's results.
struct ProfileReport {
    name: String,
    source: String,
    outcomes: Vec<TestOutcome>,
    lints: Vec<LintWarning>,
}

impl ProfileReport {
    fn failed(&self) -> usize {
        self.outcomes.iter().filter(|o| !o.passed()).count()
    }

    fn passed(&self) -> usize {
        self.outcomes.len() - self.failed()
    }
}

/// Counts over all profiles tested.
struct Totals {
    passed: usize,
    failed: usize,
    warnings: usize,
}

/// Runs the tests and lint and prints the report. `Ok(true)` when every test passed (and,
/// with `--strict`, nothing was linted); an unknown profile or an unreadable policy
/// directory is an error.
pub(super) fn run(args: &TestArgs, out: &mut dyn Write) -> anyhow::Result<bool> {
    let registry = ProfileRegistry::load_untested(args.source.policy_dir.as_deref())
        .context("cannot load the policy directory")?;
    let mut names: Vec<String> = Vec::new();
    for name in &args.profiles {
        lookup(&registry, name)?;
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    if names.is_empty() {
        names = registry.names();
    }
    let reports: Vec<ProfileReport> = names
        .into_iter()
        .filter_map(|name| {
            let profile = registry.get(&name)?;
            Some(ProfileReport {
                source: source_text(registry.source(&name)?),
                outcomes: profile.run_tests(),
                lints: lint(profile.profile()),
                name,
            })
        })
        .collect();
    let totals = Totals {
        passed: reports.iter().map(ProfileReport::passed).sum(),
        failed: reports.iter().map(ProfileReport::failed).sum(),
        warnings: reports.iter().map(|r| r.lints.len()).sum(),
    };
    let ok = totals.failed == 0 && (!args.strict || totals.warnings == 0);
    if args.json {
        write_json(&reports, &totals, ok, args.strict, out)?;
    } else {
        write_text(&reports, &totals, args.strict, out)?;
    }
    Ok(ok)
}

fn write_text(
    reports: &[ProfileReport],
    totals: &Totals,
    strict: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    // With --strict a warning fails the run, so it is called what it then is.
    let level = if strict { "error" } else { "warning" };
    for r in reports {
        let summary = match (r.outcomes.len(), r.failed()) {
            (0, _) => "no tests".to_string(),
            (n, 0) => format!("{n} passed"),
            (_, failed) => format!("{} passed, {failed} failed", r.passed()),
        };
        writeln!(
            out,
            "{} ({}): {summary}",
            Escaped(&r.name),
            Escaped(&r.source)
        )?;
        for outcome in r.outcomes.iter().filter(|o| !o.passed()) {
            // The test's name and the reason quote the file's text.
            writeln!(out, "  FAIL {}", Escaped(&outcome.to_string()))?;
        }
        for w in &r.lints {
            writeln!(out, "  {level}: {}: {}", w.field, Escaped(&w.message))?;
        }
    }
    writeln!(
        out,
        "{} profiles: {} tests passed, {} failed; lint {level}s: {}",
        reports.len(),
        totals.passed,
        totals.failed,
        totals.warnings
    )?;
    Ok(())
}

fn write_json(
    reports: &[ProfileReport],
    totals: &Totals,
    ok: bool,
    strict: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let profiles: Vec<_> = reports
        .iter()
        .map(|r| {
            let tests: Vec<_> = r.outcomes.iter().map(outcome_json).collect();
            json!({
                "name": r.name,
                "source": r.source,
                "passed": r.passed(),
                "failed": r.failed(),
                "tests": tests,
                "lints": r.lints,
            })
        })
        .collect();
    let body = json!({
        "ok": ok,
        "strict": strict,
        "passed": totals.passed,
        "failed": totals.failed,
        "warnings": totals.warnings,
        "profiles": profiles,
    });
    writeln!(out, "{body}")?;
    Ok(())
}

/// A test and its decision; `rule_index` is -1 for the mode default, as in `policy check`.
fn outcome_json(o: &TestOutcome) -> serde_json::Value {
    json!({
        "number": o.number,
        "name": o.test.name,
        "passed": o.passed(),
        "expect": o.test.expect,
        "rule": o.test.rule,
        "unmatched": o.test.unmatched,
        "decision": o.verdict.decision,
        "rule_index": o.verdict.rule_index.map_or(-1, |i| i as i64),
        "reason": o.verdict.reason,
        "part": o.verdict.part,
        "message": (!o.passed()).then(|| o.to_string()),
    })
}
