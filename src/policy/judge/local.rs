//! The workspace as this machine's filesystem has it, when the judge runs beside it
//! (`policy check --workspace DIR` on the worker's machine, a server sharing it).
//!
//! Paths are otherwise placed lexically, and a path inside the workspace can land
//! anywhere through a symlink in it (`link -> /etc`). So where the workspace root exists
//! here, the files a shell line writes (and, for the secrets, reads) are also resolved
//! through the symlinks that exist, and judged with where they land; a symlink that does
//! not resolve (dangling, a loop, not readable) leaves the write unknown. Only paths
//! inside the workspace are looked at: resolution stops where a link leads out of it.
//! Where the root does not exist here (a server elsewhere, a test's `/workspace`), nothing
//! is looked up and the judge is lexical only.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use super::path::{locate, normalize_path, WorkspacePath};

/// The workspace root, as named and as this filesystem resolves it.
pub(crate) struct LocalWorkspace {
    root: String,
    real: PathBuf,
}

/// Where a path of the workspace really is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// No symlink on the way: where it reads.
    Same,
    /// Elsewhere (absolute; under the root as named when it stays inside).
    Elsewhere(String),
    /// Through a symlink whose target does not exist: a write creates it there (the
    /// absolute path, as far as it can be told).
    Dangling(String),
    /// Through a symlink that does not resolve otherwise (a loop, not readable).
    Unresolvable,
}

impl LocalWorkspace {
    /// The workspace at `root`, if that is an existing directory on this machine.
    pub(crate) fn find(root: Option<&str>) -> Option<LocalWorkspace> {
        let root = normalize_path(root?);
        if !root.starts_with('/') {
            return None;
        }
        let real = std::fs::canonicalize(&root).ok()?;
        real.is_dir().then_some(LocalWorkspace { root, real })
    }

    /// `resolve` for a path that lies inside the workspace as written; `None` for one
    /// outside it (or from a home), which is not looked at.
    pub(crate) fn resolve_inside(&self, path: &str, root: Option<&str>) -> Option<Resolution> {
        match locate(path, root) {
            WorkspacePath::Inside(_) => Some(self.resolve(path)),
            WorkspacePath::Outside(_) => None,
        }
    }

    /// Where `path` (as written: relative to the root, or absolute inside it) lands: each
    /// existing component is followed through its symlinks, `..` after a symlink leaves
    /// from where it points (as the kernel does), and the components that do not exist yet
    /// are taken as written.
    pub(crate) fn resolve(&self, path: &str) -> Resolution {
        let relative = match path.strip_prefix('/') {
            Some(_) => match Path::new(path).strip_prefix(&self.root) {
                Ok(rest) => rest.to_path_buf(),
                Err(_) => return Resolution::Unresolvable,
            },
            None => PathBuf::from(path),
        };
        let mut at = self.real.clone();
        let mut exists = true;
        for component in relative.components() {
            let name = match component {
                Component::Normal(name) => name,
                Component::ParentDir => {
                    at.pop();
                    continue;
                }
                _ => continue,
            };
            // Past a missing component, or out of the workspace, the rest is as written.
            if !exists || !at.starts_with(&self.real) {
                at.push(name);
                continue;
            }
            let next = at.join(name);
            match std::fs::symlink_metadata(&next) {
                Ok(meta) if meta.file_type().is_symlink() => match std::fs::canonicalize(&next) {
                    Ok(real) => at = real,
                    Err(_) => return dangling(&at, &next),
                },
                Ok(_) => at = next,
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                    exists = false;
                    at = next;
                }
                Err(_) => return Resolution::Unresolvable,
            }
        }
        let Some(real) = at.to_str() else {
            return Resolution::Unresolvable;
        };
        let shown = match at.strip_prefix(&self.real) {
            Ok(rest) => normalize_path(&format!("{}/{}", self.root, rest.to_string_lossy())),
            Err(_) => real.to_string(),
        };
        let lexical = match path.starts_with('/') {
            true => normalize_path(path),
            false => normalize_path(&format!("{}/{path}", self.root)),
        };
        if shown == lexical {
            Resolution::Same
        } else {
            Resolution::Elsewhere(shown)
        }
    }
}

/// A symlink `link` (in the real directory `dir`) that does not resolve: where its target
/// would be, when it is only missing.
fn dangling(dir: &Path, link: &Path) -> Resolution {
    let Ok(target) = std::fs::read_link(link) else {
        return Resolution::Unresolvable;
    };
    match dir.join(target).to_str() {
        Some(created) => Resolution::Dangling(normalize_path(created)),
        None => Resolution::Unresolvable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_inside_the_workspace_are_followed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("src")).expect("mkdir");
        std::os::unix::fs::symlink("/etc", root.join("etc")).expect("link");
        std::os::unix::fs::symlink("src", root.join("code")).expect("link");
        std::fs::create_dir_all(root.join("src/sub")).expect("mkdir");
        std::os::unix::fs::symlink("src/sub", root.join("deep")).expect("link");
        std::os::unix::fs::symlink("/nonexistent/x", root.join("dangling")).expect("link");
        let named = root.to_str().expect("utf-8");
        let ws = LocalWorkspace::find(Some(named)).expect("exists");
        let under = |rest: &str| format!("{named}/{rest}");
        for (path, want) in [
            ("src/a.rs", Resolution::Same),
            ("new/dir/f", Resolution::Same),
            ("etc/passwd", Resolution::Elsewhere("/etc/passwd".into())),
            ("code/a.rs", Resolution::Elsewhere(under("src/a.rs"))),
            ("code/../x", Resolution::Same),
            ("deep/../x", Resolution::Elsewhere(under("src/x"))),
            ("etc/../root/x", Resolution::Elsewhere("/root/x".into())),
            ("dangling", Resolution::Dangling("/nonexistent/x".into())),
            ("dangling/x", Resolution::Dangling("/nonexistent/x".into())),
        ] {
            assert_eq!(ws.resolve(path), want, "{path}");
        }
        assert_eq!(
            ws.resolve(&under("etc/hosts")),
            Resolution::Elsewhere("/etc/hosts".into())
        );
        assert!(LocalWorkspace::find(Some("/no/such/workspace")).is_none());
        assert!(LocalWorkspace::find(None).is_none());
    }
}
