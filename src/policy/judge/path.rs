//! Lexical path handling: what a path names relative to the run's workspace.
//!
//! Nothing here touches the filesystem: the policy must answer the same on the server as
//! on the worker's machine, and must not be steered by files the agent creates. Symlinks
//! are therefore not resolved here; a worker that resolves a path sends the result as the
//! call's resolved path, which is judged as well (`ToolCall::resolved_path`), and beyond
//! that containing them is the sandbox's job.

/// Where a path lies with respect to the workspace root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspacePath {
    /// Inside the workspace, relative to its root (`.` for the root itself).
    Inside(String),
    /// Outside the workspace (or not placeable), normalised; absolute when it can be.
    Outside(String),
}

impl WorkspacePath {
    /// The string path globs are matched against.
    pub fn as_str(&self) -> &str {
        match self {
            WorkspacePath::Inside(p) | WorkspacePath::Outside(p) => p,
        }
    }

    /// Whether the path escapes the workspace (and so is never allowed).
    pub fn is_outside(&self) -> bool {
        matches!(self, WorkspacePath::Outside(_))
    }
}

/// Normalises a path lexically: drops `.` and empty segments, resolves `a/..`, keeps
/// leading `..` of a relative path, and never climbs above `/`. Idempotent.
///
/// An empty path stays empty; a relative path that resolves to nothing becomes `.`.
pub fn normalize_path(path: &str) -> String {
    if path.is_empty() {
        return String::new();
    }
    let absolute = path.starts_with('/');
    let mut stack: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => match stack.last() {
                Some(&last) if last != ".." => {
                    stack.pop();
                }
                // `/..` is `/`; a relative path keeps the `..` that leaves its base.
                _ if absolute => {}
                _ => stack.push(".."),
            },
            other => stack.push(other),
        }
    }
    let joined = stack.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

/// Whether the normalised `path` is one of `places` (normalised absolute or `~/` paths:
/// a profile's `writable`) or lies inside one.
pub(crate) fn within(path: &str, places: &[String]) -> bool {
    places.iter().any(|place| {
        path == place
            || path
                .strip_prefix(place.as_str())
                .is_some_and(|r| r.starts_with('/'))
    })
}

/// Places `path` with respect to `workspace_root`.
///
/// A relative path is taken relative to the root. Without a root, every absolute path
/// and every relative path that climbs out counts as outside. A root that is not
/// absolute cannot contain an absolute path. A path starting with `~` names a home
/// directory, which is never the workspace.
pub fn locate(path: &str, workspace_root: Option<&str>) -> WorkspacePath {
    let normalized = normalize_path(path);
    if normalized.starts_with('~') {
        return WorkspacePath::Outside(normalized);
    }
    let root = workspace_root
        .filter(|r| !r.is_empty())
        .map(normalize_path)
        .filter(|r| r.starts_with('/'));
    let absolute = if normalized.starts_with('/') {
        normalized
    } else {
        match &root {
            Some(root) => normalize_path(&format!("{root}/{normalized}")),
            None if escapes(&normalized) => return WorkspacePath::Outside(normalized),
            None => return WorkspacePath::Inside(normalized),
        }
    };
    match root
        .as_deref()
        .and_then(|root| relative_to(&absolute, root))
    {
        Some(rel) => WorkspacePath::Inside(rel),
        None => WorkspacePath::Outside(absolute),
    }
}

fn escapes(relative: &str) -> bool {
    relative == ".." || relative.starts_with("../")
}

/// `path` relative to `root`, if it is the root or below it (both normalised, absolute).
fn relative_to(path: &str, root: &str) -> Option<String> {
    if path == root {
        return Some(".".to_string());
    }
    if root == "/" {
        return Some(path.trim_start_matches('/').to_string());
    }
    path.strip_prefix(root)
        .and_then(|rest| rest.strip_prefix('/'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes() {
        for (input, want) in [
            ("./a/../.env", ".env"),
            ("a//b/./c/", "a/b/c"),
            ("../x", "../x"),
            ("a/../../x", "../x"),
            ("/a/../../etc", "/etc"),
            (".", "."),
            ("a/..", "."),
            ("/", "/"),
        ] {
            assert_eq!(normalize_path(input), want, "{input}");
        }
    }

    #[test]
    fn locates() {
        let root = Some("/home/dev/repo");
        assert_eq!(
            locate("/home/dev/repo/secrets/k", root),
            WorkspacePath::Inside("secrets/k".into())
        );
        assert_eq!(
            locate("/home/dev/repo", root),
            WorkspacePath::Inside(".".into())
        );
        assert_eq!(
            locate("/home/dev/repository/x", root),
            WorkspacePath::Outside("/home/dev/repository/x".into())
        );
        assert_eq!(
            locate("../other/x", root),
            WorkspacePath::Outside("/home/dev/other/x".into())
        );
        assert_eq!(locate("../repo/x", root), WorkspacePath::Inside("x".into()));
        assert!(locate("/etc/passwd", None).is_outside());
        assert!(locate("../x", None).is_outside());
        assert!(locate("~/x", root).is_outside());
        assert_eq!(
            locate("src/a.rs", None),
            WorkspacePath::Inside("src/a.rs".into())
        );
    }
}
