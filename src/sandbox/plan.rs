//! The sandbox plan: what the agent, and everything it starts, may read, write and reach.
//! It is compiled from the run's profile and the worker's facts (workspace, home, the
//! agent's own state, the run's private directories) by one pure function, so that what
//! `runplane work --print-sandbox` shows, what is hashed into the run's log and what the
//! kernel is told are the same thing. The OS calls that place it live beside it
//! (`materialise`, `bwrap`, `kernel`).

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Names inside the workspace that stay read-only although the workspace is writable:
/// the judge's list, so that what it refuses and what the kernel refuses are one.
pub use crate::policy::PROTECTED_NAMES;

/// runplane's own files, hidden whatever the profile says: a token read by the agent
/// would let it answer its own asks.
pub const RUNPLANE_SECRETS: [&str; 4] = [
    "runplane-data",
    "**/runplane-data",
    "**/operator.token",
    "**/worker.token",
];

/// What the worker knows when it compiles the plan. Every path is absolute and already
/// resolved (the edge canonicalises them).
#[derive(Debug, Clone, Default)]
pub struct PlanInput {
    /// The agent's working directory: writable, except for its protected names.
    pub workspace: PathBuf,
    /// Git directories of the workspace that live elsewhere (a worktree's gitdir and its
    /// common dir): read-only like `.git`.
    pub git_dirs: Vec<PathBuf>,
    /// The home directory `~/` secrets are relative to.
    pub home: PathBuf,
    /// The run's private temp dir: the agent's `TMPDIR`, writable, gone with the run.
    pub run_tmp: PathBuf,
    /// The worker's private directory (the hook socket, the plan file): readable, never
    /// writable, so the agent can reach its hooks but not change what starts the gate.
    pub private: PathBuf,
    /// The agent's own state (`~/.claude`, a fresh `CODEX_HOME`, …): writable.
    pub agent_state: Vec<PathBuf>,
    /// Where the agent's program lives, and the `runplane` executable its hooks run:
    /// readable, and kept visible where the sandbox's private `/tmp` would hide them (a
    /// wrapper script in a temp dir, a runplane built under `/tmp`).
    pub programs: Vec<PathBuf>,
    /// The profile's secret globs (`~/`-relative, absolute or workspace-relative).
    pub secrets: Vec<String>,
    /// The profile's own protected paths, relative to the workspace: read-only like the
    /// protected names.
    pub protected: Vec<String>,
    /// The profile's writable places outside the workspace (absolute or `~/`): writable.
    /// Anything else (a relative path, `/` or the home itself) is left out: the server
    /// validated the profile, and a place the plan cannot vouch for is not opened.
    pub writable: Vec<String>,
    /// runplane's credential files on this machine (token files, client keys, the data
    /// dir): hidden, whatever the profile says.
    pub credentials: Vec<PathBuf>,
    /// The endpoints the egress proxy admits, as `host:port`.
    pub egress: Vec<String>,
}

/// A set of paths the agent cannot read: a literal path, or a glob under a root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hidden {
    /// The directory the glob is relative to (`/` for an absolute glob).
    pub root: PathBuf,
    /// A glob relative to `root` (`**/.env`), or empty for `root` itself.
    pub glob: String,
}

/// The plan. Reads are allowed everywhere except `hidden`; writes only in `writable`,
/// never in `read_only`; network only to the egress proxy, which admits `egress`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Where the agent may write (bound read-write).
    pub writable: Vec<PathBuf>,
    /// Paths inside `writable` that stay read-only.
    pub read_only: Vec<PathBuf>,
    /// What the agent cannot read (nor write).
    pub hidden: Vec<Hidden>,
    /// Readable, not writable, and kept visible where the rest of its parent is not
    /// (the worker's private directory under a private `/tmp`).
    pub visible: Vec<PathBuf>,
    /// The agent's `TMPDIR`.
    pub tmpdir: PathBuf,
    /// The working directory the agent starts in.
    pub workdir: PathBuf,
    /// Endpoints (`host:port`, host globs allowed) the egress proxy admits.
    pub egress: Vec<String>,
}

