//! `runplane grants …`: a run's remembered answers (made by `asks allow|deny --for-run`),
//! and revoking one.

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::Subcommand;
use serde::Serialize;

use super::connect::connect;
use super::output::{self, table};
use super::ClientArgs;
use crate::domain::{GrantMatch, GrantRecord};
use crate::grpc::convert::grant_from_proto;
use crate::grpc::pb;
use crate::grpc::pb::run_service_client::RunServiceClient;

/// The grants commands.
#[derive(Debug, Subcommand)]
pub enum GrantsCommand {
    /// List a run's grants, oldest first, revoked ones included.
    List {
        /// The run.
        run_id: String,
    },
    /// Withdraw a grant: what it covered is asked again from the run's next call on.
    Revoke {
        /// The run.
        run_id: String,
        /// The grant (see `runplane grants list`).
        grant_id: String,
        /// Why, recorded in the run's log.
        #[arg(long)]
        reason: Option<String>,
    },
}

/// A grant as the CLI prints it (`--json`: this shape).
#[derive(Debug, Serialize)]
pub(super) struct GrantView {
    run_id: String,
    grant_id: String,
    call_id: String,
    tool: String,
    /// `command`, `prefix` or `path_glob`.
    kind: &'static str,
    /// The command, prefix or glob.
    covers: String,
    decision: String,
    granted_by: String,
    note: String,
    granted_at: DateTime<Utc>,
    revoked_by: Option<String>,
    revoked_at: Option<DateTime<Utc>>,
    revoke_reason: Option<String>,
}

impl GrantView {
    /// Checks a grant from the wire.
    pub(super) fn from_pb(grant: pb::Grant) -> anyhow::Result<GrantView> {
        let (run_id, record) =
            grant_from_proto(grant).context("the server sent an invalid grant")?;
        Ok(GrantView::new(run_id, record))
    }

    fn new(run_id: String, record: GrantRecord) -> GrantView {
        let GrantRecord {
            grant,
            granted_at,
            revoked,
        } = record;
        let (kind, covers) = match grant.matcher {
            GrantMatch::Command(command) => ("command", command),
            GrantMatch::Prefix(prefix) => ("prefix", prefix),
            GrantMatch::PathGlob(glob) => ("path_glob", glob),
        };
        let (revoked_by, revoked_at, revoke_reason) = match revoked {
            Some((revoked, at)) => (Some(revoked.by), Some(at), Some(revoked.reason)),
            None => (None, None, None),
        };
        GrantView {
            run_id,
            grant_id: grant.id,
            call_id: grant.call_id,
            tool: grant.tool,
            kind,
            covers,
            decision: grant.decision.to_string(),
            granted_by: grant.by,
            note: grant.note,
            granted_at,
            revoked_by,
            revoked_at,
            revoke_reason,
        }
    }

    /// One line: `g1 allow Bash prefix "npm run build" by alice (call c3)`.
    pub(super) fn line(&self) -> String {
        let mut line = format!(
            "grant {} of run {}: {} {} {} {:?} (by {}, call {})",
            self.grant_id,
            self.run_id,
            self.decision,
            self.tool,
            self.kind,
            self.covers,
            self.granted_by,
            self.call_id
        );
        if let Some(by) = &self.revoked_by {
            line.push_str(&format!("; revoked by {by}"));
        }
        line
    }
}

/// The JSON of `grants list`: the response's shape.
#[derive(Serialize)]
struct GrantsPage<'a> {
    grants: &'a [GrantView],
}

/// Runs one `grants` command against the server.
pub(super) async fn run(client: &ClientArgs, command: GrantsCommand) -> anyhow::Result<()> {
    let mut rpc = RunServiceClient::new(connect(client).await?);
    match command {
        GrantsCommand::List { run_id } => {
            let response = rpc
                .list_grants(pb::ListGrantsRequest { run_id })
                .await?
                .into_inner();
            let grants = response
                .grants
                .into_iter()
                .map(GrantView::from_pb)
                .collect::<anyhow::Result<Vec<_>>>()?;
            if client.json {
                output::print_json(&GrantsPage { grants: &grants })?;
            } else if grants.is_empty() {
                println!("no grants");
            } else {
                println!("{}", grants_table(&grants));
            }
        }
        GrantsCommand::Revoke {
            run_id,
            grant_id,
            reason,
        } => {
            let grant = rpc
                .revoke_grant(pb::RevokeGrantRequest {
                    run_id,
                    grant_id,
                    reason: reason.unwrap_or_default(),
                })
                .await?
                .into_inner();
            let grant = GrantView::from_pb(grant)?;
            if client.json {
                output::print_json(&grant)?;
            } else {
                println!("{}", super::escape::Escaped(&grant.line()));
            }
        }
    }
    Ok(())
}

/// Grants as a table; the last column (the command, prefix or glob) is free length.
fn grants_table(grants: &[GrantView]) -> String {
    let rows = grants
        .iter()
        .map(|g| {
            let state = match &g.revoked_by {
                Some(by) => format!("revoked by {by}"),
                None => "active".to_string(),
            };
            vec![
                g.grant_id.clone(),
                g.decision.clone(),
                g.tool.clone(),
                g.granted_by.clone(),
                output::time(g.granted_at),
                state,
                g.kind.to_string(),
                g.covers.clone(),
            ]
        })
        .collect();
    table(
        &[
            "GRANT", "DECISION", "TOOL", "BY", "AT", "STATE", "KIND", "COVERS",
        ],
        rows,
    )
}
