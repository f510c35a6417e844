//! The parts of a shell line judged: first by the secrets, then each by first match over
//! the rules, with the caveats that keep allow rules from applying; and the words of the
//! verdict.

use super::eval::{Verdict, SHELL_TOOL, WRITE_TOOL};
use super::guard::Line;
use super::local::Resolution;
use super::network::Finding;
use super::path::{locate, within, WorkspacePath};
use super::protected::protected_write;
use super::shell::{Part, Restriction};
use super::table::trusted_form;
use super::words::Word;
use crate::domain::Decision;
use crate::policy::profile::compile::{
    CallFacts, CommandArg, CompiledProfile, PathArg, Subject, Tri,
};

/// Why allow rules may not apply to a subject.
#[derive(Debug, Clone)]
pub(super) enum Caveat {
    Restricted(Restriction),
    Indeterminate(&'static str),
    Outside(String),
    UnknownTarget,
    /// A write below a path the line itself makes a link at or moves a file to.
    ThroughLink(String),
    /// A write through a symlink on this machine that does not resolve.
    Unresolved,
    /// A write that a symlink on this machine takes out of the workspace, to this path.
    Symlinked(String),
    /// What the profile's `network` cannot vouch for, in words.
    Network(String),
}

impl std::fmt::Display for Caveat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caveat::Restricted(Restriction::Assignment) => f.write_str("it sets shell variables"),
            Caveat::Restricted(Restriction::PathName) => f.write_str("its command name is a path"),
            Caveat::Restricted(Restriction::ShellState) => {
                f.write_str("it changes the shell's state (variables, options, traps, aliases)")
            }
            Caveat::Restricted(Restriction::Unvetted(why)) => f.write_str(why),
            Caveat::Indeterminate(why) => write!(f, "it is indeterminate ({why})"),
            Caveat::Outside(path) => write!(f, "the path {path} is outside the workspace"),
            Caveat::UnknownTarget => f.write_str("its target is not known before it runs"),
            Caveat::ThroughLink(path) => write!(
                f,
                "it writes through {path}, where the line itself makes a link or moves a file \
                 (so it may land anywhere)"
            ),
            Caveat::Unresolved => {
                f.write_str("its path goes through a symlink on this machine that does not resolve")
            }
            Caveat::Network(why) => f.write_str(why),
            Caveat::Symlinked(path) => write!(
                f,
                "a symlink on this machine makes it write {path}, outside the workspace"
            ),
        }
    }
}

/// The outcome for one subject, before it is put into words.
pub(super) struct Judgement {
    pub(super) decision: Decision,
    /// The deciding rule and how surely it matched.
    rule: Option<(usize, Tri)>,
    caveat: Option<Caveat>,
    /// An allow rule that matched but was passed over because of the caveat.
    passed_over: Option<usize>,
    /// Where a symlink on this machine takes the write, when that decided.
    note: Option<String>,
    /// The trusted tool whose form the command is, when that decided.
    trusted: Option<&'static str>,
}

impl CompiledProfile {
    /// Judges one part of a line; `None` for a part with nothing to judge (a read of a
    /// file that is not a secret: the command that reads it is judged).
    pub(super) fn judge_part(
        &self,
        part: &Part,
        path: PathArg<'_>,
        outside: Option<Caveat>,
        line: &Line<'_>,
        facts: &CallFacts,
    ) -> Option<Judgement> {
        Some(match part {
            Part::Command {
                words, restriction, ..
            } => {
                let subject = Subject {
                    tool: SHELL_TOOL,
                    command: CommandArg::Words(words),
                    path,
                    facts,
                };
                let caveat = restriction.clone().map(Caveat::Restricted);
                // What the network cannot vouch for: its destination or its program.
                let network = || match line.network(part)? {
                    Finding::Unsure(why) => Some(Caveat::Network(why.clone())),
                    Finding::Refused(_) => None,
                };
                let caveat = caveat.or_else(network).or(outside);
                match self.trusted_tool(words) {
                    Some(tool) => Self::judge_trusted(caveat, tool),
                    None => self.judge(&subject, caveat),
                }
            }
            Part::Indeterminate { why, .. } => {
                let subject = Subject {
                    tool: SHELL_TOOL,
                    command: CommandArg::Indeterminate,
                    path,
                    facts,
                };
                self.judge(&subject, Some(Caveat::Indeterminate(why)))
            }
            // Reads were checked against the secrets before (`secret_in_line`); what reads
            // them is the command, judged on its own.
            Part::Read { .. } => return None,
            Part::Write { target, .. } => self.judge_write(part, target.as_deref(), line, facts),
        })
    }

