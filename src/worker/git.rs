//! The workspace through git: where a run started (for a rollback) and delivering what
//! the agent changed — a patch, a local commit, a pushed branch, a pull request.
//!
//! The start is a tree of the whole working tree, untracked files included (ignored files
//! are not: build output stays), written through a temporary index so the user's own
//! index is never touched, plus the commit HEAD was at.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use crate::domain::DeliverMode;

/// Why a git step failed, with git's own words.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// git could not be started.
    #[error("cannot run git: {0}")]
    Spawn(std::io::Error),
    /// git ran and refused.
    #[error("git {args}: {stderr}")]
    Failed {
        /// The arguments.
        args: String,
        /// What git printed on stderr.
        stderr: String,
    },
    /// A delivery that cannot be made as asked (nothing changed, no `gh`, …).
    #[error("{0}")]
    Refused(String),
}

/// Where the workspace was when the run started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The commit HEAD pointed to; `None` in a repository without commits.
    pub head: Option<String>,
    /// The tree of the whole working tree (tracked and untracked, not ignored files).
    pub tree: String,
}

/// What a delivery produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    /// The patch file, for `patch`.
    pub patch_path: Option<PathBuf>,
    /// The commit, for `commit-local`, `branch` and `pr`.
    pub commit: Option<String>,
    /// The branch, for `branch` and `pr`.
    pub branch: Option<String>,
    /// The pull request, for `pr`.
    pub pr_url: Option<String>,
}

/// A git working tree.
pub struct Workspace {
    dir: PathBuf,
}

