//! Which calls a run's grants cover, and whether an operator's run-scoped answer fits the
//! call it answers. Pure: no I/O, no clock.
//!
//! Grants are consulted only for a call the profile asks about, so a profile's deny (its
//! rules, and the fail-closed denies of what the judge cannot understand) always stands.
//! A grant covers calls of its own tool only, and never more than its text says:
//! - a command grant covers a call whose whole command is the same text, byte for byte;
//! - a prefix grant covers one simple command whose first words are the prefix's words,
//!   each known before the line runs; a part with a caveat (variables set for it, a path
//!   as its name, shell state), a redirection and a part the judge cannot understand are
//!   never covered by a prefix;
//! - a path glob grant covers a call without a command whose every file (path, resolved
//!   path, further paths), placed in the workspace as the profile places it, matches.
//!
//! A command line is covered when every part the profile did not allow is covered (a
//! command grant covers every part of its line at once). A deny grant covering any of
//! those parts denies the call; otherwise allow grants covering all of them allow it;
//! otherwise the call is asked, as the profile said.

use super::compile::CompiledProfile;
use super::globs::path_glob;
use crate::domain::{Decision, Grant, GrantMatch, Remember};
use crate::policy::judge::eval::{same_tool, ToolCall, Verdict, SHELL_TOOL};
use crate::policy::judge::memo;
use crate::policy::judge::path::locate;
use crate::policy::judge::shell::Part;

/// A run-scoped answer that does not fit the asked call; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// The command prefix is not one the call's command starts with.
    #[error("command_prefix: {0}")]
    Prefix(String),
    /// The path glob is malformed or does not match the call's files.
    #[error("path_glob: {0}")]
    PathGlob(String),
    /// The call has nothing the requested kind of grant could name.
    #[error("scope: {0}")]
    Scope(String),
}

/// The grant an operator's run-scoped answer makes for the asked call. Refused when it
/// would not cover that call itself: a prefix must start the asked command and end at a
/// word boundary, a glob must match every file of the asked call.
pub fn grant_match(remember: &Remember, asked: &ToolCall<'_>) -> Result<GrantMatch, GrantError> {
    match remember {
        Remember::Command if asked.command.is_empty() => Err(GrantError::Scope(
            "the call has no command to remember; give a path glob".into(),
        )),
        Remember::Command => Ok(GrantMatch::Command(asked.command.to_string())),
        Remember::Prefix(prefix) => prefix_match(prefix, asked),
        Remember::PathGlob(glob) => glob_match(glob, asked),
    }
}

fn prefix_match(prefix: &str, asked: &ToolCall<'_>) -> Result<GrantMatch, GrantError> {
    let prefix = prefix.trim();
    let command = asked.command.trim_start();
    if command.is_empty() {
        return Err(GrantError::Prefix("the call has no command".into()));
    }
    if prefix.is_empty() {
        return Err(GrantError::Prefix("must not be empty".into()));
    }
    let Some(rest) = command.strip_prefix(prefix) else {
        return Err(GrantError::Prefix(format!(
            "{prefix:?} is not a prefix of the asked command {command:?}"
        )));
    };
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return Err(GrantError::Prefix(format!(
            "{prefix:?} ends inside a word of the asked command {command:?}"
        )));
    }
    if prefix_words(asked.tool, prefix).is_none() {
        return Err(GrantError::Prefix(format!(
            "{prefix:?} is not one simple command of words known before it runs"
        )));
    }
    Ok(GrantMatch::Prefix(prefix.to_string()))
}

fn glob_match(glob: &str, asked: &ToolCall<'_>) -> Result<GrantMatch, GrantError> {
    let glob = glob.trim();
    if glob.is_empty() {
        return Err(GrantError::PathGlob("must not be empty".into()));
    }
    if !asked.command.is_empty() {
        return Err(GrantError::PathGlob(
            "a call with a command is remembered by its command or a command prefix".into(),
        ));
    }
    let files = files(asked);
    if files.is_empty() {
        return Err(GrantError::PathGlob("the call names no file".into()));
    }
    let matcher = path_glob(glob)
        .map_err(|why| GrantError::PathGlob(format!("{glob:?}: {why}")))?
        .compile_matcher();
    for file in files {
        let located = locate(file, asked.workspace_root);
        if !matcher.is_match(located.as_str()) {
            return Err(GrantError::PathGlob(format!(
                "{glob:?} does not match the asked call's file {:?}",
                located.as_str()
            )));
        }
    }
    Ok(GrantMatch::PathGlob(glob.to_string()))
}

