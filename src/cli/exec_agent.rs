//! `runplane exec-agent`: how `runplane work` starts an agent (and the gate's commands).
//! It asks the kernel to kill this process when the worker that started it dies
//! (`PR_SET_PDEATHSIG`, kept across `exec`), then becomes the agent — inside the sandbox
//! when given one: it becomes bubblewrap, which starts `runplane-confine` (the binary
//! beside this one, [`confine`]) in the new namespaces, which puts Landlock and seccomp on
//! itself and becomes the agent. Without
//! the death signal an agent whose worker was killed (SIGKILL, an OOM kill) would run on
//! with hooks that reach nobody. A launcher rather than a hook between fork and exec,
//! which would need `unsafe`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::Signal;

use crate::sandbox::{bwrap, confine_binary, kernel, Spec, BWRAP};

/// Flags of `runplane exec-agent`.
#[derive(Debug, Clone, Args)]
pub struct ExecAgentArgs {
    /// The worker's process id: if it is already gone, the agent is not started.
    #[arg(long)]
    pub parent: u32,
    /// Start the agent inside the sandbox this spec describes.
    #[arg(long, value_name = "SPEC")]
    pub sandbox: Option<PathBuf>,
    /// The agent's command line.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Becomes the agent; returns only if that fails.
pub fn run(args: ExecAgentArgs) -> ExitCode {
    if let Err(err) = set_pdeathsig(Some(Signal::SIGKILL)) {
        return refuse(format_args!("cannot tie the agent to its worker: {err}"));
    }
    // The worker may have died before the line above: then nothing would kill the agent.
    if args.parent != std::os::unix::process::parent_id() {
        return refuse(format_args!("the worker is gone; the agent is not started"));
    }
    match &args.sandbox {
        Some(spec) => into_sandbox(spec, &args.command),
        None => become_(&args.command),
    }
}

/// Becomes bubblewrap, which starts `runplane-confine` in the sandbox.
fn into_sandbox(path: &Path, command: &[String]) -> ExitCode {
    let spec = match Spec::read(path) {
        Ok(spec) => spec,
        Err(err) => return refuse(format_args!("{err}; the agent is not started")),
    };
    let confine = match confine_binary() {
        Ok(confine) => confine,
        Err(err) => return refuse(format_args!("{err}; the agent is not started")),
    };
    let err = std::process::Command::new(BWRAP)
        .args(bwrap::command_line(&spec.bwrap, &confine, path, command))
        .exec();
    refuse(format_args!(
        "cannot start bubblewrap ({BWRAP}): {err}; the agent is not started"
    ))
}

/// `runplane-confine SPEC -- COMMAND…`, inside the namespaces: the kernel layers, then
/// the command. `args` are the ones after the program's name.
pub fn confine(args: Vec<OsString>) -> ExitCode {
    let (spec, command) = match args.split_first() {
        Some((spec, rest)) if rest.first().is_some_and(|a| a == "--") && rest.len() > 1 => {
            (Path::new(spec), &rest[1..])
        }
        _ => return refuse(format_args!("usage: runplane-confine SPEC -- COMMAND…")),
    };
    let spec = match Spec::read(spec) {
        Ok(spec) => spec,
        Err(err) => return refuse(format_args!("{err}; the agent is not started")),
    };
    if let Err(err) = kernel::restrict(&spec.kernel_rules()) {
        return refuse(format_args!("{err}; the agent is not started"));
    }
    become_(command)
}

fn become_<S: AsRef<std::ffi::OsStr>>(command: &[S]) -> ExitCode {
    let Some((program, rest)) = command.split_first() else {
        return ExitCode::FAILURE;
    };
    let program = program.as_ref();
    let err = std::process::Command::new(program).args(rest).exec();
    eprintln!("runplane exec-agent: cannot start {program:?}: {err}");
    ExitCode::from(127)
}

fn refuse(why: std::fmt::Arguments<'_>) -> ExitCode {
    eprintln!("runplane exec-agent: {why}");
    ExitCode::FAILURE
}
