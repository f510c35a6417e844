//! `runplane asks …`: the tool calls the policy left to a person, and the answers.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::connect::connect;
use super::escape::Escaped;
use super::grants::GrantView;
use super::output::{self, AskView};
use super::ClientArgs;
use crate::domain::{Decision, ToolCallResponse};
use crate::grpc::pb;
use crate::grpc::pb::run_service_client::RunServiceClient;

/// The asks commands.
#[derive(Debug, Subcommand)]
pub enum AsksCommand {
    /// List the asks waiting for an operator, oldest first.
    List {
        /// Only this run's asks.
        #[arg(long, value_name = "RUN_ID")]
        run: Option<String>,
    },
    /// Let a waiting tool call run; the worker receives the final allow.
    Allow(ResolveArgs),
    /// Refuse a waiting tool call; the worker receives the final deny.
    Deny(ResolveArgs),
}

/// Which ask to answer, and the note that goes with the answer.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The run of the ask.
    run_id: String,
    /// The call of the ask (see `runplane asks list`).
    call_id: String,
    /// Why, passed on to the worker and recorded in the run's log.
    #[arg(long)]
    reason: Option<String>,
    /// A note on who answers, recorded beside the token's name (which is what the log
    /// counts as the identity) [default: $USER, else "cli"]
    #[arg(long, value_name = "NAME")]
    resolver: Option<String>,
    /// Remember the answer for the rest of the run (a grant): later calls of the same tool
    /// with the same command are answered alike, unless the profile denies them.
    #[arg(long)]
    for_run: bool,
    /// With --for-run: remember this prefix of the asked command instead (it must start
    /// the command and end at a word boundary).
    #[arg(
        long,
        value_name = "PREFIX",
        requires = "for_run",
        conflicts_with = "path"
    )]
    prefix: Option<String>,
    /// With --for-run, for a call without a command: remember this path glob (relative
    /// to the workspace; it must match the asked file).
    #[arg(long, value_name = "GLOB", requires = "for_run")]
    path: Option<String>,
}

/// The JSON of `asks list`: the response's shape.
#[derive(Serialize)]
struct AsksPage<'a> {
    asks: &'a [AskView],
}

/// Runs one `asks` command against the server.
pub(super) async fn run(client: &ClientArgs, command: AsksCommand) -> anyhow::Result<()> {
    let mut rpc = RunServiceClient::new(connect(client).await?);
    let (args, decision) = match command {
        AsksCommand::List { run } => {
            let request = pb::ListPendingAsksRequest {
                run_id: run.unwrap_or_default(),
            };
            let response = rpc.list_pending_asks(request).await?.into_inner();
            let asks = response
                .asks
                .into_iter()
                .map(AskView::from_pb)
                .collect::<anyhow::Result<Vec<_>>>()?;
            if client.json {
                output::print_json(&AsksPage { asks: &asks })?;
            } else if asks.is_empty() {
                println!("no pending asks");
            } else {
                println!("{}", output::asks_table(&asks));
            }
            return Ok(());
        }
        AsksCommand::Allow(args) => (args, Decision::Allow),
        AsksCommand::Deny(args) => (args, Decision::Deny),
    };
    let scope = if args.for_run {
        pb::AnswerScope::Run
    } else {
        pb::AnswerScope::Once
    };
    let request = pb::ResolveAskRequest {
        run_id: args.run_id.clone(),
        call_id: args.call_id.clone(),
        decision: pb::Decision::from(decision).into(),
        reason: args.reason.unwrap_or_default(),
        resolver: args.resolver.unwrap_or_else(default_resolver),
        scope: scope.into(),
        command_prefix: args.prefix.unwrap_or_default(),
        path_glob: args.path.unwrap_or_default(),
    };
    let response = rpc.resolve_ask(request).await?.into_inner();
    let response = ToolCallResponse::try_from(response)
        .context("the server sent an invalid tool call response")?;
    // The grant made is the newest one of the answered call.
    let grant = if args.for_run {
        let grants = rpc
            .list_grants(pb::ListGrantsRequest {
                run_id: args.run_id,
            })
            .await?
            .into_inner()
            .grants;
        let made = grants
            .into_iter()
            .rev()
            .find(|g| g.call_id == args.call_id)
            .context("the server made no grant for the answer")?;
        Some(GrantView::from_pb(made)?)
    } else {
        None
    };
    if client.json {
        return output::print_json(&Resolved {
            response: &response,
            grant: grant.as_ref(),
        });
    }
    // The ids and the reason come back from the server: escaped like every listing.
    let mut line = format!(
        "{}: call {} of run {}",
        response.decision,
        Escaped(&response.call_id),
        Escaped(&response.run_id)
    );
    if !response.reason.is_empty() {
        line.push_str(&format!(" ({})", Escaped(&response.reason)));
    }
    println!("{line}");
    if let Some(grant) = grant {
        println!("{}", Escaped(&grant.line()));
    }
    Ok(())
}

/// The JSON of `asks allow|deny`: the final response, and the grant made with --for-run.
#[derive(Serialize)]
struct Resolved<'a> {
    #[serde(flatten)]
    response: &'a ToolCallResponse,
    #[serde(skip_serializing_if = "Option::is_none")]
    grant: Option<&'a GrantView>,
}

/// The note on who answered: the login name when there is one. The server records the
/// token's name as the identity; this only tells apart people sharing a token.
fn default_resolver() -> String {
    std::env::var("USER")
        .ok()
        .filter(|user| !user.is_empty())
        .unwrap_or_else(|| "cli".to_string())
}
