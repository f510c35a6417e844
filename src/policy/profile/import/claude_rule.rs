//! One Claude Code permission rule (`Bash(git diff:*)`, `Read(./.env)`, …): read, matched
//! the way Claude Code matches it (for the generated tests), and translated into a runplane
//! rule that means the same or, where no exact equivalent exists, something stricter.

use globset::GlobBuilder;

use super::Probe;
use crate::domain::Decision;
use crate::policy::profile::globs::path_glob;
use crate::policy::profile::schema::PermissionRule;

/// Claude Code applies `Edit` rules to every tool that edits files.
const EDIT_TOOLS: &[&str] = &["Edit", "Write", "MultiEdit", "NotebookEdit"];
/// Claude Code applies `Read` rules, best effort, to the tools that read files.
pub(super) const READ_TOOLS: &[&str] = &["Read", "Grep", "Glob", "LS", "NotebookRead"];
/// Tools whose specifier is a path but for which Claude Code's documents define no path
/// rules of their own (they are covered through `Edit(…)` and `Read(…)`).
const OTHER_PATH_TOOLS: &[&str] = &["Write", "MultiEdit", "NotebookEdit", "Grep", "Glob", "LS"];

/// What a `Bash(…)` specifier matches, over the command's words joined by single spaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum BashSpec {
    /// `Bash(npm run build)`: exactly this command.
    Exact(String),
    /// `Bash(git diff:*)`, `Bash(git diff *)`: these words, alone or followed by more.
    Prefix(String),
    /// `Bash(git * main)`: `*` is any text, spaces included.
    Glob(String),
}

/// Where a path pattern is anchored (Claude Code's four forms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Anchor {
    /// `/src/**`: the project root (the run's workspace).
    Project,
    /// `./src/**` or `src/**`: the current directory (the workspace, where the agent runs).
    Cwd,
    /// `~/x`: the home directory, outside every workspace.
    Home,
    /// `//etc/x`: an absolute path.
    Root,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PathSpec {
    pub anchor: Anchor,
    /// The glob after the anchor (`src/**`, `.env`), a directory pattern (`dir/`) already
    /// extended to `dir/**`.
    pub glob: String,
    /// A gitignore pattern without an inner `/` matches at any depth.
    pub any_depth: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Spec {
    /// No specifier (or `*`): every use of the tool.
    Any,
    Bash(BashSpec),
    Path(PathSpec),
    /// `WebFetch(domain:example.com)`.
    Domain(String),
}

/// A rule that could be read: its tool and what its specifier means, or why the specifier
/// has no runplane equivalent.
#[derive(Debug, Clone)]
pub(super) struct ClaudeRule {
    pub text: String,
    pub tool: String,
    pub spec: Result<Spec, String>,
}

/// Reads `Tool` or `Tool(specifier)`; `None` when not even a tool name can be read.
pub(super) fn parse(text: &str) -> Option<ClaudeRule> {
    let trimmed = text.trim();
    let (tool, inner) = match trimmed.split_once('(') {
        None => (trimmed, None),
        Some((tool, rest)) => (tool, Some(rest.strip_suffix(')'))),
    };
    let name_ok = !tool.is_empty()
        && tool
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        || (tool.starts_with("mcp__")
            && tool
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*')));
    if !name_ok {
        return None;
    }
    let spec = match inner.map(|i| i.map(str::trim)) {
        None | Some(Some("*")) => Ok(Spec::Any),
        Some(None) => Err("the specifier has no closing parenthesis".to_string()),
        Some(Some("")) => Err("an empty specifier".to_string()),
        Some(Some(inner)) => specifier(tool, inner),
    };
    Some(ClaudeRule {
        text: trimmed.to_string(),
        tool: tool.to_string(),
        spec,
    })
}

fn specifier(tool: &str, inner: &str) -> Result<Spec, String> {
    match tool {
        "Bash" => bash(inner).map(Spec::Bash),
        "Read" | "Edit" | "NotebookRead" => path(inner).map(Spec::Path),
        t if OTHER_PATH_TOOLS.contains(&t) => path(inner).map(Spec::Path),
        "WebFetch" => domain(inner).map(Spec::Domain),
        _ => Err(format!("a {tool}(…) specifier has no runplane equivalent")),
    }
}

/// A character a word may hold without the shell giving it a meaning (quotes, expansions,
/// globs, operators, comments): rules made of such words mean the same compared as text
/// (Claude Code) and as words after quote removal (runplane).
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            '-' | '_' | '.' | '/' | '=' | ':' | ',' | '@' | '%' | '+' | '^' | '~'
        )
}

