//! A profile prepared for evaluation: globs built once, command entries split into words,
//! and the three-valued matching of one rule against one part of a call.

use globset::{GlobMatcher, GlobSet, GlobSetBuilder};

use super::error::PolicyError;
use super::globs::{build_path_glob, command_glob, domain_glob, tool_glob};
use super::schema::{PermissionRule, PolicyProfile};
use super::version::{canonical_form, content_hash};
use crate::domain::Decision;
use crate::policy::judge::network::Scope;
use crate::policy::judge::path::WorkspacePath;
use crate::policy::judge::secrets::Secrets;
use crate::policy::judge::words::Word;

/// Whether something holds, may hold, or does not: a part of a command that is only known
/// at run time *may* match. Allow rules need `Yes`; deny and ask rules take `Maybe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Tri {
    No,
    Maybe,
    Yes,
}

impl Tri {
    fn from_bool(b: bool) -> Self {
        if b {
            Tri::Yes
        } else {
            Tri::No
        }
    }

    fn not(self) -> Self {
        match self {
            Tri::No => Tri::Yes,
            Tri::Maybe => Tri::Maybe,
            Tri::Yes => Tri::No,
        }
    }
}

/// The command of a part, as far as rules are concerned.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CommandArg<'a> {
    /// No command: satisfies every command constraint.
    None,
    Words(&'a [Word]),
    /// Not known before it runs: only rules without a command constraint apply.
    Indeterminate,
}

/// The path of a part, as far as rules are concerned.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PathArg<'a> {
    /// No path: satisfies every path constraint.
    None,
    Known(&'a WorkspacePath),
    /// A write whose target is not known before it runs.
    Unknown,
}

/// One part of a call, as a rule sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'a> {
    pub tool: &'a str,
    pub command: CommandArg<'a>,
    pub path: PathArg<'a>,
    /// What holds for the whole call, whichever part is judged.
    pub facts: &'a CallFacts,
}

/// The URL's host and the input of a call, read once per call.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallFacts {
    host: HostArg,
    input: InputArg,
}

#[derive(Debug, Clone, Default)]
enum HostArg {
    /// No URL: satisfies every domain constraint.
    #[default]
    None,
    /// The host as a WHATWG URL parser reads it (lowercase; what a fetch would reach).
    Known(String),
    /// A URL without a readable host: only deny and ask rules may match it.
    Unreadable,
}

#[derive(Debug, Clone, Default)]
enum InputArg {
    /// No input: it carries no field, so no `input_match` holds.
    #[default]
    None,
    Object(serde_json::Map<String, serde_json::Value>),
    /// Not a JSON object: an `input_match` may hold (deny and ask rules apply).
    Unreadable,
}

