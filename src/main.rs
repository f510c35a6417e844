//! The `runplane` binary: parses flags and hands over to `runplane::cli`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    runplane::cli::run(runplane::cli::Cli::parse())
}
