//! Evaluation of one tool call: split it into parts, judge each by first match, and take
//! the strictest. Only the deciding part's reason is written out, so a long command
//! line costs one message, not one per part.

use serde::Serialize;

use super::guard::Line;
use super::judgement::{what, Caveat, Judgement};
use super::memo;
use super::path::{locate, within, WorkspacePath};
use super::shell::Part;
use super::words::Word;
use crate::domain::Decision;
use crate::policy::profile::compile::{CallFacts, CommandArg, CompiledProfile, PathArg, Subject};

/// The tool whose command is a shell command line. Tool names are compared ignoring ASCII
/// case everywhere (here and in rule matching): agents and their hosts do not agree on
/// the case of a tool's name, and an exact comparison let `bash` or `EDIT` pass every rule
/// written for `Bash` or `Edit` — and `bash` past the shell parser.
pub(crate) const SHELL_TOOL: &str = "Bash";
/// The tool a redirection is judged as (rules for `write` apply too, see `same_tool`).
pub(super) const WRITE_TOOL: &str = "Write";

/// Whether two tool names name the same tool.
pub(crate) fn same_tool(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// A tool use a worker asks about. Empty `command`/`path` mean none.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolCall<'a> {
    /// The tool name (`Bash`, `Edit`, …).
    pub tool: &'a str,
    /// The command (a shell command line for `Bash`).
    pub command: &'a str,
    /// The file the tool works on.
    pub path: &'a str,
    /// `path` as the worker's filesystem resolves it (symlinks followed); empty: not
    /// resolved. `path` is placed lexically, so `ws/link/passwd` with `link -> /etc` looks
    /// inside the workspace; with this set, both are judged and the stricter decision wins.
    pub resolved_path: &'a str,
    /// Further files the call touches, each judged like `path` (strictest wins).
    pub paths: &'a [String],
    /// The URL a web tool fetches, judged by host against domain globs; empty: none.
    pub url: &'a str,
    /// The tool's whole input as JSON text, matched by rules' `input_match`; empty: none.
    pub input: &'a str,
    /// The run's workspace root (absolute), if the worker named one.
    pub workspace_root: Option<&'a str>,
}

/// The answer to a tool call and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// What the worker may do.
    pub decision: Decision,
    /// A sentence for the operator and the agent.
    pub reason: String,
    /// The rule that decided; `None` when the mode default did.
    pub rule_index: Option<usize>,
    /// For a shell command: the simple command or redirection that decided.
    pub part: Option<String>,
}

impl Verdict {
    /// A deny no rule made: the run's state or a limit decided.
    pub fn deny(reason: String) -> Verdict {
        Verdict {
            decision: Decision::Deny,
            reason,
            rule_index: None,
            part: None,
        }
    }
}

impl CompiledProfile {
    /// Decides a tool call. No clock; the filesystem is looked at only where the call's
    /// workspace exists on this machine (see `local`).
    ///
    /// With a resolved path, the call is judged with its path and again with the resolved
    /// path in its place, and the stricter verdict wins (the path's on a tie): a symlink
    /// can make either one the true name of the file, and neither may buy an allow the
    /// other would not get. Each of `paths` (a multi-file edit) is judged the same way in
    /// the path's place, and the strictest of all wins.
    pub fn evaluate(&self, call: &ToolCall<'_>) -> Verdict {
        let facts = CallFacts::read(call.url, call.input);
        // Secrets come before every rule: no allow rule can open one.
        if let Some(verdict) = self.secret_in_call(call, &facts) {
            return verdict;
        }
        // So do the protected places, which no rule may open for writing.
        if let Some(verdict) = self.protected_in_call(call) {
            return verdict;
        }
        // And the network the profile states, which no rule may widen.
        if let Some(verdict) = self.network_in_call(call) {
            return verdict;
        }
        // A shell line is split once, whichever paths it is judged with.
        let parts = (same_tool(call.tool, SHELL_TOOL) && !call.command.trim().is_empty())
            .then(|| memo::parts(call.command));
        let line = parts
            .as_deref()
            .map(|parts| Line::new(parts, call.workspace_root, self.network.as_ref()));
        let line = line.as_ref();
        let refused = |line| {
            self.secret_in_line(line)
                .or_else(|| self.network_in_line(line))
        };
        if let Some(verdict) = line.and_then(refused) {
            return verdict;
        }
        // A call that names its files only in `paths` is judged by them alone: an empty
        // path stands for "no file", which every path constraint lets through.
        let (first, rest) = match call.paths.split_first() {
            Some((first, rest)) if call.path.is_empty() => (
                self.evaluate_path(
                    &ToolCall {
                        path: first,
                        ..*call
                    },
                    line,
                    &facts,
                ),
                rest,
            ),
            _ => (self.evaluate_path(call, line, &facts), call.paths),
        };
        let mut verdict = first;
        // Every further file is judged in the path's place; the strictest wins (the first
        // on a tie), and nothing is stricter than deny.
        for path in rest {
            if verdict.decision == Decision::Deny {
                break;
            }
            let by_path = self.evaluate_at(call, path, line, &facts);
            if by_path.decision > verdict.decision {
                verdict = Verdict {
                    reason: format!("the path {path:?} decided: {}", by_path.reason),
                    ..by_path
                };
            }
        }
        verdict
    }