impl CallFacts {
    /// Reads a call's URL and input.
    pub(crate) fn read(url: &str, input: &str) -> CallFacts {
        let host = if url.is_empty() {
            HostArg::None
        } else {
            url::Url::parse(url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
                .filter(|h| !h.is_empty())
                .map_or(HostArg::Unreadable, HostArg::Known)
        };
        let input = if input.trim().is_empty() {
            InputArg::None
        } else {
            match serde_json::from_str(input) {
                Ok(serde_json::Value::Object(map)) => InputArg::Object(map),
                _ => InputArg::Unreadable,
            }
        };
        CallFacts { host, input }
    }

    /// A text field of the call's input (a JSON object), if it has one.
    pub(crate) fn input_text(&self, key: &str) -> Option<&str> {
        match &self.input {
            InputArg::Object(fields) => fields.get(key).and_then(serde_json::Value::as_str),
            InputArg::None | InputArg::Unreadable => None,
        }
    }
}

pub(crate) struct CompiledRule {
    /// The tool name as written, for reasons.
    pub tool: String,
    /// When the name holds glob characters (`mcp__github__*`): the names it matches,
    /// ignoring ASCII case like every tool name comparison.
    tool_glob: Option<GlobMatcher>,
    pub decision: Decision,
    sub_pattern: Option<SubPattern>,
    path_allow: Option<PathGlobs>,
    path_deny: Option<PathGlobs>,
    command_allow: Vec<Vec<String>>,
    command_deny: Vec<Vec<String>>,
    domain_allow: Option<GlobSet>,
    domain_deny: Option<GlobSet>,
    input_match: std::collections::BTreeMap<String, serde_json::Value>,
}

/// One list of path globs (`path_allow` or `path_deny`), built twice: as written and
/// ignoring case.
///
/// On a case-insensitive filesystem (macOS, Windows, some mounts) `.ENV` and `Secrets/x`
/// are the files `.env` and `secrets/x`, and the server cannot know which filesystem the
/// worker has. So a path that matches a glob only when case is ignored *may* match it
/// (`Tri::Maybe`), like a word not known before it runs: an allow rule needs `Yes`, so
/// its `path_allow` holds only as written and its `path_deny` holds ignoring case; a deny
/// or ask rule takes `Maybe`, so its `path_allow` (the files it is about) reaches every
/// case and its `path_deny` (its exceptions) holds only as written. Either way a case
/// variant gets the stricter answer.
struct PathGlobs {
    exact: GlobSet,
    folded: GlobSet,
}

impl PathGlobs {
    fn matches(&self, path: &str) -> Tri {
        if self.exact.is_match(path) {
            Tri::Yes
        } else if self.folded.is_match(path) {
            Tri::Maybe
        } else {
            Tri::No
        }
    }
}

struct SubPattern {
    matcher: GlobMatcher,
    /// The pattern's text before its first glob character: every match starts with it.
    literal_prefix: String,
}

/// A validated profile ready to evaluate calls. Cheap to share (`Send + Sync`).
pub struct CompiledProfile {
    pub(crate) profile: PolicyProfile,
    pub(crate) rules: Vec<CompiledRule>,
    /// The profile's secrets and those of every profile, checked before the rules.
    pub(crate) secrets: Secrets,
    /// The profile's `network`, when it states one: checked before the rules.
    pub(crate) network: Option<Scope>,
    /// The profile in its canonical form (see `version`), kept for storing the version.
    canonical: String,
    /// The SHA-256 of `canonical`: the version's name.
    hash: String,
}

impl std::fmt::Debug for CompiledProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledProfile")
            .field("name", &self.profile.name)
            .finish_non_exhaustive()
    }
}

impl CompiledProfile {
    /// Validates and prepares a profile.
    pub fn compile(profile: PolicyProfile) -> Result<Self, PolicyError> {
        profile.validate()?;
        let rules = profile
            .rules
            .iter()
            .enumerate()
            .map(|(i, rule)| compile_rule(i, rule))
            .collect::<Result<_, _>>()?;
        let secrets = Secrets::compile(&profile.secrets)?;
        let network = Scope::of(&profile.network);
        let canonical = canonical_form(&profile);
        let hash = content_hash(&canonical);
        Ok(Self {
            profile,
            rules,
            secrets,
            network,
            canonical,
            hash,
        })
    }

    /// The profile as written.
    pub fn profile(&self) -> &PolicyProfile {
        &self.profile
    }

    /// The content hash of the profile (64 hex digits): same for every spelling of the
    /// same profile, different for any change to it.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The profile's canonical TOML: what the hash is taken over, and what the store keeps.
    pub fn canonical(&self) -> &str {
        &self.canonical
    }
}

