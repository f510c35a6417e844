//! How a run gets its sandbox, and how it fails closed: the plan the server sends at
//! attach, `--sandbox on` recorded with its plan hash, `--sandbox off` recorded and shown
//! as unsandboxed, refused by a profile that requires the sandbox (by the worker, and by
//! the server when a worker reports it anyway), and a kernel that cannot enforce the plan
//! refusing to start the agent. Needs bubblewrap where the sandbox runs
//! (`RUNPLANE_REQUIRE_SANDBOX=1` in `.ci/run`).

mod common;

use common::fake::*;
use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::worker_message::Message as In;

/// Allows `touch marker` (a Bash call that writes `marker`) and nothing else; no gate.
const PROFILE: &str = r#"
name = "loose"
mode = "default"
secrets = ["keys/**"]

[sandbox]
egress = ["crates.io:443"]

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["touch marker"]

[[rules]]
specifier = { tool = "Write" }
decision = "allow"
path_allow = ["marker"]

[[rules]]
specifier = { tool = "WebFetch" }
decision = "allow"
domain_allow = ["docs.rs"]
"#;

async fn server() -> TestServer {
    TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await
}

fn touch() -> serde_json::Value {
    serde_json::json!([{"name": "Bash", "input": {"command": "touch marker"}}])
}