    /// The first part of a line that reads or writes a secret or writes a protected place,
    /// as a deny: checked before any rule, as for the call's own files (`guard`).
    pub(super) fn secret_in_line(&self, line: &Line<'_>) -> Option<Verdict> {
        line.parts.iter().find_map(|part| {
            let why = match part {
                Part::Read { paths, .. } => self.secret_read(paths, line),
                Part::Write {
                    target: Some(target),
                    ..
                } => self.secret_written(target, line),
                _ => None,
            }?;
            Some(Verdict {
                decision: Decision::Deny,
                reason: format!("{} {why}", what(part)),
                rule_index: None,
                part: Some(part.text().to_string()),
            })
        })
    }

    /// The first command of a line that the profile's `network` refuses, as a deny:
    /// checked before any rule, so that no allow rule reaches past it.
    pub(super) fn network_in_line(&self, line: &Line<'_>) -> Option<Verdict> {
        let (part, why) = line.network_refused().next()?;
        Some(Verdict {
            decision: Decision::Deny,
            reason: format!("{} {why}", what(part)),
            rule_index: None,
            part: Some(part.text().to_string()),
        })
    }

    /// Why reading one of `paths` is reading a secret: as written, or where a symlink on
    /// this machine takes it.
    fn secret_read(&self, paths: &[String], line: &Line<'_>) -> Option<String> {
        let find = |path: &str| self.secrets.find(path, line.root, false);
        if let Some(hit) = paths.iter().find_map(|p| find(p)) {
            return Some(format!("reads a secret: {hit}"));
        }
        let hit = paths
            .iter()
            .filter_map(|p| line.landing(p))
            .find_map(|real| find(&real).map(|hit| hit.to_string()))?;
        Some(format!("reads a secret through a symlink: {hit}"))
    }

    /// Why writing `target` is refused before any rule: it is a secret, as for
    /// `secret_read`, or a protected place.
    fn secret_written(&self, target: &str, line: &Line<'_>) -> Option<String> {
        let find = |path: &str| {
            self.secrets
                .find(path, line.root, false)
                .map(|h| h.to_string())
        };
        if let Some(hit) = find(target) {
            return Some(format!("writes a secret: {hit}"));
        }
        let landing = line.landing(target);
        if let Some(hit) = landing.as_deref().and_then(find) {
            return Some(format!("writes a secret through a symlink: {hit}"));
        }
        let extra = &self.profile.protected;
        protected_write(target, line.root, extra).or_else(|| {
            let why = protected_write(landing.as_deref()?, line.root, extra)?;
            Some(format!("{why} (through a symlink)"))
        })
    }

