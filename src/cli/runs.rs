//! `runplane runs …`: start, inspect, watch and cancel runs on a running server.

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::{Args, Subcommand};
use serde::Serialize;

use super::connect::{connect, AuthChannel};
use super::escape::Escaped;
use super::output::{self, EventView};
use super::ClientArgs;
use crate::domain::{DeliverMode, ExecMode, Run, StartRequest, Status};
use crate::grpc::pb;
use crate::grpc::pb::run_service_client::RunServiceClient;

/// What `ListRunEvents` returns when no page size is given (see the proto); used only to
/// tell whether a page was full and more may follow.
const DEFAULT_EVENTS_PAGE: i32 = 100;

/// The runs commands.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Create a pending run; a worker then attaches to it and does the work.
    Start(StartArgs),
    /// Show one run.
    Get {
        /// The run's id.
        run_id: String,
    },
    /// List runs, newest first.
    List(ListArgs),
    /// End a run as cancelled and tell its worker to stop.
    Cancel {
        /// The run's id.
        run_id: String,
        /// Why, recorded as the run's error and sent to the worker.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Print a run's events as they happen, from the start, until the run ends.
    Watch {
        /// The run's id.
        run_id: String,
        /// First sequence number to print (1 is the first event).
        #[arg(long, value_name = "N", default_value_t = 0)]
        from_seq: u64,
    },
    /// Print one page of a run's event log.
    Events {
        /// The run's id.
        run_id: String,
        /// First sequence number to print (1 is the first event).
        #[arg(long, value_name = "N", default_value_t = 0)]
        from_seq: u64,
        /// Most events to print [default: 100]
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..=1000))]
        page_size: Option<i32>,
    },
}

/// Flags of `runs start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// The task to work on.
    #[arg(long)]
    task: String,
    /// The agent that will work on it.
    #[arg(long)]
    agent: String,
    /// The project (repository) the task belongs to.
    #[arg(long)]
    project: String,
    /// The owning team.
    #[arg(long)]
    team: Option<String>,
    /// Policy profile deciding the run's tool calls [default: the server's,
    /// headless-safe-sandbox]
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Where the agent's tools act [default: mount]
    #[arg(long, value_parser = choices(ExecMode::ALL, ExecMode::as_str))]
    exec_mode: Option<ExecMode>,
    /// How a completed run's changes are handed over [default: none]
    #[arg(long, value_parser = choices(DeliverMode::ALL, DeliverMode::as_str))]
    deliver_mode: Option<DeliverMode>,
}

/// Flags of `runs list`; an absent filter matches everything.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only runs of this task.
    #[arg(long)]
    task: Option<String>,
    /// Only runs of this project.
    #[arg(long)]
    project: Option<String>,
    /// Only runs of this agent.
    #[arg(long)]
    agent: Option<String>,
    /// Only runs in this status.
    #[arg(long, value_parser = choices(Status::ALL, Status::as_str))]
    status: Option<Status>,
    /// Most runs to list [default: 50]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..=1000))]
    page_size: Option<i32>,
    /// The token printed after the previous page.
    #[arg(long, value_name = "T")]
    page_token: Option<String>,
}

/// A clap parser that offers exactly the domain's names (so `--help` lists them) and
/// yields the domain value.
pub(super) fn choices<T, const N: usize>(
    all: [T; N],
    name: fn(T) -> &'static str,
) -> impl clap::builder::TypedValueParser<Value = T>
where
    T: Copy + Send + Sync + 'static,
{
    PossibleValuesParser::new(all.map(name)).try_map(move |given| {
        all.into_iter()
            .find(|value| name(*value) == given)
            .ok_or_else(|| format!("unknown value {given:?}"))
    })
}

/// The JSON of `runs start`: the run, and the token only when authentication issued one.
#[derive(Serialize)]
struct Started<'a> {
    run: &'a Run,
    #[serde(skip_serializing_if = "str::is_empty")]
    worker_token: &'a str,
}

/// The JSON of `runs list`: the response's shape, so paging scripts read one field.
#[derive(Serialize)]
struct RunsPage<'a> {
    runs: &'a [Run],
    next_page_token: &'a str,
}

/// The JSON of `runs events`.
#[derive(Serialize)]
struct EventsPage<'a> {
    events: &'a [EventView],
    next_seq: u64,
}

