//! Command-line interface: flags with clap, one module per command group.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

/// runplane: the control plane for AI coding-agent runs.
#[derive(Debug, Parser)]
#[command(name = "runplane", version, about, propagate_version = true)]
pub struct Cli {}

/// Runs a parsed command line and returns the process exit code.
pub fn run(_cli: Cli) -> ExitCode {
    match Cli::command().print_help() {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