fn bash(inner: &str) -> Result<BashSpec, String> {
    let (body, legacy) = match inner.strip_suffix(":*") {
        Some(body) => (body, true),
        None => (inner, false),
    };
    let words: Vec<&str> = body.split_whitespace().collect();
    let Some(first) = words.first() else {
        return Err("an empty command".into());
    };
    // runplane judges a command named by a path by its basename and never lets an
    // assignment pass an allow rule: such a first word cannot be compared as written.
    if first.contains('/') {
        return Err(format!(
            "runplane judges the command {first:?}, named by a path, by its basename and \
             never allows it"
        ));
    }
    if first.contains('=') {
        return Err(format!(
            "{first:?} is an assignment, which runplane never lets an allow rule pass"
        ));
    }
    for word in &words {
        let odd = word
            .chars()
            .find(|&c| !(plain(c) || c == '*'))
            .or_else(|| word.starts_with('~').then_some('~'));
        if let Some(c) = odd {
            return Err(format!(
                "{c:?} means something to the shell; runplane compares words after the shell has read them"
            ));
        }
    }
    let joined = words.join(" ");
    let stars = joined.matches('*').count();
    Ok(match (legacy, stars) {
        (true, 0) => BashSpec::Prefix(joined),
        (true, _) => return Err("`:*` after a wildcard".into()),
        (false, 0) => BashSpec::Exact(joined),
        // A single trailing ` *` is optional in Claude Code: `ls *` also matches `ls`.
        (false, 1) if words.len() > 1 && words.last() == Some(&"*") => {
            BashSpec::Prefix(words[..words.len() - 1].join(" "))
        }
        (false, _) => BashSpec::Glob(joined),
    })
}

fn path(inner: &str) -> Result<PathSpec, String> {
    let (anchor, rest) = if let Some(rest) = inner.strip_prefix("//") {
        (Anchor::Root, rest)
    } else if let Some(rest) = inner.strip_prefix("~/") {
        (Anchor::Home, rest)
    } else if let Some(rest) = inner.strip_prefix('/') {
        (Anchor::Project, rest)
    } else if let Some(rest) = inner.strip_prefix("./") {
        (Anchor::Cwd, rest)
    } else if inner.starts_with('~') {
        return Err("a path in another user's home".into());
    } else {
        (Anchor::Cwd, inner)
    };
    if rest.starts_with('!') || rest.is_empty() {
        return Err("an empty or negated path pattern".into());
    }
    if rest.split('/').any(|s| s == "..") && matches!(anchor, Anchor::Project | Anchor::Cwd) {
        return Err("a path that climbs out of the workspace".into());
    }
    let inner_slash = rest.trim_end_matches('/').contains('/');
    // gitignore: `dir/` is the directory, so everything below it. Braces are literal in
    // gitignore but alternatives in runplane's globs.
    let mut glob = rest.replace('{', "\\{").replace('}', "\\}");
    if glob.ends_with('/') {
        glob.push_str("**");
    }
    path_glob(&glob).map_err(|e| format!("the pattern is not a glob runplane reads: {e}"))?;
    Ok(PathSpec {
        anchor,
        glob,
        // gitignore reads `x` at any depth; Claude Code's documents read `./x` and `x` in
        // the current directory. Only a deny or ask takes the wider reading.
        any_depth: anchor == Anchor::Cwd && !inner_slash,
    })
}

fn domain(inner: &str) -> Result<String, String> {
    let host = inner
        .strip_prefix("domain:")
        .ok_or("a WebFetch specifier other than domain:HOST")?
        .trim();
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '*'))
    {
        return Err(format!("the domain {host:?} is not a host name"));
    }
    Ok(host.to_ascii_lowercase())
}

/// The runplane tool (or tool glob) a rule of `tool` is about.
fn runplane_tool(tool: &str, decision: Decision) -> String {
    let family = |tools: &[&str]| format!("{{{}}}", tools.join(","));
    match tool {
        "Edit" => family(EDIT_TOOLS),
        // An allow keeps to `Read` itself: for Grep and Glob a call may carry no path,
        // which every path constraint lets through.
        "Read" if decision != Decision::Allow => family(READ_TOOLS),
        t if is_mcp_server(t) => format!("{t}__*"),
        t => t.to_string(),
    }
}

