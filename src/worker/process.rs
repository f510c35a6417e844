//! Running a shell command for the worker (a quality gate's tests or linter): in the
//! workspace, in its own process group, with a time limit, keeping the tail of its output.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt as _;

use super::agent::Launcher;

/// How much of a command's output is kept: the end, where test runners and linters put
/// their summary and the failures.
pub const OUTPUT_TAIL_BYTES: usize = 16 * 1024;

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// Whether it exited with status 0 within its time limit.
    pub success: bool,
    /// Its exit code; `None` when it was killed (by the time limit or a signal).
    pub code: Option<i32>,
    /// The last `OUTPUT_TAIL_BYTES` of stdout and stderr together, with a note when
    /// something was cut or the time limit ended it.
    pub output: String,
}

/// Why a command could not be run at all.
#[derive(Debug, thiserror::Error)]
#[error("cannot run {command:?}: {source}")]
pub struct SpawnError {
    /// The command line.
    pub command: String,
    /// The I/O error.
    pub source: std::io::Error,
}

/// Runs `command` with `sh -c` in `dir` through `launcher` (so in the agent's sandbox
/// when it has one: the command runs what the agent wrote), stdin closed, in a process
/// group of its own so that the time limit ends everything it started, not just the shell.
pub async fn run_shell(
    command: &str,
    dir: &Path,
    limit: Duration,
    launcher: &Launcher,
) -> Result<Finished, SpawnError> {
    let spawn_error = |source| SpawnError {
        command: command.to_string(),
        source,
    };
    // stderr is merged into stdout by the shell, so the tail keeps their order.
    let line = ["sh".into(), "-c".into(), format!("exec 2>&1; {command}")];
    let mut child = launcher
        .command(&line)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(spawn_error)?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let mut stdout = child.stdout.take();
    let mut tail = Tail::default();
    let read_all = async {
        let mut buffer = [0u8; 8192];
        if let Some(out) = stdout.as_mut() {
            while let Ok(n) = out.read(&mut buffer).await {
                if n == 0 {
                    break;
                }
                tail.push(&buffer[..n]);
            }
        }
        child.wait().await
    };
    match tokio::time::timeout(limit, read_all).await {
        Ok(status) => {
            let status = status.map_err(spawn_error)?;
            Ok(Finished {
                success: status.success(),
                code: status.code(),
                output: tail.text(None),
            })
        }
        Err(_) => {
            if let Some(group) = group {
                // The group may already be gone; nothing else to do then.
                let _ = killpg(group, Signal::SIGKILL);
            }
            let _ = child.wait().await;
            let note = format!(
                "[runplane: stopped after the time limit of {} s]",
                limit.as_secs_f64()
            );
            Ok(Finished {
                success: false,
                code: None,
                output: tail.text(Some(&note)),
            })
        }
    }
}

/// The last `OUTPUT_TAIL_BYTES` of a stream, and whether anything before them was dropped.
#[derive(Default)]
struct Tail {
    bytes: Vec<u8>,
    cut: bool,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > 2 * OUTPUT_TAIL_BYTES {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.bytes.len() > OUTPUT_TAIL_BYTES {
            let drop = self.bytes.len() - OUTPUT_TAIL_BYTES;
            self.bytes.drain(..drop);
            self.cut = true;
        }
    }

    fn text(mut self, note: Option<&str>) -> String {
        self.trim();
        let mut text = String::new();
        if self.cut {
            text.push_str("[runplane: earlier output cut]\n");
        }
        text.push_str(&String::from_utf8_lossy(&self.bytes));
        if let Some(note) = note {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(note);
        }
        text
    }
}
