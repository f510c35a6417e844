//! Who may call what: every RPC × every kind of credential, against a real server with
//! authentication on (the default). Each cell asserts the exact status code, and every
//! refused call is checked to have changed nothing.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::access_service_client::AccessServiceClient;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::policy_service_client::PolicyServiceClient;
use runplane::grpc::pb::worker_message::Message as In;
use tokio_stream::StreamExt as _;
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
    ListGrants,
    RevokeGrant,
    StartRun,
    CancelRun,
    ListProfiles,
    GetProfile,
    Evaluate,
    Replay,
    Reload,
    CreateToken,
    ListTokens,
    RevokeToken,
    Session,
    Health,
    Reflection,
}

/// The order cells run in: reads first, then what changes state.
const RPCS: [Rpc; 22] = [
    Rpc::Health,
    Rpc::Reflection,
    Rpc::GetRun,
    Rpc::ListRuns,
    Rpc::WatchRun,
    Rpc::ListRunEvents,
    Rpc::ListPendingAsks,
    Rpc::ListPendingAsksOfRun,
    Rpc::ListGrants,
    Rpc::ListProfiles,
    Rpc::GetProfile,
    Rpc::Evaluate,
    Rpc::Replay,
    // Rereads the same policy directory: the profiles stay as they were for later cells.
    Rpc::Reload,
    Rpc::ListTokens,
    Rpc::CreateToken,
    Rpc::RevokeToken,
    Rpc::StartRun,
    Rpc::RevokeGrant,
    Rpc::ResolveAsk,
    Rpc::CancelRun,
    // Last: an attach that works takes the run's session over, and its stream, dropped at
    // once, records a detach in the background.
    Rpc::Session,
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
            | ListGrants
            | ListProfiles
            | GetProfile
            | Evaluate
            | Reflection
    );
    // Replay changes nothing, but judges whole histories: operators only.
    let writes = matches!(
        rpc,
        ResolveAsk | RevokeGrant | StartRun | CancelRun | Replay
    );
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
            ListRuns | ListPendingAsks | ListProfiles | GetProfile | Evaluate | Replay
            | Reflection => Code::Ok,
            GetRun | WatchRun | ListRunEvents | ListPendingAsksOfRun | ResolveAsk | CancelRun
            | ListGrants | RevokeGrant => Code::NotFound,
            _ => Code::PermissionDenied,
        },
    }
}

/// One row's world: a red-team run with a pending ask, a grant (g1) and its worker
/// attached, plus the tokens the row needs.
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

async fn fixture(server: &TestServer, who: Who, row: usize) -> Fixture {
    let run_id = server.start_team_run("red", "asks").await;
    let (mut worker, _) = Worker::attach(server, &run_id).await;
    let asked = worker.call("e1", "Edit", "", "ask/file.rs").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    // A grant for RevokeGrant to revoke, made by answering a second ask for the run.
    let asked = worker.call("e0", "Edit", "", "ask/granted.rs").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    server
        .runs()
        .await
        .resolve_ask(pb::ResolveAskRequest {
            run_id: run_id.clone(),
            call_id: "e0".into(),
            decision: pb::Decision::Allow as i32,
            scope: pb::AnswerScope::Run as i32,
            path_glob: "ask/granted.rs".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    match worker.recv().await {
        Out::ToolCallResponse(response) => assert_eq!(decision(&response), pb::Decision::Allow),
        other => panic!("expected the answer to e0, got {other:?}"),
    }
    let victim = format!("victim-{row}");
    server.create_token(&victim, pb::Role::Viewer, &[]).await;
    let token = match who {
        Who::Nobody => None,
        Who::Malformed => Some("rpo_not-a-token".to_string()),
        Who::Revoked => {
            let name = format!("revoked-{row}");
            let secret = server.create_token(&name, pb::Role::Admin, &[]).await;
            server
                .admin_call(async |mut access| {
                    access
                        .revoke_token(pb::RevokeTokenRequest { name })
                        .await
                        .unwrap()
                })
                .await;
            Some(secret)
        }
        Who::Viewer => Some(
            server
                .create_token(&format!("viewer-{row}"), pb::Role::Viewer, &[])
                .await,
        ),
        Who::Operator => Some(
            server
                .create_token(&format!("operator-{row}"), pb::Role::Operator, &[])
                .await,
        ),
        Who::Admin => Some(server.admin_token.clone()),
        Who::OtherTeamOperator => Some(
            server
                .create_token(&format!("blue-{row}"), pb::Role::Operator, &["blue"])
                .await,
        ),
        Who::WorkerOfThisRun => Some(server.worker_token(&run_id)),
        Who::WorkerOfAnotherRun => {
            let other = server.start_team_run("red", "asks").await;
            Some(server.worker_token(&other))
        }
        Who::WorkerOfFinishedRun => {
            let finished = server.start_team_run("red", "asks").await;
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
                ..Default::default()
            })
            .await
            .map(drop),
        Rpc::ListGrants => runs
            .list_grants(pb::ListGrantsRequest { run_id })
            .await
            .map(drop),
        Rpc::RevokeGrant => runs
            .revoke_grant(pb::RevokeGrantRequest {
                run_id,
                grant_id: "g1".into(),
                reason: "matrix".into(),
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
                hash: String::new(),
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
        Rpc::Replay => match policy
            .replay(pb::ReplayRequest {
                candidate: Some(pb::replay_request::Candidate::ProfileName("asks".into())),
                ..Default::default()
            })
            .await
        {
            // The last message is the summary; an error ends the stream instead.
            Ok(stream) => stream
                .into_inner()
                .collect::<Result<Vec<_>, _>>()
                .await
                .map(drop),
            Err(status) => Err(status),
        },
        Rpc::Reload => policy.reload(pb::ReloadRequest {}).await.map(drop),
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
/// Of the row's own run only: earlier rows' sessions end in the background (a dropped
/// stream records its detach after the fact), which must not read as a change here.
struct Fingerprint {
    run: pb::Run,
    run_count: usize,
    events: usize,
    asks: usize,
    tokens: Vec<pb::Token>,
}

async fn fingerprint(server: &TestServer, run_id: &str) -> Fingerprint {
    let run_count = server
        .runs()
        .await
        .list_runs(pb::ListRunsRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs
        .len();
    let mut run = server.get_run(run_id).await;
    run.updated_at = None;
    let tokens = server
        .admin_call(async |mut access| {
            access
                .list_tokens(pb::ListTokensRequest {})
                .await
                .unwrap()
                .into_inner()
                .tokens
        })
        .await;
    Fingerprint {
        run,
        run_count,
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
