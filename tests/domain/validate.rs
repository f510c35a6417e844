use runplane::domain::{DeliverMode, ExecMode, Status, ValidationError};

use super::{new_run, start_request};

#[test]
fn start_request_with_the_three_ids_is_valid() {
    assert_eq!(start_request().validate(), Ok(()));
}

#[test]
fn start_request_with_every_optional_field_is_valid() {
    let mut req = start_request();
    req.team_id = "team".into();
    req.policy_profile = "plan-readonly".into();
    req.exec_mode = Some(ExecMode::Sandbox);
    req.deliver_mode = Some(DeliverMode::CommitLocal);
    assert_eq!(req.validate(), Ok(()));
}

#[test]
fn start_request_refuses_each_missing_id_in_order() {
    let mut req = start_request();
    req.task_id.clear();
    assert_eq!(req.validate(), Err(ValidationError::Required("task_id")));
    let mut req = start_request();
    req.agent_id.clear();
    assert_eq!(req.validate(), Err(ValidationError::Required("agent_id")));
    let mut req = start_request();
    req.project_id.clear();
    assert_eq!(req.validate(), Err(ValidationError::Required("project_id")));
    assert_eq!(
        ValidationError::Required("agent_id").to_string(),
        "agent_id is required"
    );
}

#[test]
fn new_run_is_valid_pending_version_one() {
    let run = new_run();
    assert_eq!(run.validate(), Ok(()));
    assert_eq!(run.status, Status::Pending);
    assert_eq!(
        run.exec_mode,
        ExecMode::Mount,
        "unset exec mode means mount"
    );
    assert_eq!(run.version, 1);
    assert_eq!(run.completed_at, None);
}

#[test]
fn run_refuses_each_missing_id() {
    for field in ["task_id", "agent_id", "project_id"] {
        let mut run = new_run();
        match field {
            "task_id" => run.task_id.clear(),
            "agent_id" => run.agent_id.clear(),
            _ => run.project_id.clear(),
        }
        assert_eq!(run.validate(), Err(ValidationError::Required(field)));
    }
}

#[test]
fn run_step_count_zero_and_positive_accepted_negative_refused() {
    let mut run = new_run();
    run.step_count = 0;
    assert_eq!(run.validate(), Ok(()));
    run.step_count = 42;
    assert_eq!(run.validate(), Ok(()));
    run.step_count = -1;
    assert_eq!(run.validate(), Err(ValidationError::NegativeStepCount(-1)));
}

#[test]
fn run_cost_must_be_finite_and_not_negative() {
    let mut run = new_run();
    run.cost_usd = 0.0;
    assert_eq!(run.validate(), Ok(()));
    run.cost_usd = 12.5;
    assert_eq!(run.validate(), Ok(()));
    run.cost_usd = -0.01;
    assert_eq!(run.validate(), Err(ValidationError::InvalidCost(-0.01)));
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        run.cost_usd = bad;
        assert!(
            matches!(run.validate(), Err(ValidationError::InvalidCost(_))),
            "{bad} must be refused"
        );
    }
}

#[test]
fn unknown_enum_values_are_refused_naming_the_field() {
    let err = "paused".parse::<Status>().unwrap_err();
    assert_eq!(err.to_string(), "status: unknown value \"paused\"");
    let err = "docker".parse::<ExecMode>().unwrap_err();
    assert_eq!(err.field, "exec_mode");
    let err = "commit_local".parse::<DeliverMode>().unwrap_err();
    assert_eq!(err.field, "deliver_mode");
    assert_eq!(DeliverMode::parse_optional(""), Ok(None));
    assert_eq!(
        DeliverMode::parse_optional("commit-local"),
        Ok(Some(DeliverMode::CommitLocal))
    );
}

#[test]
fn every_enum_value_parses_from_its_name() {
    for status in Status::ALL {
        assert_eq!(status.as_str().parse::<Status>(), Ok(status));
    }
    for mode in ExecMode::ALL {
        assert_eq!(mode.as_str().parse::<ExecMode>(), Ok(mode));
    }
    for mode in DeliverMode::ALL {
        assert_eq!(mode.as_str().parse::<DeliverMode>(), Ok(mode));
    }
}
