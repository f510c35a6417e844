//! The agent's kernel sandbox as the run knows it: what the run's profile tells the
//! worker, and what the worker reports back (the sandbox in force, or none, and each
//! effect the sandbox refused). Reports are `sandbox.*` events in the run's log.

use serde::{Deserialize, Serialize};

use super::attributes::{Reader, Writer};
use super::event::EventError;

/// What the run's pinned profile says about the agent's sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// The profile's name.
    pub profile: String,
    /// The profile version's hash.
    pub profile_hash: String,
    /// Secret path globs the sandbox hides.
    pub secrets: Vec<String>,
    /// Workspace-relative paths the sandbox keeps read-only, besides the built-in ones.
    pub protected: Vec<String>,
    /// Places outside the workspace (absolute or `~/`) the sandbox lets the agent write.
    pub writable: Vec<String>,
    /// The profile forbids running the agent without the sandbox.
    pub required: bool,
    /// `host:port` endpoints the egress proxy admits besides the model's.
    pub egress: Vec<String>,
}

/// Whether the agent of a run is sandboxed, as its worker last reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    /// The agent runs inside the kernel sandbox.
    Enforced,
    /// The agent runs without one (`runplane work --sandbox off`).
    Unsandboxed,
}

impl SandboxState {
    /// The name GetRun, the CLI and the console show.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Enforced => "enforced",
            SandboxState::Unsandboxed => "unsandboxed",
        }
    }
}

/// A worker's report about the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxReport {
    /// `sandbox.enforced`: the agent runs in the sandbox of this plan.
    Enforced {
        /// SHA-256 of the plan's canonical form.
        plan_hash: String,
        /// The layers in force (`bubblewrap`, `landlock-abi-6`, `seccomp`).
        layers: Vec<String>,
    },
    /// `sandbox.off`: the agent runs without a sandbox.
    Off {
        /// Why, as the worker says.
        reason: String,
    },
    /// `sandbox.egress_refused`: the egress proxy refused a connection.
    EgressRefused(EgressRefusal),
    /// `sandbox.denied`: a tool's result shows an error the sandbox gives.
    Denied(KernelDenial),
}

/// A refusal of the kernel's, as a tool's result showed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelDenial {
    /// The call whose result showed it.
    pub call_id: String,
    /// The errno's name: `EROFS` (a read-only mount), `EACCES` (Landlock, a hidden
    /// path), `EPERM` (seccomp).
    pub errno: String,
    /// The output line that showed it.
    pub line: String,
}

/// A connection the egress proxy refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressRefusal {
    /// The host asked for.
    pub host: String,
    /// The port.
    pub port: u16,
    /// `CONNECT` or the HTTP method.
    pub method: String,
    /// The tool call running at the time; empty when none was.
    pub call_id: String,
    /// Why.
    pub reason: String,
}

pub(super) const ENFORCED: &str = "sandbox.enforced";
pub(super) const OFF: &str = "sandbox.off";
pub(super) const EGRESS_REFUSED: &str = "sandbox.egress_refused";
pub(super) const DENIED: &str = "sandbox.denied";

impl SandboxReport {
    /// Every report's kind name.
    pub const KINDS: [&'static str; 4] = [ENFORCED, OFF, EGRESS_REFUSED, DENIED];

    /// The stored kind name.
    pub fn name(&self) -> &'static str {
        match self {
            SandboxReport::Enforced { .. } => ENFORCED,
            SandboxReport::Off { .. } => OFF,
            SandboxReport::EgressRefused(_) => EGRESS_REFUSED,
            SandboxReport::Denied(_) => DENIED,
        }
    }

    /// The run's sandbox state after this report; `None` when it does not change it.
    pub fn state(&self) -> Option<SandboxState> {
        match self {
            SandboxReport::Enforced { .. } => Some(SandboxState::Enforced),
            SandboxReport::Off { .. } => Some(SandboxState::Unsandboxed),
            SandboxReport::EgressRefused(_) | SandboxReport::Denied(_) => None,
        }
    }

    pub(super) fn write(&self, w: Writer) -> Writer {
        match self {
            SandboxReport::Enforced { plan_hash, layers } => w
                .text("plan_hash", plan_hash)
                .text("layers", &layers.join(",")),
            SandboxReport::Off { reason } => w.text("reason", reason),
            SandboxReport::EgressRefused(r) => w
                .text("host", &r.host)
                .value("port", r.port)
                .text("method", &r.method)
                .text("call_id", &r.call_id)
                .text("reason", &r.reason),
            SandboxReport::Denied(d) => w
                .text("call_id", &d.call_id)
                .text("errno", &d.errno)
                .text("line", &d.line),
        }
    }

    pub(super) fn read(kind: &str, r: &mut Reader<'_>) -> Result<SandboxReport, EventError> {
        Ok(match kind {
            ENFORCED => SandboxReport::Enforced {
                plan_hash: r.required("plan_hash")?,
                layers: r.text("layers").split(',').map(str::to_string).collect(),
            },
            OFF => SandboxReport::Off {
                reason: r.text("reason"),
            },
            DENIED => SandboxReport::Denied(KernelDenial {
                call_id: r.text("call_id"),
                errno: r.required("errno")?,
                line: r.text("line"),
            }),
            _ => SandboxReport::EgressRefused(EgressRefusal {
                host: r.required("host")?,
                port: r.value("port")?,
                method: r.text("method"),
                call_id: r.text("call_id"),
                reason: r.text("reason"),
            }),
        })
    }
}
