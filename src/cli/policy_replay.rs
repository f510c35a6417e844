//! `runplane policy replay`: judges the recorded tool calls of past runs again under a
//! candidate profile and prints what would change, from a data directory (`--data-dir`,
//! read-only) or through a server's `PolicyService.Replay`. Both run the same replay
//! (`crate::replay`), so they print the same changes.
//!
//! Exits 0 when no call would be decided differently and 3 when one would, so a policy
//! change can be gated on it in CI; 2 for a bad profile or option, 1 when the replay
//! itself fails (an unreadable data directory, an unreachable server, a refused call).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use tokio::sync::mpsc;

use super::escape::Escaped;
use super::policy::{lookup, PolicySource};
use super::runs::choices;
use super::ClientArgs;
use crate::domain::Status;
use crate::grpc::convert::timestamp;
use crate::grpc::pb;
use crate::grpc::pb::policy_service_client::PolicyServiceClient;
use crate::grpc::pb::replay_response::Item;
use crate::policy::replay::{Change, Judged, Tally};
use crate::policy::ProfileRegistry;
use crate::policy::{parse_profile, profile_to_toml, CompiledProfile, ProfileFormat};
use crate::replay::{replay, ReplayFilter, CHANGES_BUFFER};
use crate::server::DATABASE_FILE;
use crate::store::SqliteStore;

/// Exit code when at least one call would be decided differently.
const EXIT_CHANGED: u8 = 3;
/// Exit code for a bad profile or option (as the other `policy` commands).
const EXIT_BAD_INPUT: u8 = 2;

/// `runplane policy replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// The candidate profile: a profile file (`.toml`, `.yaml`, `.yml`, or any path with a
    /// `/`), or a profile's name: looked up in --policy-dir when given, else among the
    /// presets offline, or among the server's loaded profiles online.
    #[arg(long, value_name = "FILE|NAME")]
    pub profile: String,
    /// Where custom profiles come from.
    #[command(flatten)]
    pub source: PolicySource,
    /// Replay the runs of this data directory (its SQLite database, opened read-only, so
    /// a server running on it is not disturbed) instead of asking a server.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Only runs of this project.
    #[arg(long, value_name = "P")]
    pub project: Option<String>,
    /// Only runs of this agent.
    #[arg(long, value_name = "A")]
    pub agent: Option<String>,
    /// Only runs in this status.
    #[arg(long, value_name = "S", value_parser = choices(Status::ALL, Status::as_str))]
    pub status: Option<Status>,
    /// Only runs created at or after this time: RFC 3339 (`2026-01-31T00:00:00Z`) or a
    /// duration back from now (`90m`, `24h`, `7d`; units s, m, h, d, w).
    #[arg(long, value_name = "RFC3339|DURATION", value_parser = parse_since)]
    pub since: Option<DateTime<Utc>>,
    /// Where the server is (without --data-dir), and `--json`: one JSON object a line,
    /// each changed call (`"type": "change"`) and then the summary (`"type": "summary"`).
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Why a replay did not print its summary.
enum Failure {
    /// A bad profile or option, found before replaying: exit 2.
    BadInput(anyhow::Error),
    /// The replay could not be done: exit 1.
    Failed(anyhow::Error),
}

/// Runs `policy replay`, printing on `out`, and returns its exit code.
pub fn run(args: ReplayArgs, out: &mut dyn Write) -> ExitCode {
    super::block_on(async move {
        match execute(args, out).await {
            Ok(tally) if tally.changed_calls() > 0 => ExitCode::from(EXIT_CHANGED),
            Ok(_) => ExitCode::SUCCESS,
            Err(Failure::BadInput(err)) => {
                eprintln!("error: {}", super::escape::escape(&format!("{err:#}")));
                ExitCode::from(EXIT_BAD_INPUT)
            }
            // As every command that reads a server: a gRPC status as `error: CODE: …`.
            Err(Failure::Failed(err)) => super::report(Err(err)),
        }
    })
}

/// The candidate, resolved on this side: compiled, or a name the server resolves.
enum Profile {
    /// Compiled here.
    Local(Arc<CompiledProfile>),
    /// A name of one of the server's profiles.
    Remote(String),
}

