//! Errors of profile validation and of loading a policy directory.

use std::path::PathBuf;

use super::check::TestFailure;

/// A profile that cannot be used, with the field that is wrong.
///
/// `field` is a path into the profile (`rules[2].path_deny[0]`, `termination.max_cost`) so
/// that an operator can find the offending line without reading the code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PolicyError {
    /// Where in the profile the problem is; empty for the profile as a whole.
    pub field: String,
    /// What is wrong there.
    pub message: String,
}

impl PolicyError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A policy directory that cannot be loaded. The server refuses to start on one, so every
/// variant names the file to fix.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The directory or a file in it cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not valid TOML/YAML.
    #[error("{}: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column where the parser gives them).
        message: String,
    },
    /// The file parses but the profile in it is wrong.
    #[error("{}: {source}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Which field is wrong and why.
        source: PolicyError,
    },
    /// Two files define the same profile name; which one should win is not guessable.
    #[error("{}: profile {name:?} is already defined in {}", path.display(), first.display())]
    Duplicate {
        /// The second file defining the name (in file-name order).
        path: PathBuf,
        /// The profile name.
        name: String,
        /// The first file defining it.
        first: PathBuf,
    },
    /// The profile loads, but one of its tests gets another decision than it expects.
    #[error("{}: {failure}", path.display())]
    TestFailed {
        /// The file.
        path: PathBuf,
        /// The first failing test (boxed: the rest of the enum is small).
        failure: Box<TestFailure>,
    },
}