impl Workspace {
    /// The repository whose working tree is `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Workspace {
        Workspace { dir: dir.into() }
    }

    /// Records where the workspace is now.
    pub async fn start(&self) -> Result<Start, GitError> {
        let head = self
            .git(&["rev-parse", "--verify", "-q", "HEAD"], &[])
            .await
            .ok();
        let tree = self.tree_of_worktree().await?;
        Ok(Start { head, tree })
    }

    /// Puts the working tree, the index and HEAD back where `start` recorded them:
    /// files the agent changed or deleted come back, files it created go (ignored files
    /// stay), and commits it made are dropped from the branch.
    pub async fn restore(&self, start: &Start) -> Result<(), GitError> {
        let index = self.scratch_index("restore").await?;
        let env = [("GIT_INDEX_FILE", index.as_os_str())];
        self.git(&["read-tree", &start.tree], &env).await?;
        self.git(&["checkout-index", "-a", "-f"], &env).await?;
        // With the start's tree as the index, "untracked" is exactly what the run created.
        self.git(&["clean", "-fdq"], &env).await?;
        let _ = std::fs::remove_file(&index);
        match &start.head {
            Some(head) => self.git(&["reset", "-q", head], &[]).await.map(drop),
            None => self.git(&["read-tree", "--empty"], &[]).await.map(drop),
        }
    }

    /// Delivers the changes since `start` as `mode` asks; `run_id` names the patch file
    /// and the branch.
    pub async fn deliver(
        &self,
        start: &Start,
        mode: DeliverMode,
        message: &str,
        run_id: &str,
        remote: &str,
    ) -> Result<Delivered, GitError> {
        if self.tree_of_worktree().await? == start.tree {
            return Err(GitError::Refused(
                "nothing to deliver: the workspace is as it was when the run started".into(),
            ));
        }
        match mode {
            DeliverMode::Patch => self.patch(start, run_id).await,
            DeliverMode::CommitLocal => Ok(Delivered {
                commit: Some(self.commit(message).await?),
                ..Delivered::default()
            }),
            DeliverMode::Branch => self.branch(message, run_id, remote).await,
            DeliverMode::Pr => {
                let mut delivered = self.branch(message, run_id, remote).await?;
                delivered.pr_url = Some(self.pull_request(message).await?);
                Ok(delivered)
            }
        }
    }

    /// A binary-safe diff from the start to the working tree, untracked files included,
    /// written inside the repository's git directory (never into the working tree).
    async fn patch(&self, start: &Start, run_id: &str) -> Result<Delivered, GitError> {
        let now = self.tree_of_worktree().await?;
        let diff = self
            .git(&["diff", "--binary", &start.tree, &now], &[])
            .await?;
        let git_dir = self.git(&["rev-parse", "--absolute-git-dir"], &[]).await?;
        let dir = Path::new(&git_dir).join("runplane");
        let path = dir.join(format!("{run_id}.patch"));
        let write = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, diff + "\n"));
        write.map_err(|e| GitError::Refused(format!("write {}: {e}", path.display())))?;
        Ok(Delivered {
            patch_path: Some(path),
            ..Delivered::default()
        })
    }

    /// Commits everything (untracked files too, not ignored ones) on the current branch.
    async fn commit(&self, message: &str) -> Result<String, GitError> {
        self.git(&["add", "-A"], &[]).await?;
        // An identity only when the repository has none, so commits never fail on it.
        let mut args = vec!["commit", "-q", "-m", message];
        if self.git(&["config", "user.email"], &[]).await.is_err() {
            args.splice(
                0..0,
                [
                    "-c",
                    "user.name=runplane",
                    "-c",
                    "user.email=runplane@localhost",
                ],
            );
        }
        self.git(&args, &[]).await?;
        self.git(&["rev-parse", "HEAD"], &[]).await
    }

    /// Commits on `runplane/<run_id>` and pushes it to `remote`.
    async fn branch(
        &self,
        message: &str,
        run_id: &str,
        remote: &str,
    ) -> Result<Delivered, GitError> {
        let branch = format!("runplane/{run_id}");
        self.git(&["checkout", "-q", "-b", &branch], &[]).await?;
        let commit = self.commit(message).await?;
        self.git(&["push", "-q", remote, &format!("{branch}:{branch}")], &[])
            .await?;
        Ok(Delivered {
            commit: Some(commit),
            branch: Some(branch),
            ..Delivered::default()
        })
    }

    /// Opens a pull request for the pushed branch with `gh`.
    async fn pull_request(&self, message: &str) -> Result<String, GitError> {
        let title = message.lines().next().unwrap_or("runplane delivery");
        let output = Command::new("gh")
            .args(["pr", "create", "--title", title, "--body", message])
            .current_dir(&self.dir)
            .output()
            .await
            .map_err(|e| {
                GitError::Refused(format!(
                    "pr delivery needs the GitHub CLI `gh` on PATH ({e}); the branch was pushed"
                ))
            })?;
        if !output.status.success() {
            return Err(GitError::Refused(format!(
                "gh pr create: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    /// The tree of the working tree as it is, through a scratch index.
    async fn tree_of_worktree(&self) -> Result<String, GitError> {
        let index = self.scratch_index("snapshot").await?;
        let env = [("GIT_INDEX_FILE", index.as_os_str())];
        let written = async {
            self.git(&["add", "-A"], &env).await?;
            self.git(&["write-tree"], &env).await
        }
        .await;
        let _ = std::fs::remove_file(&index);
        written
    }

    /// A fresh index file path inside the git directory.
    async fn scratch_index(&self, purpose: &str) -> Result<PathBuf, GitError> {
        let git_dir = self.git(&["rev-parse", "--absolute-git-dir"], &[]).await?;
        let path =
            Path::new(&git_dir).join(format!("runplane-{purpose}-{}.index", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Ok(path)
    }

    /// Runs git in the workspace; its trimmed stdout on success.
    async fn git(
        &self,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<String, GitError> {
        let mut command = Command::new("git");
        command.args(args).current_dir(&self.dir);
        for (key, value) in env {
            command.env(key, value);
        }
        let output = command.output().await.map_err(GitError::Spawn)?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout)
                .trim_end()
                .to_string())
        } else {
            Err(GitError::Failed {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            })
        }
    }
}