/// The `sandbox.*` events of a run, as (type, attributes).
async fn sandbox_events(
    server: &TestServer,
    run_id: &str,
) -> Vec<(String, std::collections::HashMap<String, String>)> {
    server
        .events(run_id)
        .await
        .into_iter()
        .filter(|e| e.r#type.starts_with("sandbox."))
        .map(|e| (e.r#type, e.attributes))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn attach_tells_the_worker_what_the_profile_says_about_the_sandbox() {
    let server = server().await;
    let run_id = server.start_run("loose").await;
    let (_worker, attached) = Worker::attach(&server, &run_id).await;
    let sandbox = attached.sandbox.expect("the sandbox policy");
    assert_eq!(sandbox.profile, "loose");
    assert_eq!(sandbox.profile_hash.len(), 64);
    assert_eq!(sandbox.secrets, ["keys/**"]);
    assert!(!sandbox.required);
    assert_eq!(
        sandbox.egress,
        ["crates.io:443", "docs.rs:443", "docs.rs:80"]
    );
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (_worker, attached) = Worker::attach(&server, &run_id).await;
    let sandbox = attached.sandbox.expect("the sandbox policy");
    assert!(sandbox.required);
    assert!(
        sandbox.secrets.iter().any(|s| s == "~/.ssh/**"),
        "{:?}",
        sandbox.secrets
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sandbox_on_is_recorded_with_its_plan_and_off_is_shown_as_unsandboxed() {
    if python3_missing() || !sandbox_available() {
        return;
    }
    let server = server().await;
    for (mode, state, kind) in [
        ("on", "enforced", "sandbox.enforced"),
        ("off", "unsandboxed", "sandbox.off"),
    ] {
        let run_id = server.start_run("loose").await;
        let token = server.worker_token(&run_id);
        let (output, repo) = fake_work(
            &server,
            &["--run", &run_id, "--sandbox", mode],
            &[("RUNPLANE_WORKER_TOKEN", &token)],
            touch(),
        )
        .await;
        assert!(output.status.success(), "{mode}: {output:?}");
        assert!(
            repo.path().join("marker").exists(),
            "{mode}: the allowed call ran"
        );
        let run = server.get_run(&run_id).await;
        assert_eq!(
            (status(&run), run.sandbox.as_str()),
            (pb::RunStatus::Completed, state)
        );
        let events = sandbox_events(&server, &run_id).await;
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].0, kind);
        match mode {
            "on" => {
                assert_eq!(events[0].1["plan_hash"].len(), 64);
                assert_eq!(events[0].1["layers"], "bubblewrap,landlock-abi-6,seccomp");
            }
            _ => assert_eq!(events[0].1["reason"], "runplane work --sandbox off"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_profile_that_requires_the_sandbox_refuses_sandbox_off() {
    if python3_missing() {
        return;
    }
    let server = server().await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let token = server.worker_token(&run_id);
    let (output, repo) = fake_work(
        &server,
        &["--run", &run_id, "--sandbox", "off"],
        &[("RUNPLANE_WORKER_TOKEN", &token)],
        touch(),
    )
    .await;
    assert!(!output.status.success());
    assert!(
        !repo.path().join("marker").exists(),
        "the agent never started"
    );
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(
        run.error,
        "the run's profile \"headless-safe-sandbox\" requires the agent's sandbox: runplane \
         work --sandbox off is refused"
    );
    assert!(sandbox_events(&server, &run_id).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_reporting_no_sandbox_for_a_profile_that_requires_one_fails_the_run() {
    let server = server().await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker
        .send(In::SandboxReport(pb::SandboxReport {
            report: Some(pb::sandbox_report::Report::Off(pb::SandboxOff {
                reason: "a worker of its own".into(),
            })),
        }))
        .await;
    let why = "the run's profile \"headless-safe-sandbox\" requires the agent's sandbox; a \
               worker that runs the agent without one is refused";
    match worker.recv().await {
        pb::coordinator_message::Message::Error(error) => {
            assert_eq!(
                (error.code.as_str(), error.message.as_str()),
                ("FAILED_PRECONDITION", why)
            )
        }
        other => panic!("expected the refusal, got {other:?}"),
    }
    let run = server.get_run(&run_id).await;
    assert_eq!(
        (status(&run), run.error.as_str()),
        (pb::RunStatus::Failed, why)
    );
    assert_eq!(run.sandbox, "unsandboxed");
}

/// A seccomp filter (for bubblewrap's `--seccomp`) that makes `landlock_create_ruleset`
/// fail with ENOSYS, as on a kernel without Landlock.
fn without_landlock() -> Vec<u8> {
    use seccompiler::{SeccompAction, SeccompFilter};
    let filter = SeccompFilter::new(
        [(libc::SYS_landlock_create_ruleset, Vec::new())]
            .into_iter()
            .collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        std::env::consts::ARCH.try_into().unwrap(),
    )
    .unwrap();
    let program: seccompiler::BpfProgram = filter.try_into().unwrap();
    program
        .iter()
        .flat_map(|i| {
            let mut bytes = i.code.to_ne_bytes().to_vec();
            bytes.extend([i.jt, i.jf]);
            bytes.extend(i.k.to_ne_bytes());
            bytes
        })
        .collect()
}

/// `runplane work --sandbox on` on `run_id` with the fake agent, run by `launcher` (a
/// command line before runplane's own, possibly empty) and the runplane binary `runplane`.
fn work_command(
    launcher: &[&str],
    runplane: &std::path::Path,
    server: &TestServer,
    run_id: &str,
    repo: &std::path::Path,
) -> tokio::process::Command {
    let script = repo.join(".git/script.json");
    std::fs::write(&script, touch().to_string()).unwrap();
    let agent = common::fake::fake_agent();
    let (program, launcher_args) = match launcher.split_first() {
        Some((program, args)) => (std::ffi::OsStr::new(*program), args),
        None => (runplane.as_os_str(), &[][..]),
    };
    let mut command = tokio::process::Command::new(program);
    command.args(launcher_args);
    if !launcher.is_empty() {
        command.arg(runplane);
    }
    command
        .args(["work", "--run", run_id, "--sandbox", "on", "--server"])
        .arg(format!("http://{}", server.addr))
        .arg("--workspace")
        .arg(repo)
        .args(["--", "python3", &agent, "-p", "do it"])
        .env("RUNPLANE_WORKER_TOKEN", server.worker_token(run_id))
        .env("FAKE_AGENT_SCRIPT", &script);
    command
}

/// `runplane work` failed, the agent never ran, and the run failed with `error`'s start
/// and no sandbox report.
async fn assert_refused_before_the_agent(
    output: std::process::Output,
    server: &TestServer,
    run_id: &str,
    repo: &std::path::Path,
    error: &str,
) {
    assert!(!output.status.success());
    assert!(!repo.join("marker").exists(), "the agent never started");
    let run = server.get_run(run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert!(run.error.starts_with(error), "{}", run.error);
    assert!(sandbox_events(server, run_id).await.is_empty());
}

const NOT_ENFORCEABLE: &str =
    "the agent's sandbox cannot be enforced on this machine, so the agent is not started: ";

#[tokio::test(flavor = "multi_thread")]
async fn a_kernel_that_cannot_enforce_the_plan_never_starts_the_agent() {
    if python3_missing() || !sandbox_available() {
        return;
    }
    let server = server().await;
    let run_id = server.start_run("loose").await;
    let filter = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(filter.path(), without_landlock()).unwrap();
    let repo = git_repo();
    // runplane work itself under the filter: bubblewrap reads it on its stdin.
    let launcher = [
        "bwrap",
        "--bind",
        "/",
        "/",
        "--dev-bind",
        "/dev",
        "/dev",
        "--seccomp",
        "0",
        "--",
    ];
    let runplane = std::path::Path::new(env!("CARGO_BIN_EXE_runplane"));
    let output = work_command(&launcher, runplane, &server, &run_id, repo.path())
        .stdin(std::fs::File::open(filter.path()).unwrap())
        .output()
        .await
        .unwrap();
    let error = format!(
        "{NOT_ENFORCEABLE}Landlock (ABI 6 or later, for TCP rules and signal scoping) cannot \
         be enforced"
    );
    assert_refused_before_the_agent(output, &server, &run_id, repo.path(), &error).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runplane_without_its_confine_binary_never_starts_the_agent() {
    if python3_missing() || !sandbox_available() {
        return;
    }
    let server = server().await;
    let run_id = server.start_run("loose").await;
    let repo = git_repo();
    // The runplane binary alone in a directory: runplane-confine is not beside it.
    let alone = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let runplane = alone.path().join("runplane");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_runplane"), &runplane).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_runplane"), &runplane).unwrap();
    }
    let output = work_command(&[], &runplane, &server, &run_id, repo.path())
        .output()
        .await
        .unwrap();
    let error = format!(
        "{NOT_ENFORCEABLE}runplane-confine is not beside {}",
        runplane.display()
    );
    assert_refused_before_the_agent(output, &server, &run_id, repo.path(), &error).await;
}
