//! `runplane policy sandbox` (and `runplane work --print-sandbox`): the sandbox plan a
//! profile gives an agent in a workspace, offline, as `runplane work` compiles it — less
//! what only a starting worker knows (its private directories, the agent's own state and
//! model endpoint), which are named as placeholders.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::policy::{lookup, PolicySource};
use crate::policy::{egress_of, PolicyProfile, ProfileRegistry};
use crate::sandbox::agreement;
use crate::sandbox::plan::{self, Plan, PlanInput};

/// Flags of `runplane policy sandbox`.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// The profile.
    #[arg(long, value_name = "NAME")]
    pub profile: String,
    /// The workspace [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where custom profiles come from.
    #[command(flatten)]
    pub source: PolicySource,
}

/// Prints the plan.
pub(super) fn run(args: &SandboxArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let registry = ProfileRegistry::load(args.source.policy_dir.as_deref())
        .context("cannot load the policy directory")?;
    let profile = lookup(&registry, &args.profile)?;
    let plan = plan_for(profile.profile(), args.workspace.as_deref(), &[])?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&plan)?)?;
    } else {
        write!(out, "{}", describe(profile.profile(), &plan))?;
    }
    Ok(())
}

/// Prints what the judge refuses beside what the sandbox permits, and the probes; true
/// when every probe agrees.
pub(super) fn explain(args: &SandboxArgs, out: &mut dyn Write) -> anyhow::Result<bool> {
    let registry = ProfileRegistry::load(args.source.policy_dir.as_deref())
        .context("cannot load the policy directory")?;
    let profile = lookup(&registry, &args.profile)?;
    let plan = plan_for(profile.profile(), args.workspace.as_deref(), &[])?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let explanation = agreement::explain(&profile, &plan, &home);
    let agree = explanation.disagreements().next().is_none();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&explanation)?)?;
        return Ok(agree);
    }
    writeln!(
        out,
        "profile {}: the judge | the sandbox",
        profile.profile().name
    )?;
    for side in &explanation.sides {
        writeln!(
            out,
            "{}
  judge:   {}
  sandbox: {}",
            side.intent, side.judge, side.sandbox
        )?;
    }
    writeln!(out, "probes:")?;
    for p in &explanation.probes {
        let mark = if p.agree { "agree" } else { "DISAGREE" };
        writeln!(
            out,
            "  {mark:8} {:9} {}: judge {}, sandbox {}",
            p.intent, p.call, p.judge, p.sandbox
        )?;
    }
    let disagreeing = explanation.disagreements().count();
    writeln!(
        out,
        "{} probes, {disagreeing} disagreeing",
        explanation.probes.len()
    )?;
    Ok(agree)
}

/// The plan `profile` gives an agent in `workspace` (the current directory when `None`),
/// with `credentials` hidden.
pub(super) fn plan_for(
    profile: &PolicyProfile,
    workspace: Option<&Path>,
    credentials: &[PathBuf],
) -> anyhow::Result<Plan> {
    let workspace = match workspace {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().context("the current directory")?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("--workspace {}", workspace.display()))?;
    let input = PlanInput {
        workspace,
        home: std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default(),
        run_tmp: PathBuf::from("<the run's TMPDIR>"),
        private: PathBuf::from("<the worker's private directory>"),
        secrets: profile.secrets.clone(),
        protected: profile.protected.clone(),
        writable: profile.writable.clone(),
        credentials: credentials.to_vec(),
        egress: egress_of(profile),
        ..PlanInput::default()
    };
    Ok(plan::compile(&input))
}

/// The plan as text, with what the worker adds when the agent starts.
pub(super) fn describe(profile: &PolicyProfile, plan: &Plan) -> String {
    format!(
        "{}when the agent starts, its own state (~/.claude, ~/.claude.json, a run's \
         CODEX_HOME) becomes writable and its model endpoint admitted\nprofile {}: the \
         sandbox {}\n",
        plan::describe(plan),
        profile.name,
        if profile.sandbox.required {
            "is required (runplane work --sandbox off is refused)"
        } else {
            "may be turned off (runplane work --sandbox off, recorded)"
        }
    )
}
