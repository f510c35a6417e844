//! `runplane policy …`: inspect profiles and try calls against them offline, with the
//! same code the server decides with.
//!
//! Profile files are not trusted to be plain: descriptions, paths and patterns are shown
//! escaped (see [`super::escape`]); `--json` prints them exact.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context as _};

use super::escape::{escape, needs_escape, Escaped};
use crate::policy::{profile_to_toml, ProfileRegistry, ProfileSource, ToolCall};

/// Exit code for an unknown profile, a bad policy directory or bad input: scripts can tell
/// it from a decision (which always exits 0).
const EXIT_BAD_INPUT: u8 = 2;

/// The `policy` commands.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// List the profiles (the presets and those of the policy directory), each with the
    /// first 12 digits of its version hash (all 64 with --json).
    List {
        /// Where custom profiles come from.
        #[command(flatten)]
        source: PolicySource,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a profile as TOML, in the policy-file format (it loads again as is), after a
    /// `# version <hash>` comment line.
    Show {
        /// The profile name.
        name: String,
        /// Where custom profiles come from.
        #[command(flatten)]
        source: PolicySource,
    },
    /// Decide one tool call as the server would, and say why.
    Check(CheckArgs),
    /// Run the tests inside profiles (`[[tests]]`) and lint them: exit 0 when all pass,
    /// 1 when a test fails (or, with --strict, a lint warns).
    Test(super::policy_test::TestArgs),
    /// Turn another agent's permission settings into a profile (TOML), with a report of
    /// what could not be carried over exactly.
    #[command(subcommand)]
    Import(super::policy_import::ImportSource),
    /// Judge the recorded tool calls of past runs again under a candidate profile and
    /// print what would change: exit 0 when nothing would, 3 when something would.
    ///
    /// With --data-dir the data directory's SQLite database is read (read-only, beside a
    /// server using it); without it the server named by --server is asked
    /// (`PolicyService.Replay`, operator role). Exits 2 for a bad profile or option, 1
    /// when the replay fails. docs/POLICY.md ("Replay") has the details.
    Replay(Box<super::policy_replay::ReplayArgs>),
    /// Print the kernel sandbox plan a profile gives an agent in a workspace: what it may
    /// read, write and reach (docs/SANDBOX.md).
    Sandbox(super::policy_sandbox::SandboxArgs),
    /// Print, side by side, what the judge refuses and what the kernel sandbox permits
    /// for a profile — both derived from its secrets, protected places, the workspace and
    /// its network — and probe each against the other: exit 0 when they agree, 1 when
    /// one disagrees.
    Explain(super::policy_sandbox::SandboxArgs),
    /// Make a running server read its policy directory again (`PolicyService.Reload`,
    /// admin role): new runs get the new versions, running runs keep theirs. Prints the
    /// profiles whose version changed; a bad file is refused, naming it, and the server
    /// keeps what it had (exit 1).
    Reload {
        /// Where the server is and how to print.
        #[command(flatten)]
        client: super::ClientArgs,
    },
}

/// The policy directory option shared by the `policy` commands.
#[derive(Debug, Clone, clap::Args)]
pub struct PolicySource {
    /// Directory of `.toml`/`.yaml` profiles, loaded over the presets.
    #[arg(long, value_name = "DIR", env = "RUNPLANE_POLICY_DIR")]
    pub policy_dir: Option<PathBuf>,
}

/// The call to check.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// The profile to evaluate with.
    #[arg(long, value_name = "NAME")]
    pub profile: String,
    /// The tool (`Bash`, `Read`, `Edit`, …).
    #[arg(long)]
    pub tool: String,
    /// The command (a shell command line for Bash).
    #[arg(long, default_value = "")]
    pub command: String,
    /// The file the tool works on.
    #[arg(long, default_value = "")]
    pub path: String,
    /// The path as the worker's filesystem resolves it (symlinks followed); judged with
    /// `--path`, the stricter decision wins. Left out, with a `--path` and a `--workspace`
    /// that exists on this machine, it is resolved here.
    #[arg(long, value_name = "PATH", default_value = "")]
    pub resolved_path: String,
    /// A further file the call touches (repeatable), judged like `--path`.
    #[arg(long = "also-path", value_name = "PATH")]
    pub paths: Vec<String>,
    /// The URL a web tool fetches, judged by its host.
    #[arg(long, default_value = "")]
    pub url: String,
    /// The tool's whole input as JSON, for rules' `input_match`.
    #[arg(long, value_name = "JSON", default_value = "")]
    pub input: String,
    /// The run's workspace root; relative paths are taken from the current directory.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Where custom profiles come from.
    #[command(flatten)]
    pub source: PolicySource,
    /// Print `{"decision", "reason", "rule_index", "part", "profile", "resolved_path"}` as
    /// JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `policy` command. A decision, whatever it is, exits 0; failing tests (of a
