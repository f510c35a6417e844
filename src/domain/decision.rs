//! The answer runplane gives a worker before a tool use.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a worker may do with one tool call.
///
/// Ordered by strictness (`Allow < Ask < Deny`) so that the decision of a compound
/// command is simply the maximum over its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The tool may run.
    Allow,
    /// A person must answer first; the call waits as a pending ask.
    Ask,
    /// The tool must not run.
    Deny,
}

impl Decision {
    /// The serialised name, as in JSON and policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decision name that is not `allow`, `deny` or `ask`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown decision {0:?} (expected allow, deny or ask)")]
pub struct UnknownDecision(pub String);

impl FromStr for Decision {
    type Err = UnknownDecision;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(Decision::Allow),
            "ask" => Ok(Decision::Ask),
            "deny" => Ok(Decision::Deny),
            other => Err(UnknownDecision(other.to_string())),
        }
    }
}