    /// Decides `call` with its `path`, and again with its resolved path when there is one.
    fn evaluate_path(
        &self,
        call: &ToolCall<'_>,
        line: Option<&Line<'_>>,
        facts: &CallFacts,
    ) -> Verdict {
        let verdict = self.evaluate_at(call, call.path, line, facts);
        let resolved = call.resolved_path;
        // Nothing is stricter than deny, and the same text is placed the same way.
        if resolved.is_empty() || resolved == call.path || verdict.decision == Decision::Deny {
            return verdict;
        }
        let by_resolved = self.evaluate_at(call, resolved, line, facts);
        if by_resolved.decision > verdict.decision {
            Verdict {
                reason: format!(
                    "the resolved path {resolved:?} of {:?} decided: {}",
                    call.path, by_resolved.reason
                ),
                ..by_resolved
            }
        } else {
            verdict
        }
    }

    /// Decides `call` as if its path were `path`; `line` holds its command's parts when it
    /// is a shell command line.
    fn evaluate_at(
        &self,
        call: &ToolCall<'_>,
        path: &str,
        line: Option<&Line<'_>>,
        facts: &CallFacts,
    ) -> Verdict {
        let located = (!path.is_empty()).then(|| locate(path, call.workspace_root));
        let path = located.as_ref().map_or(PathArg::None, PathArg::Known);
        let outside = || {
            located
                .as_ref()
                .filter(|p| p.is_outside() && !within(p.as_str(), &self.profile.writable))
                .map(|p| Caveat::Outside(p.as_str().to_string()))
        };
        let Some(line) = line else {
            let words: Vec<Word> = call.command.split_whitespace().map(Word::literal).collect();
            let subject = Subject {
                tool: call.tool,
                command: if words.is_empty() {
                    CommandArg::None
                } else {
                    CommandArg::Words(&words)
                },
                path,
                facts,
            };
            let judgement = self.judge(&subject, outside());
            let what = describe(call, located.as_ref());
            return self.verdict(judgement, &what, None);
        };
        let mut best: Option<(&Part, Judgement)> = None;
        for part in line.parts {
            let Some(judgement) = self.judge_part(part, path, outside(), line, facts) else {
                continue;
            };
            if best
                .as_ref()
                .is_none_or(|(_, b)| judgement.decision > b.decision)
            {
                let deny = judgement.decision == Decision::Deny;
                best = Some((part, judgement));
                if deny {
                    break;
                }
            }
        }
        match best {
            Some((part, judgement)) => {
                self.verdict(judgement, &what(part), Some(part.text().to_string()))
            }
            None => {
                // Only comments: nothing runs; judge the bare tool.
                let subject = Subject {
                    tool: SHELL_TOOL,
                    command: CommandArg::None,
                    path,
                    facts,
                };
                self.verdict(self.judge(&subject, outside()), "an empty command", None)
            }
        }
    }

    /// The parts of a shell line that some file of the call keeps from being allowed: the
    /// parts an ask of the line is about, which grants must cover (`grants`). Each part is
    /// judged with every file of the call, as `evaluate` judges the line.
    pub(crate) fn unallowed_parts<'p>(
        &self,
        call: &ToolCall<'_>,
        parts: &'p [Part],
    ) -> Vec<&'p Part> {
        let facts = CallFacts::read(call.url, call.input);
        let line = Line::new(parts, call.workspace_root, self.network.as_ref());
        let mut files: Vec<&str> = [call.path, call.resolved_path]
            .into_iter()
            .chain(call.paths.iter().map(String::as_str))
            .filter(|file| !file.is_empty())
            .collect();
        if files.is_empty() {
            files.push("");
        }
        let allowed = |part: &Part, file: &str| {
            let located = (!file.is_empty()).then(|| locate(file, call.workspace_root));
            let path = located.as_ref().map_or(PathArg::None, PathArg::Known);
            let outside = located
                .as_ref()
                .filter(|p| p.is_outside())
                .map(|p| Caveat::Outside(p.as_str().to_string()));
            let judged = self.judge_part(part, path, outside, &line, &facts);
            judged.is_none_or(|j| j.decision == Decision::Allow)
        };
        parts
            .iter()
            .filter(|part| !files.iter().all(|file| allowed(part, file)))
            .collect()
    }
}

fn describe(call: &ToolCall<'_>, path: Option<&WorkspacePath>) -> String {
    let mut what = call.tool.to_string();
    if !call.command.is_empty() {
        what.push_str(&format!(" {:?}", call.command));
    }
    if !call.url.is_empty() {
        what.push_str(&format!(" of {:?}", call.url));
    }
    if let Some(p) = path {
        what.push_str(&format!(" of {}", p.as_str()));
    }
    what
}
