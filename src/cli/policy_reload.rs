//! `runplane policy reload`: a running server reads its policy directory again.

use std::io::Write;
use std::process::ExitCode;

use super::escape::Escaped;
use super::policy::short_hash;
use super::ClientArgs;
use crate::grpc::pb;
use crate::grpc::pb::policy_service_client::PolicyServiceClient;

/// Asks the server to reload and prints the profiles whose version changed: exit 0, or 1
/// with the server's error (a bad file is `INVALID_ARGUMENT: <file>: <what is wrong>`).
pub fn run(client: &ClientArgs, out: &mut dyn Write) -> ExitCode {
    super::block_on(async move { super::report(reload(client, out).await) })
}

async fn reload(client: &ClientArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut rpc = PolicyServiceClient::new(super::connect::connect(client).await?);
    let changes = rpc.reload(pb::ReloadRequest {}).await?.into_inner().changes;
    if client.json {
        let items: Vec<_> = changes
            .iter()
            .map(|c| {
                serde_json::json!({
                    "name": c.name,
                    "previous_hash": c.previous_hash,
                    "hash": c.hash,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::json!({ "changes": items }))?;
        return Ok(());
    }
    writeln!(out, "reloaded: {} profile(s) changed", changes.len())?;
    for change in &changes {
        let version = |hash: &str, none: &'static str| -> String {
            if hash.is_empty() {
                none.to_string()
            } else {
                short_hash(hash).to_string()
            }
        };
        writeln!(
            out,
            "  {}  {} -> {}",
            Escaped(&change.name),
            version(&change.previous_hash, "(new)"),
            version(&change.hash, "(removed)")
        )?;
    }
    Ok(())
}
