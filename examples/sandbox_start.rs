//! What starting a process inside the agent's sandbox costs over starting it bare:
//! `runplane exec-agent -- true` against `runplane exec-agent --sandbox SPEC -- true`,
//! alternated, with the plan of `headless-safe-sandbox` on a fresh workspace.
//!
//! ```sh
//! cargo build --release && cargo run --release --example sandbox_start [-- ROUNDS]
//! ```
//!
//! It uses the `runplane` binary beside its own directory (`target/release/runplane`).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use runplane::policy::presets;
use runplane::sandbox::materialise::materialise;
use runplane::sandbox::plan::{compile, PlanInput};
use runplane::sandbox::{bwrap, missing, Spec};

fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(50);
    let missing = missing();
    anyhow::ensure!(
        missing.is_empty(),
        "the sandbox cannot run here: {missing:?}"
    );
    let exe = std::env::current_exe()?;
    let runplane = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("runplane"))
        .filter(|path| path.exists())
        .ok_or_else(|| anyhow::anyhow!("no runplane binary beside {}", exe.display()))?;
    let (workspace, private, tmp) = (
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    );
    std::fs::create_dir(workspace.path().join(".git"))?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let plan = compile(&PlanInput {
        workspace: workspace.path().canonicalize()?,
        home,
        run_tmp: tmp.path().to_path_buf(),
        private: private.path().to_path_buf(),
        secrets: presets()[1].secrets.clone(),
        ..PlanInput::default()
    });
    let (mounts, _placeholders) = materialise(&plan, private.path())?;
    let spec_path = private.path().join("sandbox.json");
    Spec {
        bwrap: bwrap::args(&mounts),
        writable: mounts.writable.clone(),
        connect_ports: vec![1],
    }
    .write(&spec_path)?;
    let start = |sandboxed: bool| -> anyhow::Result<Duration> {
        let mut command = Command::new(&runplane);
        command.args(["exec-agent", "--parent", &std::process::id().to_string()]);
        if sandboxed {
            command.arg("--sandbox").arg(&spec_path);
        }
        let began = Instant::now();
        let status = command
            .args(["--", "true"])
            .current_dir(workspace.path())
            .status()?;
        anyhow::ensure!(status.success(), "exec-agent failed: {status}");
        Ok(began.elapsed())
    };
    let (mut bare, mut sandboxed) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        bare.push(start(false)?);
        sandboxed.push(start(true)?);
    }
    let median = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let (bare, sandboxed) = (median(&mut bare), median(&mut sandboxed));
    println!(
        "{rounds} rounds, medians: bare {:.2} ms, sandboxed {:.2} ms, added {:.2} ms",
        bare.as_secs_f64() * 1e3,
        sandboxed.as_secs_f64() * 1e3,
        sandboxed.saturating_sub(bare).as_secs_f64() * 1e3
    );
    Ok(())
}