/// What the plan lets the agent do with one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Neither read nor write.
    Hidden,
    /// Read, not write.
    ReadOnly,
    /// Read and write.
    Writable,
}

/// A path the plan cannot place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    /// `~user/…`: another user's home is not known to the plan.
    #[error("{0:?}: another user's home directory (~user) is not known to the sandbox plan")]
    OtherHome(String),
}

/// Compiles the plan. Pure: the same input gives the same plan on every machine.
pub fn compile(input: &PlanInput) -> Plan {
    let mut writable = vec![input.workspace.clone(), input.run_tmp.clone()];
    writable.extend(input.agent_state.iter().cloned());
    writable.extend(
        input
            .writable
            .iter()
            .filter_map(|place| outside_place(place, &input.home)),
    );
    let mut read_only: Vec<PathBuf> = PROTECTED_NAMES
        .iter()
        .copied()
        .chain(input.protected.iter().map(String::as_str))
        .filter(|name| !name.starts_with(['/', '~']) && !name.split('/').any(|s| s == ".."))
        .map(|name| normalise(&input.workspace.join(name)))
        .collect();
    read_only.extend(input.git_dirs.iter().cloned());
    let mut hidden: Vec<Hidden> = input
        .secrets
        .iter()
        .map(|glob| rooted(glob, &input.workspace, &input.home))
        .collect();
    hidden.extend(
        RUNPLANE_SECRETS
            .iter()
            .map(|glob| rooted(glob, &input.workspace, &input.home)),
    );
    hidden.extend(input.credentials.iter().map(|path| Hidden {
        root: path.clone(),
        glob: String::new(),
    }));
    for list in [&mut writable, &mut read_only] {
        list.sort();
        list.dedup();
    }
    hidden.sort_by(|a, b| (&a.root, &a.glob).cmp(&(&b.root, &b.glob)));
    hidden.dedup();
    let mut egress = input.egress.clone();
    egress.sort();
    egress.dedup();
    Plan {
        writable,
        read_only,
        hidden,
        visible: {
            let mut visible = vec![input.private.clone()];
            visible.extend(input.programs.iter().cloned());
            visible.sort();
            visible.dedup();
            visible
        },
        tmpdir: input.run_tmp.clone(),
        workdir: input.workspace.clone(),
        egress,
    }
}

/// A writable place of the profile on this machine: `~/x` under the home, `/x` as is;
/// `None` for anything else, and for `/` or the home itself.
fn outside_place(place: &str, home: &Path) -> Option<PathBuf> {
    let path = match place.strip_prefix("~/") {
        Some(rest) => home.join(rest),
        None if place.starts_with('/') => PathBuf::from(place),
        None => return None,
    };
    let path = normalise(&path);
    (path != Path::new("/") && path != normalise(home)).then_some(path)
}

/// A secret glob as a root and a glob under it.
fn rooted(glob: &str, workspace: &Path, home: &Path) -> Hidden {
    let (root, rest) = if let Some(rest) = glob.strip_prefix("~/") {
        (home.to_path_buf(), rest)
    } else if let Some(rest) = glob.strip_prefix('/') {
        (PathBuf::from("/"), rest)
    } else {
        (
            workspace.to_path_buf(),
            glob.strip_prefix("./").unwrap_or(glob),
        )
    };
    // A trailing `/**` hides the place itself, not only what is in it.
    let mut rest = rest;
    while let Some(shorter) = rest.strip_suffix("/**") {
        rest = shorter;
    }
    if rest == "**" {
        rest = "";
    }
    // The literal directories at the front of the glob become part of the root, so the
    // edge walks only where a match can be.
    let mut root = root;
    let mut parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    while parts.len() > 1 && !is_pattern(parts[0]) {
        root.push(parts.remove(0));
    }
    if parts.len() == 1 && !is_pattern(parts[0]) {
        root.push(parts.remove(0));
    }
    Hidden {
        root,
        glob: parts.join("/"),
    }
}

fn is_pattern(part: &str) -> bool {
    part.contains(['*', '?', '[', '{', '\\'])
}