/// `mcp__server` (no tool part) stands for every tool of the server.
fn is_mcp_server(tool: &str) -> bool {
    tool.strip_prefix("mcp__")
        .is_some_and(|rest| !rest.is_empty() && !rest.contains("__") && !rest.contains('*'))
}

/// A runplane rule, and a call it must decide (for the generated tests).
pub(super) struct Translated {
    pub rule: PermissionRule,
    pub probe: Option<Probe>,
    /// What the translation had to approximate (for the report).
    pub note: Option<String>,
}

impl ClaudeRule {
    /// The runplane rule with the same meaning, for a rule of the `decision` list; `Err`
    /// says why there is none. Where Claude Code's meaning is uncertain, a deny or ask
    /// takes the wider reading and an allow the narrower one.
    pub(super) fn translate(
        &self,
        decision: Decision,
        home: Option<&str>,
    ) -> Result<Translated, String> {
        let spec = self.spec.as_ref().map_err(Clone::clone)?;
        // Claude Code's own tools are spelt in PascalCase and compared exactly; runplane
        // compares tool names ignoring case, so an allow of `bash` would allow `Bash`.
        if decision == Decision::Allow
            && !self.tool.starts_with("mcp__")
            && !self.tool.starts_with(|c: char| c.is_ascii_uppercase())
        {
            return Err(format!(
                "Claude Code compares tool names exactly and has no tool {:?}; runplane ignores case",
                self.tool
            ));
        }
        let mut rule = PermissionRule::new(&runplane_tool(&self.tool, decision), decision);
        let mut probe = Probe::tool(&self.probe_tool());
        let mut note = None;
        match spec {
            // A file tool is called with a file: without one, every path rule matches.
            Spec::Any if self.is_path_tool() => probe.path = "a.txt".into(),
            Spec::Any => {}
            Spec::Bash(BashSpec::Prefix(words)) => {
                rule.command_allow = vec![words.clone()];
                probe.command = words.clone();
            }
            Spec::Bash(BashSpec::Exact(line) | BashSpec::Glob(line)) => {
                rule.specifier.sub_pattern = Some(line.clone());
                probe.command = line.replace('*', "x");
            }
            Spec::Domain(host) => {
                if decision == Decision::Allow && host.contains('*') {
                    return Err(
                        "a wildcard domain may mean less to Claude Code than to runplane".into(),
                    );
                }
                rule.domain_allow = vec![host.clone()];
                // Claude Code may count subdomains as the domain; a deny takes them too.
                if decision != Decision::Allow && !host.starts_with('*') {
                    rule.domain_allow.push(format!("*.{host}"));
                }
                probe.url = format!("https://{}/", host.replace('*', "x"));
            }
            Spec::Path(p) => {
                if decision == Decision::Allow && (OTHER_PATH_TOOLS.contains(&self.tool.as_str())) {
                    return Err(format!(
                        "Claude Code applies path rules for {} through Edit(…) and Read(…)",
                        self.tool
                    ));
                }
                let (globs, approx) = path_globs(p, decision, home)?;
                rule.path_allow = globs;
                note = approx;
                probe.path = probe_path(&claude_glob(p)).unwrap_or_default();
                if probe.path.is_empty() {
                    return Ok(Translated {
                        rule,
                        probe: None,
                        note,
                    });
                }
            }
        }
        Ok(Translated {
            rule,
            probe: Some(probe),
            note,
        })
    }

    /// The tool a test call of this rule uses: the rule's own name, made concrete.
    fn probe_tool(&self) -> String {
        if is_mcp_server(&self.tool) {
            format!("{}__x", self.tool)
        } else {
            self.tool.replace('*', "x")
        }
    }

    /// Whether Claude Code applies this rule to `call` (`None`: its specifier cannot be
    /// read, so nothing is known).
    pub(super) fn matches(&self, call: &Probe) -> Option<bool> {
        let spec = self.spec.as_ref().ok()?;
        if !self.covers_tool(&call.tool) {
            return Some(false);
        }
        Some(match spec {
            Spec::Any => true,
            Spec::Bash(BashSpec::Exact(line)) => call.command == *line,
            Spec::Bash(BashSpec::Prefix(words)) => {
                call.command == *words || call.command.starts_with(&format!("{words} "))
            }
            Spec::Bash(BashSpec::Glob(glob)) => wildcard(glob, &call.command),
            Spec::Domain(host) => call
                .url
                .split_once("://")
                .map(|(_, rest)| rest.split(['/', ':']).next().unwrap_or_default())
                .is_some_and(|h| wildcard(host, &h.to_ascii_lowercase())),
            Spec::Path(p) => GlobBuilder::new(&claude_glob(p))
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .is_ok_and(|g| g.compile_matcher().is_match(&call.path)),
        })
    }

