//! proto ↔ domain: every value round-trips and every bad value names its field.

use chrono::{TimeZone, Utc};
use runplane::domain::{
    Decision, DeliverMode, ExecMode, Run, StartRequest, Status, ToolCallRequest, ToolCallResponse,
    ToolCallResult,
};
use runplane::grpc::convert::{
    decision_from_proto, deliver_mode_from_proto, exec_mode_from_proto, status_from_proto,
    ConvertError,
};
use runplane::grpc::pb;

fn run() -> Run {
    let t0 = Utc.timestamp_opt(1_780_000_000, 123_456_789).unwrap();
    let mut run = Run::new(
        "run-1".into(),
        StartRequest {
            task_id: "t".into(),
            agent_id: "a".into(),
            project_id: "p".into(),
            team_id: "team".into(),
            policy_profile: String::new(),
            exec_mode: Some(ExecMode::Sandbox),
            deliver_mode: Some(DeliverMode::Pr),
        },
        "plan-readonly".into(),
        t0,
    );
    run.step_count = 3;
    run.cost_usd = 0.75;
    run
}

fn expect_field<T: std::fmt::Debug>(result: Result<T, ConvertError>, field: &str) {
    let err = result.expect_err("must be refused");
    assert_eq!(err.field(), field, "{err}");
    assert!(err.to_string().starts_with(field), "{err}");
}

#[test]
fn run_round_trips_pending_and_finished() {
    let pending = run();
    assert_eq!(Run::try_from(pb::Run::from(&pending)), Ok(pending.clone()));
    let mut done = pending;
    done.transition(
        Status::Running,
        Utc.timestamp_opt(1_780_000_001, 0).unwrap(),
    )
    .unwrap();
    done.transition(Status::Failed, Utc.timestamp_opt(1_780_000_002, 5).unwrap())
        .unwrap();
    done.error = "stall detected".into();
    let wire = pb::Run::from(&done);
    assert!(wire.completed_at.is_some());
    assert_eq!(Run::try_from(wire), Ok(done));
}

#[test]
fn every_status_round_trips() {
    for status in Status::ALL {
        let mut r = run();
        r.status = status;
        let wire = pb::Run::from(&r);
        assert_ne!(wire.status, 0, "{status} is never UNSPECIFIED on the wire");
        assert_eq!(status_from_proto("status", wire.status), Ok(Some(status)));
        assert_eq!(Run::try_from(wire).unwrap().status, status);
    }
    assert_eq!(status_from_proto("status", 0), Ok(None));
}

#[test]
fn every_exec_mode_round_trips_and_unspecified_means_mount() {
    for mode in ExecMode::ALL {
        let wire: i32 = pb::ExecMode::from(mode).into();
        assert_eq!(exec_mode_from_proto("exec_mode", wire), Ok(Some(mode)));
    }
    let mut wire = pb::Run::from(&run());
    wire.exec_mode = pb::ExecMode::Unspecified.into();
    assert_eq!(Run::try_from(wire).unwrap().exec_mode, ExecMode::Mount);
}

#[test]
fn every_deliver_mode_round_trips_and_unspecified_means_none() {
    for mode in DeliverMode::ALL {
        let wire: i32 = pb::DeliverMode::from(Some(mode)).into();
        assert_eq!(
            deliver_mode_from_proto("deliver_mode", wire),
            Ok(Some(mode))
        );
    }
    assert_eq!(deliver_mode_from_proto("deliver_mode", 0), Ok(None));
    assert_eq!(i32::from(pb::DeliverMode::from(None)), 0);
}

#[test]
fn every_decision_round_trips_and_unspecified_is_refused() {
    for decision in [Decision::Allow, Decision::Deny, Decision::Ask] {
        let wire: i32 = pb::Decision::from(decision).into();
        assert_eq!(decision_from_proto("decision", wire), Ok(decision));
    }
    expect_field(decision_from_proto("decision", 0), "decision");
}

#[test]
fn unknown_enum_numbers_name_their_field() {
    let mut wire = pb::Run::from(&run());
    wire.status = 42;
    let err = Run::try_from(wire).unwrap_err();
    assert_eq!(
        err,
        ConvertError::InvalidEnum {
            field: "status",
            value: 42
        }
    );
    assert_eq!(err.to_string(), "status: invalid enum value 42");

    let mut wire = pb::Run::from(&run());
    wire.exec_mode = 9;
    expect_field(Run::try_from(wire), "exec_mode");
    let mut wire = pb::Run::from(&run());
    wire.deliver_mode = -1;
    expect_field(Run::try_from(wire), "deliver_mode");
    let mut wire = pb::Run::from(&run());
    wire.status = 0;
    expect_field(Run::try_from(wire), "status");
}

#[test]
fn bad_numbers_name_their_field() {
    let mut wire = pb::Run::from(&run());
    wire.step_count = -1;
    expect_field(Run::try_from(wire), "step_count");
    for cost in [-1.0, f64::NAN, f64::INFINITY] {
        let mut wire = pb::Run::from(&run());
        wire.cost_usd = cost;
        expect_field(Run::try_from(wire), "cost_usd");
    }
    let mut wire = pb::Run::from(&run());
    wire.version = -3;
    expect_field(Run::try_from(wire), "version");
}

