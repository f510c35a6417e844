//! What the grants suites share: a profile that asks, answers with a scope, and reading
//! a run's grants and events back.
#![allow(dead_code)]

use super::common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use tonic::Status;

/// Bash: `rm` denied, `git status` allowed, everything else asked (mode default); every
/// other tool asked. Asks wait until answered.
pub const PROFILE: &str = r#"
name = "grants"
mode = "default"

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
command_allow = ["rm"]

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git status"]

[termination]
ask_timeout_seconds = 0
"#;

pub async fn server() -> TestServer {
    TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await
}

/// The grant an answer asks for: the scope and at most one of a prefix and a glob.
#[derive(Clone, Copy)]
pub enum Scope<'a> {
    Once,
    Run,
    Prefix(&'a str),
    Glob(&'a str),
}

/// An operator's answer to `call_id` as the admin, with `scope`.
pub async fn answer(
    server: &TestServer,
    run_id: &str,
    call_id: &str,
    decision: pb::Decision,
    scope: Scope<'_>,
) -> Result<pb::ToolCallResponse, Status> {
    answer_as(server.runs().await, run_id, call_id, decision, scope).await
}

pub async fn answer_as(
    mut runs: RunServiceClient<runplane::cli::connect::AuthChannel>,
    run_id: &str,
    call_id: &str,
    decision: pb::Decision,
    scope: Scope<'_>,
) -> Result<pb::ToolCallResponse, Status> {
    let (scope, command_prefix, path_glob) = match scope {
        Scope::Once => (pb::AnswerScope::Once, "", ""),
        Scope::Run => (pb::AnswerScope::Run, "", ""),
        Scope::Prefix(prefix) => (pb::AnswerScope::Run, prefix, ""),
        Scope::Glob(glob) => (pb::AnswerScope::Run, "", glob),
    };
    runs.resolve_ask(pb::ResolveAskRequest {
        run_id: run_id.into(),
        call_id: call_id.into(),
        decision: decision as i32,
        reason: String::new(),
        resolver: "pager".into(),
        scope: scope as i32,
        command_prefix: command_prefix.into(),
        path_glob: path_glob.into(),
    })
    .await
    .map(|r| r.into_inner())
}

/// Asks `command` (Bash), answers it for the run with `scope`, and checks the worker
/// received the answer.
pub async fn grant(
    server: &TestServer,
    worker: &mut Worker,
    call_id: &str,
    command: &str,
    decision: pb::Decision,
    scope: Scope<'_>,
) {
    let asked = worker.call(call_id, "Bash", command, "").await;
    assert_eq!(
        super::common::decision(&asked),
        pb::Decision::Ask,
        "{command}"
    );
    answer(server, &worker.run_id, call_id, decision, scope)
        .await
        .unwrap();
    match worker.recv().await {
        Out::ToolCallResponse(response) => {
            assert_eq!(super::common::decision(&response), decision, "{command}")
        }
        other => panic!("expected the answer to {call_id}, got {other:?}"),
    }
}

/// The decision the worker gets for a Bash `command`.
pub async fn bash(worker: &mut Worker, call_id: &str, command: &str) -> pb::ToolCallResponse {
    worker.call(call_id, "Bash", command, "").await
}

pub async fn grants(server: &TestServer, run_id: &str) -> Vec<pb::Grant> {
    server
        .runs()
        .await
        .list_grants(pb::ListGrantsRequest {
            run_id: run_id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .grants
}

/// The events of a type, with their attributes.
pub async fn events_of(server: &TestServer, run_id: &str, kind: &str) -> Vec<pb::RunEvent> {
    let events = server.events(run_id).await;
    events.into_iter().filter(|e| e.r#type == kind).collect()
}

pub fn attributes(event: &pb::RunEvent) -> Vec<(&str, &str)> {
    let mut pairs: Vec<(&str, &str)> = event
        .attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.sort();
    pairs
}

pub const ASKED_BUILD: &str = "no rule matches \"npm run build\"; mode default gives ask";
