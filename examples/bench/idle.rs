//! Memory per idle session, measured on the server alone: the bench re-runs itself as a
//! child process that only serves (`--serve-child`), so the client's sessions, buffers and
//! histograms are not in the figure. The child's VmRSS is read from /proc before and after
//! N runs are started and N sessions attached and left idle.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::load::{self, Target};

/// What the idle phase measured (KiB of the server's resident set).
pub struct IdleResult {
    /// Sessions attached.
    pub sessions: usize,
    /// RSS with the warm-up sessions only.
    pub base_kib: u64,
    /// RSS once every run is started (pending: an actor each, no stream).
    pub runs_kib: u64,
    /// RSS once every run has an attached, idle session.
    pub attached_kib: u64,
}

impl IdleResult {
    /// Server memory per idle session: its run's actor, the stream, the HTTP/2 state.
    pub fn per_session_kib(&self) -> f64 {
        self.attached_kib.saturating_sub(self.base_kib) as f64 / self.sessions as f64
    }

    /// Of that, the pending run alone (actor and mailbox).
    pub fn per_run_kib(&self) -> f64 {
        self.runs_kib.saturating_sub(self.base_kib) as f64 / self.sessions as f64
    }
}

/// The child: serves runplane on loopback until its stdin closes (the parent exiting, even
/// by a crash, closes it). Prints `LISTENING <addr>` once bound.
pub fn serve_child(data_dir: &Path, policy_dir: &Path) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let mut config = runplane::server::ServeConfig::new(data_dir);
        config.listen = "127.0.0.1:0".parse()?;
        config.policy_dir = Some(policy_dir.to_path_buf());
        let bound = runplane::server::bind(config).await?;
        println!("LISTENING {}", bound.local_addr()?);
        let stdin_closed = async {
            let _ = tokio::task::spawn_blocking(|| {
                std::io::copy(&mut std::io::stdin(), &mut std::io::sink())
            })
            .await;
        };
        bound.serve(stdin_closed).await?;
        anyhow::Ok(())
    })
}

/// A server child: killed when dropped, so an error in the parent leaves nothing behind.
pub struct ChildServer {
    child: Child,
    /// Its process id, for its RSS.
    pub pid: u32,
    /// Where it serves.
    pub url: String,
    /// Its admin token (authentication is on, as in `runplane serve`).
    pub token: String,
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a server child on a fresh data directory `dir/name` and waits until it listens.
pub async fn start_child(dir: &Path, policy_dir: &Path, name: &str) -> anyhow::Result<ChildServer> {
    let exe = std::env::current_exe()?;
    let data_dir = dir.join(name);
    let mut child = Command::new(exe)
        .arg("--serve-child")
        .arg(&data_dir)
        .arg(policy_dir)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("start the server child")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let pid = child.id();
    let mut server = ChildServer {
        child,
        pid,
        url: String::new(),
        token: String::new(),
    };
    let addr = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        match line.trim().strip_prefix("LISTENING ") {
            Some(addr) => Ok(addr.to_string()),
            None => bail!("the server child printed {line:?}"),
        }
    })
    .await??;
    server.url = format!("http://{addr}");
    // Written before the child printed LISTENING.
    server.token = crate::admin_token(&data_dir)?;
    Ok(server)
}

/// Resident set of a process, KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS in /proc/PID/status")?;
    let kib = line
        .split_whitespace()
        .nth(1)
        .context("malformed VmRSS line")?;
    Ok(kib.parse()?)
}

/// Starts the child server, attaches `sessions` idle sessions, reads its RSS.
pub async fn run(
    dir: &Path,
    policy_dir: &Path,
    sessions: usize,
    profile: &str,
) -> anyhow::Result<IdleResult> {
    let child = start_child(dir, policy_dir, "idle-data").await?;
    let (pid, token) = (child.pid, child.token.clone());
    // Streams per connection stay in the hundreds, as a real deployment's would.
    let channels = load::connect(&child.url, sessions.div_ceil(250).max(1)).await?;
    // Warm up: the first sessions allocate what every later one shares (runtime, pools,
    // SQLite's page cache, statement caches).
    let warm = 200.min(sessions);
    let _warm =
        load::open_sessions(&channels, Target::Runplane, profile, Some(&token), warm).await?;
    settle().await;
    let base_kib = rss_kib(pid)?;

    let mut runs = Vec::with_capacity(sessions);
    for chunk in (0..sessions).collect::<Vec<_>>().chunks(256) {
        let mut starting = Vec::with_capacity(chunk.len());
        for &i in chunk {
            let channel = channels[i % channels.len()].clone();
            let profile = profile.to_string();
            let token = token.clone();
            starting.push(tokio::spawn(async move {
                load::start_run(channel, &profile, Some(&token), i).await
            }));
        }
        for task in starting {
            runs.push(task.await??);
        }
    }
    settle().await;
    let runs_kib = rss_kib(pid)?;

    let mut attached = Vec::with_capacity(sessions);
    let mut runs = runs.into_iter().peekable();
    while runs.peek().is_some() {
        let mut attaching = Vec::with_capacity(256);
        for run in runs.by_ref().take(256) {
            let i = attached.len() + attaching.len();
            let channel = channels[i % channels.len()].clone();
            attaching.push(tokio::spawn(load::attach(
                channel,
                Target::Runplane,
                run,
                i,
            )));
        }
        for task in attaching {
            attached.push(task.await??);
        }
    }
    settle().await;
    let attached_kib = rss_kib(pid)?;
    drop(attached);
    drop(child);
    Ok(IdleResult {
        sessions,
        base_kib,
        runs_kib,
        attached_kib,
    })
}

/// Lets the server finish what the last requests started (commits, task wake-ups).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1500)).await;
}