async fn execute(args: ReplayArgs, out: &mut dyn Write) -> Result<Tally, Failure> {
    let filter = ReplayFilter {
        project_id: args.project.clone(),
        agent_id: args.agent.clone(),
        status: args.status,
        since: args.since,
        scope: Default::default(),
    };
    let mut printer = Printer {
        json: args.client.json,
        out,
    };
    let tally = match &args.data_dir {
        Some(dir) => {
            let profile = local_profile(&args.profile, &args.source).map_err(Failure::BadInput)?;
            offline(dir, profile, &filter, &mut printer).await
        }
        None => {
            // A bare name goes to the server, whose own profiles decide what it means
            // (they may be files this machine does not have).
            let profile = if is_file(&args.profile) || args.source.policy_dir.is_some() {
                let profile =
                    local_profile(&args.profile, &args.source).map_err(Failure::BadInput)?;
                Profile::Local(profile)
            } else {
                Profile::Remote(args.profile.clone())
            };
            online(&args.client, profile, &filter, &mut printer).await
        }
    }
    .map_err(Failure::Failed)?;
    printer.summary(&tally).map_err(Failure::Failed)?;
    Ok(tally)
}

/// Whether `--profile` names a file rather than a profile.
fn is_file(profile: &str) -> bool {
    let path = Path::new(profile);
    profile.contains('/') || ProfileFormat::from_path(path).is_some() || path.is_file()
}

/// The candidate compiled here: a file, or a name among the presets and --policy-dir.
fn local_profile(profile: &str, source: &PolicySource) -> anyhow::Result<Arc<CompiledProfile>> {
    if is_file(profile) {
        let path = Path::new(profile);
        let context = || format!("--profile {}", path.display());
        let text = std::fs::read_to_string(path).with_context(context)?;
        let format = ProfileFormat::from_path(path).unwrap_or(ProfileFormat::Toml);
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("candidate");
        let parsed = parse_profile(&text, format, stem).with_context(context)?;
        // Its own tests are not run: a candidate is still being written (`policy test`
        // runs them).
        let compiled = CompiledProfile::compile(parsed).with_context(context)?;
        return Ok(Arc::new(compiled));
    }
    let registry = ProfileRegistry::load(source.policy_dir.as_deref())
        .context("cannot load the policy directory")?;
    lookup(&registry, profile)
}

/// `--since`: RFC 3339, or a duration back from now.
fn parse_since(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let bad = || format!("{text:?} is neither an RFC 3339 time nor a duration like 24h or 7d");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().map_err(|_| bad())?;
    let seconds_per_unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err(bad()),
    };
    number
        .checked_mul(seconds_per_unit)
        .and_then(TimeDelta::try_seconds)
        .and_then(|back| Utc::now().checked_sub_signed(back))
        .ok_or_else(|| format!("{text:?} reaches back further than a time can"))
}

/// Replays a data directory's runs here.
async fn offline(
    dir: &Path,
    profile: Arc<CompiledProfile>,
    filter: &ReplayFilter,
    printer: &mut Printer<'_>,
) -> anyhow::Result<Tally> {
    let store = SqliteStore::open_read_only(&dir.join(DATABASE_FILE))
        .with_context(|| format!("--data-dir {}", dir.display()))?;
    let (changes, mut found) = mpsc::channel(CHANGES_BUFFER);
    let replaying = async move {
        let tally = replay(&store, profile, filter, &changes).await;
        // Dropping the sender ends the printing below.
        drop(changes);
        tally
    };
    let printing = async move {
        while let Some(change) = found.recv().await {
            printer.change(&change)?;
        }
        anyhow::Ok(())
    };
    // Printing that fails (a closed stdout) drops the receiver, which stops the replay.
    let (tally, printed) = tokio::join!(replaying, printing);
    printed?;
    Ok(tally?)
}

