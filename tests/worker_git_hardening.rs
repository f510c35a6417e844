//! The worker's git never runs what the agent wrote into the repository: real git, real
//! temp repositories armed (`git_traps`) with a trap on every git command the worker uses;
//! `start`, `restore`, patch and commit-local delivery trip none of them, and produce the
//! files' real content. The user's global configuration still applies.

mod git_traps;

use std::process::Command;

use git_traps::{agent_works, armed, git, global};
use runplane::domain::DeliverMode;
use runplane::worker::git::{neutralise, GitError, Workspace};

#[test]
fn the_traps_are_armed_for_plain_git() {
    let armed = armed();
    let d = armed.repo();
    agent_works(&d);
    let _ = Command::new("git")
        .args(["add", "-A"])
        .current_dir(&d)
        .output()
        .unwrap();
    let _ = Command::new("git")
        .args(["diff", "HEAD"])
        .current_dir(&d)
        .output()
        .unwrap();
    let _ = Command::new("git")
        .args(["commit", "-q", "-m", "x"])
        .current_dir(&d)
        .output()
        .unwrap();
    let fired = armed.markers();
    for marker in [
        "fsmonitor",
        "filter-clean",
        "diff-command",
        "hookspath-pre-commit",
        "gpg",
    ] {
        assert!(
            fired.contains(&marker.to_string()),
            "{marker} not in {fired:?}"
        );
    }
}

#[tokio::test]
async fn start_restore_patch_and_commit_run_nothing_the_repository_configures() {
    let armed = armed();
    let d = armed.repo();
    let workspace = Workspace::new(&d);
    let start = workspace.start().await.unwrap();
    agent_works(&d);

    let patch = workspace
        .deliver(&start, DeliverMode::Patch, "m", "run-1", "origin")
        .await
        .unwrap()
        .patch_path
        .unwrap();
    let text = std::fs::read_to_string(&patch).unwrap();
    assert!(text.contains("diff --git a/a.txt b/a.txt\n"), "{text}");
    assert!(
        text.contains("\n-a\n+changed\n"),
        "the file's own lines: {text}"
    );
    assert!(
        text.contains("\n+fn main() {}\n") && !text.contains("CHANGED"),
        "{text}"
    );

    workspace.restore(&start).await.unwrap();
    assert_eq!(std::fs::read_to_string(d.join("a.txt")).unwrap(), "a\n");
    assert_eq!(std::fs::read_to_string(d.join("b.txt")).unwrap(), "b\n");
    assert!(!d.join("new.rs").exists() && !d.join("more.txt").exists());

    agent_works(&d);
    let commit = workspace
        .deliver(
            &start,
            DeliverMode::CommitLocal,
            "fix: it",
            "run-1",
            "origin",
        )
        .await
        .unwrap()
        .commit
        .unwrap();
    assert_eq!(git(&d, &["rev-parse", "HEAD"]), commit);
    // The blobs are the files as written, not a filter's output.
    let blob = |path: &str| git(&d, &["cat-file", "-p", &format!("HEAD:{path}")]);
    assert_eq!(blob("a.txt"), "changed");
    assert_eq!(blob("more.txt"), "more");
    assert_eq!(blob("new.rs"), "fn main() {}");
    // The identity is the user's global one; the commit is not signed.
    assert_eq!(
        git(&d, &["log", "-1", "--format=%an <%ae>|%G?"]),
        "Global Op <global@example.com>|N"
    );
    assert_eq!(armed.markers(), Vec::<String>::new());
}

#[tokio::test]
async fn a_core_worktree_pointing_away_from_the_workspace_is_refused() {
    global();
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("repo");
    let elsewhere = root.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("secret"), "s\n").unwrap();
    git(root.path(), &["init", "-q", d.to_str().unwrap()]);
    std::fs::write(d.join("a.txt"), "a\n").unwrap();
    git(&d, &["add", "-A"]);
    git(&d, &["commit", "-q", "-m", "start"]);
    let workspace = Workspace::new(&d);
    // (core.worktree, whether git may run)
    for (worktree, runs) in [
        (d.to_str().unwrap(), true),
        (elsewhere.to_str().unwrap(), false),
        ("/", false),
    ] {
        git(&d, &["config", "core.worktree", worktree]);
        match workspace.start().await {
            Ok(_) => assert!(runs, "{worktree}"),
            Err(GitError::Refused(why)) => {
                assert!(!runs, "{worktree}: {why}");
                assert!(
                    why.starts_with("the repository's core.worktree makes git work on"),
                    "{why}"
                );
            }
            Err(e) => panic!("{worktree}: {e}"),
        }
    }
}

