//! `runplane policy …`: inspect profiles and try calls against them offline, with the
//! same code the server decides with.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context as _};

use crate::policy::{profile_to_toml, ProfileRegistry, ProfileSource, ToolCall};

/// Exit code for an unknown profile, a bad policy directory or bad input: scripts can tell
/// it from a decision (which always exits 0).
const EXIT_BAD_INPUT: u8 = 2;

/// The `policy` commands.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// List the profiles: the presets and those of the policy directory.
    List {
        /// Where custom profiles come from.
        #[command(flatten)]
        source: PolicySource,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a profile as TOML, in the policy-file format (it loads again as is).
    Show {
        /// The profile name.
        name: String,
        /// Where custom profiles come from.
        #[command(flatten)]
        source: PolicySource,
    },
    /// Decide one tool call as the server would, and say why.
    Check(CheckArgs),
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

/// Runs a `policy` command. A decision, whatever it is, exits 0; an unknown profile or
/// bad input exits 2 with a message on stderr.
pub fn run(cmd: PolicyCommand) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match execute(cmd, &mut stdout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

fn execute(cmd: PolicyCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match cmd {
        PolicyCommand::List { source, json } => list(&load(&source)?, json, out),
        PolicyCommand::Show { name, source } => {
            let registry = load(&source)?;
            let profile = lookup(&registry, &name)?;
            write!(out, "{}", profile_to_toml(profile.profile()))?;
            Ok(())
        }
        PolicyCommand::Check(args) => check(args, out),
    }
}

fn load(source: &PolicySource) -> anyhow::Result<ProfileRegistry> {
    ProfileRegistry::load(source.policy_dir.as_deref()).context("cannot load the policy directory")
}

fn lookup(
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

fn list(registry: &ProfileRegistry, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let rows: Vec<_> = registry
        .names()
        .into_iter()
        .filter_map(|name| {
            let profile = registry.get(&name)?;
            let source = match registry.source(&name)? {
                ProfileSource::Preset => "preset".to_string(),
                ProfileSource::File(path) => path.display().to_string(),
            };
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
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(items))?;
        return Ok(());
    }
    let width = rows.iter().map(|(n, _, _)| n.len()).max().unwrap_or(0);
    for (name, profile, source) in &rows {
        let p = profile.profile();
        writeln!(
            out,
            "{name:width$}  {:<11}  {source}  {}",
            p.mode.as_str(),
            p.description
        )?;
    }
    Ok(())
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
        writeln!(out, "{}: {}", verdict.decision, verdict.reason)?;
    }
    Ok(())
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
