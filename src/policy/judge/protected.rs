//! Places inside the workspace that stay read-only although the workspace is writable:
//! in every profile those that hold something that runs later, outside the agent's turn
//! — git's hooks and config, the agents' project settings and hooks, the MCP servers a
//! later session starts —, and those a profile adds (`protected`). The judge denies a
//! write there before any rule, and the sandbox binds the same places read-only
//! (`sandbox::plan`), from these lists.

use super::path::{locate, WorkspacePath};

/// The protected names, at the workspace's root.
pub const PROTECTED_NAMES: [&str; 4] = [".git", ".claude", ".codex", ".mcp.json"];

/// The protected place `path` is or lies inside, placed with respect to `root`: one of
/// the names (compared ignoring ASCII case: on a case-insensitive checkout `.GIT` is
/// `.git`), or one of the profile's own `extra` paths (workspace-relative, normalised).
/// `None` for a path outside the workspace (which other checks judge) or not protected.
pub(crate) fn protected_place(path: &str, root: Option<&str>, extra: &[String]) -> Option<String> {
    let WorkspacePath::Inside(inside) = locate(path, root) else {
        return None;
    };
    let first = inside.split('/').next()?;
    if let Some(name) = PROTECTED_NAMES
        .into_iter()
        .find(|name| name.eq_ignore_ascii_case(first))
    {
        return Some(name.to_string());
    }
    extra
        .iter()
        .find(|place| inside == **place || inside.starts_with(&format!("{place}/")))
        .cloned()
}

/// Why writing `path` is refused, when it is protected.
pub(crate) fn protected_write(path: &str, root: Option<&str>, extra: &[String]) -> Option<String> {
    let name = protected_place(path, root, extra)?;
    let why = if PROTECTED_NAMES.contains(&name.as_str()) {
        "read-only in every profile (what it holds runs later, outside the agent's turn)"
    } else {
        "which the profile keeps read-only (protected)"
    };
    Some(format!(
        "writes a protected place: {path:?} is {name:?} or inside it, {why}"
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
            assert!(protected_place(path, root, &[]).is_some(), "{path}");
        }
        for path in [
            "src/.git/x",
            ".gitignore",
            ".github/workflows/ci.yml",
            "/etc/.git/x",
            "../.git/config",
            ".mcp.json.bak",
        ] {
            assert_eq!(protected_place(path, root, &[]), None, "{path}");
        }
    }

    #[test]
    fn a_profiles_own_places_are_protected_with_what_is_inside_them() {
        let extra = ["Makefile".to_string(), "scripts/ci".to_string()];
        let root = Some("/w");
        for (path, place) in [
            ("Makefile", "Makefile"),
            ("/w/scripts/ci/run.sh", "scripts/ci"),
            ("./scripts/ci", "scripts/ci"),
            (".git/x", ".git"),
        ] {
            assert_eq!(protected_place(path, root, &extra).as_deref(), Some(place));
        }
        for path in ["Makefile.bak", "scripts/cix", "scripts", "src/Makefile"] {
            assert_eq!(protected_place(path, root, &extra), None, "{path}");
        }
    }
}
