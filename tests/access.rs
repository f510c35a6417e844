//! Who may call what: every RPC × every kind of credential, against a real server with
//! authentication on (the default). Each cell asserts the exact status code, and every
//! refused call is checked to have changed nothing.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::access_service_client::AccessServiceClient;
use runplane::grpc::pb::policy_service_client::PolicyServiceClient;
use runplane::grpc::pb::worker_message::Message as In;
use tokio_stream::StreamExt as _;
use tonic::metadata::MetadataValue;
use tonic::Code;

/// Every RPC the server serves (health and reflection included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rpc {
    GetRun,
    ListRuns,
    WatchRun,
    ListRunEvents,
    ListPendingAsks,
    ListPendingAsksOfRun,
    ResolveAsk,
    StartRun,
    CancelRun,
    ListProfiles,
    GetProfile,
    Evaluate,
    CreateToken,
    ListTokens,
    RevokeToken,
    Session,
    Health,
    Reflection,
}

/// The order cells run in: reads first, then what changes state, the run's cancel last.
const RPCS: [Rpc; 18] = [
    Rpc::Health,
    Rpc::Reflection,
    Rpc::GetRun,
    Rpc::ListRuns,
    Rpc::WatchRun,
    Rpc::ListRunEvents,
    Rpc::ListPendingAsks,
    Rpc::ListPendingAsksOfRun,
    Rpc::ListProfiles,
    Rpc::GetProfile,
    Rpc::Evaluate,
    Rpc::ListTokens,
    Rpc::CreateToken,
    Rpc::RevokeToken,
    Rpc::StartRun,
    Rpc::Session,
    Rpc::ResolveAsk,
    Rpc::CancelRun,
];

/// The credential a row of the matrix calls with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Nobody,
    Malformed,
    Revoked,
    Viewer,
    Operator,
    Admin,
    OtherTeamOperator,
    WorkerOfThisRun,
    WorkerOfAnotherRun,
    WorkerOfFinishedRun,
}

const WHO: [Who; 10] = [
    Who::Nobody,
    Who::Malformed,
    Who::Revoked,
    Who::Viewer,
    Who::Operator,
    Who::Admin,
    Who::OtherTeamOperator,
    Who::WorkerOfThisRun,
    Who::WorkerOfAnotherRun,
    Who::WorkerOfFinishedRun,
];

/// The code each cell must get.
fn expected(who: Who, rpc: Rpc) -> Code {
    use Rpc::*;
    let reads = matches!(
        rpc,
        GetRun
            | ListRuns
            | WatchRun
            | ListRunEvents
            | ListPendingAsks
            | ListPendingAsksOfRun
            | ListProfiles
            | GetProfile
            | Evaluate
            | Reflection
    );
    let writes = matches!(rpc, ResolveAsk | StartRun | CancelRun);
    if rpc == Health {
        return Code::Ok;
    }
    match who {
        Who::Nobody | Who::Malformed | Who::Revoked | Who::WorkerOfFinishedRun => {
            Code::Unauthenticated
        }
        Who::WorkerOfThisRun if rpc == Session => Code::Ok,
        Who::WorkerOfThisRun | Who::WorkerOfAnotherRun => Code::PermissionDenied,
        _ if rpc == Session => Code::PermissionDenied,
        Who::Viewer if reads => Code::Ok,
        Who::Viewer => Code::PermissionDenied,
        Who::Operator if reads || writes => Code::Ok,
        Who::Operator => Code::PermissionDenied,
        Who::Admin => Code::Ok,
        Who::OtherTeamOperator => match rpc {
            // Lists answer, without the other team's runs (checked separately).
            ListRuns | ListPendingAsks | ListProfiles | GetProfile | Evaluate | Reflection => {
                Code::Ok
            }
            GetRun | WatchRun | ListRunEvents | ListPendingAsksOfRun | ResolveAsk | CancelRun => {
                Code::NotFound
            }
            _ => Code::PermissionDenied,
        },
    }
}

/// One row's world: a red-team run with a pending ask and its worker attached, plus the
/// tokens the row needs.
struct Fixture {
    run_id: String,
    worker: Worker,
    /// The token the row calls with (`None`: no header at all).
    token: Option<String>,
    /// A token the admin made for this row, for RevokeToken to revoke.
    victim: String,
    /// Distinguishes the names this row creates.
    row: usize,
}

async fn admin_call<T>(
    server: &TestServer,
    f: impl AsyncFnOnce(AccessServiceClient<runplane::cli::connect::AuthChannel>) -> T,
) -> T {
    f(AccessServiceClient::new(server.channel().await)).await
}

