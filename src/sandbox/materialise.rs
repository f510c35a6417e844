//! The plan placed on this machine's filesystem: which of its paths exist, the secret
//! globs expanded to the files and directories that match them now, the protected
//! directories made where they are missing (so that the agent cannot create them), and
//! the unreadable stand-ins that cover hidden paths. The OS side of [`super::plan`].

use std::path::{Path, PathBuf};

use super::bwrap::Mounts;
use super::plan::{Hidden, Plan};

/// How many directory entries one secret glob may walk: a glob that would walk the whole
/// filesystem is a mistake in the profile, and stopping is safer than guessing.
const WALK_BUDGET: usize = 500_000;

/// Why the plan cannot be placed: the agent must not start.
#[derive(Debug, thiserror::Error)]
pub enum MaterialiseError {
    /// A filesystem call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A secret glob matches too much to place.
    #[error(
        "the secret glob {glob:?} under {root} walks more than {WALK_BUDGET} entries; \
         make it narrower"
    )]
    TooWide {
        /// The glob.
        glob: String,
        /// Its root.
        root: PathBuf,
    },
}

/// Protected directories the worker made (empty) for a run; removed again after it, if
/// still empty.
#[derive(Debug, Default)]
pub struct Placeholders(Vec<PathBuf>);

impl Drop for Placeholders {
    fn drop(&mut self) {
        for dir in &self.0 {
            // Only an empty directory goes; anything else stays as it is.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Places `plan`; `private` is the worker's private directory, where the stand-ins go.
pub fn materialise(
    plan: &Plan,
    private: &Path,
) -> Result<(Mounts, Placeholders), MaterialiseError> {
    let mut placeholders = Placeholders::default();
    for path in &plan.read_only {
        let is_agent_settings = path
            .file_name()
            .is_some_and(|name| name == ".claude" || name == ".codex");
        if is_agent_settings && !path.exists() && path.parent().is_some_and(Path::is_dir) {
            std::fs::create_dir(path).map_err(|source| MaterialiseError::Io {
                what: "create the protected directory",
                path: path.clone(),
                source,
            })?;
            placeholders.0.push(path.clone());
        }
    }
    let existing = |paths: &[PathBuf]| -> Vec<PathBuf> {
        paths.iter().filter(|p| p.exists()).cloned().collect()
    };
    let mut mounts = Mounts {
        writable: existing(&plan.writable),
        read_only: existing(&plan.read_only),
        visible: existing(&plan.visible),
        workdir: plan.workdir.clone(),
        ..Mounts::default()
    };
    for hidden in &plan.hidden {
        for path in matches(hidden)? {
            // symlink_metadata: a link is covered as itself, never followed out.
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => mounts.hidden_dirs.push(path),
                Ok(_) => mounts.hidden_files.push(path),
                Err(_) => {}
            }
        }
    }
    for list in [&mut mounts.hidden_dirs, &mut mounts.hidden_files] {
        list.sort();
        list.dedup();
    }
    (mounts.blocker_file, mounts.blocker_dir) = blockers(private)?;
    Ok((mounts, placeholders))
}

/// The existing paths `hidden` names: its root, or what under it matches its glob (a
/// matching directory is not walked further: it is hidden whole).
fn matches(hidden: &Hidden) -> Result<Vec<PathBuf>, MaterialiseError> {
    if hidden.glob.is_empty() {
        return Ok(if std::fs::symlink_metadata(&hidden.root).is_ok() {
            vec![hidden.root.clone()]
        } else {
            Vec::new()
        });
    }
    let matcher = hidden.matcher();
    let mut found = Vec::new();
    let mut budget = WALK_BUDGET;
    let mut pending = vec![hidden.root.clone()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            budget = budget
                .checked_sub(1)
                .ok_or_else(|| MaterialiseError::TooWide {
                    glob: hidden.glob.clone(),
                    root: hidden.root.clone(),
                })?;
            let path = entry.path();
            if matcher.covers(&path) {
                found.push(path);
            } else if entry.file_type().is_ok_and(|t| t.is_dir()) && entry.file_name() != ".git" {
                pending.push(path);
            }
        }
    }
    Ok(found)
}

/// The unreadable file and directory that cover hidden paths.
fn blockers(private: &Path) -> Result<(PathBuf, PathBuf), MaterialiseError> {
    use std::os::unix::fs::PermissionsExt as _;
    let file = private.join("hidden-file");
    let dir = private.join("hidden-dir");
    let io = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| MaterialiseError::Io { what, path, source }
    };
    std::fs::write(&file, b"").map_err(io("create", &file))?;
    std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    for path in [&file, &dir] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o000))
            .map_err(io("make unreadable", path))?;
    }
    Ok((file, dir))
}
