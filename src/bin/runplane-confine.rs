//! `runplane-confine SPEC -- COMMAND…`: the step inside bubblewrap's namespaces that puts
//! the sandbox's kernel layers (Landlock, seccomp) on itself and becomes the agent.
//! `runplane exec-agent --sandbox` starts it; a user never does. A binary of its own so
//! that this step, paid on every sandboxed start, loads a small program rather than all of
//! runplane (about 2 ms less: BENCHMARKS.md).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    runplane::cli::confine(std::env::args_os().skip(1).collect())
}
