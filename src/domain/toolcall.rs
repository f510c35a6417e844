//! A tool call: the worker's question, runplane's answer, and what the tool then did.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::Decision;

/// A worker asking whether it may use a tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The run the call belongs to.
    pub run_id: String,
    /// Worker-chosen id, unique within the run; a repeat gets the same decision.
    pub call_id: String,
    /// Tool name as the agent knows it (`Bash`, `Edit`, `Read`, …).
    pub tool: String,
    /// The shell command, for Bash.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// The file or directory the tool acts on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// `path` as the worker's filesystem resolves it (symlinks followed); empty when the
    /// worker did not resolve it. A symlink inside the workspace may point out of it, which
    /// the lexical `path` cannot show, so both are judged and the stricter decision wins.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resolved_path: String,
    /// Every further file the call touches (a multi-file edit), each judged like `path`;
    /// the strictest decision wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The URL a web tool fetches, judged by its host against the rules' domain globs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// The tool's whole input as the agent gave it (JSON text): recorded in the log, shown
    /// to the operator who answers an ask, and matched by rules' `input_match`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub input: String,
}

impl ToolCallRequest {
    /// SHA-256 over every field that is judged or recorded (`run_id` and `call_id` aside),
    /// each length-prefixed so no two different calls read the same. A repeated `call_id`
    /// must carry the same call; keeping this instead of the call's text keeps a decided
    /// call small in memory. A cryptographic hash because the agent chooses the text: it
    /// must not be able to make a different call pass for one already allowed.
    pub fn fingerprint(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(bytes);
        };
        for text in [
            &self.tool,
            &self.command,
            &self.path,
            &self.resolved_path,
            &self.url,
            &self.input,
        ] {
            field(text.as_bytes());
        }
        field(&(self.paths.len() as u64).to_le_bytes());
        for path in &self.paths {
            field(path.as_bytes());
        }
        hash.finalize().into()
    }
}

/// runplane's answer to a `ToolCallRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallResponse {
    /// The run the call belongs to.
    pub run_id: String,
    /// The call being answered.
    pub call_id: String,
    /// Allow, deny or ask.
    pub decision: Decision,
    /// Why; empty when the decision speaks for itself.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// What happened when an allowed tool ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallResult {
    /// The run the call belongs to.
    pub run_id: String,
    /// The allowed call this is the result of.
    pub call_id: String,
    /// Whether the tool succeeded; a failed step is never progress.
    pub success: bool,
    /// The tool's output; its hash feeds the stall tracker.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// The tool's error text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// What the step cost in US dollars; zero when unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost_usd: f64,
    /// How long the tool ran, as integer nanoseconds like Go's `time.Duration` in JSON.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nanos")]
    pub duration: Option<Duration>,
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

/// `time.Duration` encodes as a plain count of nanoseconds; keep that wire shape.
mod nanos {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_nanos))
    }
}
