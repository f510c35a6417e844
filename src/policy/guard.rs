//! What is checked before any rule: the secrets a call names. A shell line's parts are
//! checked the same way as they are judged (`eval`); here are the call's own files.

use super::compile::{CallFacts, CompiledProfile};
use super::eval::{same_tool, ToolCall, Verdict};

/// Tools that search a directory: their path is read through, not only named.
const SEARCHES: [&str; 3] = ["Grep", "Glob", "LS"];
/// Tools that read the file they name.
const READS: [&str; 2] = ["Read", "NotebookRead"];
/// Tools that write the files they name.
const WRITES: [&str; 5] = ["Edit", "Write", "MultiEdit", "NotebookEdit", "apply_patch"];

impl CompiledProfile {
    /// A deny when a file of the call is a secret: its path, resolved path or further
    /// paths, and for a search its own glob (Grep's `glob`, Glob's `pattern`) taken under
    /// its path. `None` when none is.
    pub(super) fn secret_in_call(&self, call: &ToolCall<'_>, facts: &CallFacts) -> Option<Verdict> {
        let is = |names: &[&str]| names.iter().any(|n| same_tool(call.tool, n));
        let searched = is(&SEARCHES);
        let verb = if searched || is(&READS) {
            "reads"
        } else if is(&WRITES) {
            "writes"
        } else {
            "touches"
        };
        let root = call.workspace_root;
        let named = [call.path, call.resolved_path]
            .into_iter()
            .chain(call.paths.iter().map(String::as_str))
            .filter(|file| !file.is_empty())
            .find_map(|file| self.secrets.find(file, root, searched))
            .map(|hit| hit.to_string());
        let hit = named.or_else(|| {
            let key = if same_tool(call.tool, "Glob") {
                "pattern"
            } else {
                "glob"
            };
            let glob = facts
                .input_text(key)
                .filter(|g| searched && !g.is_empty())?;
            let base = if call.path.is_empty() { "." } else { call.path };
            let under = match glob.starts_with(['/', '~']) {
                true => glob.to_string(),
                false => format!("{base}/{glob}"),
            };
            let hit = self.secrets.find(&under, root, false)?;
            Some(format!("{hit} (its {key} {glob:?})"))
        })?;
        Some(Verdict::deny(format!("{verb} a secret: {hit}")))
    }
}