#[test]
fn missing_ids_and_times_name_their_field() {
    for field in ["id", "task_id", "agent_id", "project_id"] {
        let mut wire = pb::Run::from(&run());
        match field {
            "id" => wire.id.clear(),
            "task_id" => wire.task_id.clear(),
            "agent_id" => wire.agent_id.clear(),
            _ => wire.project_id.clear(),
        }
        assert_eq!(Run::try_from(wire), Err(ConvertError::Required { field }));
    }
    let mut wire = pb::Run::from(&run());
    wire.created_at = None;
    expect_field(Run::try_from(wire), "created_at");
    let mut wire = pb::Run::from(&run());
    wire.updated_at = Some(prost_types::Timestamp {
        seconds: 0,
        nanos: -1,
    });
    expect_field(Run::try_from(wire), "updated_at");
}

#[test]
fn start_request_round_trips_and_refuses_bad_fields() {
    let req = StartRequest {
        task_id: "t".into(),
        agent_id: "a".into(),
        project_id: "p".into(),
        team_id: String::new(),
        policy_profile: "plan-readonly".into(),
        exec_mode: Some(ExecMode::Sandbox),
        deliver_mode: Some(DeliverMode::CommitLocal),
    };
    assert_eq!(
        StartRequest::try_from(pb::StartRequest::from(&req)),
        Ok(req.clone())
    );

    let minimal = pb::StartRequest {
        task_id: "t".into(),
        agent_id: "a".into(),
        project_id: "p".into(),
        ..Default::default()
    };
    let parsed = StartRequest::try_from(minimal.clone()).unwrap();
    assert_eq!(parsed.exec_mode, None);
    assert_eq!(parsed.deliver_mode, None);

    let mut bad = minimal.clone();
    bad.agent_id.clear();
    expect_field(StartRequest::try_from(bad), "agent_id");
    let mut bad = minimal.clone();
    bad.exec_mode = 3;
    expect_field(StartRequest::try_from(bad), "exec_mode");
    let mut bad = minimal;
    bad.deliver_mode = 5;
    expect_field(StartRequest::try_from(bad), "deliver_mode");
}

#[test]
fn tool_calls_round_trip_and_refuse_bad_fields() {
    let req = ToolCallRequest {
        run_id: "r".into(),
        call_id: "c".into(),
        tool: "Bash".into(),
        command: "git status".into(),
        path: "link/passwd".into(),
        resolved_path: "/etc/passwd".into(),
        paths: vec!["src/a.rs".into(), ".env".into()],
        url: "https://example.com/x".into(),
        input: r#"{"command":"git status"}"#.into(),
    };
    assert_eq!(
        ToolCallRequest::try_from(pb::ToolCallRequest::from(&req)),
        Ok(req.clone())
    );
    // The resolved path ends up in the log like `path`: capped the same way.
    let mut bad = pb::ToolCallRequest::from(&req);
    bad.resolved_path = "x".repeat(64 * 1024 + 1);
    expect_field(ToolCallRequest::try_from(bad), "resolved_path");
    let mut bad = pb::ToolCallRequest::from(&req);
    bad.paths = vec!["p".into(); 1025];
    expect_field(ToolCallRequest::try_from(bad), "paths");
    let mut bad = pb::ToolCallRequest::from(&req);
    bad.paths.push(String::new());
    expect_field(ToolCallRequest::try_from(bad), "paths");
    let mut bad = pb::ToolCallRequest::from(&req);
    bad.input = "x".repeat(64 * 1024 + 1);
    expect_field(ToolCallRequest::try_from(bad), "input");
    let mut bad = pb::ToolCallRequest::from(&req);
    bad.call_id.clear();
    expect_field(ToolCallRequest::try_from(bad), "call_id");
    let mut bad = pb::ToolCallRequest::from(&req);
    bad.tool.clear();
    expect_field(ToolCallRequest::try_from(bad), "tool");

    let resp = ToolCallResponse {
        run_id: "r".into(),
        call_id: "c".into(),
        decision: Decision::Deny,
        reason: "no".into(),
    };
    assert_eq!(
        ToolCallResponse::try_from(pb::ToolCallResponse::from(&resp)),
        Ok(resp)
    );

    let result = ToolCallResult {
        run_id: "r".into(),
        call_id: "c".into(),
        success: true,
        output: "ok".into(),
        error: String::new(),
        cost_usd: 0.01,
        duration: Some(std::time::Duration::new(2, 500)),
    };
    assert_eq!(
        ToolCallResult::try_from(pb::ToolCallResult::from(&result)),
        Ok(result.clone())
    );
    let mut bad = pb::ToolCallResult::from(&result);
    bad.cost_usd = f64::NAN;
    expect_field(ToolCallResult::try_from(bad), "cost_usd");
    let mut bad = pb::ToolCallResult::from(&result);
    bad.duration = Some(prost_types::Duration {
        seconds: -1,
        nanos: 0,
    });
    expect_field(ToolCallResult::try_from(bad), "duration");
    let mut bad = pb::ToolCallResult::from(&result);
    bad.call_id.clear();
    expect_field(ToolCallResult::try_from(bad), "call_id");
}

#[test]
fn convert_error_becomes_invalid_argument() {
    let status = tonic::Status::from(ConvertError::Required { field: "call_id" });
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(status.message(), "call_id: required");
}
