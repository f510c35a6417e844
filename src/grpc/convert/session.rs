//! Conversions for the worker session, the event log and pending asks.

use super::{bounded, status_from_proto, timestamp, ConvertError};
use crate::coordinator::{
    AttachRequest, DeliveryOutcome, GateOutcome, PendingAsk, Push, RunCompletion, SessionError,
    WorkerInput,
};
use crate::domain::Event;
use crate::domain::{EgressRefusal, KernelDenial, SandboxPolicy, SandboxReport};
use crate::domain::{Status, ToolCallRequest, ToolCallResult};
use crate::grpc::pb;
use crate::grpc::pb::coordinator_message::Message as Out;
use crate::grpc::pb::worker_message::Message as In;

impl TryFrom<pb::Attach> for AttachRequest {
    type Error = ConvertError;

    fn try_from(attach: pb::Attach) -> Result<AttachRequest, ConvertError> {
        Ok(AttachRequest {
            run_id: super::required("attach.run_id", attach.run_id)?,
            worker_id: bounded("attach.worker_id", attach.worker_id)?,
            workspace_root: bounded("attach.workspace_root", attach.workspace_root)?,
        })
    }
}

fn invalid(call_id: &str, err: ConvertError) -> SessionError {
    SessionError::invalid(call_id, err.to_string())
}

/// A worker message after the first. An error is answered in-stream; the session goes on.
pub fn worker_input(message: pb::WorkerMessage) -> Result<WorkerInput, SessionError> {
    match message.message {
        None => Err(SessionError::invalid("", "message: empty WorkerMessage")),
        Some(In::Attach(_)) => Err(SessionError::precondition(
            "",
            "attach: the session is already attached; open a new stream to attach again",
        )),
        Some(In::ToolCallRequest(request)) => {
            let call_id = request.call_id.clone();
            ToolCallRequest::try_from(request)
                .map(WorkerInput::ToolCall)
                .map_err(|e| invalid(&call_id, e))
        }
        Some(In::ToolCallResult(result)) => {
            let call_id = result.call_id.clone();
            ToolCallResult::try_from(result)
                .map(WorkerInput::Result)
                .map_err(|e| invalid(&call_id, e))
        }
        Some(In::Complete(complete)) => {
            let status = status_from_proto("complete.status", complete.status)
                .map_err(|e| invalid("", e))?
                .ok_or_else(|| {
                    SessionError::invalid("", "complete.status: must be COMPLETED or FAILED")
                })?;
            Ok(WorkerInput::Complete(RunCompletion {
                status,
                output: bounded("complete.output", complete.output).map_err(|e| invalid("", e))?,
                error: bounded("complete.error", complete.error).map_err(|e| invalid("", e))?,
            }))
        }
        Some(In::QualityGateResult(gate)) => Ok(WorkerInput::GateResult(GateOutcome {
            tests_passed: gate.tests_passed,
            lint_passed: gate.lint_passed,
            test_output: gate.test_output,
            lint_output: gate.lint_output,
            error: bounded("quality_gate_result.error", gate.error).map_err(|e| invalid("", e))?,
        })),
        Some(In::DeliveryResult(delivery)) => {
            let field = |name, value| bounded(name, value).map_err(|e| invalid("", e));
            Ok(WorkerInput::Delivery(DeliveryOutcome {
                success: delivery.success,
                patch_path: field("delivery_result.patch_path", delivery.patch_path)?,
                commit_hash: field("delivery_result.commit_hash", delivery.commit_hash)?,
                branch_name: field("delivery_result.branch_name", delivery.branch_name)?,
                pr_url: field("delivery_result.pr_url", delivery.pr_url)?,
                error: field("delivery_result.error", delivery.error)?,
            }))
        }
        Some(In::Heartbeat(_)) => Ok(WorkerInput::Heartbeat),
        Some(In::SandboxReport(report)) => sandbox_report(report)
            .map(WorkerInput::Sandbox)
            .map_err(|e| invalid("", e)),
    }
}

