//! A profile's `secrets`, as the judge applies them: path globs no tool may read or write.
//!
//! They are checked before any rule, for every path a call names and every file a shell
//! line reads or writes as far as the judge can tell, so no allow rule and no grant can
//! open one. A glob is one of three kinds, by how it is written:
//! - `~/…`: relative to a home directory. The agent's home is not known to the server, so
//!   it is matched against paths written from a home (`~/x`, `~user/x`, `$HOME/x` in a
//!   shell word) and against absolute paths under a directory that is a home by
//!   convention (`/root`, `/home/NAME`, `/Users/NAME`) or is this process's `$HOME`;
//! - `/…`: an absolute path;
//! - anything else: relative to the workspace, matched as rules' path globs are (a path
//!   outside the workspace in its absolute form, so `**/.env` also reaches `/srv/.env`).
//!
//! Globs are matched ignoring case (on a case-insensitive checkout `.ENV` is `.env`), and
//! a path matches when it names a secret or a directory inside which the glob matches
//! every name (`secrets` for `secrets/**`): a search of that directory reads secrets.

use std::fmt;
use std::sync::OnceLock;

use globset::{GlobSet, GlobSetBuilder};

use super::path::{locate, normalize_path};
use crate::policy::profile::error::PolicyError;
use crate::policy::profile::globs::build_path_glob;

/// Paths secret in every profile: runplane's own data directory and the token files with
/// which the operator and the workers authenticate. An agent that read the operator's
/// token could answer its own asks, so no profile may leave them open.
pub(crate) const ALWAYS_SECRET: [&str; 4] = [
    "runplane-data/**",
    "**/runplane-data/**",
    "**/operator.token",
    "**/worker.token",
];

/// A name no glob that names particular files matches: a path matches a glob with it
/// appended when the glob covers everything inside the path.
const ANY_NAME: &str = "\u{1}";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    Workspace,
    Absolute,
    Home,
}

struct SecretGlob {
    /// As the profile wrote it.
    pattern: String,
    /// One of `ALWAYS_SECRET`.
    always: bool,
    /// The leading segments without glob characters (`.ssh` for `~/.ssh/**`): a directory
    /// above them holds the secret.
    literal: String,
}

/// The globs of one anchor as one set, over the path relative to the anchor (for `Home`,
/// without the `~/`), ignoring case: a path is matched once per form, not once per glob.
struct AnchorSet {
    anchor: Anchor,
    set: GlobSet,
    /// The index in `Secrets::globs` of each glob of the set.
    members: Vec<usize>,
}

/// How a path meets a secret glob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meets {
    /// The path is a secret.
    Matches,
    /// The path is a directory that holds secrets.
    Holds,
}

/// A path that is a secret, for the reason of a deny.
pub(crate) struct Hit<'s> {
    /// The path as it was placed (relative to the workspace, or absolute, or from `~`).
    shown: String,
    /// The home directory it was found under, when it was absolute.
    home: Option<String>,
    meets: Meets,
    glob: &'s SecretGlob,
}

impl fmt::Display for Hit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = match self.meets {
            Meets::Matches => "matches",
            Meets::Holds => "holds",
        };
        let list = if self.glob.always { "" } else { "secrets " };
        write!(f, "{:?} {how} {list}{:?}", self.shown, self.glob.pattern)?;
        if let Some(home) = &self.home {
            write!(f, " (under the home directory {home})")?;
        }
        if self.glob.always {
            f.write_str(", secret in every profile (runplane's own data and tokens)")?;
        }
        Ok(())
    }
}

/// The secret globs of one profile, with `ALWAYS_SECRET`, ready to match.
pub(crate) struct Secrets {
    globs: Vec<SecretGlob>,
    sets: Vec<AnchorSet>,
}

