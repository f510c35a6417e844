//! runplane: the control plane for AI coding-agent runs.
#![forbid(unsafe_code)]

pub mod auth;
pub mod cli;
pub mod coordinator;
pub mod domain;
pub mod grpc;
pub mod metrics;
pub mod policy;
pub mod replay;
pub mod sandbox;
pub mod server;
pub mod store;
pub mod webhook;
pub mod worker;
