//! The agent as a child process, in a process group of its own, and stopping it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::launch::Launch;

/// Variables of the worker that must never reach the agent: the operator's and the
/// run's credentials (an agent holding them could answer its own asks).
pub const CREDENTIAL_VARIABLES: [&str; 3] = [
    "RUNPLANE_TOKEN",
    "RUNPLANE_WORKER_TOKEN",
    "RUNPLANE_TOKEN_FILE",
];

/// How the worker starts the agent and the gate's commands: `runplane exec-agent`, in the
/// sandbox when there is one, with the sandbox's variables (TMPDIR, the egress proxy).
#[derive(Debug, Clone)]
pub struct Launcher {
    /// The `runplane` executable.
    pub runplane: PathBuf,
    /// The sandbox spec; `None` with `--sandbox off`.
    pub sandbox: Option<PathBuf>,
    /// Variables set for everything started.
    pub env: Vec<(String, OsString)>,
}

impl Launcher {
    /// `runplane exec-agent` for `line`, with credentials taken out of its environment.
    pub fn command(&self, line: &[String]) -> Command {
        let mut command = Command::new(&self.runplane);
        command.args(["exec-agent", "--parent", &std::process::id().to_string()]);
        if let Some(spec) = &self.sandbox {
            command.arg("--sandbox").arg(spec);
        }
        command.arg("--").args(line);
        for name in CREDENTIAL_VARIABLES {
            command.env_remove(name);
        }
        command.envs(self.env.iter().map(|(name, value)| (name, value)));
        command
    }
}

/// Starts the agent in `workspace`, in a process group of its own so that stopping it
/// stops everything it started, through `runplane exec-agent` (`launcher`) so that it
/// dies with this process. stdin is closed; its stdout goes to `stdout`, its stderr where
/// ours goes.
pub fn spawn(
    launch: &Launch,
    workspace: &Path,
    stdout: Stdio,
    launcher: &Launcher,
) -> std::io::Result<Child> {
    if launch.line.is_empty() {
        return Err(std::io::Error::other("empty agent command"));
    }
    let mut command = launcher.command(&launch.line);
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
