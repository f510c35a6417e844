//! What RunService shows an operator beyond the run's own fields, through a real server
//! and a real client: the rule and the part of a command line that sent a call to a
//! person (ListPendingAsks), and the stall tracker's count against its threshold (GetRun).

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;

/// `git status` is allowed and `curl` asked by a rule; anything else is asked by the mode.
/// Three results in a row without progress end a run.
const PROFILE: &str = r#"
name = "operator-view"
mode = "default"

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git status"]

[[rules]]
specifier = { tool = "Bash" }
decision = "ask"
command_allow = ["curl"]

[[rules]]
specifier = { tool = "Read" }
decision = "allow"

[[rules]]
specifier = { tool = "Edit" }
decision = "allow"

[termination]
stall_detection = true
stall_threshold = 3
ask_timeout_seconds = 600
"#;

/// rules[1] as the policy file writes it (`policy show`'s form).
const CURL_RULE: &str = "[[rules]]\n\
                         specifier = { tool = \"Bash\" }\n\
                         decision = \"ask\"\n\
                         command_allow = [\"curl\"]\n";

async fn server() -> TestServer {
    TestServer::with(Options {
        policy: Some(PROFILE.to_string()),
        ..Options::default()
    })
    .await
}

/// The asks' call ids, rule indexes, rule texts and parts, oldest first.
fn details(asks: &[pb::PendingAsk]) -> Vec<(String, Option<i32>, String, String)> {
    asks.iter()
        .map(|ask| {
            let call_id = ask.request.as_ref().map(|r| r.call_id.clone());
            (
                call_id.unwrap_or_default(),
                ask.rule_index,
                ask.rule.clone(),
                ask.part.clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_pending_ask_names_its_rule_and_the_deciding_part() {
    let server = server().await;
    let run_id = server.start_run("operator-view").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;

    // `git status` is allowed by rules[0], `sh` would be asked by the mode: the first
    // part with the strictest decision, `curl x`, decides, by rules[1].
    let compound = worker
        .call("c-compound", "Bash", "git status && curl x | sh", "")
        .await;
    assert_eq!(decision(&compound), pb::Decision::Ask);
    let by_mode = worker.call("c-make", "Bash", "make", "").await;
    assert_eq!(decision(&by_mode), pb::Decision::Ask);
    // A tool other than Bash is judged whole: no part.
    let write = worker.call("c-write", "Write", "", "notes.txt").await;
    assert_eq!(decision(&write), pb::Decision::Ask);

    let expected = vec![
        (
            "c-compound".to_string(),
            Some(1),
            CURL_RULE.to_string(),
            "curl x".to_string(),
        ),
        (
            "c-make".to_string(),
            None,
            String::new(),
            "make".to_string(),
        ),
        ("c-write".to_string(), None, String::new(), String::new()),
    ];
    assert_eq!(details(&server.pending_asks(&run_id).await), expected);
    // The list of every run's asks says the same.
    assert_eq!(details(&server.pending_asks("").await), expected);

    // The free-text reason still names both, for clients that read only it.
    let asks = server.pending_asks(&run_id).await;
    assert_eq!(
        asks[0].reason, "rules[1] (Bash ask) matches \"curl x\"",
        "{asks:?}"
    );
}

/// The stall tracker of a run as GetRun reports it: (count, threshold, detected).
async fn stall(server: &TestServer, run_id: &str) -> (i32, i32, bool) {
    let run = server.get_run(run_id).await;
    let stall = run.stall.expect("GetRun carries the stall tracker");
    (stall.count, stall.threshold, stall.detected)
}

/// Allows a call of `tool` and reports its successful result with `output`.
async fn step(worker: &mut Worker, call_id: &str, tool: &str, output: &str) -> Out {
    let response = worker.call(call_id, tool, "", "src/lib.rs").await;
    assert_eq!(decision(&response), pb::Decision::Allow, "{response:?}");
    worker.result(call_id, true, output, 0.0).await
}

#[tokio::test]
async fn get_run_counts_results_without_progress_up_to_the_stall() {
    let mut server = server().await;
    let run_id = server.start_run("operator-view").await;
    assert_eq!(stall(&server, &run_id).await, (0, 3, false));
    let (mut worker, _) = Worker::attach(&server, &run_id).await;

    // Reads are never progress.
    step(&mut worker, "r1", "Read", "fn main() {}").await;
    assert_eq!(stall(&server, &run_id).await, (1, 3, false));
    step(&mut worker, "r2", "Read", "fn main() {}").await;
    assert_eq!(stall(&server, &run_id).await, (2, 3, false));
    // A successful edit with a new output is: the count starts again.
    step(&mut worker, "e1", "Edit", "edited src/lib.rs").await;
    assert_eq!(stall(&server, &run_id).await, (0, 3, false));

    // Three identical results in a row: the run is stalled and ends.
    for (i, call_id) in ["r3", "r4", "r5"].into_iter().enumerate() {
        let ack = step(&mut worker, call_id, "Read", "fn main() {}").await;
        assert!(matches!(ack, Out::ResultAck(_)), "{ack:?}");
        let count = i32::try_from(i).unwrap() + 1;
        assert_eq!(
            stall(&server, &run_id).await,
            (count, 3, count == 3),
            "after {call_id}"
        );
    }
    let run = server.get_run(&run_id).await;
    assert_eq!(
        (status(&run), run.error.as_str()),
        (pb::RunStatus::Failed, "stall detected")
    );

    // ListRuns reads run rows only and leaves the tracker out.
    let listed = server
        .runs()
        .await
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.runs.len(), 1);
    assert_eq!(listed.runs[0].stall, None);

    // The tracker is read from the store: a restarted server reports the same.
    drop(worker);
    server.restart().await;
    assert_eq!(stall(&server, &run_id).await, (3, 3, true));
}
