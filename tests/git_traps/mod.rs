//! Repositories armed the way an agent could arm them: hooks, fsmonitor, filter and diff
//! drivers, pagers, signing programs, credential helpers, each a script that leaves a
//! marker file if it ever runs; and the user's global configuration (a temp file through
//! `GIT_CONFIG_GLOBAL`, set once per test binary) with an identity and a credential helper.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The user's global configuration, shared by every test here: an identity and a
/// credential helper that answers `op`/`global-secret` and leaves a marker.
pub struct Global {
    /// Where the global helper leaves its marker.
    pub helper_marker: PathBuf,
    _dir: tempfile::TempDir,
}

pub fn global() -> &'static Global {
    static GLOBAL: OnceLock<Global> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let helper_marker = dir.path().join("global-helper-ran");
        let helper = executable(
            dir.path(),
            "global-helper",
            &format!(
                "touch '{}'\n[ \"$1\" = get ] && printf 'username=op\\npassword=global-secret\\n'\nexit 0",
                helper_marker.display()
            ),
        );
        let config = dir.path().join("gitconfig");
        std::fs::write(
            &config,
            format!(
                "[user]\n\tname = Global Op\n\temail = global@example.com\n\
                 [credential]\n\thelper = {}\n[init]\n\tdefaultBranch = main\n",
                helper.display()
            ),
        )
        .unwrap();
        // Set before any test here starts a process (they all come through this first),
        // and the same for all of them.
        std::env::set_var("GIT_CONFIG_GLOBAL", &config);
        std::env::set_var("GIT_CONFIG_NOSYSTEM", "1");
        // The credential test's remote is on 127.0.0.1: no proxy of this machine's between.
        for proxy in ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"] {
            std::env::remove_var(proxy);
        }
        Global {
            helper_marker,
            _dir: dir,
        }
    })
}

/// An executable `sh` script.
pub fn executable(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Plain git, for setting up and for reading results with commands that run nothing
/// configurable (`config`, `cat-file`, `rev-parse`, `log --format`, `init`).
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A temp dir with a repository `repo/` (one commit, no local identity: the global one
/// applies) and a `markers/` directory every trap writes into.
pub struct Armed {
    pub root: tempfile::TempDir,
}

impl Armed {
    pub fn repo(&self) -> PathBuf {
        self.root.path().join("repo")
    }

    pub fn markers(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root.path().join("markers"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A script that leaves the marker `name`, then runs `then`.
    pub fn trap(&self, name: &str, then: &str) -> PathBuf {
        let marker = self.root.path().join("markers").join(name);
        let body = format!("touch '{}'\n{then}", marker.display());
        executable(&self.root.path().join("traps"), name, &body)
    }
}

/// Every hook event the worker's commands could reach.
const HOOKS: [&str; 10] = [
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-checkout",
    "pre-push",
    "reference-transaction",
    "post-index-change",
    "pre-auto-gc",
    "post-rewrite",
];

/// A repository whose configuration and hooks, as an agent could write them, would run a
/// trap on every git command the worker uses.
pub fn armed() -> Armed {
    global();
    let root = tempfile::tempdir().unwrap();
    for dir in ["repo", "markers", "traps", "traps/hooks"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    let armed = Armed { root };
    let repo = armed.repo();
    let d = repo.as_path();
    git(d, &["init", "-q"]);
    std::fs::write(d.join("a.txt"), "a\n").unwrap();
    std::fs::write(d.join("b.txt"), "b\n").unwrap();
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "start"]);
    // Hooks in .git/hooks and in a core.hooksPath directory.
    for hook in HOOKS {
        let trap = armed.trap(&format!("hook-{hook}"), "exit 0");
        std::fs::copy(trap, d.join(".git/hooks").join(hook)).unwrap();
        let trap = armed.trap(&format!("hookspath-{hook}"), "exit 0");
        std::fs::rename(trap, armed.root.path().join("traps/hooks").join(hook)).unwrap();
    }
    let hooks_dir = armed.root.path().join("traps/hooks");
    git(
        d,
        &["config", "core.hooksPath", hooks_dir.to_str().unwrap()],
    );
    let upper = "tr a-z A-Z";
    // (key, the trap's marker, what the trap does after leaving it)
    let traps = [
        ("core.fsmonitor", "fsmonitor", "exit 1"),
        ("filter.evil.clean", "filter-clean", upper),
        ("filter.proc.process", "filter-process", "exit 1"),
        ("diff.external", "diff-external", "exit 0"),
        ("diff.evil.textconv", "diff-textconv", upper),
        ("diff.evil.command", "diff-command", "exit 0"),
        ("core.pager", "pager", "cat"),
        ("pager.diff", "pager-diff", "cat"),
        ("core.editor", "editor", "exit 0"),
        ("gpg.program", "gpg", "exit 1"),
        ("core.askPass", "askpass", "exit 0"),
        ("core.sshCommand", "ssh", "exit 1"),
        ("merge.evil.driver", "merge-driver", "exit 1"),
        ("hook.evil.command", "config-hook", "exit 0"),
    ];
    for (key, marker, then) in traps {
        git(
            d,
            &["config", key, armed.trap(marker, then).to_str().unwrap()],
        );
    }
    let settings = [
        ("filter.evil.required", "true"),
        ("commit.gpgSign", "true"),
        ("maintenance.auto", "true"),
        ("gc.auto", "1"),
        ("hook.evil.event", "pre-commit"),
        ("protocol.ext.allow", "always"),
    ];
    for (key, value) in settings {
        git(d, &["config", key, value]);
    }
    // libcurl's cookie jar, written where the repository says (only when git exits
    // cleanly, so no control shows it: the key table covers it).
    let jar = armed.root.path().join("markers/cookie-jar");
    git(d, &["config", "http.cookieFile", jar.to_str().unwrap()]);
    git(d, &["config", "http.saveCookies", "true"]);
    // An empty helper resets the list: plain git would ask only the agent's helper.
    let helper = armed.trap(
        "local-helper",
        "[ \"$1\" = get ] && printf 'username=agent\\npassword=stolen\\n'\nexit 0",
    );
    git(d, &["config", "--add", "credential.helper", ""]);
    let helper = helper.to_str().unwrap();
    git(d, &["config", "--add", "credential.helper", helper]);
    // The smudge half comes from a file the repository's config includes.
    let included = armed.root.path().join("traps/included");
    let smudge = armed.trap("filter-smudge", upper);
    std::fs::write(
        &included,
        format!("[filter \"evil\"]\n\tsmudge = {}\n", smudge.display()),
    )
    .unwrap();
    git(d, &["config", "include.path", included.to_str().unwrap()]);
    std::fs::write(
        d.join(".gitattributes"),
        "*.txt filter=evil diff=evil merge=evil\n*.rs filter=proc\n",
    )
    .unwrap();
    armed
}

/// What the agent does in the armed repository.
pub fn agent_works(d: &Path) {
    std::fs::write(d.join("a.txt"), "changed\n").unwrap();
    std::fs::remove_file(d.join("b.txt")).unwrap();
    std::fs::write(d.join("new.rs"), "fn main() {}\n").unwrap();
    // Written during the run: attributes can only name drivers the config defines.
    std::fs::write(d.join("more.txt"), "more\n").unwrap();
    std::fs::write(
        d.join(".gitattributes"),
        "* filter=evil diff=evil\n*.rs filter=nosuch\n",
    )
    .unwrap();
}
