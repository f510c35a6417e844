//! Where a run's tools act and how its changes are delivered.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use super::UnknownValue;

/// Where the agent's tools act.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecMode {
    /// Directly on the host filesystem; the default.
    #[default]
    Mount,
    /// In an isolated container.
    Sandbox,
}

impl ExecMode {
    /// Every mode, for exhaustive tests.
    pub const ALL: [ExecMode; 2] = [ExecMode::Mount, ExecMode::Sandbox];

    /// The serialised name.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecMode::Mount => "mount",
            ExecMode::Sandbox => "sandbox",
        }
    }
}

impl fmt::Display for ExecMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ExecMode {
    type Err = UnknownValue;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ExecMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| UnknownValue::new("exec_mode", s))
    }
}

/// How a completed run's changes are handed over. "No delivery" is `Option::None`: stored
/// as an empty string, and left out of JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeliverMode {
    /// A patch file.
    #[serde(rename = "patch")]
    Patch,
    /// A commit in the local repository.
    #[serde(rename = "commit-local")]
    CommitLocal,
    /// A new branch.
    #[serde(rename = "branch")]
    Branch,
    /// A pull request.
    #[serde(rename = "pr")]
    Pr,
}

impl DeliverMode {
    /// Every mode, for exhaustive tests.
    pub const ALL: [DeliverMode; 4] = [
        DeliverMode::Patch,
        DeliverMode::CommitLocal,
        DeliverMode::Branch,
        DeliverMode::Pr,
    ];

    /// The serialised name (`"commit-local"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            DeliverMode::Patch => "patch",
            DeliverMode::CommitLocal => "commit-local",
            DeliverMode::Branch => "branch",
            DeliverMode::Pr => "pr",
        }
    }

    /// Parses the serialised string, where `""` means no delivery.
    pub fn parse_optional(s: &str) -> Result<Option<DeliverMode>, UnknownValue> {
        if s.is_empty() {
            Ok(None)
        } else {
            s.parse().map(Some)
        }
    }
}

impl fmt::Display for DeliverMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeliverMode {
    type Err = UnknownValue;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeliverMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| UnknownValue::new("deliver_mode", s))
    }
}
