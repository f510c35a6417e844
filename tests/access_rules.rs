//! Access beyond the matrix of tests/access.rs: scopes hide other teams' runs, events name
//! who did what, a worker token in the metadata, malformed authorization headers, and a
//! rule for every method of the API.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::worker_message::Message as In;
use tonic::metadata::MetadataValue;
use tonic::Code;

#[tokio::test]
async fn a_scoped_token_sees_only_its_teams_runs() {
    let server = TestServer::with(Options {
        policy: Some(limits_profile("asks", "")),
        ..Options::default()
    })
    .await;
    let red = server.start_team_run("red", "asks").await;
    let (mut worker, _) = Worker::attach(&server, &red).await;
    worker.call("e1", "Edit", "", "ask/file.rs").await;
    let blue_token = server
        .create_token("blue", pb::Role::Operator, &["blue"])
        .await;
    let mut blue = RunServiceClient::new(server.channel_as(Some(&blue_token)).await);
    let blue_run = blue
        .start_run(pb::StartRequest {
            task_id: "t".into(),
            agent_id: "a".into(),
            project_id: "p".into(),
            team_id: "blue".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    let listed = blue
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .runs;
    assert_eq!(
        listed.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        [blue_run.id]
    );
    let asks = blue
        .list_pending_asks(pb::ListPendingAsksRequest::default())
        .await
        .unwrap()
        .into_inner()
        .asks;
    assert!(asks.is_empty(), "the red run's ask is not listed: {asks:?}");
    let unknown = blue
        .get_run(pb::GetRunRequest {
            run_id: "no-such-run".into(),
        })
        .await
        .unwrap_err();
    let hidden = blue
        .get_run(pb::GetRunRequest {
            run_id: red.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(hidden.code(), Code::NotFound);
    assert_eq!(
        hidden.message().replace(&red, "ID"),
        unknown.message().replace("no-such-run", "ID"),
        "a hidden run reads exactly like a missing one"
    );
    // The admin still sees both, and the red ask.
    assert_eq!(server.pending_asks("").await.len(), 1);
}

#[tokio::test]
async fn events_record_the_authenticated_principal_as_by() {
    let server = TestServer::with(Options {
        policy: Some(limits_profile("asks", "")),
        ..Options::default()
    })
    .await;
    let token = server.create_token("carol", pb::Role::Operator, &[]).await;
    let mut carol = RunServiceClient::new(server.channel_as(Some(&token)).await);
    let response = carol
        .start_run(pb::StartRequest {
            task_id: "t".into(),
            agent_id: "a".into(),
            project_id: "p".into(),
            policy_profile: "asks".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let run_id = response.run.unwrap().id;
    server.remember_worker_token(&run_id, &response.worker_token);
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    worker.call("e1", "Edit", "", "ask/file.rs").await;
    carol
        .resolve_ask(pb::ResolveAskRequest {
            run_id: run_id.clone(),
            call_id: "e1".into(),
            decision: pb::Decision::Allow as i32,
            reason: String::new(),
            // A client claiming to be someone else is recorded as a note, not as them.
            resolver: "admin".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    carol
        .cancel_run(pb::CancelRunRequest {
            run_id: run_id.clone(),
            reason: String::new(),
        })
        .await
        .unwrap();
    let events = server.events(&run_id).await;
    let by = |kind: &str| {
        let event = events.iter().find(|e| e.r#type == kind).unwrap();
        (
            event.attributes.get("by").cloned(),
            event.attributes.get("note").cloned(),
        )
    };
    assert_eq!(by("run.created"), (Some("carol".into()), None));
    assert_eq!(
        by("run.toolcall.resolved"),
        (Some("carol".into()), Some("admin".into()))
    );
    assert_eq!(by("run.cancelled"), (Some("carol".into()), None));
    let cancelled = events.iter().find(|e| e.r#type == "run.cancelled").unwrap();
    assert_eq!(cancelled.attributes["reason"], "cancelled by carol");
    // No event carries a token or its hash.
    for event in &events {
        for value in event.attributes.values() {
            assert!(
                !value.contains("rpo_") && !value.contains("rpw_"),
                "{value}"
            );
        }
    }
}

#[tokio::test]
async fn a_worker_token_in_the_metadata_opens_its_session() {
    let server = TestServer::start().await;
    let run_id = server.start_run("").await;
    let token = server.worker_token(&run_id);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(msg(In::Attach(pb::Attach {
        run_id: run_id.clone(),
        worker_id: "w".into(),
        token: String::new(),
        workspace_root: "/work/repo".into(),
    })))
    .await
    .unwrap();
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    let value: MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
    request.metadata_mut().insert("authorization", value);
    let mut stream = server
        .workers()
        .await
        .session(request)
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert!(matches!(
        first.message,
        Some(pb::coordinator_message::Message::Attached(_))
    ));
}

#[tokio::test]
async fn malformed_authorization_headers_are_unauthenticated() {
    let server = TestServer::start().await;
    for header in [
        "Basic YWRtaW46YWRtaW4=",
        "Bearer",
        "Bearer ",
        "rpo_abc",
        &format!("Bearer {}x", server.admin_token),
        &format!("Bearer {}", server.admin_token.to_uppercase()),
    ] {
        let mut request = tonic::Request::new(pb::ListRunsRequest::default());
        request
            .metadata_mut()
            .insert("authorization", header.parse().unwrap());
        let err = RunServiceClient::new(server.raw_channel().await)
            .list_runs(request)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{header:?}: {err:?}");
    }
    // Lower-case scheme is fine (RFC 7235: the scheme is case-insensitive).
    let mut request = tonic::Request::new(pb::ListRunsRequest::default());
    request.metadata_mut().insert(
        "authorization",
        format!("bearer {}", server.admin_token).parse().unwrap(),
    );
    RunServiceClient::new(server.raw_channel().await)
        .list_runs(request)
        .await
        .unwrap();
}

#[test]
fn every_method_in_the_api_has_an_access_rule() {
    use prost::Message as _;
    let set = prost_types::FileDescriptorSet::decode(pb::FILE_DESCRIPTOR_SET).unwrap();
    let mut methods = 0;
    for file in &set.file {
        for service in &file.service {
            for method in &service.method {
                let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                assert!(
                    runplane::grpc::access::rule(&path).is_some(),
                    "{path} has no access rule"
                );
                methods += 1;
            }
        }
    }
    assert_eq!(methods, 19);
    assert_eq!(
        runplane::grpc::access::rule("/runplane.v1.RunService/Nope"),
        None
    );
}

#[tokio::test]
async fn a_store_that_cannot_answer_lets_nobody_in() {
    use runplane::auth::{AuthError, AuthMode, Authenticator};
    use runplane::domain::{Role, Scope};
    use runplane::store::{RunStore, SqliteStore, SqliteStoreOptions};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(SqliteStore::open(SqliteStoreOptions::new(dir.path().join("db"))).unwrap());
    let auth = Authenticator::new(Arc::clone(&store) as Arc<dyn RunStore>, AuthMode::On);
    let (secret, _) = auth
        .create_token("ops", Role::Admin, Scope::default(), chrono::Utc::now())
        .await
        .unwrap();
    assert!(auth.authenticate(Some(secret.expose())).await.is_ok());
    store.close();
    let refused = auth.authenticate(Some(secret.expose())).await;
    assert!(matches!(refused, Err(AuthError::Store(_))), "{refused:?}");
    let status = runplane::grpc::access::auth_status(refused.unwrap_err());
    assert_eq!(status.code(), Code::Unavailable);
}
