//! A run and the request that starts one.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{DeliverMode, ExecMode, Status};

/// One attempt by one agent to do one task under one policy profile.
///
/// Field names and JSON shape are part of the API: optional strings are omitted when empty,
/// `deliver_mode` when none, `completed_at` until the run ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Server-assigned unique id.
    pub id: String,
    /// The task this run works on; required.
    pub task_id: String,
    /// The agent doing the work; required.
    pub agent_id: String,
    /// The project the task belongs to; required.
    pub project_id: String,
    /// The owning team, empty when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub team_id: String,
    /// The policy profile deciding this run's tool calls.
    pub policy_profile: String,
    /// Where the agent's tools act.
    #[serde(default)]
    pub exec_mode: ExecMode,
    /// How changes are delivered on completion; `None` is serialised as the empty string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_mode: Option<DeliverMode>,
    /// Lifecycle status; moves only as `Status::can_transition` allows.
    pub status: Status,
    /// Tool calls decided so far. Signed (a JSON int) so that a corrupt value is
    /// caught by `validate` rather than wrapped silently.
    pub step_count: i32,
    /// Cost reported by tool results so far, in US dollars.
    pub cost_usd: f64,
    /// The worker's final output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// Why the run failed, timed out or was cancelled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// Bumped on every accepted change, for optimistic concurrency in the store.
    pub version: i64,
    /// When the run started: at creation, refreshed when a worker first attaches. Wall-clock
    /// limits count from here.
    pub started_at: DateTime<Utc>,
    /// When the run reached a terminal status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    /// When the run was created.
    pub created_at: DateTime<Utc>,
    /// When the run last changed.
    pub updated_at: DateTime<Utc>,
    /// Whether the agent runs in the kernel sandbox, as its worker last reported; `None`
    /// until a worker says (one that is not `runplane work` never does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<super::SandboxState>,
}

/// What an operator asks for when starting a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StartRequest {
    /// The task to work on; required.
    pub task_id: String,
    /// The agent that will work on it; required.
    pub agent_id: String,
    /// The project the task belongs to; required.
    pub project_id: String,
    /// The owning team, empty when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub team_id: String,
    /// Policy profile name; empty selects the server's default profile.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_profile: String,
    /// Where tools act; `None` means mount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_mode: Option<ExecMode>,
    /// How to deliver on completion; `None` means no delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_mode: Option<DeliverMode>,
}

/// Why a run or start request is invalid. Each variant names the field.
///
/// Unknown status, exec mode or deliver mode values cannot reach these types: they are
/// refused where text becomes a value (`FromStr`, serde, the proto conversions), with an
/// `UnknownValue` that names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidationError {
    /// A required field is empty.
    #[error("{0} is required")]
    Required(&'static str),
    /// `step_count` is below zero.
    #[error("step_count must be >= 0, got {0}")]
    NegativeStepCount(i32),
    /// `cost_usd` is negative, NaN or infinite.
    #[error("cost_usd must be a finite number >= 0, got {0}")]
    InvalidCost(f64),
}

/// A status change the transition table forbids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("run cannot move from {from} to {to}")]
pub struct TransitionError {
    /// The status the run is in.
    pub from: Status,
    /// The status that was refused.
    pub to: Status,
}

fn require(field: &'static str, value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        Err(ValidationError::Required(field))
    } else {
        Ok(())
    }
}

fn require_ids(task_id: &str, agent_id: &str, project_id: &str) -> Result<(), ValidationError> {
    require("task_id", task_id)?;
    require("agent_id", agent_id)?;
    require("project_id", project_id)
}

impl StartRequest {
    /// The rules: task_id, agent_id and project_id are required.
    pub fn validate(&self) -> Result<(), ValidationError> {
        require_ids(&self.task_id, &self.agent_id, &self.project_id)
    }
}

impl Run {
    /// A new pending run for a validated request. `policy_profile` is the resolved profile
    /// name (the request's, or the server's default when the request left it empty).
    pub fn new(
        id: String,
        request: StartRequest,
        policy_profile: String,
        now: DateTime<Utc>,
    ) -> Run {
        Run {
            id,
            task_id: request.task_id,
            agent_id: request.agent_id,
            project_id: request.project_id,
            team_id: request.team_id,
            policy_profile,
            exec_mode: request.exec_mode.unwrap_or_default(),
            deliver_mode: request.deliver_mode,
            status: Status::Pending,
            step_count: 0,
            cost_usd: 0.0,
            output: String::new(),
            error: String::new(),
            version: 1,
            started_at: now,
            completed_at: None,
            created_at: now,
            updated_at: now,
            sandbox: None,
        }
    }

    /// The rules: the three ids are required, step_count >= 0, cost_usd finite and >= 0.
    pub fn validate(&self) -> Result<(), ValidationError> {
        require_ids(&self.task_id, &self.agent_id, &self.project_id)?;
        if self.step_count < 0 {
            return Err(ValidationError::NegativeStepCount(self.step_count));
        }
        if !self.cost_usd.is_finite() || self.cost_usd < 0.0 {
            return Err(ValidationError::InvalidCost(self.cost_usd));
        }
        Ok(())
    }

    /// Records any accepted change: bumps `version` and `updated_at`.
    pub fn touch(&mut self, now: DateTime<Utc>) {
        self.version += 1;
        self.updated_at = now;
    }

    /// Moves the run to `to` if the transition table allows it. The first move to running
    /// restarts the wall clock; a terminal move stamps `completed_at`.
    pub fn transition(&mut self, to: Status, now: DateTime<Utc>) -> Result<(), TransitionError> {
        if !self.status.can_transition(to) {
            return Err(TransitionError {
                from: self.status,
                to,
            });
        }
        if self.status == Status::Pending && to == Status::Running {
            self.started_at = now;
        }
        if to.is_terminal() {
            self.completed_at = Some(now);
        }
        self.status = to;
        self.touch(now);
        Ok(())
    }
}
