//! `runplane policy replay` and `PolicyService.Replay`: runs recorded through a real server
//! are judged again under a candidate profile, offline on the data directory (read-only,
//! beside the running server) and through the RPC, and both give the same changes.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::policy_service_client::PolicyServiceClient;
use runplane::grpc::pb::replay_response::Item;
use tokio_stream::StreamExt as _;
use tonic::Code;

/// The profile the runs are recorded under.
const RECORDED: &str = r#"
name = "recorded"
mode = "acceptEdits"

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git", "curl", "ls"]

[[rules]]
specifier = { tool = "Edit" }
decision = "ask"
path_allow = ["ask/**"]
"#;

/// A stricter candidate: curl denied, asked edits denied, edits allowed only under `src/`
/// (which an absolute path meets only when judged with the run's workspace root), the
/// rest asked.
const STRICT: &str = r#"
name = "strict"
mode = "default"

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
command_allow = ["curl"]

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git", "ls"]

[[rules]]
specifier = { tool = "Edit" }
decision = "deny"
path_allow = ["ask/**"]

[[rules]]
specifier = { tool = "Edit" }
decision = "allow"
path_allow = ["src/**"]

[[rules]]
specifier = { tool = "Read" }
decision = "allow"
"#;

/// A changed call as both paths report it: run, call, recorded and replayed decision and
/// rule (-1: the mode).
type Changed = (String, String, String, i64, String, i64);

/// The recorded runs: a red one (completed, with an answered ask) and a blue one (still
/// running), each through a real worker session.
struct Recorded {
    server: TestServer,
    red: String,
    blue: String,
}

async fn record() -> Recorded {
    let server = TestServer::with(Options {
        policy: Some(RECORDED.into()),
        ..Options::default()
    })
    .await;
    let red = server.start_team_run("red", "recorded").await;
    let (mut worker, _) = Worker::attach(&server, &red).await;
    for (call_id, tool, command, path, expected) in [
        ("r1", "Bash", "git status", "", pb::Decision::Allow),
        (
            "r2",
            "Bash",
            "curl https://example.com",
            "",
            pb::Decision::Allow,
        ),
        ("r3", "Edit", "", "ask/notes.md", pb::Decision::Ask),
        (
            "r4",
            "Edit",
            "",
            "/work/repo/src/lib.rs",
            pb::Decision::Allow,
        ),
    ] {
        let response = worker.call(call_id, tool, command, path).await;
        assert_eq!(decision(&response), expected, "{call_id}");
        if expected == pb::Decision::Ask {
            server
                .resolve(&red, call_id, pb::Decision::Allow, "fine")
                .await;
            let resolved = worker.recv().await;
            assert!(
                matches!(
                    resolved,
                    pb::coordinator_message::Message::ToolCallResponse(_)
                ),
                "{resolved:?}"
            );
        }
    }
    worker.complete().await;
    let blue = server.start_team_run("blue", "recorded").await;
    let (mut worker, _) = Worker::attach(&server, &blue).await;
    for (call_id, tool, command, path) in [
        ("b1", "Bash", "curl example.org", ""),
        ("b2", "Read", "", "README"),
    ] {
        let response = worker.call(call_id, tool, command, path).await;
        assert_eq!(decision(&response), pb::Decision::Allow, "{call_id}");
    }
    // The red run has ended (its completion recorded) before anything is replayed.
    for _ in 0..100 {
        if status(&server.get_run(&red).await) == pb::RunStatus::Completed {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        status(&server.get_run(&red).await),
        pb::RunStatus::Completed
    );
    Recorded { server, red, blue }
}

/// What the strict profile changes in the recorded runs.
fn strict_changes(red: &str, blue: &str) -> BTreeSet<Changed> {
    let c = |run: &str, call: &str, from: &str, from_rule, to: &str, to_rule| {
        (
            run.to_string(),
            call.to_string(),
            from.to_string(),
            from_rule,
            to.to_string(),
            to_rule,
        )
    };
    BTreeSet::from([
        c(red, "r2", "allow", 0, "deny", 0),
        c(red, "r3", "ask", 1, "deny", 2),
        c(blue, "b1", "allow", 0, "deny", 0),
    ])
}

/// Calls Replay and returns the changes and the summary, checking the summary is last.
async fn replay_rpc(
    server: &TestServer,
    token: &str,
    candidate: pb::replay_request::Candidate,
) -> Result<(BTreeSet<Changed>, pb::ReplaySummary), tonic::Status> {
    let mut policy = PolicyServiceClient::new(server.channel_as(Some(token)).await);
    let messages: Vec<pb::ReplayResponse> = policy
        .replay(pb::ReplayRequest {
            candidate: Some(candidate),
            ..Default::default()
        })
        .await?
        .into_inner()
        .collect::<Result<_, _>>()
        .await?;
    let (last, changes) = messages.split_last().expect("at least the summary");
    let Some(Item::Summary(summary)) = &last.item else {
        panic!("the last message is the summary: {last:?}");
    };
    let decision = |d: i32| {
        pb::Decision::try_from(d)
            .unwrap()
            .as_str_name()
            .to_lowercase()
    };
    let changed = changes
        .iter()
        .map(|message| {
            let Some(Item::Change(change)) = &message.item else {
                panic!("only changes before the summary: {message:?}");
            };
            let recorded = change.recorded.as_ref().unwrap();
            let replayed = change.replayed.as_ref().unwrap();
            (
                change.run_id.clone(),
                change.call_id.clone(),
                decision(recorded.decision).replace("decision_", ""),
                i64::from(recorded.rule_index),
                decision(replayed.decision).replace("decision_", ""),
                i64::from(replayed.rule_index),
            )
        })
        .collect();
    Ok((changed, summary.clone()))
}

/// Runs the real binary (on the blocking pool: the server shares this runtime).
async fn runplane(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_runplane"))
            .args(&args)
            .env_remove("RUNPLANE_POLICY_DIR")
            .env_remove("RUNPLANE_SERVER")
            .env_remove("RUNPLANE_TOKEN")
            .output()
            .expect("runs the binary")
    })
    .await
    .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}