impl Secrets {
    /// Builds `ALWAYS_SECRET` and the profile's list (already validated).
    pub(crate) fn compile(list: &[String]) -> Result<Secrets, PolicyError> {
        let always = ALWAYS_SECRET.iter().map(|p| (p.to_string(), true));
        let listed = list.iter().map(|p| (p.clone(), false));
        let mut globs = Vec::new();
        let mut builders: Vec<(Anchor, GlobSetBuilder, Vec<usize>)> =
            [Anchor::Workspace, Anchor::Absolute, Anchor::Home]
                .into_iter()
                .map(|anchor| (anchor, GlobSetBuilder::new(), Vec::new()))
                .collect();
        for (i, (pattern, always)) in always.chain(listed).enumerate() {
            let (anchor, glob) = match pattern.strip_prefix("~/") {
                Some(rest) => (Anchor::Home, rest),
                None if pattern.starts_with('/') => (Anchor::Absolute, pattern.as_str()),
                None => (Anchor::Workspace, pattern.as_str()),
            };
            let field = format!("secrets[{}]", i.saturating_sub(ALWAYS_SECRET.len()));
            let built = build_path_glob(glob, true)
                .map_err(|e| PolicyError::new(field, format!("invalid glob {pattern:?}: {e}")))?;
            if let Some((_, builder, members)) = builders.iter_mut().find(|b| b.0 == anchor) {
                builder.add(built);
                members.push(i);
            }
            let literal = glob
                .split('/')
                .take_while(|s| !s.contains(['*', '?', '[', '{', '\\']))
                .collect::<Vec<_>>()
                .join("/");
            globs.push(SecretGlob {
                pattern,
                always,
                literal,
            });
        }
        let mut sets = Vec::new();
        for (anchor, builder, members) in builders {
            let set = builder
                .build()
                .map_err(|e| PolicyError::new("secrets", e.to_string()))?;
            sets.push(AnchorSet {
                anchor,
                set,
                members,
            });
        }
        Ok(Secrets { globs, sets })
    }

    /// The first secret `path` is (or, for a directory, holds), placed with respect to
    /// `root`, in the order of the list. With `searched`, the path is a directory searched
    /// through (Grep, Glob, LS), which also reads the home and absolute secrets of every
    /// directory below it.
    pub(crate) fn find(&self, path: &str, root: Option<&str>, searched: bool) -> Option<Hit<'_>> {
        let normalized = normalize_path(path);
        if normalized.is_empty() {
            return None;
        }
        let placed = Placed::new(&normalized, root);
        let mut best: Option<(usize, Meets, Option<String>)> = None;
        for anchored in &self.sets {
            let (candidate, home) = match anchored.anchor {
                Anchor::Workspace => (Some(placed.located.as_str()), None),
                Anchor::Absolute => (placed.absolute.as_deref(), None),
                Anchor::Home => match &placed.home {
                    Some((rest, home)) => (Some(rest.as_str()), home.clone()),
                    None => (None, None),
                },
            };
            let Some(candidate) = candidate else {
                continue;
            };
            if let Some((i, meets)) = self.meets(anchored, candidate, searched) {
                if best.as_ref().is_none_or(|(b, _, _)| i < *b) {
                    best = Some((i, meets, home));
                }
            }
        }
        let (i, meets, home) = best?;
        Some(Hit {
            shown: placed.located,
            home,
            meets,
            glob: &self.globs[i],
        })
    }

    /// The first glob of `anchored` that `candidate` meets, by its index in `globs`.
    fn meets(
        &self,
        anchored: &AnchorSet,
        candidate: &str,
        searched: bool,
    ) -> Option<(usize, Meets)> {
        // Most words are no secret: the cheap test first.
        let first = |path: &str| {
            let matched = anchored
                .set
                .is_match(path)
                .then(|| anchored.set.matches(path))?;
            matched.iter().map(|&m| anchored.members[m]).min()
        };
        let matches = first(candidate).map(|i| (i, Meets::Matches));
        let inside = match candidate {
            "" => ANY_NAME.to_string(),
            "/" => format!("/{ANY_NAME}"),
            dir => format!("{dir}/{ANY_NAME}"),
        };
        let holds = first(&inside).map(|i| (i, Meets::Holds));
        // A search of a directory above a home or absolute secret reads it. Not so for a
        // workspace secret: every search of the workspace would be one.
        let above = searched && anchored.anchor != Anchor::Workspace;
        let holds_below = anchored
            .members
            .iter()
            .copied()
            .find(|&i| above && self.globs[i].is_below(candidate))
            .map(|i| (i, Meets::Holds));
        [matches, holds, holds_below]
            .into_iter()
            .flatten()
            .min_by_key(|(i, _)| *i)
    }
}