impl Plan {
    /// SHA-256 (lowercase hex) of the plan's canonical JSON: what the run's log records.
    pub fn hash(&self) -> String {
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        Sha256::digest(&canonical)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// What the plan lets the agent do with `path`: absolute, relative to the workspace,
    /// or `~/`-relative; `..` is resolved by name. Symlinks are the kernel's business: the
    /// edge binds real paths, so a link is as writable as the place it points to.
    pub fn access(&self, path: &str, home: &Path) -> Result<Access, PlaceError> {
        let path = self.place(path, home)?;
        if self.hidden.iter().any(|h| h.covers(&path)) {
            return Ok(Access::Hidden);
        }
        if self.read_only.iter().any(|r| path.starts_with(r)) {
            return Ok(Access::ReadOnly);
        }
        if self.writable.iter().any(|w| path.starts_with(w)) {
            return Ok(Access::Writable);
        }
        Ok(Access::ReadOnly)
    }

    fn place(&self, path: &str, home: &Path) -> Result<PathBuf, PlaceError> {
        let joined = if let Some(rest) = path.strip_prefix("~/") {
            home.join(rest)
        } else if path == "~" {
            home.to_path_buf()
        } else if path.starts_with('~') {
            return Err(PlaceError::OtherHome(path.to_string()));
        } else {
            self.workdir.join(path)
        };
        Ok(normalise(&joined))
    }
}

impl Hidden {
    /// Whether `path` (absolute, normalised) is this secret or inside it.
    pub fn covers(&self, path: &Path) -> bool {
        self.matcher().covers(path)
    }

    /// The glob compiled once, for checking many paths.
    pub fn matcher(&self) -> HiddenMatcher<'_> {
        let glob = match self.glob.as_str() {
            "" => None,
            glob => globset::GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .ok()
                .map(|g| g.compile_matcher()),
        };
        HiddenMatcher { hidden: self, glob }
    }
}

/// A [`Hidden`] with its glob compiled.
pub struct HiddenMatcher<'a> {
    hidden: &'a Hidden,
    /// `None`: the whole root is hidden (no glob, or one that does not compile: never
    /// less than the glob would hide).
    glob: Option<globset::GlobMatcher>,
}

impl HiddenMatcher<'_> {
    /// Whether `path` (absolute, normalised) is hidden: it, or one of its parents under
    /// the root, matches.
    pub fn covers(&self, path: &Path) -> bool {
        let Ok(rest) = path.strip_prefix(&self.hidden.root) else {
            return false;
        };
        let Some(matcher) = &self.glob else {
            return true;
        };
        let mut candidate = rest.to_path_buf();
        loop {
            if !candidate.as_os_str().is_empty() && matcher.is_match(&candidate) {
                return true;
            }
            if !candidate.pop() {
                return false;
            }
        }
    }
}

/// `path` with `.` and `..` resolved by name (`/..` stays `/`).
pub fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The plan as `--print-sandbox` shows it.
pub fn describe(plan: &Plan) -> String {
    let mut text = String::from("sandbox plan ");
    text.push_str(&plan.hash());
    text.push_str("\nreadable: everything except the hidden paths\nwritable:\n");
    let list = |text: &mut String, paths: &mut dyn Iterator<Item = String>| {
        for path in paths {
            text.push_str("  ");
            text.push_str(&path);
            text.push('\n');
        }
    };
    list(
        &mut text,
        &mut plan.writable.iter().map(|p| p.display().to_string()),
    );
    text.push_str("read-only inside them:\n");
    list(
        &mut text,
        &mut plan.read_only.iter().map(|p| p.display().to_string()),
    );
    text.push_str("hidden (neither read nor written):\n");
    list(
        &mut text,
        &mut plan.hidden.iter().map(|h| match h.glob.as_str() {
            "" => h.root.display().to_string(),
            glob => format!("{}/{glob}", h.root.display()),
        }),
    );
    text.push_str("network: only through runplane's egress proxy, which admits:\n");
    list(&mut text, &mut plan.egress.iter().cloned());
    if plan.egress.is_empty() {
        text.push_str("  (nothing but the agent's model endpoint)\n");
    }
    text.push_str("processes: no new privileges, own PID namespace, no signals or ptrace out\n");
    text.push_str(&format!("TMPDIR: {}\n", plan.tmpdir.display()));
    text
}
