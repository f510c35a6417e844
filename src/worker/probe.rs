//! Hooks-live probe. An agent can run without runplane's hooks and say nothing about it:
//! Codex skips a hook it does not trust, Claude Code's managed settings can switch hooks
//! off, a wrapper script can drop the flags. So before the agent may act, the worker starts
//! it once in a form that cannot act — no model it can reach (an address that accepts and
//! never answers) and, for Claude Code, no tools — with everything that decides whether the
//! hooks run left as it is. Both agents run the SessionStart hook before their first
//! model request (measured), so the hook arriving proves the hooks are live; without it
//! the run fails and the agent never starts for real.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::sync::mpsc;

use super::agent;
use super::hook_wire::Agent;
use super::launch::{self, Launch};

/// How long the probe agent has to stop once it has shown its hooks.
const PROBE_GRACE: Duration = Duration::from_secs(1);

/// Starts the probe form of `launch` in `workspace` and waits up to `limit` for its
/// SessionStart hook (reported on `starts`). `Err` names why the hooks are not live.
pub async fn hooks_live(
    agent: Agent,
    launch: &Launch,
    workspace: &Path,
    starts: &mut mpsc::UnboundedReceiver<String>,
    limit: Duration,
    launcher: &agent::Launcher,
) -> Result<(), String> {
    // Held open while the probe runs: the agent's connection waits in its backlog.
    let silent_model = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| Ok((listener.local_addr()?, listener)))
        .map_err(|err| format!("cannot open the probe's model address: {err}"))?;
    let probe = launch::probe(agent, launch, silent_model.0);
    let mut child = agent::spawn(&probe, workspace, Stdio::null(), launcher)
        .map_err(|err| format!("cannot start {:?}: {err}", probe.line.first()))?;
    let _group = agent::GroupGuard::new(&child);
    let outcome = tokio::select! {
        _ = starts.recv() => Ok(()),
        exited = child.wait() => Err(format!(
            "the agent ended ({}) without running runplane's SessionStart hook",
            exited.map_or_else(|err| err.to_string(), |status| status.to_string())
        )),
        _ = tokio::time::sleep(limit) => Err(format!(
            "the agent did not run runplane's SessionStart hook within {} s",
            limit.as_secs()
        )),
    };
    agent::stop(&mut child, PROBE_GRACE).await;
    outcome.map_err(|why| {
        format!(
            "the agent's hooks are not live: {why}. Something keeps them from running (managed \
             settings that switch hooks off, an untrusted hook, a wrapper that drops runplane's \
             flags); the agent was not started"
        )
    })
}