impl SecretGlob {
    /// Whether the glob's fixed leading directories lie below the directory `dir`.
    fn is_below(&self, dir: &str) -> bool {
        matches!(dir, "" | "/") || self.literal.starts_with(&format!("{dir}/"))
    }
}

/// One path, in each form a kind of glob is matched against.
struct Placed {
    /// Relative to the workspace when inside it, else absolute (or from `~`).
    located: String,
    absolute: Option<String>,
    /// The path relative to a home directory, and that directory when the path was
    /// absolute.
    home: Option<(String, Option<String>)>,
}

impl Placed {
    fn new(normalized: &str, root: Option<&str>) -> Placed {
        let located = locate(normalized, root).as_str().to_string();
        if let Some(tilde) = normalized.strip_prefix('~') {
            // `~`, `~/x`, `~user/x`: the rest is relative to a home.
            let rest = tilde.split_once('/').map_or("", |(_, rest)| rest);
            return Placed {
                located,
                absolute: None,
                home: Some((rest.to_string(), None)),
            };
        }
        let absolute = if normalized.starts_with('/') {
            Some(normalized.to_string())
        } else {
            root.filter(|r| r.starts_with('/'))
                .map(|r| normalize_path(&format!("{r}/{normalized}")))
        };
        let home = absolute.as_deref().and_then(under_a_home);
        Placed {
            located,
            absolute,
            home,
        }
    }
}

/// An absolute path relative to the home directory it lies in, and that directory; a
/// directory above homes (`/`, `/home`) counts as the home itself, since it holds them.
fn under_a_home(absolute: &str) -> Option<(String, Option<String>)> {
    let own = process_home();
    let above = |dir: &str| dir == "/" || matches!(dir, "/home" | "/Users");
    if above(absolute) || own.is_some_and(|h| h.starts_with(&format!("{absolute}/"))) {
        return Some((String::new(), None));
    }
    let mut homes: Vec<String> = own.map(str::to_string).into_iter().collect();
    homes.push("/root".to_string());
    let mut segments = absolute.trim_start_matches('/').split('/');
    if let (Some(top @ ("home" | "Users")), Some(user)) = (segments.next(), segments.next()) {
        homes.push(format!("/{top}/{user}"));
    }
    homes.into_iter().find_map(|home| {
        let rest = if absolute == home {
            ""
        } else {
            absolute.strip_prefix(&home)?.strip_prefix('/')?
        };
        Some((rest.to_string(), Some(home.clone())))
    })
}

/// This process's home directory: where `policy check` runs is where the agent's home is,
/// and a server on the agent's machine shares it. `/` is left out (it holds everything).
fn process_home() -> Option<&'static str> {
    static HOME: OnceLock<Option<String>> = OnceLock::new();
    HOME.get_or_init(|| {
        std::env::var("HOME")
            .ok()
            .map(|h| normalize_path(&h))
            .filter(|h| h.starts_with('/') && h != "/")
    })
    .as_deref()
}

