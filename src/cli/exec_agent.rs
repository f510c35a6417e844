//! `runplane exec-agent`: how `runplane work` starts an agent. It asks the kernel to kill
//! this process when the worker that started it dies (`PR_SET_PDEATHSIG`, kept across
//! `exec`), then becomes the agent. Without it an agent whose worker was killed (SIGKILL,
//! an OOM kill) would run on with hooks that reach nobody: every tool blocked, the model
//! still called. A launcher rather than a hook between fork and exec, which would need
//! `unsafe`.

use std::os::unix::process::CommandExt as _;
use std::process::ExitCode;

use clap::Args;
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::Signal;

/// Flags of `runplane exec-agent`.
#[derive(Debug, Clone, Args)]
pub struct ExecAgentArgs {
    /// The worker's process id: if it is already gone, the agent is not started.
    #[arg(long)]
    pub parent: u32,
    /// The agent's command line.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Becomes the agent; returns only if that fails.
pub fn run(args: ExecAgentArgs) -> ExitCode {
    if let Err(err) = set_pdeathsig(Some(Signal::SIGKILL)) {
        eprintln!("runplane exec-agent: cannot tie the agent to its worker: {err}");
        return ExitCode::FAILURE;
    }
    // The worker may have died before the line above: then nothing would kill the agent.
    if std::os::unix::process::parent_id() != args.parent {
        eprintln!("runplane exec-agent: the worker is gone; the agent is not started");
        return ExitCode::FAILURE;
    }
    let (program, rest) = match args.command.split_first() {
        Some(split) => split,
        None => return ExitCode::FAILURE,
    };
    let err = std::process::Command::new(program).args(rest).exec();
    eprintln!("runplane exec-agent: cannot start {program:?}: {err}");
    ExitCode::from(127)
}