/// Asks the server to replay the runs it has.
async fn online(
    client: &ClientArgs,
    profile: Profile,
    filter: &ReplayFilter,
    printer: &mut Printer<'_>,
) -> anyhow::Result<Tally> {
    use pb::replay_request::Candidate;
    let candidate = match profile {
        Profile::Remote(name) => Candidate::ProfileName(name),
        // Sent as TOML whatever the file's format: the renderer's TOML loads back to the
        // same profile.
        Profile::Local(profile) => Candidate::ProfileToml(profile_to_toml(profile.profile())),
    };
    let request = pb::ReplayRequest {
        candidate: Some(candidate),
        project_id: filter.project_id.clone().unwrap_or_default(),
        agent_id: filter.agent_id.clone().unwrap_or_default(),
        status: filter
            .status
            .map_or(pb::RunStatus::Unspecified, pb::RunStatus::from)
            .into(),
        since: filter.since.map(timestamp),
    };
    let mut rpc = PolicyServiceClient::new(super::connect::connect(client).await?);
    let mut stream = rpc.replay(request).await?.into_inner();
    let mut summary = None;
    while let Some(message) = stream.message().await? {
        match message.item {
            Some(Item::Change(change)) => {
                let change =
                    Change::try_from(change).context("the server sent an invalid change")?;
                printer.change(&change)?;
            }
            Some(Item::Summary(tally)) => {
                summary =
                    Some(Tally::try_from(tally).context("the server sent an invalid summary")?)
            }
            None => bail!("the server sent an empty replay message"),
        }
    }
    summary.context("the server ended the replay without its summary")
}

/// Prints changes as they come and the summary at the end.
struct Printer<'a> {
    /// One JSON object a line instead of text.
    json: bool,
    /// Where to.
    out: &'a mut dyn Write,
}

/// How a rule is named in text: `rules[2]`, or `mode` for the profile's mode.
fn rule_text(rule_index: Option<usize>) -> String {
    rule_index.map_or_else(|| "mode".to_string(), |i| format!("rules[{i}]"))
}

fn judged_json(judged: &Judged) -> serde_json::Value {
    json!({
        "decision": judged.decision,
        "rule_index": judged.rule_index.map_or(-1, |i| i as i64),
        "reason": judged.reason,
        "part": judged.part,
    })
}

impl Printer<'_> {
    fn change(&mut self, change: &Change) -> anyhow::Result<()> {
        if self.json {
            let line = json!({
                "type": "change",
                "run_id": change.run_id,
                "seq": change.seq,
                "call_id": change.call_id,
                "tool": change.tool,
                "command": change.command,
                "path": change.path,
                "workspace_root": change.workspace_root,
                "recorded": judged_json(&change.recorded),
                "replayed": judged_json(&change.replayed),
            });
            writeln!(self.out, "{line}")?;
            return Ok(());
        }
        // Commands and paths come from agents: escaped, so they cannot rewrite the line.
        let subject = if change.command.is_empty() {
            &change.path
        } else {
            &change.command
        };
        writeln!(
            self.out,
            "run {} call {}: {} {}",
            Escaped(&change.run_id),
            Escaped(&change.call_id),
            Escaped(&change.tool),
            Escaped(subject),
        )?;
        writeln!(
            self.out,
            "  {} by {} → {} by {}: {}",
            change.recorded.decision,
            rule_text(change.recorded.rule_index),
            change.replayed.decision,
            rule_text(change.replayed.rule_index),
            Escaped(&change.replayed.reason),
        )?;
        Ok(())
    }

    fn summary(&mut self, tally: &Tally) -> anyhow::Result<()> {
        if self.json {
            let transitions: Vec<_> = tally
                .changed
                .iter()
                .map(|(&(recorded, replayed), calls)| {
                    json!({"recorded": recorded, "replayed": replayed, "calls": calls})
                })
                .collect();
            let line = json!({
                "type": "summary",
                "runs": tally.runs,
                "calls": tally.calls,
                "unjudged": tally.unjudged,
                "changed": tally.changed_calls(),
                "transitions": transitions,
            });
            writeln!(self.out, "{line}")?;
            return Ok(());
        }
        for (&(recorded, replayed), calls) in &tally.changed {
            writeln!(self.out, "{} → {}: {calls}", recorded, replayed)?;
        }
        let changed = tally.changed_calls();
        let verdict = if changed == 0 {
            "no change".to_string()
        } else {
            format!("{changed} changed")
        };
        writeln!(
            self.out,
            "{verdict}: {} calls judged again in {} runs ({} never judged by the policy, left out)",
            tally.calls, tally.runs, tally.unjudged
        )?;
        Ok(())
    }
}