/// Every file a call names.
fn files<'a>(call: &ToolCall<'a>) -> Vec<&'a str> {
    [call.path, call.resolved_path]
        .into_iter()
        .chain(call.paths.iter().map(String::as_str))
        .filter(|file| !file.is_empty())
        .collect()
}

/// A prefix's words: for a shell tool, the words of the one simple command it is (none
/// when it is more, has a caveat, or has a word not known before it runs); for another
/// tool, its whitespace-separated words, as the profile reads such a command.
fn prefix_words(tool: &str, prefix: &str) -> Option<Vec<String>> {
    if !same_tool(tool, SHELL_TOOL) {
        return Some(prefix.split_whitespace().map(str::to_string).collect());
    }
    // The files a prefix's words may name are no part of what it runs.
    let parts = memo::parts(prefix);
    let runs: Vec<&Part> = parts
        .iter()
        .filter(|part| !matches!(part, Part::Read { .. }))
        .collect();
    match runs.as_slice() {
        [Part::Command {
            words,
            restriction: None,
            ..
        }] => words
            .iter()
            .map(|w| w.exact().map(str::to_string))
            .collect(),
        _ => None,
    }
}

/// Whether a part the profile did not allow is one simple command starting with `prefix`.
fn part_starts_with(part: &Part, prefix: &[String]) -> bool {
    match part {
        Part::Command {
            words,
            restriction: None,
            ..
        } => {
            words.len() >= prefix.len()
                && words
                    .iter()
                    .zip(prefix)
                    .all(|(word, p)| word.exact() == Some(p.as_str()))
        }
        _ => false,
    }
}

/// Whether a grant covers the whole call at once (a command or path glob grant).
fn covers_whole(grant: &Grant, call: &ToolCall<'_>) -> bool {
    match &grant.matcher {
        GrantMatch::Command(command) => !call.command.is_empty() && call.command == command,
        GrantMatch::PathGlob(glob) => {
            let files = files(call);
            let Ok(glob) = path_glob(glob) else {
                return false;
            };
            let matcher = glob.compile_matcher();
            call.command.is_empty()
                && !files.is_empty()
                && files
                    .iter()
                    .all(|file| matcher.is_match(locate(file, call.workspace_root).as_str()))
        }
        GrantMatch::Prefix(_) => false,
    }
}

impl CompiledProfile {
    /// The verdict a run's grants give a call this profile decided `verdict` for, with the
    /// ids of the grants that decided (`g1,g3`); `None` when the profile did not ask or the
    /// grants do not cover the call (see the module doc).
    pub fn apply_grants(
        &self,
        call: &ToolCall<'_>,
        verdict: &Verdict,
        grants: &[Grant],
    ) -> Option<(Verdict, String)> {
        if verdict.decision != Decision::Ask {
            return None;
        }
        let grants: Vec<&Grant> = grants
            .iter()
            .filter(|g| same_tool(&g.tool, call.tool))
            .collect();
        if grants.is_empty() {
            return None;
        }
        let whole: Vec<&Grant> = grants
            .iter()
            .copied()
            .filter(|g| covers_whole(g, call))
            .collect();
        // For each part the profile did not allow, the prefix grants covering it.
        let by_part = self.prefix_cover(call, &grants);
        if let Some(deny) = first(Decision::Deny, &whole).or_else(|| {
            by_part
                .iter()
                .find_map(|cover| first(Decision::Deny, cover))
        }) {
            return Some(granted(verdict, Decision::Deny, &[deny]));
        }
        if let Some(allow) = first(Decision::Allow, &whole) {
            return Some(granted(verdict, Decision::Allow, &[allow]));
        }
        let mut allows: Vec<&Grant> = Vec::new();
        for cover in &by_part {
            let allow = first(Decision::Allow, cover)?;
            if !allows.iter().any(|g| g.id == allow.id) {
                allows.push(allow);
            }
        }
        (!allows.is_empty()).then(|| granted(verdict, Decision::Allow, &allows))
    }

