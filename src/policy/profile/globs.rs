//! How each kind of glob in a profile is built. Validation (`schema`) and compilation
//! (`compile`) both build them, and must agree on the options, so they live below both.

use globset::{Glob, GlobBuilder};

/// A path glob: `*` and `?` stay within a segment, `**` spans segments. A leading `./` is
/// dropped because paths are normalised without it.
pub(crate) fn path_glob(pattern: &str) -> Result<Glob, String> {
    build_path_glob(pattern, false)
}

/// A path glob as [`path_glob`], optionally ignoring case (see `compile::PathGlobs`).
pub(crate) fn build_path_glob(pattern: &str, case_insensitive: bool) -> Result<Glob, String> {
    let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .case_insensitive(case_insensitive)
        .build()
        .map_err(|e| e.kind().to_string())
}

/// A domain glob: hosts compare ignoring case, and `*` also crosses dots
/// (`*.github.com` is every subdomain, at any depth; list `github.com` too for the apex).
pub(crate) fn domain_glob(pattern: &str) -> Result<Glob, String> {
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .case_insensitive(true)
        .build()
        .map_err(|e| e.kind().to_string())
}

/// A command glob: a command is one line of words, so `*` matches anything, `/` included.
pub(crate) fn command_glob(pattern: &str) -> Result<Glob, String> {
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map_err(|e| e.kind().to_string())
}

/// A glob over tool names (`mcp__github__*`): ignoring ASCII case like every tool name
/// comparison, and `*` crosses everything (tool names have no separator).
pub(crate) fn tool_glob(pattern: &str) -> Result<Glob, String> {
    GlobBuilder::new(pattern)
        .case_insensitive(true)
        .build()
        .map_err(|e| e.kind().to_string())
}