/// The JSON lines of `--json`: the changes, and the summary (the last line).
fn json_lines(output: &Output) -> (BTreeSet<Changed>, serde_json::Value) {
    let text = String::from_utf8_lossy(&output.stdout);
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let summary = lines.pop().expect("a summary line");
    assert_eq!(summary["type"], "summary", "{text}");
    let changes = lines
        .iter()
        .map(|v| {
            assert_eq!(v["type"], "change", "{text}");
            (
                v["run_id"].as_str().unwrap().to_string(),
                v["call_id"].as_str().unwrap().to_string(),
                v["recorded"]["decision"].as_str().unwrap().to_string(),
                v["recorded"]["rule_index"].as_i64().unwrap(),
                v["replayed"]["decision"].as_str().unwrap().to_string(),
                v["replayed"]["rule_index"].as_i64().unwrap(),
            )
        })
        .collect();
    (changes, summary)
}

fn write_strict(dir: &Path) -> String {
    let path = dir.join("strict.toml");
    std::fs::write(&path, STRICT).unwrap();
    path.to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stricter_profile_changes_exactly_the_calls_it_should_offline_and_online_alike() {
    let Recorded { server, red, blue } = record().await;
    let expected = strict_changes(&red, &blue);
    let candidates = tempfile::tempdir().unwrap();
    let strict = write_strict(candidates.path());
    let data_dir = server.dir.path().join("data");

    // The RPC, as the admin.
    let (changed, summary) = replay_rpc(
        &server,
        &server.admin_token,
        pb::replay_request::Candidate::ProfileToml(STRICT.into()),
    )
    .await
    .unwrap();
    assert_eq!(changed, expected);
    assert_eq!((summary.runs, summary.calls, summary.unjudged), (2, 6, 0));
    let transitions: Vec<(i32, i32, u64)> = summary
        .changed
        .iter()
        .map(|t| (t.recorded, t.replayed, t.calls))
        .collect();
    assert_eq!(
        transitions,
        [
            (pb::Decision::Allow as i32, pb::Decision::Deny as i32, 2),
            (pb::Decision::Ask as i32, pb::Decision::Deny as i32, 1),
        ]
    );

    // Offline on the data directory, while the server runs on it.
    let offline = runplane(args(&[
        "policy",
        "replay",
        "--profile",
        &strict,
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--json",
    ]))
    .await;
    assert_eq!(
        offline.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&offline.stderr)
    );
    let (offline_changed, offline_summary) = json_lines(&offline);
    assert_eq!(offline_changed, expected);
    assert_eq!(offline_summary["runs"], 2);
    assert_eq!(offline_summary["calls"], 6);
    assert_eq!(offline_summary["changed"], 3);

    // Online through the CLI: the file is sent to the server.
    let online = runplane(args(&[
        "policy",
        "replay",
        "--profile",
        &strict,
        "--server",
        &format!("http://{}", server.addr),
        "--token",
        &server.admin_token,
        "--json",
    ]))
    .await;
    assert_eq!(
        online.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&online.stderr)
    );
    let (online_changed, online_summary) = json_lines(&online);
    assert_eq!(online_changed, expected);
    assert_eq!(online_summary, offline_summary);

    // The text a person reads: the counts by decision, and each call.
    let text = runplane(args(&[
        "policy",
        "replay",
        "--profile",
        &strict,
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(text.status.code(), Some(3));
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    assert_eq!(
        tail,
        [
            "3 changed: 6 calls judged again in 2 runs (0 never judged by the policy, left out)",
            "ask → deny: 1",
            "allow → deny: 2",
        ],
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "run {red} call r2: Bash curl https://example.com\n  allow by rules[0] → deny by rules[0]"
        )),
        "{text}"
    );

    // Filters: only the completed run.
    let completed = runplane(args(&[
        "policy",
        "replay",
        "--profile",
        &strict,
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--status",
        "completed",
        "--since",
        "1h",
        "--json",
    ]))
    .await;
    assert_eq!(completed.status.code(), Some(3));
    let (completed_changed, completed_summary) = json_lines(&completed);
    assert_eq!(
        completed_changed,
        expected
            .iter()
            .filter(|c| c.0 == red)
            .cloned()
            .collect::<BTreeSet<_>>()
    );
    assert_eq!(completed_summary["runs"], 1);
    assert_eq!(completed_summary["calls"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_profile_changes_nothing_and_exits_zero() {
    let Recorded {
        mut server, red, ..
    } = record().await;
    let data_dir = server.dir.path().join("data");
    let policy_dir = server.dir.path().join("policies");
    let offline_args = args(&[
        "policy",
        "replay",
        "--profile",
        "recorded",
        "--policy-dir",
        policy_dir.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    let no_change =
        "no change: 6 calls judged again in 2 runs (0 never judged by the policy, left out)\n";

    let offline = runplane(offline_args.clone()).await;
    assert_eq!(
        offline.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&offline.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&offline.stdout), no_change);

    // With the server stopped too (its WAL checkpointed away), and the server starts on
    // the data directory again after it.
    server.stop().await;
    let stopped = runplane(offline_args).await;
    assert_eq!(
        stopped.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&stopped.stdout), no_change);
    server.restart().await;
    assert_eq!(
        status(&server.get_run(&red).await),
        pb::RunStatus::Completed
    );

    // By name, online: the server's own profile of that name.
    let online = runplane(args(&[
        "policy",
        "replay",
        "--profile",
        "recorded",
        "--server",
        &format!("http://{}", server.addr),
        "--token",
        &server.admin_token,
        "--json",
    ]))
    .await;
    assert_eq!(
        online.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&online.stderr)
    );
    let (changed, summary) = json_lines(&online);
    assert!(changed.is_empty());
    assert_eq!(summary["calls"], 6);
    assert_eq!(summary["changed"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_operator_replays_only_its_runs_and_a_viewer_none() {
    let Recorded { server, red, blue } = record().await;
    let red_operator = server
        .create_token("red-ops", pb::Role::Operator, &["red"])
        .await;
    let (changed, summary) = replay_rpc(
        &server,
        &red_operator,
        pb::replay_request::Candidate::ProfileToml(STRICT.into()),
    )
    .await
    .unwrap();
    let expected: BTreeSet<Changed> = strict_changes(&red, &blue)
        .into_iter()
        .filter(|c| c.0 == red)
        .collect();
    assert_eq!(changed, expected);
    assert_eq!((summary.runs, summary.calls), (1, 4));

    let viewer = server.create_token("look", pb::Role::Viewer, &[]).await;
    let refused = replay_rpc(
        &server,
        &viewer,
        pb::replay_request::Candidate::ProfileName("recorded".into()),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);

    // A candidate that is not a profile, and one the server does not know.
    let bad = replay_rpc(
        &server,
        &server.admin_token,
        pb::replay_request::Candidate::ProfileToml("mode = 3".into()),
    )
    .await
    .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    let unknown = replay_rpc(
        &server,
        &server.admin_token,
        pb::replay_request::Candidate::ProfileName("nope".into()),
    )
    .await
    .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_refused_by_a_limit_are_left_out_and_bad_input_exits_2() {
    let server = TestServer::with(Options {
        policy: Some(limits_profile("limited", "max_steps = 2")),
        ..Options::default()
    })
    .await;
    let run = server.start_run("limited").await;
    let (mut worker, _) = Worker::attach(&server, &run).await;
    for call_id in ["c1", "c2", "c3"] {
        worker.call(call_id, "Read", "", "src/a.rs").await;
    }
    // A candidate that denies every Read: the two judged calls change, the third was
    // refused by the step limit and is not judged again.
    let candidates = tempfile::tempdir().unwrap();
    let deny_reads = candidates.path().join("deny-reads.toml");
    std::fs::write(
        &deny_reads,
        "name = \"deny-reads\"\n[[rules]]\nspecifier = { tool = \"Read\" }\ndecision = \"deny\"\n",
    )
    .unwrap();
    let data_dir = server.dir.path().join("data");
    let out = runplane(args(&[
        "policy",
        "replay",
        "--profile",
        deny_reads.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--json",
    ]))
    .await;
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (changed, summary) = json_lines(&out);
    let calls: Vec<&str> = changed.iter().map(|c| c.1.as_str()).collect();
    assert_eq!(calls, ["c1", "c2"]);
    assert_eq!(summary["calls"], 2);
    assert_eq!(summary["unjudged"], 1);

    let missing = runplane(args(&[
        "policy",
        "replay",
        "--profile",
        "/no/such/profile.toml",
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(missing.status.code(), Some(2));
    let not_a_data_dir = runplane(args(&[
        "policy",
        "replay",
        "--profile",
        deny_reads.to_str().unwrap(),
        "--data-dir",
        candidates.path().to_str().unwrap(),
    ]))
    .await;
    assert_eq!(not_a_data_dir.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&not_a_data_dir.stderr).contains("no runplane database there"),
        "{}",
        String::from_utf8_lossy(&not_a_data_dir.stderr)
    );
}
