//! The agent as a child process, in a process group of its own, and stopping it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::launch::Launch;

/// Starts the agent in `workspace`, in a process group of its own so that stopping it
/// stops everything it started, through `runplane exec-agent` (the `runplane` executable
/// `launcher`) so that it dies with this process. stdin is closed; its stdout goes to
/// `stdout`, its stderr where ours goes.
pub fn spawn(
    launch: &Launch,
    workspace: &Path,
    stdout: Stdio,
    launcher: &Path,
) -> std::io::Result<Child> {
    if launch.line.is_empty() {
        return Err(std::io::Error::other("empty agent command"));
    }
    let mut command = Command::new(launcher);
    command
        .args([
            "exec-agent",
            "--parent",
            &std::process::id().to_string(),
            "--",
        ])
        .args(&launch.line);
    for name in &launch.env_remove {
        command.env_remove(name);
    }
    command
        .envs(launch.env.iter().map(|(name, value)| (name, value)))
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(stdout)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
}

/// Kills the agent's whole process group when dropped: however the worker ends (an error
/// included), nothing the agent started outlives it.
pub struct GroupGuard(Option<Pid>);

impl GroupGuard {
    /// Guards the group `child` leads.
    pub fn new(child: &Child) -> GroupGuard {
        GroupGuard(
            child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .map(Pid::from_raw),
        )
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            // Already gone is fine.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// Stops the agent: SIGTERM to its group, then SIGKILL after `grace`.
pub async fn stop(child: &mut Child, grace: Duration) {
    let Some(group) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
    else {
        return; // already reaped
    };
    let _ = killpg(group, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait().await;
    }
}
