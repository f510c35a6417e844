//! The `runplane` binary: parses flags and hands over to `runplane::cli`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: a decision allocates and frees a few dozen small
/// values on one thread and drops them on another, and glibc's arenas spent ~15 % of the
/// server's CPU on that in the benchmark (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    runplane::cli::run(runplane::cli::Cli::parse())
}
