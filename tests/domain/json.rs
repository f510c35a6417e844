use std::time::Duration;

use runplane::domain::{
    Decision, DeliverMode, ExecMode, Run, Status, ToolCallRequest, ToolCallResponse, ToolCallResult,
};
use serde_json::{json, Value};

use super::{at, new_run};

#[test]
fn new_run_serialises_to_exactly_the_seed_fields() {
    let value = serde_json::to_value(new_run()).unwrap();
    assert_eq!(
        value,
        json!({
            "id": "run-1",
            "task_id": "task-1",
            "agent_id": "agent-1",
            "project_id": "proj-1",
            "policy_profile": "headless-safe-sandbox",
            "exec_mode": "mount",
            "status": "pending",
            "step_count": 0,
            "cost_usd": 0.0,
            "version": 1,
            "started_at": "2026-05-28T20:26:40Z",
            "created_at": "2026-05-28T20:26:40Z",
            "updated_at": "2026-05-28T20:26:40Z"
        })
    );
}

fn full_run() -> Run {
    let mut run = new_run();
    run.team_id = "team-a".into();
    run.exec_mode = ExecMode::Sandbox;
    run.deliver_mode = Some(DeliverMode::CommitLocal);
    run.transition(Status::Running, at(1)).unwrap();
    run.transition(Status::QualityGate, at(2)).unwrap();
    run.step_count = 7;
    run.cost_usd = 1.25;
    run.output = "done".into();
    run.error = "lint failed".into();
    run.transition(Status::Completed, at(3)).unwrap();
    run
}

#[test]
fn finished_run_has_every_field_with_its_api_name() {
    let value = serde_json::to_value(full_run()).unwrap();
    let Value::Object(map) = value else {
        panic!("a run is an object")
    };
    let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "agent_id",
            "completed_at",
            "cost_usd",
            "created_at",
            "deliver_mode",
            "error",
            "exec_mode",
            "id",
            "output",
            "policy_profile",
            "project_id",
            "started_at",
            "status",
            "step_count",
            "task_id",
            "team_id",
            "updated_at",
            "version"
        ]
    );
    assert_eq!(map["deliver_mode"], "commit-local");
    assert_eq!(map["exec_mode"], "sandbox");
    assert_eq!(map["status"], "completed");
    assert_eq!(map["completed_at"], "2026-05-28T20:26:43Z");
}

#[test]
fn run_round_trips_through_json() {
    for run in [new_run(), full_run()] {
        let text = serde_json::to_string(&run).unwrap();
        let back: Run = serde_json::from_str(&text).unwrap();
        assert_eq!(back, run);
    }
}

#[test]
fn quality_gate_status_is_snake_case() {
    assert_eq!(
        serde_json::to_value(Status::QualityGate).unwrap(),
        "quality_gate"
    );
    let status: Status = serde_json::from_value(json!("quality_gate")).unwrap();
    assert_eq!(status, Status::QualityGate);
}

#[test]
fn unknown_status_in_json_is_refused() {
    let mut value = serde_json::to_value(new_run()).unwrap();
    value["status"] = json!("paused");
    let err = serde_json::from_value::<Run>(value).unwrap_err();
    assert!(err.to_string().contains("paused"), "{err}");
}

#[test]
fn tool_call_types_use_api_names_and_omit_empty_fields() {
    let req = ToolCallRequest {
        run_id: "r".into(),
        call_id: "c1".into(),
        tool: "Read".into(),
        command: String::new(),
        path: "src/lib.rs".into(),
        resolved_path: String::new(),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&req).unwrap(),
        json!({"run_id": "r", "call_id": "c1", "tool": "Read", "path": "src/lib.rs"})
    );
    let resolved = ToolCallRequest {
        resolved_path: "/etc/passwd".into(),
        ..req.clone()
    };
    assert_eq!(
        serde_json::to_value(&resolved).unwrap()["resolved_path"],
        json!("/etc/passwd")
    );
    let resp = ToolCallResponse {
        run_id: "r".into(),
        call_id: "c1".into(),
        decision: Decision::Ask,
        reason: String::new(),
    };
    assert_eq!(
        serde_json::to_value(&resp).unwrap(),
        json!({"run_id": "r", "call_id": "c1", "decision": "ask"})
    );
    let result = ToolCallResult {
        run_id: "r".into(),
        call_id: "c1".into(),
        success: true,
        output: "ok".into(),
        error: String::new(),
        cost_usd: 0.5,
        duration: Some(Duration::from_millis(1500)),
    };
    let value = serde_json::to_value(&result).unwrap();
    assert_eq!(
        value,
        json!({"run_id": "r", "call_id": "c1", "success": true, "output": "ok",
               "cost_usd": 0.5, "duration": 1_500_000_000u64})
    );
    assert_eq!(
        serde_json::from_value::<ToolCallResult>(value).unwrap(),
        result
    );
    let bare = ToolCallResult {
        run_id: "r".into(),
        call_id: "c2".into(),
        ..ToolCallResult::default()
    };
    assert_eq!(
        serde_json::to_value(&bare).unwrap(),
        json!({"run_id": "r", "call_id": "c2", "success": false})
    );
}