    /// A write, judged as the Write tool of its target: by the rules with the target as
    /// written and, where a symlink on this machine takes it elsewhere, with where it lands
    /// (the stricter wins).
    fn judge_write(
        &self,
        part: &Part,
        target: Option<&str>,
        line: &Line<'_>,
        facts: &CallFacts,
    ) -> Judgement {
        let write = |path: PathArg<'_>, caveat: Option<Caveat>| {
            let subject = Subject {
                tool: WRITE_TOOL,
                command: CommandArg::None,
                path,
                facts,
            };
            self.judge(&subject, caveat)
        };
        let Some(target) = target else {
            return write(PathArg::Unknown, Some(Caveat::UnknownTarget));
        };
        let located = locate(target, line.root);
        let caveat = match &located {
            WorkspacePath::Outside(p) if within(p, &self.profile.writable) => None,
            WorkspacePath::Outside(p) => Some(Caveat::Outside(p.clone())),
            WorkspacePath::Inside(_) => line.link_above(part, &located).map(Caveat::ThroughLink),
        };
        if caveat.is_some() {
            return write(PathArg::Known(&located), caveat);
        }
        let as_written = write(PathArg::Known(&located), None);
        match line.resolve(target) {
            Resolution::Same => as_written,
            Resolution::Unresolvable | Resolution::Dangling(_) => {
                write(PathArg::Known(&located), Some(Caveat::Unresolved))
            }
            Resolution::Elsewhere(real) => {
                let landed = locate(&real, line.root);
                let caveat = landed.is_outside().then(|| Caveat::Symlinked(real.clone()));
                let inside = caveat.is_none();
                let mut there = write(PathArg::Known(&landed), caveat);
                if there.decision <= as_written.decision {
                    return as_written;
                }
                if inside {
                    there.note = Some(format!("a symlink on this machine makes it write {real}"));
                }
                there
            }
        }
    }

    /// First match over the rules for one subject. With a caveat, allow rules are passed
    /// over and an allowing mode default becomes ask.
    pub(super) fn judge(&self, subject: &Subject<'_>, caveat: Option<Caveat>) -> Judgement {
        let mut passed_over = None;
        for (i, rule) in self.rules.iter().enumerate() {
            if !rule.is_for(subject.tool) {
                continue;
            }
            let matched = rule.matches(subject);
            let applies = match rule.decision {
                Decision::Allow => matched == Tri::Yes,
                Decision::Ask | Decision::Deny => matched != Tri::No,
            };
            if !applies {
                continue;
            }
            if rule.decision == Decision::Allow && caveat.is_some() {
                passed_over.get_or_insert(i);
                continue;
            }
            return Judgement {
                decision: rule.decision,
                rule: Some((i, matched)),
                caveat,
                passed_over,
                note: None,
                trusted: None,
            };
        }
        let mut decision = self.profile.mode.unmatched_decision();
        if decision == Decision::Allow && caveat.is_some() {
            decision = Decision::Ask;
        }
        Judgement {
            decision,
            rule: None,
            caveat,
            passed_over,
            note: None,
            trusted: None,
        }
    }

    /// A form of a trusted tool, judged before the rules: allowed when nothing keeps allow
    /// rules from applying (every option vetted, no variables set), asked otherwise.
    fn judge_trusted(caveat: Option<Caveat>, tool: &'static str) -> Judgement {
        Judgement {
            decision: match caveat {
                None => Decision::Allow,
                Some(_) => Decision::Ask,
            },
            rule: None,
            caveat,
            passed_over: None,
            note: None,
            trusted: Some(tool),
        }
    }

    /// The trusted tool of the profile whose form `words` is, if any.
    fn trusted_tool(&self, words: &[Word]) -> Option<&'static str> {
        let trusted = &self.profile.trusted_tools;
        if trusted.is_empty() {
            return None;
        }
        trusted_form(words).filter(|tool| trusted.iter().any(|t| t == tool))
    }

    pub(super) fn verdict(&self, j: Judgement, what: &str, part: Option<String>) -> Verdict {
        let reason = match j.trusted {
            Some(tool) => trusted_reason(tool, what, &j),
            None => self.rule_reason(&j, what),
        };
        let reason = match &j.note {
            Some(note) => format!("{reason}; {note}"),
            None => reason,
        };
        Verdict {
            decision: j.decision,
            reason,
            rule_index: j.rule.map(|(i, _)| i),
            part,
        }
    }

    /// Why the rules (or the mode default) decided, in words.
    fn rule_reason(&self, j: &Judgement, what: &str) -> String {
        match (&j.rule, &j.caveat) {
            (Some((i, matched)), caveat) => {
                let how = if *matched == Tri::Maybe {
                    "may match"
                } else {
                    "matches"
                };
                let rule = &self.rules[*i];
                let mut reason =
                    format!("rules[{i}] ({} {}) {how} {what}", rule.tool, rule.decision);
                if let Some(c) = caveat {
                    reason.push_str(&format!("; {c}"));
                }
                reason
            }
            (None, Some(c))
                if j.decision == Decision::Ask
                    && self.profile.mode.unmatched_decision() == Decision::Allow =>
            {
                let passed = j
                    .passed_over
                    .map(|i| format!(" (rules[{i}] would allow it)"))
                    .unwrap_or_default();
                format!("{what} is never allowed because {c}{passed}; no deny or ask rule matches, so ask")
            }
            // The caveat says why a part the judge cannot know (or may not allow) is what
            // it is, even when no rule had to pass it over.
            (None, Some(c)) => {
                let mode = self.profile.mode;
                format!(
                    "no rule matches {what}; {c}; mode {mode} gives {}",
                    j.decision
                )
            }
            (None, None) => {
                let mode = self.profile.mode;
                format!("no rule matches {what}; mode {mode} gives {}", j.decision)
            }
        }
    }
}

/// Why a form of a trusted tool got its decision.
fn trusted_reason(tool: &str, what: &str, j: &Judgement) -> String {
    match &j.caveat {
        None => format!(
            "{what} is a form of {tool}, a trusted tool, with every option vetted by the \
             option table (trusted_tools)"
        ),
        Some(c) => format!("{what} is a form of {tool}, a trusted tool, but {c}; so ask"),
    }
}

/// How a reason names a part of a line.
pub(super) fn what(part: &Part) -> String {
    match part {
        Part::Write { text, .. } => format!("the write {text:?} (judged as {WRITE_TOOL})"),
        _ => format!("{:?}", part.text()),
    }
}
