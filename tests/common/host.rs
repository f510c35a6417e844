//! Places on the host's own file system for the sandbox tests: what a test writes there
//! must stay visible inside the sandbox as the host's (a checkout, a home, a directory
//! outside the workspace), never fall under a place the sandbox makes private and fresh
//! (`/tmp`, `/var/tmp`, `/run`). `target/tmp` usually qualifies; in a clone under `/tmp`
//! (CI's clean clone) it does not, and the places go under `$HOME/.cache` instead.

use std::path::{Path, PathBuf};

/// The places the sandbox replaces with a fresh tmpfs.
const PRIVATE: [&str; 3] = ["/tmp", "/var/tmp", "/run"];

/// A fresh directory on the host, removed when dropped.
pub fn host_dir(prefix: &str) -> tempfile::TempDir {
    let root = host_root();
    std::fs::create_dir_all(&root).expect("the host root for sandbox tests");
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&root)
        .expect("a host dir")
}

/// Whether `path` is under a place the sandbox makes private.
pub fn private(path: &Path) -> bool {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    PRIVATE.iter().any(|place| path.starts_with(place))
}

/// Where host places go: `target/tmp`, or `$HOME/.cache/…` when that is private.
pub fn host_root() -> PathBuf {
    let target_tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    if !private(target_tmp) {
        return target_tmp.to_path_buf();
    }
    let home = std::env::var_os("HOME").expect("HOME, for sandbox test places off /tmp");
    let root = Path::new(&home).join(".cache/runplane-sandbox-tests");
    assert!(
        !private(Path::new(&home)),
        "both target/tmp and HOME are under a place the sandbox makes private"
    );
    root
}