    fn is_path_tool(&self) -> bool {
        let tool = self.tool.as_str();
        EDIT_TOOLS.contains(&tool) || READ_TOOLS.contains(&tool) || OTHER_PATH_TOOLS.contains(&tool)
    }

    fn covers_tool(&self, tool: &str) -> bool {
        match self.tool.as_str() {
            "Edit" => EDIT_TOOLS.contains(&tool),
            "Read" => READ_TOOLS.contains(&tool),
            t if is_mcp_server(t) => tool
                .strip_prefix(t)
                .is_some_and(|rest| rest.starts_with("__")),
            t => wildcard(t, tool),
        }
    }
}

/// The glob a path pattern names in Claude Code's narrower reading, as a call's path is
/// written: workspace-relative, `/abs` or `~/x`.
fn claude_glob(p: &PathSpec) -> String {
    match p.anchor {
        Anchor::Project | Anchor::Cwd => p.glob.clone(),
        Anchor::Home => format!("~/{}", p.glob),
        Anchor::Root => format!("/{}", p.glob),
    }
}

impl ClaudeRule {
    /// For a `Read(path)` deny rule: the path as `secrets` globs, so that no tool reads or
    /// writes it and the sandbox hides it (a file Claude Code may not read is a secret).
    /// Read the wider way, like every deny: `.env` at any depth.
    pub(super) fn secret_globs(&self) -> Option<Vec<String>> {
        let Ok(Spec::Path(p)) = &self.spec else {
            return None;
        };
        if self.tool != "Read" {
            return None;
        }
        Some(match p.anchor {
            Anchor::Project | Anchor::Cwd if p.any_depth => vec![format!("**/{}", p.glob)],
            _ => vec![claude_glob(p)],
        })
    }
}

/// The `path_allow` globs of a rule, and what was approximated.
fn path_globs(
    p: &PathSpec,
    decision: Decision,
    home: Option<&str>,
) -> Result<(Vec<String>, Option<String>), String> {
    let strict = decision != Decision::Allow;
    match p.anchor {
        Anchor::Project | Anchor::Cwd if strict && p.any_depth => {
            Ok((vec![format!("**/{}", p.glob)], None))
        }
        Anchor::Project | Anchor::Cwd => Ok((vec![p.glob.clone()], None)),
        // runplane never allows a path outside the workspace.
        _ if !strict => Err("a path outside the workspace, which runplane never allows".into()),
        Anchor::Home | Anchor::Root => {
            let mut globs = vec![claude_glob(p)];
            if let (Anchor::Home, Some(home)) = (p.anchor, home) {
                globs.push(format!("{}/{}", home.trim_end_matches('/'), p.glob));
            }
            // An absolute glob matches only paths outside the workspace (those inside are
            // made relative), so the same place seen from inside is added.
            let inside = anywhere(&p.glob);
            // A workspace lying inside the denied place itself is the case left out.
            let note = format!(
                "an absolute glob matches only paths outside the workspace, so it is also \
                 matched inside as {inside:?}; a workspace inside {:?} itself is not covered",
                claude_glob(p)
            );
            globs.push(inside);
            Ok((globs, Some(note)))
        }
    }
}

/// `**/` and the pattern from its last literal directory before the first wildcard (or its
/// last segment): `Users/a/secrets/**` → `**/secrets/**`, `etc/passwd` → `**/passwd`.
fn anywhere(glob: &str) -> String {
    let segments: Vec<&str> = glob.split('/').filter(|s| !s.is_empty()).collect();
    let first_wild = segments
        .iter()
        .position(|s| s.contains(['*', '?', '[']))
        .unwrap_or(segments.len());
    let start = first_wild
        .saturating_sub(1)
        .min(segments.len().saturating_sub(1));
    format!("**/{}", segments[start..].join("/"))
}

/// A concrete path a glob matches (`**` and `*` become `x`); `None` for a character class.
fn probe_path(glob: &str) -> Option<String> {
    if glob.contains('[') {
        return None;
    }
    Some(
        glob.replace("**", "x")
            .replace(['*', '?'], "x")
            .replace('\\', ""),
    )
}