async fn create_token(server: &TestServer, name: &str, role: pb::Role, teams: &[&str]) -> String {
    admin_call(server, async |mut access| {
        access
            .create_token(pb::CreateTokenRequest {
                name: name.into(),
                role: role as i32,
                teams: teams.iter().map(|t| t.to_string()).collect(),
                projects: Vec::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .secret
    })
    .await
}

async fn start_red_run(server: &TestServer) -> String {
    let response = server
        .runs()
        .await
        .start_run(pb::StartRequest {
            task_id: "task-1".into(),
            agent_id: "agent-1".into(),
            project_id: "proj-1".into(),
            team_id: "red".into(),
            policy_profile: "asks".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let run_id = response.run.unwrap().id;
    server.remember_worker_token(&run_id, &response.worker_token);
    run_id
}

async fn fixture(server: &TestServer, who: Who, row: usize) -> Fixture {
    let run_id = start_red_run(server).await;
    let (mut worker, _) = Worker::attach(server, &run_id).await;
    let asked = worker.call("e1", "Edit", "", "ask/file.rs").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    let victim = format!("victim-{row}");
    create_token(server, &victim, pb::Role::Viewer, &[]).await;
    let token = match who {
        Who::Nobody => None,
        Who::Malformed => Some("rpo_not-a-token".to_string()),
        Who::Revoked => {
            let name = format!("revoked-{row}");
            let secret = create_token(server, &name, pb::Role::Admin, &[]).await;
            admin_call(server, async |mut access| {
                access
                    .revoke_token(pb::RevokeTokenRequest { name })
                    .await
                    .unwrap()
            })
            .await;
            Some(secret)
        }
        Who::Viewer => {
            Some(create_token(server, &format!("viewer-{row}"), pb::Role::Viewer, &[]).await)
        }
        Who::Operator => {
            Some(create_token(server, &format!("operator-{row}"), pb::Role::Operator, &[]).await)
        }
        Who::Admin => Some(server.admin_token.clone()),
        Who::OtherTeamOperator => Some(
            create_token(
                server,
                &format!("blue-{row}"),
                pb::Role::Operator,
                &["blue"],
            )
            .await,
        ),
        Who::WorkerOfThisRun => Some(server.worker_token(&run_id)),
        Who::WorkerOfAnotherRun => {
            let other = start_red_run(server).await;
            Some(server.worker_token(&other))
        }
        Who::WorkerOfFinishedRun => {
            let finished = start_red_run(server).await;
            server
                .runs()
                .await
                .cancel_run(pb::CancelRunRequest {
                    run_id: finished.clone(),
                    reason: String::new(),
                })
                .await
                .unwrap();
            Some(server.worker_token(&finished))
        }
    };
    Fixture {
        run_id,
        worker,
        token,
        victim,
        row,
    }
}

/// Calls `rpc` as the fixture's principal and returns the status code.
async fn call(server: &TestServer, fx: &Fixture, rpc: Rpc) -> Code {
    let channel = server.channel_as(fx.token.as_deref()).await;
    let mut runs = RunServiceClient::new(channel.clone());
    let mut policy = PolicyServiceClient::new(channel.clone());
    let mut access = AccessServiceClient::new(channel.clone());
    let run_id = fx.run_id.clone();
    let result: Result<(), tonic::Status> = match rpc {
        Rpc::GetRun => runs.get_run(pb::GetRunRequest { run_id }).await.map(drop),
        Rpc::ListRuns => runs
            .list_runs(pb::ListRunsRequest::default())
            .await
            .map(drop),
        Rpc::WatchRun => match runs
            .watch_run(pb::WatchRunRequest {
                run_id,
                from_seq: 0,
            })
            .await
        {
            Ok(stream) => stream
                .into_inner()
                .next()
                .await
                .expect("the log has events")
                .map(drop),
            Err(status) => Err(status),
        },
        Rpc::ListRunEvents => runs
            .list_run_events(pb::ListRunEventsRequest {
                run_id,
                from_seq: 0,
                page_size: 0,
            })
            .await
            .map(drop),
        Rpc::ListPendingAsks => runs
            .list_pending_asks(pb::ListPendingAsksRequest::default())
            .await
            .map(drop),
        Rpc::ListPendingAsksOfRun => runs
            .list_pending_asks(pb::ListPendingAsksRequest { run_id })
            .await
            .map(drop),
        Rpc::ResolveAsk => runs
            .resolve_ask(pb::ResolveAskRequest {
                run_id,
                call_id: "e1".into(),
                decision: pb::Decision::Deny as i32,
                reason: "matrix".into(),
                resolver: "matrix".into(),
            })
            .await
            .map(drop),
        Rpc::StartRun => runs
            .start_run(pb::StartRequest {
                task_id: "t".into(),
                agent_id: "a".into(),
                project_id: "proj-1".into(),
                team_id: "red".into(),
                ..Default::default()
            })
            .await
            .map(drop),
        Rpc::CancelRun => runs
            .cancel_run(pb::CancelRunRequest {
                run_id,
                reason: "matrix".into(),
            })
            .await
            .map(drop),
        Rpc::ListProfiles => policy
            .list_profiles(pb::ListProfilesRequest::default())
            .await
            .map(drop),
        Rpc::GetProfile => policy
            .get_profile(pb::GetProfileRequest {
                name: "asks".into(),
            })
            .await
            .map(drop),
        Rpc::Evaluate => policy
            .evaluate(pb::EvaluateRequest {
                profile: "asks".into(),
                tool: "Read".into(),
                path: "a".into(),
                ..Default::default()
            })
            .await
            .map(drop),
        Rpc::CreateToken => access
            .create_token(pb::CreateTokenRequest {
                name: format!("made-{}", fx.row),
                role: pb::Role::Viewer as i32,
                ..Default::default()
            })
            .await
            .map(drop),
        Rpc::ListTokens => access.list_tokens(pb::ListTokensRequest {}).await.map(drop),
        Rpc::RevokeToken => access
            .revoke_token(pb::RevokeTokenRequest {
                name: fx.victim.clone(),
            })
            .await
            .map(drop),
        Rpc::Session => session(server, fx).await,
        Rpc::Health => health(channel).await,
        Rpc::Reflection => reflection(channel).await,
    };
    result.err().map_or(Code::Ok, |status| status.code())
}

/// Attaches with the row's token in `Attach.token`; OK once `Attached` arrives.
async fn session(server: &TestServer, fx: &Fixture) -> Result<(), tonic::Status> {
    let attach = In::Attach(pb::Attach {
        run_id: fx.run_id.clone(),
        worker_id: "matrix".into(),
        token: fx.token.clone().unwrap_or_default(),
        workspace_root: "/work/repo".into(),
    });
    let (_tx, mut rx) = Worker::open(server, attach).await?;
    match rx.message().await? {
        Some(pb::CoordinatorMessage {
            message: Some(pb::coordinator_message::Message::Attached(_)),
        }) => Ok(()),
        other => panic!("expected attached, got {other:?}"),
    }
}

async fn health(channel: runplane::cli::connect::AuthChannel) -> Result<(), tonic::Status> {
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let response = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await?;
    assert_eq!(response.into_inner().status, 1, "SERVING");
    Ok(())
}

async fn reflection(channel: runplane::cli::connect::AuthChannel) -> Result<(), tonic::Status> {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    let request = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([request]))
        .await?
        .into_inner();
    responses.next().await.expect("one answer")?;
    Ok(())
}

/// Everything a refused call must leave as it was.
#[derive(Debug, PartialEq)]
struct Fingerprint {
    runs: Vec<pb::Run>,
    events: usize,
    asks: usize,
    tokens: Vec<pb::Token>,
}

async fn fingerprint(server: &TestServer, run_id: &str) -> Fingerprint {
    let mut runs = server
        .runs()
        .await
        .list_runs(pb::ListRunsRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs;
    runs.iter_mut().for_each(|run| run.updated_at = None);
    let tokens = admin_call(server, async |mut access| {
        access
            .list_tokens(pb::ListTokensRequest {})
            .await
            .unwrap()
            .into_inner()
            .tokens
    })
    .await;
    Fingerprint {
        runs,
        events: server.events(run_id).await.len(),
        asks: server.pending_asks("").await.len(),
        tokens,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_rpc_refuses_every_credential_it_should_and_changes_nothing() {
    let server = TestServer::with(Options {
        policy: Some(limits_profile("asks", "")),
        ..Options::default()
    })
    .await;
    let mut failures = Vec::new();
    for (row, who) in WHO.into_iter().enumerate() {
        let fx = fixture(&server, who, row).await;
        for rpc in RPCS {
            let wanted = expected(who, rpc);
            let before = (wanted != Code::Ok).then_some(fingerprint(&server, &fx.run_id).await);
            let got = call(&server, &fx, rpc).await;
            if got != wanted {
                failures.push(format!(
                    "{who:?} × {rpc:?}: got {got:?}, expected {wanted:?}"
                ));
            }
            if let Some(before) = before {
                let after = fingerprint(&server, &fx.run_id).await;
                if after != before {
                    failures.push(format!("{who:?} × {rpc:?} was refused but changed state"));
                }
            }
        }
        drop(fx.worker);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn a_scoped_token_sees_only_its_teams_runs() {
    let server = TestServer::with(Options {
        policy: Some(limits_profile("asks", "")),
        ..Options::default()
    })
    .await;
    let red = start_red_run(&server).await;
    let (mut worker, _) = Worker::attach(&server, &red).await;
    worker.call("e1", "Edit", "", "ask/file.rs").await;
    let blue_token = create_token(&server, "blue", pb::Role::Operator, &["blue"]).await;
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
    let token = create_token(&server, "carol", pb::Role::Operator, &[]).await;
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
    assert_eq!(methods, 15);
    assert_eq!(
        runplane::grpc::access::rule("/runplane.v1.RunService/Nope"),
        None
    );
}
