//! The plan's mounts as bubblewrap's command line: a read-only view of the whole system
//! in new mount, PID, IPC and UTS namespaces, the writable places bound back, the
//! protected places inside them bound read-only again, and every hidden path covered by
//! an unreadable stand-in. Pure: the paths come from [`super::materialise`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What the sandbox mounts, with every path known to exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// Bound read-write.
    pub writable: Vec<PathBuf>,
    /// Bound read-only again, after the writable places (so inside them).
    pub read_only: Vec<PathBuf>,
    /// Readable places under the private `/tmp` (the worker's private directory).
    pub visible: Vec<PathBuf>,
    /// Hidden files: covered by `blocker_file`.
    pub hidden_files: Vec<PathBuf>,
    /// Hidden directories: covered by `blocker_dir`.
    pub hidden_dirs: Vec<PathBuf>,
    /// An empty file no one may read (mode 000).
    pub blocker_file: PathBuf,
    /// An empty directory no one may enter (mode 000).
    pub blocker_dir: PathBuf,
    /// The working directory.
    pub workdir: PathBuf,
}

/// Places that are private to the sandbox: fresh and empty, so nothing of the host's
/// (sockets of other services in `/run`, other users' temp files) is reachable.
const PRIVATE_TMPFS: [&str; 3] = ["/tmp", "/var/tmp", "/run"];

/// bubblewrap's namespace and mount arguments for `mounts` (what the spec stores).
pub fn args(mounts: &Mounts) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "--die-with-parent",
        // A session of its own: the agent cannot push keystrokes into the user's
        // terminal (TIOCSTI).
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    .map(OsString::from)
    .into();
    for place in PRIVATE_TMPFS {
        if Path::new(place).is_dir() {
            push(&mut args, "--tmpfs", &[Path::new(place)]);
        }
    }
    for path in &mounts.writable {
        push(&mut args, "--bind", &[path, path]);
    }
    for path in mounts.visible.iter().chain(&mounts.read_only) {
        push(&mut args, "--ro-bind", &[path, path]);
    }
    for path in &mounts.hidden_files {
        push(&mut args, "--ro-bind", &[&mounts.blocker_file, path]);
    }
    for path in &mounts.hidden_dirs {
        push(&mut args, "--ro-bind", &[&mounts.blocker_dir, path]);
    }
    push(&mut args, "--chdir", &[&mounts.workdir]);
    args
}

/// bubblewrap's whole command line: the spec's `mounts`, then `confine` bound read-only
/// at its own path — last, so no private `/tmp` or hidden directory of the plan covers
/// it (a build's `target/` in a temp dir) — then `confine SPEC -- COMMAND…` as the
/// process to start in the namespaces.
pub fn command_line(
    mounts: &[OsString],
    confine: &Path,
    spec: &Path,
    command: &[String],
) -> Vec<OsString> {
    let mut args = mounts.to_vec();
    push(&mut args, "--ro-bind", &[confine, confine]);
    args.push("--".into());
    args.push(confine.as_os_str().to_owned());
    args.push(spec.as_os_str().to_owned());
    args.push("--".into());
    args.extend(command.iter().map(OsString::from));
    args
}

fn push(args: &mut Vec<OsString>, flag: &str, paths: &[&Path]) {
    args.push(flag.into());
    args.extend(paths.iter().map(|p| p.as_os_str().to_owned()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_paths_come_after_the_places_that_would_show_them() {
        let mounts = Mounts {
            writable: vec!["/w".into()],
            read_only: vec!["/w/.git".into()],
            hidden_files: vec!["/w/.env".into()],
            hidden_dirs: vec!["/h/.ssh".into()],
            blocker_file: "/p/f".into(),
            blocker_dir: "/p/d".into(),
            workdir: "/w".into(),
            ..Mounts::default()
        };
        let args: Vec<String> = args(&mounts)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let at = |needle: &str| args.iter().position(|a| a == needle).unwrap_or(usize::MAX);
        assert!(at("/w") < at("/w/.git"), "{args:?}");
        assert!(at("/w/.git") < at("/w/.env"), "{args:?}");
        assert!(at("/p/d") < at("/h/.ssh"), "{args:?}");
        assert_eq!(args.last().map(String::as_str), Some("/w"));
        assert_eq!(&args[..2], ["--die-with-parent", "--new-session"]);
    }

    #[test]
    fn the_confine_binary_is_bound_after_every_mount_and_starts_the_command() {
        let mounts: Vec<OsString> = ["--tmpfs", "/tmp"].map(OsString::from).into();
        let line = command_line(
            &mounts,
            Path::new("/tmp/t/runplane-confine"),
            Path::new("/p/sandbox.json"),
            &["sh".into(), "-c".into(), "true".into()],
        );
        let expected = [
            "--tmpfs",
            "/tmp",
            "--ro-bind",
            "/tmp/t/runplane-confine",
            "/tmp/t/runplane-confine",
            "--",
            "/tmp/t/runplane-confine",
            "/p/sandbox.json",
            "--",
            "sh",
            "-c",
            "true",
        ];
        assert_eq!(line, expected.map(OsString::from));
    }
}
