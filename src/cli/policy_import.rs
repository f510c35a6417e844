//! `runplane policy import claude-code SETTINGS.json`: another agent's permission settings
//! as a runplane profile. The translation is `crate::policy::import`; this reads the file,
//! prints the report on stderr and writes the TOML.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;

use super::escape::escape;
use super::policy::visible_toml;
use crate::policy::import::{import_claude_code, render, ClaudeImport, ImportError};

/// Exit code when a generated test does not hold: the translation would widen, a bug
/// rather than bad input.
const EXIT_TEST_FAILED: u8 = 1;

/// Where the rules come from.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ImportSource {
    /// Claude Code's `permissions` (allow, ask, deny, defaultMode) from a settings.json.
    #[command(name = "claude-code")]
    ClaudeCode(ClaudeArgs),
}

/// `policy import claude-code`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClaudeArgs {
    /// The settings file (`.claude/settings.json`, `~/.claude/settings.json`, …).
    #[arg(value_name = "SETTINGS.json")]
    pub settings: PathBuf,
    /// The profile's name.
    #[arg(long, default_value = "claude-code")]
    pub name: String,
    /// Write the profile here instead of to stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Leave out the generated `[[tests]]` (they are checked either way).
    #[arg(long)]
    pub no_tests: bool,
}

/// The exit code for an import error: 1 when a generated test failed, else `None` (bad
/// input, the caller's code).
pub fn exit_code(err: &anyhow::Error) -> Option<u8> {
    matches!(
        err.downcast_ref::<ImportError>(),
        Some(ImportError::TestFailed { .. })
    )
    .then_some(EXIT_TEST_FAILED)
}

/// Imports, prints the report on stderr and the profile on `out` (or `--output`).
pub fn execute(source: ImportSource, out: &mut dyn Write) -> anyhow::Result<()> {
    let ImportSource::ClaudeCode(args) = source;
    let path = args.settings.display().to_string();
    let text =
        std::fs::read_to_string(&args.settings).with_context(|| format!("cannot read {path}"))?;
    let settings: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{path} is not valid JSON"))?;
    let description = format!("Imported from Claude Code settings {path}");
    let home = std::env::var("HOME").ok().filter(|h| h.starts_with('/'));
    let options = ClaudeImport {
        name: &args.name,
        description: &description,
        home: home.as_deref(),
    };
    let imported =
        import_claude_code(&settings, &options).with_context(|| format!("cannot import {path}"))?;
    for note in &imported.notes {
        // Rule text comes from the file.
        eprintln!("note: {}", escape(&note.to_string()));
    }
    let header = format!("runplane policy import claude-code {path}");
    let toml = render(&imported, &header, !args.no_tests);
    let toml = visible_toml(&toml);
    match &args.output {
        Some(file) => std::fs::write(file, toml.as_bytes())
            .with_context(|| format!("cannot write {}", file.display()))?,
        None => out.write_all(toml.as_bytes())?,
    }
    eprintln!(
        "imported {} rules, {} tests checked, {} notes",
        imported.profile.rules.len(),
        imported.tests.len(),
        imported.notes.len()
    );
    Ok(())
}