/// `*` matches any text (also none); everything else itself.
fn wildcard(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == text;
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// For a rule with no runplane equivalent in a deny or ask list: a rule at least as strict.
/// A Bash rule keeps its plain first word (every command the rule is about starts with it);
/// anything else covers the whole tool.
pub(super) fn fallback(text: &str, tool: &str, decision: Decision) -> PermissionRule {
    let mut rule = PermissionRule::new(&runplane_tool(tool, decision), decision);
    if tool == "Bash" {
        let inner = text
            .trim()
            .strip_prefix("Bash(")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_default();
        let inner = inner.strip_suffix(":*").unwrap_or(inner);
        // A first word made only of plain characters is whole: whatever follows it in the
        // rule is after a blank. A command named by a path is judged by its basename.
        let first = inner.split_whitespace().next().unwrap_or_default();
        let first = first.rsplit('/').next().unwrap_or_default();
        if !first.is_empty() && first.chars().all(plain) && !first.contains('=') {
            rule.command_allow = vec![first.to_string()];
        }
    }
    rule
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> Result<Spec, String> {
        parse(text).expect("parses").spec
    }

    #[test]
    fn reads_bash_forms() {
        let prefix = |s: &str| Ok(Spec::Bash(BashSpec::Prefix(s.into())));
        assert_eq!(spec("Bash(git diff:*)"), prefix("git diff"));
        assert_eq!(spec("Bash(git  diff *)"), prefix("git diff"));
        assert_eq!(
            spec("Bash(npm run build)"),
            Ok(Spec::Bash(BashSpec::Exact("npm run build".into())))
        );
        assert_eq!(
            spec("Bash(git * main)"),
            Ok(Spec::Bash(BashSpec::Glob("git * main".into())))
        );
        assert_eq!(spec("Bash"), Ok(Spec::Any));
        assert_eq!(spec("Bash(*)"), Ok(Spec::Any));
        assert!(spec("Bash(echo \"a b\":*)").is_err());
        assert!(spec("Bash(./deploy.sh:*)").is_err());
        assert!(spec("Bash(git diff").is_err());
        assert!(parse("bad tool").is_none());
    }

    #[test]
    fn reads_path_anchors() {
        let path = |text: &str| match spec(text) {
            Ok(Spec::Path(p)) => (p.anchor, p.glob, p.any_depth),
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(path("Read(./.env)"), (Anchor::Cwd, ".env".into(), true));
        assert_eq!(
            path("Edit(/src/**/*.ts)"),
            (Anchor::Project, "src/**/*.ts".into(), false)
        );
        assert_eq!(
            path("Read(~/.ssh/**)"),
            (Anchor::Home, ".ssh/**".into(), false)
        );
        assert_eq!(
            path("Read(//etc/passwd)"),
            (Anchor::Root, "etc/passwd".into(), false)
        );
        assert_eq!(
            path("Read(secrets/)"),
            (Anchor::Cwd, "secrets/**".into(), true)
        );
        assert!(spec("Read(../x)").is_err());
    }

    #[test]
    fn anywhere_keeps_the_last_literal_directory() {
        assert_eq!(anywhere("Users/a/secrets/**"), "**/secrets/**");
        assert_eq!(anywhere("etc/passwd"), "**/passwd");
        assert_eq!(anywhere("*.pem"), "**/*.pem");
    }

    #[test]
    fn wildcard_matches_like_claude_code() {
        assert!(wildcard("git * main", "git checkout main"));
        assert!(!wildcard("git * main", "git main"));
        assert!(wildcard("ls*", "lsof"));
        assert!(wildcard("* --version", "node --version"));
        assert!(!wildcard("a*a", "a"));
    }

    #[test]
    fn fallback_keeps_a_whole_plain_first_word() {
        let rule = fallback("Bash(rm -rf \"$HOME\")", "Bash", Decision::Deny);
        assert_eq!(rule.command_allow, vec!["rm".to_string()]);
        let rule = fallback("Bash(./deploy.sh:*)", "Bash", Decision::Deny);
        assert_eq!(rule.command_allow, vec!["deploy.sh".to_string()]);
        for whole_tool in [
            "Bash($(evil))",
            "Bash(rm\"x\" y)",
            "Bash(A=1 make)",
            "Bash(x",
        ] {
            let rule = fallback(whole_tool, "Bash", Decision::Deny);
            assert!(rule.command_allow.is_empty(), "{whole_tool}");
        }
    }
}
