//! Conversions for runs, their enums and tool calls.

use std::time::Duration;

use super::{
    bounded, from_timestamp, non_negative, non_negative_finite, required, required_timestamp,
    timestamp, ConvertError,
};
use crate::domain::SandboxState;
use crate::domain::{
    Decision, DeliverMode, ExecMode, Run, StallTracker, StartRequest, Status, ToolCallRequest,
    ToolCallResponse, ToolCallResult,
};
use crate::grpc::pb;

impl From<Status> for pb::RunStatus {
    fn from(status: Status) -> pb::RunStatus {
        match status {
            Status::Pending => pb::RunStatus::Pending,
            Status::Running => pb::RunStatus::Running,
            Status::Completed => pb::RunStatus::Completed,
            Status::Failed => pb::RunStatus::Failed,
            Status::Cancelled => pb::RunStatus::Cancelled,
            Status::Timeout => pb::RunStatus::Timeout,
            Status::QualityGate => pb::RunStatus::QualityGate,
        }
    }
}

/// A wire status; `None` for UNSPECIFIED, which filters read as "any".
pub fn status_from_proto(field: &'static str, value: i32) -> Result<Option<Status>, ConvertError> {
    let status =
        pb::RunStatus::try_from(value).map_err(|_| ConvertError::InvalidEnum { field, value })?;
    Ok(match status {
        pb::RunStatus::Unspecified => None,
        pb::RunStatus::Pending => Some(Status::Pending),
        pb::RunStatus::Running => Some(Status::Running),
        pb::RunStatus::Completed => Some(Status::Completed),
        pb::RunStatus::Failed => Some(Status::Failed),
        pb::RunStatus::Cancelled => Some(Status::Cancelled),
        pb::RunStatus::Timeout => Some(Status::Timeout),
        pb::RunStatus::QualityGate => Some(Status::QualityGate),
    })
}

impl From<ExecMode> for pb::ExecMode {
    fn from(mode: ExecMode) -> pb::ExecMode {
        match mode {
            ExecMode::Mount => pb::ExecMode::Mount,
            ExecMode::Sandbox => pb::ExecMode::Sandbox,
        }
    }
}

/// A wire exec mode; `None` for UNSPECIFIED (which the domain reads as mount).
pub fn exec_mode_from_proto(
    field: &'static str,
    value: i32,
) -> Result<Option<ExecMode>, ConvertError> {
    match pb::ExecMode::try_from(value) {
        Ok(pb::ExecMode::Unspecified) => Ok(None),
        Ok(pb::ExecMode::Mount) => Ok(Some(ExecMode::Mount)),
        Ok(pb::ExecMode::Sandbox) => Ok(Some(ExecMode::Sandbox)),
        Err(_) => Err(ConvertError::InvalidEnum { field, value }),
    }
}

impl From<Option<DeliverMode>> for pb::DeliverMode {
    fn from(mode: Option<DeliverMode>) -> pb::DeliverMode {
        match mode {
            None => pb::DeliverMode::Unspecified,
            Some(DeliverMode::Patch) => pb::DeliverMode::Patch,
            Some(DeliverMode::CommitLocal) => pb::DeliverMode::CommitLocal,
            Some(DeliverMode::Branch) => pb::DeliverMode::Branch,
            Some(DeliverMode::Pr) => pb::DeliverMode::Pr,
        }
    }
}

/// A wire deliver mode; UNSPECIFIED means none (no delivery).
pub fn deliver_mode_from_proto(
    field: &'static str,
    value: i32,
) -> Result<Option<DeliverMode>, ConvertError> {
    match pb::DeliverMode::try_from(value) {
        Ok(pb::DeliverMode::Unspecified) => Ok(None),
        Ok(pb::DeliverMode::Patch) => Ok(Some(DeliverMode::Patch)),
        Ok(pb::DeliverMode::CommitLocal) => Ok(Some(DeliverMode::CommitLocal)),
        Ok(pb::DeliverMode::Branch) => Ok(Some(DeliverMode::Branch)),
        Ok(pb::DeliverMode::Pr) => Ok(Some(DeliverMode::Pr)),
        Err(_) => Err(ConvertError::InvalidEnum { field, value }),
    }
}

impl From<Decision> for pb::Decision {
    fn from(decision: Decision) -> pb::Decision {
        match decision {
            Decision::Allow => pb::Decision::Allow,
            Decision::Deny => pb::Decision::Deny,
            Decision::Ask => pb::Decision::Ask,
        }
    }
}

/// A wire decision; UNSPECIFIED is refused because every place that carries a decision needs one.
pub fn decision_from_proto(field: &'static str, value: i32) -> Result<Decision, ConvertError> {
    match pb::Decision::try_from(value) {
        Ok(pb::Decision::Allow) => Ok(Decision::Allow),
        Ok(pb::Decision::Deny) => Ok(Decision::Deny),
        Ok(pb::Decision::Ask) => Ok(Decision::Ask),
        Ok(pb::Decision::Unspecified) | Err(_) => Err(ConvertError::InvalidEnum { field, value }),
    }
}