fn sandbox_report(report: pb::SandboxReport) -> Result<SandboxReport, ConvertError> {
    use pb::sandbox_report::Report;
    match report.report {
        None => Err(ConvertError::Required {
            field: "sandbox_report.report",
        }),
        Some(Report::Enforced(enforced)) => Ok(SandboxReport::Enforced {
            plan_hash: super::required("sandbox_report.enforced.plan_hash", enforced.plan_hash)?,
            layers: enforced
                .layers
                .into_iter()
                .map(|layer| bounded("sandbox_report.enforced.layers", layer))
                .collect::<Result<_, _>>()?,
        }),
        Some(Report::Off(off)) => Ok(SandboxReport::Off {
            reason: bounded("sandbox_report.off.reason", off.reason)?,
        }),
        Some(Report::EgressRefused(refused)) => Ok(SandboxReport::EgressRefused(EgressRefusal {
            host: super::required("sandbox_report.egress_refused.host", refused.host)?,
            port: u16::try_from(refused.port).map_err(|_| ConvertError::OutOfRange {
                field: "sandbox_report.egress_refused.port",
                problem: format!("{} is not a TCP port", refused.port),
            })?,
            method: bounded("sandbox_report.egress_refused.method", refused.method)?,
            call_id: bounded("sandbox_report.egress_refused.call_id", refused.call_id)?,
            reason: bounded("sandbox_report.egress_refused.reason", refused.reason)?,
        })),
        Some(Report::KernelDenied(denied)) => Ok(SandboxReport::Denied(KernelDenial {
            call_id: bounded("sandbox_report.kernel_denied.call_id", denied.call_id)?,
            errno: super::required("sandbox_report.kernel_denied.errno", denied.errno)?,
            line: bounded("sandbox_report.kernel_denied.line", denied.line)?,
        })),
    }
}

impl From<&SandboxPolicy> for pb::SandboxPolicy {
    fn from(policy: &SandboxPolicy) -> pb::SandboxPolicy {
        pb::SandboxPolicy {
            profile: policy.profile.clone(),
            profile_hash: policy.profile_hash.clone(),
            secrets: policy.secrets.clone(),
            protected: policy.protected.clone(),
            writable: policy.writable.clone(),
            required: policy.required,
            egress: policy.egress.clone(),
        }
    }
}

fn status(status: Status) -> i32 {
    pb::RunStatus::from(status).into()
}

/// A push as the wire message; `None` for `Close`, which ends the stream instead.
pub fn coordinator_message(push: Push) -> Option<pb::CoordinatorMessage> {
    let message = match push {
        Push::Attached {
            run,
            limits,
            resumed,
            sandbox,
        } => Out::Attached(pb::Attached {
            run: Some(pb::Run::from(&*run)),
            limits: Some(pb::TerminationCondition::from(&limits)),
            resumed,
            sandbox: Some(pb::SandboxPolicy::from(&*sandbox)),
        }),
        Push::Decision(response) => Out::ToolCallResponse(pb::ToolCallResponse::from(&response)),
        Push::ResultAck {
            call_id,
            step_count,
            cost_usd,
        } => Out::ResultAck(pb::ResultAck {
            call_id,
            step_count,
            cost_usd,
        }),
        Push::Cancel { reason } => Out::Cancel(pb::Cancel { reason }),
        Push::Terminate { status: s, reason } => Out::Terminate(pb::Terminate {
            status: status(s),
            reason,
        }),
        Push::QualityGate {
            run_tests,
            run_lint,
            test_command,
            lint_command,
            rollback_on_fail,
        } => Out::QualityGateRequest(pb::QualityGateRequest {
            run_tests,
            run_lint,
            test_command,
            lint_command,
            rollback_on_fail,
        }),
        Push::Deliver {
            mode,
            commit_message,
        } => Out::DeliverRequest(pb::DeliverRequest {
            mode: pb::DeliverMode::from(Some(mode)).into(),
            commit_message,
        }),
        Push::Finished(run) => Out::Finished(pb::Finished {
            run: Some(pb::Run::from(&*run)),
        }),
        Push::Error(error) => Out::Error(session_error(error)),
        Push::Heartbeat(s) => Out::Heartbeat(pb::HeartbeatReply { status: status(s) }),
        Push::Close(_) => return None,
    };
    Some(pb::CoordinatorMessage {
        message: Some(message),
    })
}

/// An in-stream error as the wire message.
pub fn session_error(error: SessionError) -> pb::SessionError {
    pb::SessionError {
        call_id: error.call_id,
        code: error.code.to_string(),
        message: error.message,
    }
}

impl From<&Event> for pb::RunEvent {
    fn from(event: &Event) -> pb::RunEvent {
        pb::RunEvent {
            run_id: event.run_id.clone(),
            seq: event.seq,
            r#type: event.kind.name().to_string(),
            at: Some(timestamp(event.at)),
            attributes: event
                .kind
                .attributes()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        }
    }
}

impl From<&PendingAsk> for pb::PendingAsk {
    fn from(ask: &PendingAsk) -> pb::PendingAsk {
        pb::PendingAsk {
            request: Some(pb::ToolCallRequest::from(&ask.request)),
            reason: ask.reason.clone(),
            asked_at: Some(timestamp(ask.asked_at)),
            deadline: ask.deadline.map(timestamp),
            // A profile of more than i32::MAX rules cannot be loaded.
            rule_index: ask.rule_index.and_then(|i| i32::try_from(i).ok()),
            rule: ask.rule.clone(),
            part: ask.part.clone(),
        }
    }
}
