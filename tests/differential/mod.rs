//! Support for `tests/shell_differential.rs`: a generator of hostile bash lines and a
//! sandbox that runs a line under real bash with logging stubs for every command.

pub mod generate;
pub mod sandbox;
