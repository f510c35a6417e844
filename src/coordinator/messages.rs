//! What flows between a worker session and a run's actor, in domain terms.
//!
//! The gRPC edge converts these to and from protobuf; the coordinator never sees tonic.

use chrono::{DateTime, Utc};

use crate::domain::{Decision, DeliverMode, Event, EventKind, Run, Status, ToolCallRequest};
use crate::domain::{SandboxPolicy, SandboxReport, ToolCallResponse, ToolCallResult};
use crate::policy::TerminationCondition;

/// A message from the worker, already validated field by field.
#[derive(Debug, Clone)]
pub enum WorkerInput {
    /// Ask before a tool use.
    ToolCall(ToolCallRequest),
    /// What an allowed tool did.
    Result(ToolCallResult),
    /// The agent is done.
    Complete(RunCompletion),
    /// The outcome of the quality gate.
    GateResult(GateOutcome),
    /// The outcome of the delivery.
    Delivery(DeliveryOutcome),
    /// Keepalive; answered with the run's status.
    Heartbeat,
    /// A report about the agent's sandbox.
    Sandbox(SandboxReport),
    /// A message the edge could not convert; the actor only passes the error back, so that
    /// one task writes to the session in order.
    Rejected(SessionError),
}

/// The worker's report that the agent is done.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCompletion {
    /// Completed or failed; anything else is refused.
    pub status: Status,
    /// The agent's final output.
    pub output: String,
    /// Why it failed.
    pub error: String,
}

/// The outcome of a quality gate run by the worker.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GateOutcome {
    /// Whether the tests passed; `None` when they were not run.
    pub tests_passed: Option<bool>,
    /// Whether the linter passed; `None` when it was not run.
    pub lint_passed: Option<bool>,
    /// The tests' output.
    pub test_output: String,
    /// The linter's output.
    pub lint_output: String,
    /// Why the gate could not run; non-empty fails the gate.
    pub error: String,
}

/// The outcome of a delivery.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeliveryOutcome {
    /// Whether the delivery worked.
    pub success: bool,
    /// The patch file, for patch.
    pub patch_path: String,
    /// The commit, for commit-local, branch and pr.
    pub commit_hash: String,
    /// The branch, for branch and pr.
    pub branch_name: String,
    /// The pull request, for pr.
    pub pr_url: String,
    /// Why it failed.
    pub error: String,
}

/// A refused worker message; the session goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionError {
    /// The call the message named, if any.
    pub call_id: String,
    /// A gRPC status name (`INVALID_ARGUMENT`, `NOT_FOUND`, `FAILED_PRECONDITION`).
    pub code: &'static str,
    /// What was wrong.
    pub message: String,
}

impl SessionError {
    /// A malformed message.
    pub fn invalid(call_id: &str, message: impl Into<String>) -> SessionError {
        SessionError {
            call_id: call_id.to_string(),
            code: "INVALID_ARGUMENT",
            message: message.into(),
        }
    }

    /// A message naming something that does not exist.
    pub fn not_found(call_id: &str, message: impl Into<String>) -> SessionError {
        SessionError {
            call_id: call_id.to_string(),
            code: "NOT_FOUND",
            message: message.into(),
        }
    }

    /// A message that does not fit the run's state.
    pub fn precondition(call_id: &str, message: impl Into<String>) -> SessionError {
        SessionError {
            call_id: call_id.to_string(),
            code: "FAILED_PRECONDITION",
            message: message.into(),
        }
    }
}

