//! What an agent's hook says a tool is about to do, as a `ToolCallRequest`.
//!
//! Claude Code and Codex send the same payload shape (`tool_name`, `tool_input`,
//! `tool_use_id`, …; docs/AGENT_HOOKS.md has samples). Each tool's input is read into the
//! fields rules judge — a shell command, the files it touches, the URL it fetches — and
//! the whole input always rides along as `input`, so a tool not in this table is still
//! judged by its name (an unknown tool: never allowed unless a rule names it) and the
//! operator who answers an ask sees everything it would do.

use serde_json::Value;

use crate::domain::ToolCallRequest;

/// Why a payload cannot become a request. The hook then blocks the tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The payload is not a JSON object.
    #[error("the hook payload is not a JSON object")]
    NotAnObject,
    /// A field every tool payload carries is missing or not text.
    #[error("the hook payload has no {0}")]
    Missing(&'static str),
    /// The input cannot be read into what rules judge (a patch that names no file):
    /// judging it without its files could let an allow rule through.
    #[error("the {0} input cannot be read: {1}")]
    Unreadable(&'static str, &'static str),
}

/// The request for a `PreToolUse` (or `PostToolUse`) payload.
pub fn tool_call(payload: &Value) -> Result<ToolCallRequest, PayloadError> {
    let object = payload.as_object().ok_or(PayloadError::NotAnObject)?;
    let text = |key: &'static str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(PayloadError::Missing(key))
    };
    let tool = text("tool_name")?;
    let call_id = text("tool_use_id")?;
    let input = object.get("tool_input").cloned().unwrap_or(Value::Null);
    let field = |key: &str| {
        input
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut request = ToolCallRequest {
        call_id: call_id.to_string(),
        tool: tool.to_string(),
        input: if input.is_null() {
            String::new()
        } else {
            fit(input.clone())
        },
        ..ToolCallRequest::default()
    };
    match tool {
        "Bash" => request.command = field("command"),
        "Edit" | "Write" | "Read" | "MultiEdit" => request.path = field("file_path"),
        "NotebookEdit" | "NotebookRead" => request.path = field("notebook_path"),
        "Glob" | "Grep" | "LS" => request.path = field("path"),
        "WebFetch" => request.url = field("url"),
        // Codex's file edits: the patch names every file it adds, changes, deletes or moves.
        "apply_patch" => {
            request.paths = patch_paths(&field("command"));
            if request.paths.is_empty() {
                return Err(PayloadError::Unreadable(
                    "apply_patch",
                    "the patch names no file",
                ));
            }
        }
        _ => {}
    }
    Ok(request)
}

/// The files an `apply_patch` patch touches, in order, each once.
pub fn patch_paths(patch: &str) -> Vec<String> {
    const MARKERS: [&str; 4] = [
        "*** Add File: ",
        "*** Update File: ",
        "*** Delete File: ",
        "*** Move to: ",
    ];
    let mut paths: Vec<String> = Vec::new();
    for line in patch.lines() {
        let Some(path) = MARKERS.iter().find_map(|m| line.strip_prefix(m)) else {
            continue;
        };
        let path = path.trim();
        if !path.is_empty() && !paths.iter().any(|p| p == path) {
            paths.push(path.to_string());
        }
    }
    paths
}

/// Largest `input` the server records (its cap for a stored text).
pub const MAX_INPUT_BYTES: usize = 64 * 1024;

/// Rounds of cutting before an input is given up on as a whole.
const MAX_CUTS: usize = 64;

/// The tool's input as JSON text within `MAX_INPUT_BYTES` (a Write of a large file would
/// otherwise be refused by the server): the longest strings are cut, with a mark saying
/// how much, so the text stays valid JSON and the short fields rules match on (flags such
/// as `dangerouslyDisableSandbox`, paths) stay whole. An input that cannot be cut down
/// (thousands of short fields) is replaced by a note of its size.
pub fn fit(mut input: Value) -> String {
    for _ in 0..MAX_CUTS {
        let text = input.to_string();
        if text.len() <= MAX_INPUT_BYTES {
            return text;
        }
        let excess = text.len() - MAX_INPUT_BYTES;
        match longest_string(&mut input) {
            Some(longest) if longest.len() > 256 => cut(longest, excess),
            _ => break,
        }
    }
    let text = input.to_string();
    if text.len() <= MAX_INPUT_BYTES {
        return text;
    }
    serde_json::json!({ "runplane": format!("input of {} bytes, too large to record", text.len()) })
        .to_string()
}

fn longest_string(value: &mut Value) -> Option<&mut String> {
    match value {
        Value::String(text) => Some(text),
        Value::Array(items) => items
            .iter_mut()
            .filter_map(longest_string)
            .max_by_key(|text| text.len()),
        Value::Object(fields) => fields
            .values_mut()
            .filter_map(longest_string)
            .max_by_key(|text| text.len()),
        _ => None,
    }
}

/// Cuts `excess` bytes (and room for the mark) off the end of `text`, at a character
/// boundary, and marks it.
fn cut(text: &mut String, excess: usize) {
    let mut keep = text.len().saturating_sub(excess + 64);
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    let cut_bytes = text.len() - keep;
    text.truncate(keep);
    text.push_str(&format!("…[runplane cut {cut_bytes} bytes]"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_paths_lists_every_file_once() {
        let patch =
            "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n*** Move to: src/b.rs\n\
                     *** Add File: .env\n+K=V\n*** Delete File: src/a.rs\n*** End Patch\n";
        assert_eq!(patch_paths(patch), ["src/a.rs", "src/b.rs", ".env"]);
        assert!(patch_paths("not a patch").is_empty());
    }
}