/// Runs one `runs` command against the server.
pub(super) async fn run(client: &ClientArgs, command: RunsCommand) -> anyhow::Result<()> {
    let mut rpc = RunServiceClient::new(connect(client).await?);
    match command {
        RunsCommand::Start(args) => {
            let request = StartRequest {
                task_id: args.task,
                agent_id: args.agent,
                project_id: args.project,
                team_id: args.team.unwrap_or_default(),
                policy_profile: args.profile.unwrap_or_default(),
                exec_mode: args.exec_mode,
                deliver_mode: args.deliver_mode,
            };
            let response = rpc
                .start_run(pb::StartRequest::from(&request))
                .await?
                .into_inner();
            let run = output::run_from_pb(response.run)?;
            let token = response.worker_token;
            if client.json {
                output::print_json(&Started {
                    run: &run,
                    worker_token: &token,
                })?;
            } else {
                println!("{}", output::run_details(&run));
                if !token.is_empty() {
                    println!("{:<13}{}", "worker token:", Escaped(&token));
                }
            }
        }
        RunsCommand::Get { run_id } => {
            let run = rpc
                .get_run(pb::GetRunRequest { run_id })
                .await?
                .into_inner();
            print_run(client, &output::run_from_pb(Some(run))?)?;
        }
        RunsCommand::Cancel { run_id, reason } => {
            let request = pb::CancelRunRequest {
                run_id,
                reason: reason.unwrap_or_default(),
            };
            let run = rpc.cancel_run(request).await?.into_inner();
            print_run(client, &output::run_from_pb(Some(run))?)?;
        }
        RunsCommand::List(args) => list(client, &mut rpc, args).await?,
        RunsCommand::Watch { run_id, from_seq } => {
            let request = pb::WatchRunRequest { run_id, from_seq };
            let mut stream = rpc.watch_run(request).await?.into_inner();
            while let Some(event) = stream.message().await? {
                let event = EventView::from_pb(event)?;
                if client.json {
                    // One object per line, so a script can act on each event as it comes.
                    println!("{}", serde_json::to_string(&event)?);
                } else {
                    println!("{}", event.line());
                }
            }
        }
        RunsCommand::Events {
            run_id,
            from_seq,
            page_size,
        } => {
            let request = pb::ListRunEventsRequest {
                run_id,
                from_seq,
                page_size: page_size.unwrap_or(0),
            };
            let response = rpc.list_run_events(request).await?.into_inner();
            let events = response
                .events
                .into_iter()
                .map(EventView::from_pb)
                .collect::<anyhow::Result<Vec<_>>>()?;
            if client.json {
                output::print_json(&EventsPage {
                    events: &events,
                    next_seq: response.next_seq,
                })?;
            } else {
                for event in &events {
                    println!("{}", event.line());
                }
                let full = i32::try_from(events.len())
                    .is_ok_and(|n| n >= page_size.unwrap_or(DEFAULT_EVENTS_PAGE));
                if full {
                    println!("more: --from-seq {}", response.next_seq);
                }
            }
        }
    }
    Ok(())
}

/// `runs list`: a table and, when there is more, how to get the next page.
async fn list(
    client: &ClientArgs,
    rpc: &mut RunServiceClient<AuthChannel>,
    args: ListArgs,
) -> anyhow::Result<()> {
    let request = pb::ListRunsRequest {
        task_id: args.task.unwrap_or_default(),
        project_id: args.project.unwrap_or_default(),
        agent_id: args.agent.unwrap_or_default(),
        status: args
            .status
            .map_or(pb::RunStatus::Unspecified, pb::RunStatus::from)
            .into(),
        page_size: args.page_size.unwrap_or(0),
        page_token: args.page_token.unwrap_or_default(),
    };
    let response = rpc.list_runs(request).await?.into_inner();
    let runs = response
        .runs
        .into_iter()
        .map(|run| output::run_from_pb(Some(run)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let next = response.next_page_token;
    if client.json {
        return output::print_json(&RunsPage {
            runs: &runs,
            next_page_token: &next,
        });
    }
    if runs.is_empty() {
        println!("no runs");
    } else {
        println!("{}", output::runs_table(&runs));
    }
    if !next.is_empty() {
        println!("next page: --page-token {}", Escaped(&next));
    }
    Ok(())
}

/// A single run, as details or JSON.
fn print_run(client: &ClientArgs, run: &Run) -> anyhow::Result<()> {
    if client.json {
        output::print_json(run)
    } else {
        println!("{}", output::run_details(run));
        Ok(())
    }
}