/// A `git config --list --show-scope -z` listing written as `scope key=value; …`.
fn listing(entries: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in entries.split("; ").filter(|e| !e.is_empty()) {
        let (scope, setting) = entry.split_once(' ').unwrap();
        let (key, value) = setting.split_once('=').unwrap();
        bytes.extend_from_slice(format!("{scope}\0{key}\n{value}\0").as_bytes());
    }
    bytes
}

#[test]
fn what_each_repository_key_is_neutralised_to() {
    let fixed = neutralise(b"").unwrap().overrides;
    assert!(fixed.contains(&"core.hooksPath=/dev/null".to_string()));
    assert!(fixed.contains(&"hook.pre-commit.enabled=false".to_string()));
    // (the listing, the overrides before the fixed ones, `; `-separated)
    let cases = [
        ("local filter.Evil.clean=x", "filter.Evil.clean="),
        (
            "worktree filter.evil.required=true",
            "filter.evil.required=false",
        ),
        (
            "global filter.lfs.process=git-lfs filter-process; local filter.lfs.process=x",
            "filter.lfs.process=git-lfs filter-process",
        ),
        ("global credential.helper=store", ""),
        (
            "global credential.helper=store; local credential.helper=!x; \
             system credential.helper=cache",
            "credential.helper=; credential.helper=store; credential.helper=cache",
        ),
        (
            "local credential.https://example.com.helper=!x",
            "credential.https://example.com.helper=",
        ),
        (
            "global core.sshcommand=ssh -i k; local core.sshcommand=x",
            "core.sshcommand=ssh -i k",
        ),
        ("local core.sshcommand=x", "core.sshcommand=ssh"),
        ("local core.askpass=x", "core.askpass="),
        (
            "local diff.evil.textconv=x; local diff.evil.command=y",
            "diff.evil.textconv=; diff.evil.command=",
        ),
        ("local merge.evil.driver=x", "merge.evil.driver=false"),
        ("local pager.log=x", "pager.log=false"),
        (
            "local gpg.program=x; local gpg.ssh.program=y",
            "gpg.program=gpg; gpg.ssh.program=ssh-keygen",
        ),
        (
            "local remote.origin.receivepack=x",
            "remote.origin.receivepack=git-receive-pack",
        ),
        (
            "local protocol.file.allow=always; local protocol.ext.allow=always",
            "protocol.file.allow=user; protocol.ext.allow=never",
        ),
        (
            "local core.gitproxy=x for example.com",
            "protocol.git.allow=never",
        ),
        (
            "local http.savecookies=true; local http.https://x.cookiefile=/home/u/.bashrc",
            "http.savecookies=false; http.https://x.cookiefile=",
        ),
        (
            "global hook.lint.command=x; local hook.evil.event=pre-commit",
            "hook.lint.enabled=false; hook.evil.enabled=false",
        ),
        (
            "local user.email=agent@example.com; local remote.origin.url=/x",
            "",
        ),
    ];
    for (entries, expected) in cases {
        let got = neutralise(&listing(entries)).unwrap().overrides;
        let mut want: Vec<String> = expected
            .split("; ")
            .filter(|o| !o.is_empty())
            .map(str::to_string)
            .collect();
        want.extend(fixed.iter().cloned());
        assert_eq!(got, want, "{entries}");
    }
    let flags = neutralise(&listing("local core.worktree=/; local url./x.insteadof=y")).unwrap();
    assert!(flags.worktree_redirected && flags.rewrites_urls);
    let flags = neutralise(&listing(
        "global core.worktree=/; global url./x.insteadof=y",
    ))
    .unwrap();
    assert!(!flags.worktree_redirected && !flags.rewrites_urls);
    // `-c` cannot name a key with '=' in it: refused rather than left armed.
    for key in ["filter.a=b.clean", "hook.a=b.command"] {
        let entry = format!("local\0{key}\nx\0");
        let err = neutralise(entry.as_bytes()).unwrap_err();
        assert!(matches!(err, GitError::Refused(_)), "{key}: {err}");
    }
}
