//! Grants over time and by whom: revoking brings the asks back, grants live in the log
//! and so survive a restart, only operators make or revoke them, and the CLI does all of
//! it.

mod common;
mod grants_common;

use common::*;
use grants_common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use tonic::Code;

#[tokio::test]
async fn revoking_a_grant_brings_the_asks_back() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    grant(
        &server,
        &mut worker,
        "c1",
        "npm run build",
        pb::Decision::Allow,
        Scope::Run,
    )
    .await;
    let mut runs = server.runs().await;
    let revoked = runs
        .revoke_grant(pb::RevokeGrantRequest {
            run_id: run_id.clone(),
            grant_id: "g1".into(),
            reason: "done building".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (revoked.revoked_by.as_str(), revoked.revoke_reason.as_str()),
        ("admin", "done building")
    );
    let event = &events_of(&server, &run_id, "run.grant.revoked").await[0];
    assert_eq!(
        attributes(event),
        [
            ("by", "admin"),
            ("grant_id", "g1"),
            ("reason", "done building")
        ]
    );
    assert_eq!(revoked.revoked_at, event.at);
    let asked = bash(&mut worker, "c2", "npm run build").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    // Listed still, as revoked.
    assert_eq!(grants(&server, &run_id).await, [revoked]);
    for (grant_id, code, message) in [
        (
            "g1",
            Code::FailedPrecondition,
            format!("grant g1 of run {run_id} is already revoked"),
        ),
        (
            "g9",
            Code::NotFound,
            format!("run {run_id} has no grant g9"),
        ),
    ] {
        let status = runs
            .revoke_grant(pb::RevokeGrantRequest {
                run_id: run_id.clone(),
                grant_id: grant_id.into(),
                reason: String::new(),
            })
            .await
            .unwrap_err();
        assert_eq!((status.code(), status.message()), (code, message.as_str()));
    }
}

#[tokio::test]
async fn grants_survive_a_restart() {
    let mut server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let prefix = Scope::Prefix("npm run build");
    grant(
        &server,
        &mut worker,
        "c1",
        "npm run build",
        pb::Decision::Allow,
        prefix,
    )
    .await;
    grant(
        &server,
        &mut worker,
        "c2",
        "make",
        pb::Decision::Allow,
        Scope::Run,
    )
    .await;
    server
        .runs()
        .await
        .revoke_grant(pb::RevokeGrantRequest {
            run_id: run_id.clone(),
            grant_id: "g2".into(),
            reason: String::new(),
        })
        .await
        .unwrap();
    let before = grants(&server, &run_id).await;
    drop(worker);
    server.restart().await;
    assert_eq!(grants(&server, &run_id).await, before);
    let (mut worker, attached) = Worker::attach(&server, &run_id).await;
    assert!(attached.resumed);
    let allowed = bash(&mut worker, "c3", "npm run build --prod").await;
    assert_eq!(
        decision(&allowed),
        pb::Decision::Allow,
        "{}",
        allowed.reason
    );
    let asked = bash(&mut worker, "c4", "make").await;
    assert_eq!(
        decision(&asked),
        pb::Decision::Ask,
        "the revoked grant stays revoked"
    );
    // Ids go on after the restart: a new grant is g3, never a reused id.
    answer(&server, &run_id, "c4", pb::Decision::Allow, Scope::Run)
        .await
        .unwrap();
    let ids: Vec<String> = grants(&server, &run_id)
        .await
        .into_iter()
        .map(|g| g.grant_id)
        .collect();
    assert_eq!(ids, ["g1", "g2", "g3"]);
}

