//! Places inside the workspace that stay read-only in every profile, although the
//! workspace is writable: each holds something that runs later, outside the agent's turn
//! — git's hooks and config, the agents' project settings and hooks, the MCP servers a
//! later session starts. The judge denies a write there before any rule, and the sandbox
//! binds the same places read-only (`sandbox::plan`), from this one list.

use super::path::{locate, WorkspacePath};

/// The protected names, at the workspace's root.
pub const PROTECTED_NAMES: [&str; 4] = [".git", ".claude", ".codex", ".mcp.json"];

/// The protected name `path` is or lies inside, placed with respect to `root`; `None`
/// for a path outside the workspace (which other checks judge) or not protected. Names
/// are compared ignoring ASCII case: on a case-insensitive checkout `.GIT` is `.git`.
pub(crate) fn protected_place(path: &str, root: Option<&str>) -> Option<&'static str> {
    let WorkspacePath::Inside(inside) = locate(path, root) else {
        return None;
    };
    let first = inside.split('/').next()?;
    PROTECTED_NAMES
        .into_iter()
        .find(|name| name.eq_ignore_ascii_case(first))
}

/// Why writing `path` is refused, when it is protected.
pub(crate) fn protected_write(path: &str, root: Option<&str>) -> Option<String> {
    let name = protected_place(path, root)?;
    Some(format!(
        "writes a protected place: {path:?} is {name:?} or inside it, read-only in every \
         profile (what it holds runs later, outside the agent's turn)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protected_names_and_what_is_inside_them_at_the_root_only() {
        let root = Some("/w");
        for path in [
            ".git",
            ".git/hooks/pre-commit",
            "/w/.GIT/config",
            "./.claude/settings.json",
            "src/../.codex/x",
            ".mcp.json",
        ] {
            assert!(protected_place(path, root).is_some(), "{path}");
        }
        for path in [
            "src/.git/x",
            ".gitignore",
            ".github/workflows/ci.yml",
            "/etc/.git/x",
            "../.git/config",
            ".mcp.json.bak",
        ] {
            assert_eq!(protected_place(path, root), None, "{path}");
        }
    }
}
