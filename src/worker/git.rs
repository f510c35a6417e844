//! The workspace through git: where a run started (for a rollback) and delivering what
//! the agent changed — a patch, a local commit, a pushed branch, a pull request.
//!
//! The start is a tree of the whole working tree, untracked files included (ignored files
//! are not: build output stays), written through a temporary index so the user's own
//! index is never touched, plus the commit HEAD was at.
//!
//! Every git command runs through [`Workspace::git`], which neutralises the repository's
//! executable configuration first (`neutralise`): the agent writes the repository, and
//! nothing it wrote may run as the worker.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use crate::domain::DeliverMode;

mod neutralise;

#[doc(hidden)]
pub use neutralise::{neutralise, Neutralised};

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
        // Plumbing, so no diff UI configuration (colour, prefixes, relative paths) reaches
        // the patch, and no external diff or textconv program runs or rewrites its content.
        let diff = [
            "diff-tree",
            "-r",
            "-p",
            "-M",
            "--binary",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            &start.tree,
            &now,
        ];
        let diff = self.git(&diff, &[]).await?;
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
        let receive_pack = self.receive_pack(remote).await?;
        self.git(&["checkout", "-q", "-b", &branch], &[]).await?;
        let commit = self.commit(message).await?;
        let refspec = format!("{branch}:{branch}");
        let mut push = vec!["push", "-q"];
        push.extend(receive_pack.as_deref());
        push.extend([remote, refspec.as_str()]);
        self.git(&push, &[]).await?;
        Ok(Delivered {
            commit: Some(commit),
            branch: Some(branch),
            ..Delivered::default()
        })
    }

    /// The `--receive-pack` a push to `remote` needs: a local-path remote's receiving side
    /// runs here, in a repository the remote URL (the agent's to write) chooses, so it runs
    /// with that repository's hooks and checkout update off. Network remotes run theirs.
    async fn receive_pack(&self, remote: &str) -> Result<Option<String>, GitError> {
        let urls = match self
            .git(&["remote", "get-url", "--push", "--all", remote], &[])
            .await
        {
            // Expanded through the neutralised configuration, insteadOf rules included.
            Ok(urls) => urls.lines().map(str::to_string).collect(),
            Err(_) if self.neutralised().await?.rewrites_urls => {
                return Err(GitError::Refused(format!(
                    "{remote:?} is not a configured remote and the repository rewrites URLs \
                     (url.*.insteadOf): runplane cannot tell where the push would go"
                )))
            }
            Err(_) => vec![remote.to_string()],
        };
        let local = urls.iter().filter(|url| is_local_url(url)).count();
        match local {
            0 => Ok(None),
            n if n == urls.len() => {
                Ok(Some(format!("--receive-pack={}", neutralise::RECEIVE_PACK)))
            }
            _ => Err(GitError::Refused(format!(
                "{remote:?} pushes both to local paths and to network remotes ({}); runplane \
                 pushes to a local repository only with its hooks off, which it cannot ask of \
                 the others",
                urls.join(", ")
            ))),
        }
    }

    /// Opens a pull request for the pushed branch with `gh`, whose own git commands get the
    /// same neutralised configuration (through `GIT_CONFIG_PARAMETERS`).
    async fn pull_request(&self, message: &str) -> Result<String, GitError> {
        let title = message.lines().next().unwrap_or("runplane delivery");
        let neutralised = self.neutralised().await?;
        let mut command = Command::new("gh");
        neutralise::clean_env(&mut command);
        let output = command
            .env(
                "GIT_CONFIG_PARAMETERS",
                neutralise::config_parameters(&neutralised.overrides),
            )
            .args(["pr", "create", "--title", title, "--body", message])
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null())
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

    /// What neutralises the repository's configuration as it is now.
    async fn neutralised(&self) -> Result<Neutralised, GitError> {
        let list = ["config", "--list", "--show-scope", "--includes", "-z"];
        let listing = self.run(&[], &list, &[]).await?;
        neutralise(&listing)
    }

    /// Runs git in the workspace with the repository's executable configuration neutralised
    /// (listed afresh for each command, so a change between two commands is seen); its
    /// trimmed stdout on success.
    async fn git(
        &self,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<String, GitError> {
        let neutralised = self.neutralised().await?;
        if neutralised.worktree_redirected {
            self.check_worktree(&neutralised.overrides).await?;
        }
        let stdout = self.run(&neutralised.overrides, args, env).await?;
        Ok(String::from_utf8_lossy(&stdout).trim_end().to_string())
    }

    /// With `core.worktree` set by the repository: git must still see the workspace's own
    /// tree (the directory holding the `.git` found from it), not one the agent named.
    async fn check_worktree(&self, overrides: &[String]) -> Result<(), GitError> {
        let top = self
            .run(overrides, &["rev-parse", "--show-toplevel"], &[])
            .await?;
        let top = String::from_utf8_lossy(&top).trim_end().to_string();
        let natural = std::fs::canonicalize(&self.dir).ok().and_then(|dir| {
            dir.ancestors()
                .find(|d| d.join(".git").exists())
                .map(Path::to_path_buf)
        });
        match (natural, std::fs::canonicalize(&top).ok()) {
            (Some(natural), Some(top)) if natural == top => Ok(()),
            _ => Err(GitError::Refused(format!(
                "the repository's core.worktree makes git work on {top}, not on the \
                 workspace {}; runplane runs git only on the workspace",
                self.dir.display()
            ))),
        }
    }

    /// Runs one git command built by `neutralise::command`; its stdout on success.
    async fn run(
        &self,
        overrides: &[String],
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<Vec<u8>, GitError> {
        let mut command = neutralise::command(&self.dir, overrides, args, env);
        let output = command.output().await.map_err(GitError::Spawn)?;
        if output.status.success() {
            Ok(output.stdout)
        } else {
            Err(GitError::Failed {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            })
        }
    }
}

/// Whether git reaches `url` through the local transport (a path or `file://`), as git
/// decides it: no `scheme://` or `helper::`, and a `/` before any `:` (else `host:path`).
fn is_local_url(url: &str) -> bool {
    if url.starts_with("file://") {
        return true;
    }
    if url.contains("://") || url.contains("::") {
        return false;
    }
    match (url.find(':'), url.find('/')) {
        (None, _) => true,
        (Some(colon), Some(slash)) => slash < colon,
        (Some(_), None) => false,
    }
}