fn compile_rule(i: usize, rule: &PermissionRule) -> Result<CompiledRule, PolicyError> {
    let glob_error = |field: String, pattern: &str, e: String| {
        PolicyError::new(field, format!("invalid glob {pattern:?}: {e}"))
    };
    let sub_pattern = match &rule.specifier.sub_pattern {
        None => None,
        Some(p) => Some(SubPattern {
            matcher: command_glob(p)
                .map_err(|e| glob_error(format!("rules[{i}].specifier.sub_pattern"), p, e))?
                .compile_matcher(),
            literal_prefix: p
                .chars()
                .take_while(|c| !matches!(c, '*' | '?' | '[' | '{' | '\\'))
                .collect(),
        }),
    };
    let set = |list: &str, patterns: &[String], folded: bool| -> Result<GlobSet, PolicyError> {
        let mut builder = GlobSetBuilder::new();
        for (j, p) in patterns.iter().enumerate() {
            builder.add(
                build_path_glob(p, folded)
                    .map_err(|e| glob_error(format!("rules[{i}].{list}[{j}]"), p, e))?,
            );
        }
        builder
            .build()
            .map_err(|e| PolicyError::new(format!("rules[{i}].{list}"), e.to_string()))
    };
    let globs = |list: &str, patterns: &[String]| -> Result<Option<PathGlobs>, PolicyError> {
        if patterns.is_empty() {
            return Ok(None);
        }
        Ok(Some(PathGlobs {
            exact: set(list, patterns, false)?,
            folded: set(list, patterns, true)?,
        }))
    };
    let domains = |list: &str, patterns: &[String]| -> Result<Option<GlobSet>, PolicyError> {
        if patterns.is_empty() {
            return Ok(None);
        }
        let mut builder = GlobSetBuilder::new();
        for (j, p) in patterns.iter().enumerate() {
            builder.add(
                domain_glob(p).map_err(|e| glob_error(format!("rules[{i}].{list}[{j}]"), p, e))?,
            );
        }
        builder
            .build()
            .map(Some)
            .map_err(|e| PolicyError::new(format!("rules[{i}].{list}"), e.to_string()))
    };
    let entries = |list: &[String]| -> Vec<Vec<String>> {
        list.iter()
            .map(|e| e.split_whitespace().map(str::to_string).collect())
            .collect()
    };
    let tool = &rule.specifier.tool;
    let tool_glob = if tool.contains(['*', '?', '[', '{']) {
        let glob = tool_glob(tool)
            .map_err(|e| glob_error(format!("rules[{i}].specifier.tool"), tool, e))?;
        Some(glob.compile_matcher())
    } else {
        None
    };
    Ok(CompiledRule {
        tool: tool.clone(),
        tool_glob,
        decision: rule.decision,
        sub_pattern,
        path_allow: globs("path_allow", &rule.path_allow)?,
        path_deny: globs("path_deny", &rule.path_deny)?,
        command_allow: entries(&rule.command_allow),
        command_deny: entries(&rule.command_deny),
        domain_allow: domains("domain_allow", &rule.domain_allow)?,
        domain_deny: domains("domain_deny", &rule.domain_deny)?,
        input_match: rule.input_match.clone(),
    })
}

impl CompiledRule {
    /// Whether the rule is about `tool`: its name ignoring ASCII case, or its glob.
    pub(crate) fn is_for(&self, tool: &str) -> bool {
        match &self.tool_glob {
            Some(glob) => glob.is_match(tool),
            None => self.tool.eq_ignore_ascii_case(tool),
        }
    }

    fn has_command_constraint(&self) -> bool {
        self.sub_pattern.is_some()
            || !self.command_allow.is_empty()
            || !self.command_deny.is_empty()
    }

    /// Whether the rule matches the subject (its tool already checked with `is_for`).
    pub(crate) fn matches(&self, subject: &Subject<'_>) -> Tri {
        let command = match subject.command {
            CommandArg::None => match &self.sub_pattern {
                Some(p) => Tri::from_bool(p.matcher.is_match("")),
                None => Tri::Yes,
            },
            CommandArg::Indeterminate if self.has_command_constraint() => Tri::No,
            CommandArg::Indeterminate => Tri::Yes,
            CommandArg::Words(words) => self.command_matches(words),
        };
        if command == Tri::No {
            return Tri::No;
        }
        command
            .min(self.path_matches(subject.path))
            .min(self.domain_matches(&subject.facts.host))
            .min(self.input_matches(&subject.facts.input))
    }