/// What the coordinator sends down a worker's stream.
#[derive(Debug, Clone)]
pub enum Push {
    /// Reply to attach.
    Attached {
        /// The run now. Boxed, like `Finished`'s: a channel allocates its slots for the
        /// largest variant, and every session's outbound queue would otherwise pay for
        /// an inline `Run` in each slot (an idle session is meant to stay small).
        run: Box<Run>,
        /// Its limits.
        limits: TerminationCondition,
        /// Whether the run was already running.
        resumed: bool,
        /// What the run's profile says about the agent's sandbox (boxed like `run`).
        sandbox: Box<SandboxPolicy>,
    },
    /// A decision (a second one follows an ask).
    Decision(ToolCallResponse),
    /// A result was recorded.
    ResultAck {
        /// The call.
        call_id: String,
        /// Steps so far.
        step_count: i32,
        /// Cost so far.
        cost_usd: f64,
    },
    /// An operator cancelled the run.
    Cancel {
        /// The operator's reason.
        reason: String,
    },
    /// A limit or the stall tracker ended the run.
    Terminate {
        /// Timeout or failed.
        status: Status,
        /// Which limit, or "stall detected".
        reason: String,
    },
    /// Run the quality gate.
    QualityGate {
        /// Run the tests.
        run_tests: bool,
        /// Run the linter.
        run_lint: bool,
        /// The test command, empty for the worker's default.
        test_command: String,
        /// The lint command, empty for the worker's default.
        lint_command: String,
        /// Whether a failed gate fails the run and the worker restores the workspace.
        rollback_on_fail: bool,
    },
    /// Deliver the changes.
    Deliver {
        /// How.
        mode: DeliverMode,
        /// The commit message.
        commit_message: String,
    },
    /// The run is over; the stream closes after this.
    Finished(Box<Run>),
    /// A refused message.
    Error(SessionError),
    /// Reply to a heartbeat.
    Heartbeat(Status),
    /// The stream ends here.
    Close(CloseReason),
}

/// Why the coordinator ends a worker's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The run finished; the stream ends normally.
    Finished,
    /// A newer attach took the run over.
    TakenOver {
        /// The worker that took over.
        by_worker: String,
    },
    /// The server is shutting down; re-attach to the next one.
    Shutdown,
    /// The worker left too many pushes unread; it may re-attach.
    TooSlow,
    /// The run's state could not be saved; re-attach to retry.
    Internal(String),
    /// Another process owns the run now (it took the run's lease): re-attach, through
    /// whichever server the address leads to.
    Moved,
}

/// An ask waiting for an operator, as `ListPendingAsks` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAsk {
    /// The call that was asked.
    pub request: ToolCallRequest,
    /// Why the policy asked.
    pub reason: String,
    /// When it was asked.
    pub asked_at: DateTime<Utc>,
    /// When it becomes a deny; `None` when the profile lets asks wait forever.
    pub deadline: Option<DateTime<Utc>>,
    /// The profile's rule that decided ask, by index; `None`: the mode's default.
    pub rule_index: Option<usize>,
    /// That rule as its policy file writes it; empty until the coordinator looks it up in
    /// the profile version that asked (the log records only the index), and when there is
    /// none.
    pub rule: String,
    /// The hash of the profile version that asked; empty for an ask recorded without one.
    pub profile_hash: String,
    /// The part of a command line that decided; empty when the call was judged whole.
    pub part: String,
}

impl PendingAsk {
    /// The ask an `asked` decision in the log records; `None` for any other event.
    pub fn from_event(event: &Event) -> Option<PendingAsk> {
        match &event.kind {
            EventKind::Decided(decided) if decided.decision == Decision::Ask => Some(PendingAsk {
                request: decided.request(&event.run_id),
                reason: decided.reason.clone(),
                asked_at: event.at,
                deadline: decided.deadline,
                rule_index: decided.rule_index,
                rule: String::new(),
                profile_hash: decided.profile_hash.clone(),
                part: decided.part.clone(),
            }),
            _ => None,
        }
    }
}

/// Why an operator or attach request was refused. The gRPC edge maps each to its code.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// No such run, ask or profile.
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed.
    #[error("{0}")]
    InvalidArgument(String),
    /// The run is not in a state that allows this.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The server is shutting down.
    #[error("server is shutting down")]
    Unavailable,
    /// Something failed inside the server (a store write); the request may be retried.
    #[error("internal error: {0}")]
    Internal(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}