impl From<&Run> for pb::Run {
    fn from(run: &Run) -> pb::Run {
        pb::Run {
            id: run.id.clone(),
            task_id: run.task_id.clone(),
            agent_id: run.agent_id.clone(),
            project_id: run.project_id.clone(),
            team_id: run.team_id.clone(),
            policy_profile: run.policy_profile.clone(),
            exec_mode: pb::ExecMode::from(run.exec_mode).into(),
            deliver_mode: pb::DeliverMode::from(run.deliver_mode).into(),
            status: pb::RunStatus::from(run.status).into(),
            step_count: run.step_count,
            cost_usd: run.cost_usd,
            output: run.output.clone(),
            error: run.error.clone(),
            version: run.version,
            sandbox: run
                .sandbox
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
            started_at: Some(timestamp(run.started_at)),
            completed_at: run.completed_at.map(timestamp),
            created_at: Some(timestamp(run.created_at)),
            updated_at: Some(timestamp(run.updated_at)),
            // Only GetRun reads the tracker with the run (`run_with_stall`).
            stall: None,
        }
    }
}

/// The run as GetRun answers it: with its stall tracker, when one is stored.
pub fn run_with_stall(run: &Run, stall: Option<&StallTracker>) -> pb::Run {
    pb::Run {
        stall: stall.map(pb::RunStall::from),
        ..pb::Run::from(run)
    }
}

impl From<&StallTracker> for pb::RunStall {
    fn from(stall: &StallTracker) -> pb::RunStall {
        pb::RunStall {
            count: stall.consecutive(),
            threshold: stall.threshold(),
            detected: stall.is_stalled(),
        }
    }
}

impl TryFrom<pb::Run> for Run {
    type Error = ConvertError;

    fn try_from(run: pb::Run) -> Result<Run, ConvertError> {
        Ok(Run {
            id: required("id", run.id)?,
            task_id: required("task_id", run.task_id)?,
            agent_id: required("agent_id", run.agent_id)?,
            project_id: required("project_id", run.project_id)?,
            team_id: run.team_id,
            policy_profile: run.policy_profile,
            exec_mode: exec_mode_from_proto("exec_mode", run.exec_mode)?.unwrap_or_default(),
            deliver_mode: deliver_mode_from_proto("deliver_mode", run.deliver_mode)?,
            status: status_from_proto("status", run.status)?.ok_or(ConvertError::InvalidEnum {
                field: "status",
                value: run.status,
            })?,
            step_count: non_negative("step_count", run.step_count)?,
            cost_usd: non_negative_finite("cost_usd", run.cost_usd)?,
            output: run.output,
            error: run.error,
            version: non_negative("version", run.version)?,
            started_at: required_timestamp("started_at", run.started_at)?,
            completed_at: run
                .completed_at
                .map(|ts| from_timestamp("completed_at", ts))
                .transpose()?,
            created_at: required_timestamp("created_at", run.created_at)?,
            updated_at: required_timestamp("updated_at", run.updated_at)?,
            sandbox: match run.sandbox.as_str() {
                "" => None,
                "enforced" => Some(SandboxState::Enforced),
                "unsandboxed" => Some(SandboxState::Unsandboxed),
                other => {
                    return Err(ConvertError::OutOfRange {
                        field: "sandbox",
                        problem: format!("{other:?} is not enforced, unsandboxed or empty"),
                    })
                }
            },
        })
    }
}

impl From<&StartRequest> for pb::StartRequest {
    fn from(req: &StartRequest) -> pb::StartRequest {
        pb::StartRequest {
            task_id: req.task_id.clone(),
            agent_id: req.agent_id.clone(),
            project_id: req.project_id.clone(),
            team_id: req.team_id.clone(),
            policy_profile: req.policy_profile.clone(),
            exec_mode: req
                .exec_mode
                .map_or(pb::ExecMode::Unspecified, pb::ExecMode::from)
                .into(),
            deliver_mode: pb::DeliverMode::from(req.deliver_mode).into(),
        }
    }
}

impl TryFrom<pb::StartRequest> for StartRequest {
    type Error = ConvertError;

    fn try_from(req: pb::StartRequest) -> Result<StartRequest, ConvertError> {
        Ok(StartRequest {
            task_id: required("task_id", req.task_id)?,
            agent_id: required("agent_id", req.agent_id)?,
            project_id: required("project_id", req.project_id)?,
            team_id: bounded("team_id", req.team_id)?,
            policy_profile: bounded("policy_profile", req.policy_profile)?,
            exec_mode: exec_mode_from_proto("exec_mode", req.exec_mode)?,
            deliver_mode: deliver_mode_from_proto("deliver_mode", req.deliver_mode)?,
        })
    }
}