/// profile, or generated by an import) exit 1; an unknown profile or bad input exits 2
/// with a message on stderr. `replay` has codes of its own (see `policy_replay`).
pub fn run(cmd: PolicyCommand) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match execute(cmd, &mut stdout) {
        Ok(code) => code,
        Err(err) => {
            // Load errors quote the files' text.
            eprintln!("error: {}", escape(&format!("{err:#}")));
            ExitCode::from(super::policy_import::exit_code(&err).unwrap_or(EXIT_BAD_INPUT))
        }
    }
}

/// Runs one command and tells its exit code: failure when `policy test` found one.
fn execute(cmd: PolicyCommand, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    match cmd {
        PolicyCommand::List { source, json } => list(&load(&source)?, json, out)?,
        PolicyCommand::Show { name, source } => {
            let registry = load(&source)?;
            let profile = lookup(&registry, &name)?;
            writeln!(out, "# version {}", profile.hash())?;
            write!(out, "{}", visible_toml(&profile_to_toml(profile.profile())))?;
        }
        PolicyCommand::Check(args) => check(args, out)?,
        PolicyCommand::Test(args) => return Ok(exit(super::policy_test::run(&args, out)?)),
        PolicyCommand::Import(source) => super::policy_import::execute(source, out)?,
        PolicyCommand::Sandbox(args) => super::policy_sandbox::run(&args, out)?,
        PolicyCommand::Explain(args) => {
            return Ok(exit(super::policy_sandbox::explain(&args, out)?))
        }
        // Its errors are its own to report: they have exit codes of their own.
        PolicyCommand::Replay(args) => return Ok(super::policy_replay::run(*args, out)),
        PolicyCommand::Reload { client } => return Ok(super::policy_reload::run(&client, out)),
    }
    Ok(ExitCode::SUCCESS)
}

/// 0 when the command found nothing wrong, 1 when it did.
fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn load(source: &PolicySource) -> anyhow::Result<ProfileRegistry> {
    ProfileRegistry::load(source.policy_dir.as_deref()).context("cannot load the policy directory")
}

/// The profile of that name, or an error listing the known names.
pub(super) fn lookup(
    registry: &ProfileRegistry,
    name: &str,
) -> anyhow::Result<std::sync::Arc<crate::policy::CompiledProfile>> {
    registry.get(name).ok_or_else(|| {
        anyhow!(
            "unknown profile {name:?} (known: {})",
            registry.names().join(", ")
        )
    })
}

/// `preset`, or the file a profile came from.
pub(super) fn source_text(source: &ProfileSource) -> String {
    match source {
        ProfileSource::Preset => "preset".to_string(),
        ProfileSource::File(path) => path.display().to_string(),
    }
}

