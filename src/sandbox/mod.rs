//! The agent's kernel sandbox. A command's text cannot bound what `make test` does, so the
//! agent and everything it starts — its tools, hooks, subagents, and the quality gate's
//! commands — run inside a sandbox compiled from the run's profile:
//!
//! - [`plan`]: the pure plan (what may be read, written, reached), hashed into the log;
//! - [`materialise`]: the plan placed on this machine's filesystem;
//! - [`bwrap`]: the mounts as bubblewrap's command line (namespaces, read-only system,
//!   writable workspace with protected places, hidden secrets);
//! - [`kernel`]: Landlock and seccomp, which the sandboxed process puts on itself;
//! - [`Spec`]: what `runplane exec-agent` and `runplane-confine` read to start a process
//!   inside all of it;
//! - [`denial`]: the sandbox's refusals as a tool's result shows them;
//! - [`agreement`]: what the judge refuses and the plan permits, side by side, checked
//!   to agree (`runplane policy explain`).
//!
//! docs/SANDBOX.md has the threat model and what each layer stops.

pub mod agreement;
pub mod bwrap;
pub mod denial;
pub mod kernel;
pub mod materialise;
pub mod plan;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use kernel::KernelRules;

/// The program that makes the namespaces and mounts.
pub const BWRAP: &str = "bwrap";

/// The file name of the program that puts the kernel layers on inside the namespaces
/// (`src/bin/runplane-confine.rs`), installed beside `runplane`.
pub const CONFINE: &str = "runplane-confine";

/// `runplane-confine` beside the running `runplane` executable, where `cargo build` and
/// `cargo install` put it.
pub fn confine_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the runplane executable: {e}"))?;
    Some(exe.with_file_name(CONFINE))
        .filter(|confine| confine.is_file())
        .ok_or_else(|| {
            format!(
                "{CONFINE} is not beside {}: install it with runplane (cargo install and \
                 cargo build put both binaries in one directory)",
                exe.display()
            )
        })
}

/// Everything `runplane exec-agent` needs to start a process in the sandbox, written by
/// the worker into its private directory (readable, never writable, inside the sandbox).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// bubblewrap's namespace and mount arguments; [`bwrap::command_line`] adds the rest.
    pub bwrap: Vec<OsString>,
    /// Places writes may go (Landlock's part).
    pub writable: Vec<PathBuf>,
    /// TCP ports connects may go to: the egress proxy's.
    pub connect_ports: Vec<u16>,
}

/// Why a spec cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("the sandbox spec {path}: {why}")]
pub struct SpecError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub why: String,
}

impl Spec {
    /// Writes the spec to `path`.
    pub fn write(&self, path: &Path) -> Result<(), SpecError> {
        let error = |why: String| SpecError {
            path: path.to_path_buf(),
            why,
        };
        let text = serde_json::to_vec(self).map_err(|e| error(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| error(e.to_string()))
    }

    /// Reads the spec at `path`.
    pub fn read(path: &Path) -> Result<Spec, SpecError> {
        let error = |why: String| SpecError {
            path: path.to_path_buf(),
            why,
        };
        let text = std::fs::read(path).map_err(|e| error(e.to_string()))?;
        serde_json::from_slice(&text).map_err(|e| error(e.to_string()))
    }

    /// The kernel layers' part.
    pub fn kernel_rules(&self) -> KernelRules {
        KernelRules {
            writable: self.writable.clone(),
            connect_ports: self.connect_ports.clone(),
        }
    }
}

/// What this machine lacks to enforce the sandbox, each with what to do; empty when
/// nothing is missing.
pub fn missing() -> Vec<String> {
    let mut missing = Vec::new();
    match std::process::Command::new(BWRAP)
        .args(["--ro-bind", "/", "/", "--unshare-pid", "--", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
    {
        Ok(out) if out.status.success() => {}
        Ok(out) => missing.push(format!(
            "bubblewrap cannot make a sandbox here ({}): unprivileged user namespaces must be \
             allowed (sysctl kernel.unprivileged_userns_clone=1, and on Ubuntu \
             kernel.apparmor_restrict_unprivileged_userns=0)",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(err) => missing.push(format!(
            "bubblewrap ({BWRAP}) cannot be run ({err}): install it (Debian and Ubuntu: apt \
             install bubblewrap)"
        )),
    }
    if let Err(err) = kernel::landlock_supported() {
        missing.push(err.to_string());
    }
    missing
}