    /// For each part of the call's command the profile did not allow, the prefix grants
    /// that cover it; empty when the call has no command.
    fn prefix_cover<'g>(&self, call: &ToolCall<'_>, grants: &[&'g Grant]) -> Vec<Vec<&'g Grant>> {
        if call.command.trim().is_empty() {
            return Vec::new();
        }
        let prefixes: Vec<(&Grant, Vec<String>)> = grants
            .iter()
            .filter_map(|g| match &g.matcher {
                GrantMatch::Prefix(prefix) => Some((*g, prefix_words(call.tool, prefix)?)),
                _ => None,
            })
            .collect();
        if !same_tool(call.tool, SHELL_TOOL) {
            let words: Vec<&str> = call.command.split_whitespace().collect();
            let cover = prefixes
                .iter()
                .filter(|(_, prefix)| {
                    words.len() >= prefix.len() && words.iter().zip(prefix).all(|(w, p)| w == p)
                })
                .map(|(g, _)| *g)
                .collect();
            return vec![cover];
        }
        let parts = memo::parts(call.command);
        self.unallowed_parts(call, &parts)
            .into_iter()
            .map(|part| {
                prefixes
                    .iter()
                    .filter(|(_, prefix)| part_starts_with(part, prefix))
                    .map(|(g, _)| *g)
                    .collect()
            })
            .collect()
    }
}

/// The first of `of` that gives `decision`.
fn first<'g>(decision: Decision, of: &[&'g Grant]) -> Option<&'g Grant> {
    of.iter().copied().find(|g| g.decision == decision)
}