#[tokio::test]
async fn a_viewer_cannot_grant_or_revoke_but_can_list() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    grant(
        &server,
        &mut worker,
        "c1",
        "make",
        pb::Decision::Allow,
        Scope::Run,
    )
    .await;
    let asked = bash(&mut worker, "c2", "npm run build").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    let viewer = server.create_token("watcher", pb::Role::Viewer, &[]).await;
    let channel = server.channel_as(Some(&viewer)).await;
    let status = answer_as(
        RunServiceClient::new(channel.clone()),
        &run_id,
        "c2",
        pb::Decision::Allow,
        Scope::Run,
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    let mut runs = RunServiceClient::new(channel);
    let status = runs
        .revoke_grant(pb::RevokeGrantRequest {
            run_id: run_id.clone(),
            grant_id: "g1".into(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    let listed = runs
        .list_grants(pb::ListGrantsRequest {
            run_id: run_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .grants;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].revoked_by, "");
    assert_eq!(server.pending_asks(&run_id).await.len(), 1);
}

/// Runs the CLI against the server as the admin and returns its stdout; it must succeed.
async fn cli(server: &TestServer, args: &[&str]) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(args)
        .env("RUNPLANE_SERVER", format!("http://{}", server.addr))
        .env("RUNPLANE_TOKEN", &server.admin_token)
        .env("USER", "oncall")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn the_cli_grants_lists_and_revokes() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let asked = bash(&mut worker, "c1", "npm run build -- --watch").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    let answered = cli(
        &server,
        &[
            "asks",
            "allow",
            &run_id,
            "c1",
            "--for-run",
            "--prefix",
            "npm run build",
        ],
    )
    .await;
    assert_eq!(
        answered,
        format!(
            "allow: call c1 of run {run_id} (allow by admin)\n\
             grant g1 of run {run_id}: allow Bash prefix \"npm run build\" (by admin, call c1)\n"
        )
    );
    assert!(matches!(worker.recv().await, Out::ToolCallResponse(_)));
    let allowed = bash(&mut worker, "c2", "npm run build").await;
    assert_eq!(decision(&allowed), pb::Decision::Allow);

    let listed = cli(&server, &["grants", "list", &run_id, "--json"]).await;
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let grant = &listed["grants"][0];
    assert_eq!(grant["grant_id"], "g1");
    assert_eq!(grant["kind"], "prefix");
    assert_eq!(grant["covers"], "npm run build");
    assert_eq!(grant["granted_by"], "admin");
    assert_eq!(grant["note"], "oncall");
    assert_eq!(grant["revoked_by"], serde_json::Value::Null);

    let revoked = cli(
        &server,
        &["grants", "revoke", &run_id, "g1", "--reason", "enough"],
    )
    .await;
    assert_eq!(
        revoked,
        format!(
            "grant g1 of run {run_id}: allow Bash prefix \"npm run build\" (by admin, call c1); \
             revoked by admin\n"
        )
    );
    let table = cli(&server, &["grants", "list", &run_id]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("GRANT  DECISION  TOOL  BY"), "{table}");
    assert!(
        lines[1].starts_with("g1     allow     Bash  admin"),
        "{table}"
    );
    assert!(
        lines[1].ends_with("revoked by admin  prefix  npm run build"),
        "{table}"
    );
    let asked = bash(&mut worker, "c3", "npm run build").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
}

#[tokio::test]
async fn an_ask_answered_while_its_worker_is_away_places_files_with_the_last_root() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    // The worker's root is /work/repo: an absolute path in it lies inside the workspace.
    let asked = worker.call("e1", "Edit", "", "/work/repo/src/a.rs").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    drop(worker);
    // The detach is recorded once the server notices the stream ended.
    for _ in 0..100 {
        if server.event_types(&run_id).await.last().map(String::as_str)
            == Some("run.worker.detached")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    answer(
        &server,
        &run_id,
        "e1",
        pb::Decision::Allow,
        Scope::Glob("src/**"),
    )
    .await
    .unwrap();
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let allowed = worker.call("e2", "Edit", "", "/work/repo/src/b.rs").await;
    assert_eq!(
        decision(&allowed),
        pb::Decision::Allow,
        "{}",
        allowed.reason
    );
}
