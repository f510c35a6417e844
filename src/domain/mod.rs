//! The run domain: pure types and rules (runs, statuses, decisions, the event log, the stall
//! tracker, access).
//!
//! Nothing here knows about gRPC, protobuf or storage; conversions live at the edges
//! (`grpc::convert`, `store`).

mod access;
mod attributes;
mod decision;
pub mod event;
pub mod grant;
mod modes;
pub mod query;
mod run;
pub mod sandbox;
mod stall;
mod status;
mod toolcall;
mod version;

pub use access::{Credential, CredentialKind, Principal, Role, Scope};
pub use decision::{Decision, UnknownDecision};
pub use event::{Event, EventKind};
pub use grant::{Grant, GrantMatch, GrantRecord, GrantRevoked, Remember, RunGrants};
pub use modes::{DeliverMode, ExecMode};
pub use run::{Run, StartRequest, TransitionError, ValidationError};
pub use sandbox::{EgressRefusal, KernelDenial, SandboxPolicy, SandboxReport, SandboxState};
pub use stall::{StallTracker, DEFAULT_STALL_THRESHOLD};
pub use status::Status;
pub use toolcall::{ToolCallRequest, ToolCallResponse, ToolCallResult};
pub use version::PolicyVersion;

/// A text value that is not one of a field's known values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: unknown value {value:?}")]
pub struct UnknownValue {
    /// The field whose value was refused.
    pub field: &'static str,
    /// The refused text.
    pub value: String,
}

impl UnknownValue {
    pub(crate) fn new(field: &'static str, value: &str) -> UnknownValue {
        UnknownValue {
            field,
            value: value.to_string(),
        }
    }
}