impl From<&ToolCallRequest> for pb::ToolCallRequest {
    fn from(req: &ToolCallRequest) -> pb::ToolCallRequest {
        pb::ToolCallRequest {
            run_id: req.run_id.clone(),
            call_id: req.call_id.clone(),
            tool: req.tool.clone(),
            command: req.command.clone(),
            path: req.path.clone(),
            resolved_path: req.resolved_path.clone(),
            paths: req.paths.clone(),
            url: req.url.clone(),
            input: req.input.clone(),
        }
    }
}

/// Most entries in `ToolCallRequest.paths`: a multi-file edit touches a handful; a bound
/// keeps one request from costing a judgement per path without end.
pub const MAX_PATHS: usize = 1024;

/// `paths`: at most `MAX_PATHS`, each non-empty and within the text cap.
pub fn bounded_paths(paths: Vec<String>) -> Result<Vec<String>, ConvertError> {
    if paths.len() > MAX_PATHS {
        return Err(ConvertError::OutOfRange {
            field: "paths",
            problem: format!("at most {MAX_PATHS} entries, got {}", paths.len()),
        });
    }
    if paths.iter().any(String::is_empty) {
        return Err(ConvertError::OutOfRange {
            field: "paths",
            problem: "an entry is empty".into(),
        });
    }
    paths
        .into_iter()
        .map(|path| bounded("paths", path))
        .collect()
}

/// The run_id may be empty on the wire (the session's run); the session fills it in.
impl TryFrom<pb::ToolCallRequest> for ToolCallRequest {
    type Error = ConvertError;

    fn try_from(req: pb::ToolCallRequest) -> Result<ToolCallRequest, ConvertError> {
        Ok(ToolCallRequest {
            run_id: req.run_id,
            call_id: required("call_id", req.call_id)?,
            tool: required("tool", req.tool)?,
            command: bounded("command", req.command)?,
            path: bounded("path", req.path)?,
            resolved_path: bounded("resolved_path", req.resolved_path)?,
            paths: bounded_paths(req.paths)?,
            url: bounded("url", req.url)?,
            input: bounded("input", req.input)?,
        })
    }
}

impl From<&ToolCallResponse> for pb::ToolCallResponse {
    fn from(resp: &ToolCallResponse) -> pb::ToolCallResponse {
        pb::ToolCallResponse {
            run_id: resp.run_id.clone(),
            call_id: resp.call_id.clone(),
            decision: pb::Decision::from(resp.decision).into(),
            reason: resp.reason.clone(),
        }
    }
}

impl TryFrom<pb::ToolCallResponse> for ToolCallResponse {
    type Error = ConvertError;

    fn try_from(resp: pb::ToolCallResponse) -> Result<ToolCallResponse, ConvertError> {
        Ok(ToolCallResponse {
            run_id: resp.run_id,
            call_id: required("call_id", resp.call_id)?,
            decision: decision_from_proto("decision", resp.decision)?,
            reason: resp.reason,
        })
    }
}

impl From<&ToolCallResult> for pb::ToolCallResult {
    fn from(result: &ToolCallResult) -> pb::ToolCallResult {
        pb::ToolCallResult {
            run_id: result.run_id.clone(),
            call_id: result.call_id.clone(),
            success: result.success,
            output: result.output.clone(),
            error: result.error.clone(),
            cost_usd: result.cost_usd,
            duration: result.duration.map(|d| prost_types::Duration {
                seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                // Always below 1e9, so the cast cannot truncate.
                nanos: d.subsec_nanos() as i32,
            }),
        }
    }
}

/// A `Duration` message as a std duration; negative or malformed durations are refused.
fn duration_from_proto(
    field: &'static str,
    d: prost_types::Duration,
) -> Result<Duration, ConvertError> {
    match (u64::try_from(d.seconds), u32::try_from(d.nanos)) {
        (Ok(seconds), Ok(nanos)) if nanos < 1_000_000_000 => Ok(Duration::new(seconds, nanos)),
        _ => Err(ConvertError::OutOfRange {
            field,
            problem: format!(
                "must be a non-negative duration, got {}s {}ns",
                d.seconds, d.nanos
            ),
        }),
    }
}

/// The run_id may be empty on the wire (the session's run); the session fills it in.
impl TryFrom<pb::ToolCallResult> for ToolCallResult {
    type Error = ConvertError;

    fn try_from(result: pb::ToolCallResult) -> Result<ToolCallResult, ConvertError> {
        Ok(ToolCallResult {
            run_id: result.run_id,
            call_id: required("call_id", result.call_id)?,
            success: result.success,
            output: result.output,
            error: bounded("error", result.error)?,
            cost_usd: non_negative_finite("cost_usd", result.cost_usd)?,
            duration: result
                .duration
                .map(|d| duration_from_proto("duration", d))
                .transpose()?,
        })
    }
}