/// The verdict of the grants that decided: the profile's deciding rule and part are kept,
/// and the reason says both what the grants decided and what the profile asked.
fn granted(asked: &Verdict, decision: Decision, grants: &[&Grant]) -> (Verdict, String) {
    let ids: Vec<&str> = grants.iter().map(|g| g.id.as_str()).collect();
    let ids = ids.join(",");
    let mut by: Vec<&str> = grants.iter().map(|g| g.by.as_str()).collect();
    by.dedup();
    let reason = format!(
        "{decision} by grant {ids} (made by {}); the profile asked: {}",
        by.join(", "),
        asked.reason
    );
    let verdict = Verdict {
        decision,
        reason,
        ..asked.clone()
    };
    (verdict, ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{PolicyMode, PolicyProfile};

    /// Every call asked: no rules, mode default.
    fn asks_everything() -> CompiledProfile {
        let profile = PolicyProfile {
            name: "t".into(),
            mode: PolicyMode::Default,
            ..PolicyProfile::default()
        };
        CompiledProfile::compile(profile).expect("compiles")
    }

    fn grant(tool: &str, matcher: GrantMatch, decision: Decision) -> Grant {
        Grant {
            id: "g1".into(),
            call_id: "c1".into(),
            tool: tool.into(),
            matcher,
            decision,
            by: "alice".into(),
            note: String::new(),
        }
    }

    /// The decision `grants` give `call` when the profile asked about it; `None`: asked.
    fn decided(call: &ToolCall<'_>, grants: &[Grant]) -> Option<Decision> {
        let profile = asks_everything();
        let verdict = profile.evaluate(call);
        assert_eq!(verdict.decision, Decision::Ask);
        profile
            .apply_grants(call, &verdict, grants)
            .map(|(v, _)| v.decision)
    }

    fn edit<'a>(path: &'a str, resolved: &'a str, paths: &'a [String]) -> ToolCall<'a> {
        ToolCall {
            tool: "Edit",
            path,
            resolved_path: resolved,
            paths,
            workspace_root: Some("/ws"),
            ..ToolCall::default()
        }
    }

    #[test]
    fn a_path_grant_needs_every_file_of_the_call_to_match() {
        let src = [grant(
            "Edit",
            GrantMatch::PathGlob("src/**".into()),
            Decision::Allow,
        )];
        let inside = ["src/b.rs".to_string()];
        let mixed = ["src/b.rs".to_string(), "docs/c.md".to_string()];
        assert_eq!(
            decided(&edit("src/a.rs", "", &inside), &src),
            Some(Decision::Allow)
        );
        assert_eq!(decided(&edit("src/a.rs", "", &mixed), &src), None);
        assert_eq!(decided(&edit("", "", &inside), &src), Some(Decision::Allow));
        // A symlink out of the workspace: its resolved path does not match.
        assert_eq!(decided(&edit("src/link", "/etc/passwd", &[]), &src), None);
        assert_eq!(
            decided(&edit("/ws/src/a.rs", "/ws/src/a.rs", &[]), &src),
            Some(Decision::Allow)
        );
    }

    #[test]
    fn a_grant_covers_its_own_tool_only_ignoring_case() {
        let make = [grant(
            "Bash",
            GrantMatch::Command("make".into()),
            Decision::Allow,
        )];
        let call = |tool| ToolCall {
            tool,
            command: "make",
            ..ToolCall::default()
        };
        assert_eq!(decided(&call("BASH"), &make), Some(Decision::Allow));
        assert_eq!(decided(&call("mcp__shell__run"), &make), None);
    }

    #[test]
    fn another_tools_command_is_read_as_whitespace_separated_words() {
        let prefix = [grant(
            "mcp__shell__run",
            GrantMatch::Prefix("make test".into()),
            Decision::Allow,
        )];
        let call = |command| ToolCall {
            tool: "mcp__shell__run",
            command,
            ..ToolCall::default()
        };
        assert_eq!(
            decided(&call("make  test all"), &prefix),
            Some(Decision::Allow)
        );
        assert_eq!(decided(&call("make testing"), &prefix), None);
        assert_eq!(decided(&call("make"), &prefix), None);
    }

    #[test]
    fn grants_are_consulted_only_for_an_ask() {
        let profile = asks_everything();
        let call = ToolCall {
            tool: "Bash",
            command: "make",
            ..ToolCall::default()
        };
        let all = [grant(
            "Bash",
            GrantMatch::Prefix("make".into()),
            Decision::Allow,
        )];
        for decision in [Decision::Allow, Decision::Deny] {
            let verdict = Verdict {
                decision,
                ..profile.evaluate(&call)
            };
            assert_eq!(profile.apply_grants(&call, &verdict, &all), None);
        }
    }

    #[test]
    fn what_an_operator_asks_to_remember_must_fit_the_asked_call() {
        let bash = |command| ToolCall {
            tool: "Bash",
            command,
            ..ToolCall::default()
        };
        let prefix = |p: &str| Remember::Prefix(p.into());
        for (command, remember, expected) in [
            (
                "  npm run build",
                prefix(" npm run build "),
                Ok(GrantMatch::Prefix("npm run build".into())),
            ),
            (
                "npm run build\t--prod",
                prefix("npm run"),
                Ok(GrantMatch::Prefix("npm run".into())),
            ),
            (
                "make && make install",
                prefix("make &&"),
                Err(GrantError::Prefix(
                    "\"make &&\" is not one simple command of words known before it runs".into(),
                )),
            ),
            (
                "A=1 make",
                prefix("A=1 make"),
                Err(GrantError::Prefix(
                    "\"A=1 make\" is not one simple command of words known before it runs".into(),
                )),
            ),
            (
                "make",
                prefix("   "),
                Err(GrantError::Prefix("must not be empty".into())),
            ),
            (
                "make",
                Remember::Command,
                Ok(GrantMatch::Command("make".into())),
            ),
        ] {
            assert_eq!(
                grant_match(&remember, &bash(command)),
                expected,
                "{command}"
            );
        }
        let file = edit("src/a.rs", "", &[]);
        assert_eq!(
            grant_match(&Remember::Command, &file),
            Err(GrantError::Scope(
                "the call has no command to remember; give a path glob".into()
            ))
        );
        assert_eq!(
            grant_match(&Remember::PathGlob("src/[".into()), &file).map_err(|e| e.to_string()),
            Err("path_glob: \"src/[\": unclosed character class; missing ']'".into())
        );
    }
}
