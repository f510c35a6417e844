//! Run lifecycle status and its allowed moves.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use super::UnknownValue;

/// Where in its lifecycle a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Started by an operator; no worker has attached yet.
    Pending,
    /// A worker is attached and tool calls are being decided.
    Running,
    /// Finished successfully.
    Completed,
    /// Finished unsuccessfully (worker error, stall, lost worker, failed gate).
    Failed,
    /// Ended by an operator.
    Cancelled,
    /// Ended by a limit (steps, cost, wall-clock time).
    Timeout,
    /// The worker reported completion and the quality gate is running.
    QualityGate,
}

impl Status {
    /// Every status, in declaration order; handy for exhaustive tests and filters.
    pub const ALL: [Status; 7] = [
        Status::Pending,
        Status::Running,
        Status::Completed,
        Status::Failed,
        Status::Cancelled,
        Status::Timeout,
        Status::QualityGate,
    ];

    /// A terminal run never changes status again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Completed | Status::Failed | Status::Cancelled | Status::Timeout
        )
    }

    /// The transition table: to running from pending or running; to quality_gate from
    /// running; to a terminal status from pending, running or quality_gate. Nothing returns
    /// to pending and nothing leaves a terminal status.
    pub fn can_transition(self, to: Status) -> bool {
        use Status::*;
        match to {
            Pending => false,
            Running => matches!(self, Pending | Running),
            QualityGate => self == Running,
            Completed | Failed | Cancelled | Timeout => {
                matches!(self, Pending | Running | QualityGate)
            }
        }
    }

    /// The serialised name (`"quality_gate"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Timeout => "timeout",
            Status::QualityGate => "quality_gate",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = UnknownValue;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownValue::new("status", s))
    }
}
