//! The worker side of a run, for `runplane work`: a real agent (Claude Code or Codex)
//! started with runplane's hooks, its hooks answered from the run's session, and what it
//! does in the workspace when runplane asks — run the quality gate, roll the workspace
//! back, deliver the changes with git.

pub mod agent;
pub mod claude;
pub mod codex;
pub mod contain;
pub mod egress;
pub mod gate;
pub mod git;
pub mod hook_server;
pub mod hook_wire;
pub mod hooks;
pub mod launch;
pub mod link;
pub mod probe;
pub mod process;
pub mod reports;
pub mod session;
pub mod tools;