    fn domain_matches(&self, host: &HostArg) -> Tri {
        if self.domain_allow.is_none() && self.domain_deny.is_none() {
            return Tri::Yes;
        }
        match host {
            HostArg::None => Tri::Yes,
            HostArg::Unreadable => Tri::Maybe,
            HostArg::Known(host) => {
                let denied = self.domain_deny.as_ref().is_some_and(|s| s.is_match(host));
                let allowed = self.domain_allow.as_ref().is_none_or(|s| s.is_match(host));
                Tri::from_bool(!denied && allowed)
            }
        }
    }

    fn input_matches(&self, input: &InputArg) -> Tri {
        if self.input_match.is_empty() {
            return Tri::Yes;
        }
        match input {
            InputArg::None => Tri::No,
            InputArg::Unreadable => Tri::Maybe,
            InputArg::Object(fields) => Tri::from_bool(
                self.input_match
                    .iter()
                    .all(|(key, value)| fields.get(key) == Some(value)),
            ),
        }
    }

    fn command_matches(&self, words: &[Word]) -> Tri {
        let sub = match &self.sub_pattern {
            Some(p) => sub_pattern_matches(p, words),
            None => Tri::Yes,
        };
        let denied = any(&self.command_deny, words);
        let allowed = if self.command_allow.is_empty() {
            Tri::Yes
        } else {
            any(&self.command_allow, words)
        };
        sub.min(denied.not()).min(allowed)
    }

    fn path_matches(&self, path: PathArg<'_>) -> Tri {
        let constrained = self.path_allow.is_some() || self.path_deny.is_some();
        match path {
            PathArg::None => Tri::Yes,
            // Like an indeterminate command: only rules without a path constraint apply.
            PathArg::Unknown => Tri::from_bool(!constrained),
            PathArg::Known(p) => {
                let p = p.as_str();
                let denied = self.path_deny.as_ref().map_or(Tri::No, |s| s.matches(p));
                if denied == Tri::Yes {
                    return Tri::No;
                }
                let allowed = self.path_allow.as_ref().map_or(Tri::Yes, |s| s.matches(p));
                denied.not().min(allowed)
            }
        }
    }
}

/// The strongest match of any entry.
fn any(entries: &[Vec<String>], words: &[Word]) -> Tri {
    let mut best = Tri::No;
    for entry in entries {
        best = best.max(entry_matches(entry, words));
        if best == Tri::Yes {
            break;
        }
    }
    best
}

/// An entry matches a command whose first words are the entry's words. A word not known
/// before it runs (which may also become several words, or none) may match.
fn entry_matches(entry: &[String], words: &[Word]) -> Tri {
    for (k, expected) in entry.iter().enumerate() {
        match words.get(k) {
            None => return Tri::No,
            Some(w) => match w.exact() {
                Some(actual) if actual == expected => {}
                Some(_) => return Tri::No,
                None => return Tri::Maybe,
            },
        }
    }
    Tri::Yes
}

fn sub_pattern_matches(pattern: &SubPattern, words: &[Word]) -> Tri {
    let mut line = String::new();
    for (k, w) in words.iter().enumerate() {
        let Some(text) = w.exact() else {
            // Everything from here on is unknown: a match is possible only if the known
            // start of the line and the pattern's literal start agree.
            if k > 0 {
                line.push(' ');
            }
            let prefix = &pattern.literal_prefix;
            let agree = line.starts_with(prefix.as_str()) || prefix.starts_with(line.as_str());
            return if agree { Tri::Maybe } else { Tri::No };
        };
        if k > 0 {
            line.push(' ');
        }
        line.push_str(text);
    }
    Tri::from_bool(pattern.matcher.is_match(&line))
}
