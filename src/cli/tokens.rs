//! `runplane tokens …`: operator tokens, for an admin.

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;

use super::connect::connect;
use super::escape::Escaped;
use super::output;
use super::ClientArgs;
use crate::grpc::pb;
use crate::grpc::pb::access_service_client::AccessServiceClient;

/// The tokens commands.
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Make an operator token and print its secret, the only time it is shown.
    Create(CreateArgs),
    /// List operator tokens (names, roles, scopes; never secrets).
    List,
    /// Revoke the live token of this name; requests with it fail from then on.
    Revoke {
        /// The token's name.
        name: String,
    },
}

/// What the new token is.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Its name, recorded as `by` in the events it causes.
    #[arg(long)]
    name: String,
    /// What it may do.
    #[arg(long, value_enum)]
    role: RoleArg,
    /// Restrict it to runs of this team (repeatable).
    #[arg(long = "team", value_name = "TEAM")]
    teams: Vec<String>,
    /// Restrict it to runs of this project (repeatable).
    #[arg(long = "project", value_name = "PROJECT")]
    projects: Vec<String>,
}

/// A role on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum RoleArg {
    /// Reads runs, logs, asks and profiles.
    Viewer,
    /// Also starts and cancels runs and answers asks.
    Operator,
    /// Also manages tokens.
    Admin,
}

impl From<RoleArg> for pb::Role {
    fn from(role: RoleArg) -> pb::Role {
        match role {
            RoleArg::Viewer => pb::Role::Viewer,
            RoleArg::Operator => pb::Role::Operator,
            RoleArg::Admin => pb::Role::Admin,
        }
    }
}

/// A token as printed.
#[derive(Debug, Serialize)]
struct TokenView {
    name: String,
    role: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    teams: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    projects: Vec<String>,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    revoked_at: Option<String>,
}

impl From<pb::Token> for TokenView {
    fn from(token: pb::Token) -> TokenView {
        let role = pb::Role::try_from(token.role).map_or("unknown", |role| match role {
            pb::Role::Viewer => "viewer",
            pb::Role::Operator => "operator",
            pb::Role::Admin => "admin",
            pb::Role::Unspecified => "unspecified",
        });
        let time = |at: Option<prost_types::Timestamp>| {
            at.and_then(|at| crate::grpc::convert::from_timestamp("at", at).ok())
                .map(|at| at.to_rfc3339())
        };
        TokenView {
            name: token.name,
            role: role.to_string(),
            teams: token.teams,
            projects: token.projects,
            created_at: time(token.created_at).unwrap_or_default(),
            revoked_at: time(token.revoked_at),
        }
    }
}

/// The JSON of `tokens create`.
#[derive(Serialize)]
struct Created<'a> {
    token: &'a TokenView,
    secret: &'a str,
}

/// Runs one `tokens` command against the server.
pub(super) async fn run(client: &ClientArgs, command: TokensCommand) -> anyhow::Result<()> {
    let mut rpc = AccessServiceClient::new(connect(client).await?);
    match command {
        TokensCommand::Create(args) => {
            let response = rpc
                .create_token(pb::CreateTokenRequest {
                    name: args.name,
                    role: pb::Role::from(args.role) as i32,
                    teams: args.teams,
                    projects: args.projects,
                })
                .await?
                .into_inner();
            let token = TokenView::from(response.token.unwrap_or_default());
            if client.json {
                output::print_json(&Created {
                    token: &token,
                    secret: &response.secret,
                })?;
            } else {
                println!(
                    "created token {} ({}); its secret, shown only now:",
                    Escaped(&token.name),
                    token.role
                );
                println!("{}", response.secret);
            }
        }
        TokensCommand::List => {
            let tokens: Vec<TokenView> = rpc
                .list_tokens(pb::ListTokensRequest {})
                .await?
                .into_inner()
                .tokens
                .into_iter()
                .map(TokenView::from)
                .collect();
            if client.json {
                output::print_json(&tokens)?;
            } else {
                print_table(&tokens);
            }
        }
        TokensCommand::Revoke { name } => {
            let token = TokenView::from(
                rpc.revoke_token(pb::RevokeTokenRequest { name })
                    .await?
                    .into_inner(),
            );
            if client.json {
                output::print_json(&token)?;
            } else {
                println!("revoked token {}", Escaped(&token.name));
            }
        }
    }
    Ok(())
}

fn print_table(tokens: &[TokenView]) {
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let scope = |list: &[String]| {
                if list.is_empty() {
                    "*".to_string()
                } else {
                    list.join(",")
                }
            };
            vec![
                t.name.clone(),
                t.role.clone(),
                format!("teams={} projects={}", scope(&t.teams), scope(&t.projects)),
                t.created_at.clone(),
                t.revoked_at.clone().unwrap_or_else(|| "-".to_string()),
            ]
        })
        .collect();
    println!(
        "{}",
        output::table(&["NAME", "ROLE", "SCOPE", "CREATED", "REVOKED"], rows)
    );
}
