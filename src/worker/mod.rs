//! The worker side of a run, for `runplane work`: what it does in the workspace when
//! runplane asks — run the quality gate, roll the workspace back, deliver the changes with
//! git. The session itself and the agent's hooks build on these.

pub mod agent;
pub mod gate;
pub mod git;
pub mod hook_server;
pub mod hook_wire;
pub mod process;
pub mod session;
pub mod tools;
