//! `runplane exec-agent`: how `runplane work` starts an agent (and the gate's commands).
//! It asks the kernel to kill this process when the worker that started it dies
//! (`PR_SET_PDEATHSIG`, kept across `exec`), then becomes the agent — inside the sandbox
//! when given one: it becomes bubblewrap, which starts `exec-agent --inside` in the new
//! namespaces, which puts Landlock and seccomp on itself and becomes the agent. Without
//! the death signal an agent whose worker was killed (SIGKILL, an OOM kill) would run on
//! with hooks that reach nobody. A launcher rather than a hook between fork and exec,
//! which would need `unsafe`.

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::Signal;

use crate::sandbox::{kernel, Spec, BWRAP};

/// Flags of `runplane exec-agent`.
#[derive(Debug, Clone, Args)]
pub struct ExecAgentArgs {
    /// The worker's process id: if it is already gone, the agent is not started.
    #[arg(long, required_unless_present = "inside")]
    pub parent: Option<u32>,
    /// Start the agent inside the sandbox this spec describes.
    #[arg(long, value_name = "SPEC", conflicts_with = "inside")]
    pub sandbox: Option<PathBuf>,
    /// (Inside bubblewrap) put the spec's kernel layers on, then become the agent.
    #[arg(long, value_name = "SPEC", hide = true)]
    pub inside: Option<PathBuf>,
    /// The agent's command line.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Becomes the agent; returns only if that fails.
pub fn run(args: ExecAgentArgs) -> ExitCode {
    if let Some(spec) = &args.inside {
        return inside(spec, &args.command);
    }
    if let Err(err) = set_pdeathsig(Some(Signal::SIGKILL)) {
        return refuse(format_args!("cannot tie the agent to its worker: {err}"));
    }
    // The worker may have died before the line above: then nothing would kill the agent.
    if args.parent != Some(std::os::unix::process::parent_id()) {
        return refuse(format_args!("the worker is gone; the agent is not started"));
    }
    match &args.sandbox {
        Some(spec) => into_sandbox(spec, &args.command),
        None => become_(&args.command),
    }
}

/// Becomes bubblewrap, which starts `exec-agent --inside` in the sandbox.
fn into_sandbox(path: &std::path::Path, command: &[String]) -> ExitCode {
    let spec = match Spec::read(path) {
        Ok(spec) => spec,
        Err(err) => return refuse(format_args!("{err}; the agent is not started")),
    };
    let runplane = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => return refuse(format_args!("the runplane executable: {err}")),
    };
    let err = std::process::Command::new(BWRAP)
        .args(&spec.bwrap)
        .arg(runplane)
        .arg("exec-agent")
        .arg("--inside")
        .arg(path)
        .arg("--")
        .args(command)
        .exec();
    refuse(format_args!(
        "cannot start bubblewrap ({BWRAP}): {err}; the agent is not started"
    ))
}

/// Inside the namespaces: the kernel layers, then the agent.
fn inside(path: &std::path::Path, command: &[String]) -> ExitCode {
    let spec = match Spec::read(path) {
        Ok(spec) => spec,
        Err(err) => return refuse(format_args!("{err}; the agent is not started")),
    };
    if let Err(err) = kernel::restrict(&spec.kernel_rules()) {
        return refuse(format_args!("{err}; the agent is not started"));
    }
    become_(command)
}

fn become_(command: &[String]) -> ExitCode {
    let Some((program, rest)) = command.split_first() else {
        return ExitCode::FAILURE;
    };
    let err = std::process::Command::new(program).args(rest).exec();
    eprintln!("runplane exec-agent: cannot start {program:?}: {err}");
    ExitCode::from(127)
}

fn refuse(why: std::fmt::Arguments<'_>) -> ExitCode {
    eprintln!("runplane exec-agent: {why}");
    ExitCode::FAILURE
}
