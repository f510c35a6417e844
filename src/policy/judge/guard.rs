//! What is checked beyond the rules: the secrets a call names (before any rule; a shell
//! line's parts are checked as they are judged, in `judgement`), and what holds for a
//! whole shell line — where its writes may have been turned into links, and where its
//! paths land on this machine.

use super::eval::{same_tool, ToolCall, Verdict};
use super::local::{LocalWorkspace, Resolution};
use super::network::{Finding, Scope};
use super::path::{locate, WorkspacePath};
use super::protected::protected_write;
use super::shell::Part;
use crate::policy::profile::compile::{CallFacts, CompiledProfile};

/// Tools that search a directory: their path is read through, not only named.
const SEARCHES: [&str; 3] = ["Grep", "Glob", "LS"];
/// Tools that read the file they name.
const READS: [&str; 2] = ["Read", "NotebookRead"];
/// The tool that fetches a URL from the agent's machine.
const FETCH_TOOL: &str = "WebFetch";
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
        let named = first_hit(&call_files(call), root, |file| {
            self.secrets
                .find(file, root, searched)
                .map(|hit| hit.to_string())
        });
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

    /// A deny when a write tool's file is a protected place (`protected`), as named or
    /// where a symlink on this machine takes it. `None` for other tools and files.
    pub(super) fn protected_in_call(&self, call: &ToolCall<'_>) -> Option<Verdict> {
        if !WRITES.iter().any(|n| same_tool(call.tool, n)) {
            return None;
        }
        let root = call.workspace_root;
        let extra = &self.profile.protected;
        first_hit(&call_files(call), root, |file| {
            protected_write(file, root, extra)
        })
        .map(Verdict::deny)
    }
}

/// The files a call names: its path, resolved path and further paths.
fn call_files<'c>(call: &ToolCall<'c>) -> Vec<&'c str> {
    [call.path, call.resolved_path]
        .into_iter()
        .chain(call.paths.iter().map(String::as_str))
        .filter(|file| !file.is_empty())
        .collect()
}

/// What `why` says of the first of `files` it refuses: as named, or else where a symlink
/// inside a workspace on this machine takes it (a link to a secret is the secret), marked
/// so.
fn first_hit(
    files: &[&str],
    root: Option<&str>,
    why: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    files.iter().find_map(|file| why(file)).or_else(|| {
        let local = LocalWorkspace::find(root)?;
        files.iter().find_map(|file| {
            let (Resolution::Elsewhere(real) | Resolution::Dangling(real)) =
                local.resolve_inside(file, root)?
            else {
                return None;
            };
            why(&real).map(|hit| format!("{hit} (through a symlink)"))
        })
    })
}

impl CompiledProfile {
    /// A deny when the call is a WebFetch and the profile's `network` does not admit its
    /// URL (a URL whose destination cannot be read is not admitted either).
    pub(super) fn network_in_call(&self, call: &ToolCall<'_>) -> Option<Verdict> {
        let scope = self.network.as_ref()?;
        if !same_tool(call.tool, FETCH_TOOL) {
            return None;
        }
        let (Finding::Refused(why) | Finding::Unsure(why)) = scope.judge_url(call.url)?;
        Some(Verdict::deny(format!("{FETCH_TOOL} {why}")))
    }
}

/// What holds for every part of one shell line.
pub(super) struct Line<'p> {
    pub(super) parts: &'p [Part],
    pub(super) root: Option<&'p str>,
    /// The writes that may leave a symlink or a moved file, with where (`ln -s /etc e`).
    links: Vec<(&'p Part, WorkspacePath)>,
    /// The workspace, when it is on this machine.
    local: Option<LocalWorkspace>,
    /// What the profile's network makes of each part, in the order of `parts` (empty when
    /// the profile states no network): found once, whichever paths the line is judged with.
    network: Vec<Option<Finding>>,
}

impl<'p> Line<'p> {
    pub(super) fn new(
        parts: &'p [Part],
        root: Option<&'p str>,
        network: Option<&Scope>,
    ) -> Line<'p> {
        let links = parts
            .iter()
            .filter_map(|part| match part {
                Part::Write {
                    target: Some(target),
                    link: true,
                    ..
                } => Some((part, locate(target, root))),
                _ => None,
            })
            .collect();
        let local = LocalWorkspace::find(root);
        let network = network.map_or_else(Vec::new, |scope| {
            let judge = |part: &Part| match part {
                Part::Command { words, .. } => scope.judge(words),
                _ => None,
            };
            parts.iter().map(judge).collect()
        });
        Line {
            parts,
            root,
            links,
            local,
            network,
        }
    }

    /// What the profile's network makes of `part`, one of the line's parts.
    pub(super) fn network(&self, part: &Part) -> Option<&Finding> {
        let at = self.parts.iter().position(|p| std::ptr::eq(p, part))?;
        self.network.get(at)?.as_ref()
    }

    /// The parts the profile's network refuses, with why.
    pub(super) fn network_refused(&self) -> impl Iterator<Item = (&'p Part, &str)> + '_ {
        self.parts
            .iter()
            .zip(&self.network)
            .filter_map(|(part, finding)| match finding {
                Some(Finding::Refused(why)) => Some((part, why.as_str())),
                _ => None,
            })
    }

    /// A path at or above `target` where another part of the line may leave a link: a
    /// write there may land anywhere, whatever the order the line runs them in.
    pub(super) fn link_above(&self, part: &Part, target: &WorkspacePath) -> Option<String> {
        self.links.iter().find_map(|(by, link)| {
            let (at, written) = (link.as_str(), target.as_str());
            let below = at == "." || written == at || written.starts_with(&format!("{at}/"));
            let same_side = link.is_outside() == target.is_outside();
            (!std::ptr::eq(*by, part) && same_side && below).then(|| at.to_string())
        })
    }

    /// Where `path` lands on this machine, when the workspace is here and a symlink on the
    /// way takes it elsewhere (for a dangling one, where it would create the file).
    pub(super) fn landing(&self, path: &str) -> Option<String> {
        match self.resolve(path) {
            Resolution::Elsewhere(real) | Resolution::Dangling(real) => Some(real),
            Resolution::Same | Resolution::Unresolvable => None,
        }
    }

    /// How this machine resolves `path` (lexically inside the workspace; anything else,
    /// or a workspace not on this machine, resolves to itself).
    pub(super) fn resolve(&self, path: &str) -> Resolution {
        self.local
            .as_ref()
            .and_then(|local| local.resolve_inside(path, self.root))
            .unwrap_or(Resolution::Same)
    }
}