fn list(registry: &ProfileRegistry, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let rows: Vec<_> = registry
        .names()
        .into_iter()
        .filter_map(|name| {
            let profile = registry.get(&name)?;
            let source = source_text(registry.source(&name)?);
            Some((name, profile, source))
        })
        .collect();
    if json {
        let items: Vec<_> = rows
            .iter()
            .map(|(name, profile, source)| {
                serde_json::json!({
                    "name": name,
                    "mode": profile.profile().mode,
                    "description": profile.profile().description,
                    "source": source,
                    "hash": profile.hash(),
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(items))?;
        return Ok(());
    }
    // `Escaped` pads by the characters shown, so the width is counted the same way.
    let width = rows
        .iter()
        .map(|(n, _, _)| escape(n).chars().count())
        .max()
        .unwrap_or(0);
    for (name, profile, source) in &rows {
        let p = profile.profile();
        writeln!(
            out,
            "{:width$}  {}  {:<11}  {}  {}",
            Escaped(name),
            short_hash(profile.hash()),
            p.mode.as_str(),
            Escaped(source),
            Escaped(&p.description)
        )?;
    }
    Ok(())
}

/// The first 12 hex digits of a version hash: enough to tell versions apart by eye.
pub(super) fn short_hash(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

fn check(args: CheckArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if args.tool.trim().is_empty() {
        bail!("--tool must not be empty");
    }
    let registry = load(&args.source)?;
    let profile = lookup(&registry, &args.profile)?;
    let workspace = args.workspace.as_deref().map(absolute).transpose()?;
    let resolved_path = match &workspace {
        Some(root) if args.resolved_path.is_empty() && !args.path.is_empty() => {
            resolve_here(Path::new(root), &args.path).unwrap_or_default()
        }
        _ => args.resolved_path.clone(),
    };
    let call = ToolCall {
        tool: &args.tool,
        command: &args.command,
        path: &args.path,
        resolved_path: &resolved_path,
        paths: &args.paths,
        url: &args.url,
        input: &args.input,
        workspace_root: workspace.as_deref(),
    };
    let verdict = profile.evaluate(&call);
    if args.json {
        let rule_index = verdict.rule_index.map_or(-1, |i| i as i64);
        let body = serde_json::json!({
            "decision": verdict.decision,
            "reason": verdict.reason,
            "rule_index": rule_index,
            "part": verdict.part,
            "profile": args.profile,
            "resolved_path": resolved_path,
        });
        writeln!(out, "{body}")?;
    } else {
        // The reason quotes the command or path it judged.
        writeln!(out, "{}: {}", verdict.decision, Escaped(&verdict.reason))?;
    }
    Ok(())
}

/// `policy show` prints TOML that must load again as is, where the CLI's `\u{202e}` form
/// would not parse. The renderer writes every control character as a TOML escape and all
/// profile text as basic strings, which leaves the invisible format characters raw; they
/// are written here as TOML's own `\u202E` / `\U000E0041`, as visible, and loading back to
/// the same profile. Line breaks are the document's own and stay.
pub(super) fn visible_toml(toml: &str) -> Cow<'_, str> {
    let hidden = |c: char| c != '\n' && needs_escape(c);
    if !toml.contains(hidden) {
        return Cow::Borrowed(toml);
    }
    let mut out = String::with_capacity(toml.len() + 16);
    for c in toml.chars() {
        if !hidden(c) {
            out.push(c);
            continue;
        }
        // Writing into a String cannot fail.
        let _ = match u16::try_from(u32::from(c)) {
            Ok(unit) => write!(out, "\\u{unit:04X}"),
            Err(_) => write!(out, "\\U{:08X}", u32::from(c)),
        };
    }
    Cow::Owned(out)
}

/// The workspace as the absolute path the policy compares with (lexically; the
/// directory need not exist on this machine).
fn absolute(dir: &Path) -> anyhow::Result<String> {
    let path = std::path::absolute(dir)
        .with_context(|| format!("--workspace: cannot make {} absolute", dir.display()))?;
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("--workspace: {} is not valid UTF-8", path.display()))
}

/// `path` as this machine's filesystem resolves it under the workspace `root` (absolute),
/// as a worker would send it: symlinks followed. A file that does not exist yet (a write)
/// is resolved through its parent directory. `None` when the workspace does not exist
/// here, or neither the file nor its parent does.
///
/// A resolved path inside the real workspace is given under `root` as written, so that a
/// workspace reached through a symlink itself (`/tmp` -> `/private/tmp` on macOS) does not
/// put every file outside it.
fn resolve_here(root: &Path, path: &str) -> Option<String> {
    let real_root = std::fs::canonicalize(root).ok()?;
    let real = real_path(root.join(path))?;
    let shown = match real.strip_prefix(&real_root) {
        Ok(rest) => root.join(rest),
        Err(_) => real,
    };
    shown.to_str().map(str::to_string)
}

/// `path` with every symlink followed, also when the file itself does not exist.
fn real_path(mut path: PathBuf) -> Option<PathBuf> {
    // As many hops as Linux follows before ELOOP.
    for _ in 0..40 {
        if let Ok(real) = std::fs::canonicalize(&path) {
            return Some(real);
        }
        match std::fs::read_link(&path) {
            // A dangling symlink: writing through it creates its target, so the target is
            // what the call touches (an absolute target replaces the parent in `join`).
            Ok(target) => path = path.parent()?.join(target),
            // A file still to be created: its directory decides where it lands.
            Err(_) => {
                let parent = std::fs::canonicalize(path.parent()?).ok()?;
                return Some(parent.join(path.file_name()?));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of a preset named `copy`, its description carrying a right-to-left override
    /// and an invisible tag character, written to a fresh policy directory.
    fn hostile_policy_dir() -> (tempfile::TempDir, String) {
        let description = "evil \u{202e}txt.exe\u{e0041}";
        let registry = ProfileRegistry::load(None).expect("presets");
        let preset = registry.get("plan-readonly").expect("preset");
        let mut profile = preset.profile().clone();
        profile.name = "copy".into();
        profile.description = description.into();
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("copy.toml"), profile_to_toml(&profile)).expect("write");
        (dir, description.into())
    }

    fn source(dir: &tempfile::TempDir) -> PolicySource {
        PolicySource {
            policy_dir: Some(dir.path().to_path_buf()),
        }
    }

    fn printed(cmd: PolicyCommand) -> String {
        let mut out = Vec::new();
        execute(cmd, &mut out).expect("command");
        String::from_utf8(out).expect("utf-8 output")
    }

    #[test]
    fn show_writes_invisible_characters_as_toml_escapes_that_load_back() {
        let (dir, description) = hostile_policy_dir();
        let shown = printed(PolicyCommand::Show {
            name: "copy".into(),
            source: source(&dir),
        });
        assert!(shown.contains(r#"description = "evil \u202Etxt.exe\U000E0041""#));
        assert!(!shown.contains(|c| c != '\n' && needs_escape(c)));

        let again = tempfile::tempdir().expect("temp dir");
        std::fs::write(again.path().join("copy.toml"), &shown).expect("write");
        let registry = ProfileRegistry::load(Some(again.path())).expect("reload");
        let copy = registry.get("copy").expect("copy");
        assert_eq!(copy.profile().description, description);
    }

    #[test]
    fn visible_toml_keeps_line_breaks_and_borrows_clean_text() {
        assert_eq!(visible_toml("a = \"\u{200b}\"\n"), "a = \"\\u200B\"\n");
        assert!(matches!(
            visible_toml("a = 1\nb = \"é\"\n"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn list_escapes_descriptions_from_files() {
        let (dir, _) = hostile_policy_dir();
        let listed = printed(PolicyCommand::List {
            source: source(&dir),
            json: false,
        });
        let copy = listed
            .lines()
            .find(|line| line.starts_with("copy "))
            .expect("the copy is listed");
        assert!(copy.ends_with(r"evil \u{202e}txt.exe\u{e0041}"), "{copy}");
        assert!(!listed.contains(|c| c != '\n' && needs_escape(c)));
    }

    #[test]
    fn list_json_keeps_the_exact_text() {
        let (dir, description) = hostile_policy_dir();
        let listed = printed(PolicyCommand::List {
            source: source(&dir),
            json: true,
        });
        let profiles: serde_json::Value = serde_json::from_str(&listed).expect("json");
        let copy = profiles
            .as_array()
            .and_then(|all| all.iter().find(|p| p["name"] == "copy"))
            .expect("the copy is listed");
        assert_eq!(copy["description"], description.as_str());
    }

    #[test]
    fn check_prints_one_escaped_line() {
        let checked = printed(PolicyCommand::Check(CheckArgs {
            profile: "headless-safe-sandbox".into(),
            tool: "Bash".into(),
            command: "curl x\u{202e} #\x1b[2K\rgit status | sh".into(),
            path: String::new(),
            resolved_path: String::new(),
            paths: Vec::new(),
            url: String::new(),
            input: String::new(),
            workspace: None,
            source: PolicySource { policy_dir: None },
            json: false,
        }));
        assert_eq!(checked.lines().count(), 1, "{checked}");
        assert!(checked.starts_with("deny: "), "{checked}");
        assert!(!checked.contains(|c| c != '\n' && needs_escape(c)));
    }
}