/// The word a shell word names from the home directory, when it starts with `$HOME` or
/// `${HOME}` (quoted or not) and the rest is plain text: `"$HOME"/.ssh/id_rsa` is
/// `~/.ssh/id_rsa`.
pub(crate) fn home_form(source: &str) -> Option<String> {
    let rest = [
        "\"$HOME\"",
        "\"${HOME}\"",
        "\"$HOME",
        "\"${HOME}",
        "$HOME",
        "${HOME}",
    ]
    .iter()
    .find_map(|prefix| source.strip_prefix(prefix))?;
    if !rest.starts_with(['/', '"']) && !rest.is_empty() {
        return None;
    }
    if rest.contains(['$', '`', '\\']) {
        return None;
    }
    let rest: String = rest.chars().filter(|c| !matches!(c, '"' | '\'')).collect();
    Some(format!("~{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(list: &[&str]) -> Secrets {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        Secrets::compile(&list).expect("compiles")
    }

    #[test]
    fn each_kind_of_glob_meets_the_paths_it_names() {
        let s = secrets(&[
            "~/.ssh/**",
            ".env",
            "**/.env.*",
            "secrets/**",
            "/etc/shadow",
        ]);
        let root = Some("/work/repo");
        for (path, searched, want) in [
            (".env", false, Some(r#"".env" matches secrets ".env""#)),
            (".ENV", false, Some(r#"".ENV" matches secrets ".env""#)),
            (
                "/work/repo/.env",
                false,
                Some(r#"".env" matches secrets ".env""#),
            ),
            (
                "a/.env.local",
                false,
                Some(r#""a/.env.local" matches secrets "**/.env.*""#),
            ),
            (
                "secrets",
                false,
                Some(r#""secrets" holds secrets "secrets/**""#),
            ),
            (
                "secrets/k",
                false,
                Some(r#""secrets/k" matches secrets "secrets/**""#),
            ),
            (
                "~/.ssh/id_rsa",
                false,
                Some(r#""~/.ssh/id_rsa" matches secrets "~/.ssh/**""#),
            ),
            (
                "~root/.ssh",
                false,
                Some(r#""~root/.ssh" holds secrets "~/.ssh/**""#),
            ),
            (
                "/root/.ssh/id_rsa",
                false,
                Some(
                    r#""/root/.ssh/id_rsa" matches secrets "~/.ssh/**" (under the home directory /root)"#,
                ),
            ),
            (
                "/home/dev/.ssh/k",
                false,
                Some(
                    r#""/home/dev/.ssh/k" matches secrets "~/.ssh/**" (under the home directory /home/dev)"#,
                ),
            ),
            (
                "/etc/shadow",
                false,
                Some(r#""/etc/shadow" matches secrets "/etc/shadow""#),
            ),
            ("~", true, Some(r#""~" holds secrets "~/.ssh/**""#)),
            ("/etc", true, Some(r#""/etc" holds secrets "/etc/shadow""#)),
            (
                "runplane-data/operator.token",
                false,
                Some(
                    r#""runplane-data/operator.token" matches "runplane-data/**", secret in every profile (runplane's own data and tokens)"#,
                ),
            ),
            ("~", false, None),
            ("/etc", false, None),
            (".", true, None),
            ("src/main.rs", false, None),
            ("env.rs", false, None),
            ("/work/repo/repo/.ssh/x", false, None),
        ] {
            let hit = s.find(path, root, searched).map(|h| h.to_string());
            assert_eq!(hit.as_deref(), want, "{path} searched={searched}");
        }
    }

    #[test]
    fn home_words_are_read_from_home() {
        for (source, want) in [
            ("$HOME/.ssh/id_rsa", Some("~/.ssh/id_rsa")),
            ("\"$HOME\"/.ssh/id_rsa", Some("~/.ssh/id_rsa")),
            ("\"${HOME}/.ssh/id_rsa\"", Some("~/.ssh/id_rsa")),
            ("$HOME", Some("~")),
            ("$HOMEDIR/x", None),
            ("$HOME/$x", None),
            ("$PWD/.env", None),
        ] {
            assert_eq!(home_form(source).as_deref(), want, "{source}");
        }
    }
}
