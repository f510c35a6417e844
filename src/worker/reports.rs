//! The worker's `SandboxReport`s: the sandbox in force (or none), each connection the
//! egress proxy refused, and each refusal a tool's result shows. They go on the run's
//! session; the server records each as a `sandbox.*` event.

use super::contain::Containment;
use super::egress::Refusal;
use crate::domain::SandboxPolicy;
use crate::grpc::pb;
use crate::grpc::pb::sandbox_report::Report;
use crate::grpc::pb::worker_message::Message as In;
use crate::sandbox::denial::denials;

fn report(report: Report) -> In {
    In::SandboxReport(pb::SandboxReport {
        report: Some(report),
    })
}

/// The run's sandbox settings as the worker uses them.
pub fn sandbox_policy(policy: pb::SandboxPolicy) -> SandboxPolicy {
    SandboxPolicy {
        profile: policy.profile,
        profile_hash: policy.profile_hash,
        secrets: policy.secrets,
        protected: policy.protected,
        writable: policy.writable,
        required: policy.required,
        egress: policy.egress,
    }
}

/// A connection the proxy refused while `call_id` was running.
pub fn egress_refused(refusal: Refusal, call_id: String) -> In {
    report(Report::EgressRefused(pb::EgressRefused {
        host: refusal.host,
        port: u32::from(refusal.port),
        method: refusal.method,
        call_id,
        reason: refusal.reason,
    }))
}

/// The report of the sandbox in force (`None`: `--sandbox off`).
pub fn sandbox_report(containment: Option<&Containment>) -> In {
    report(match containment {
        Some(c) => Report::Enforced(pb::SandboxEnforced {
            plan_hash: c.plan.hash(),
            layers: c.layers.clone(),
        }),
        None => Report::Off(pb::SandboxOff {
            reason: "runplane work --sandbox off".into(),
        }),
    })
}

/// The refusals a tool result shows, when `message` is one; nothing for other messages.
pub fn kernel_denials(message: &In) -> Vec<In> {
    let In::ToolCallResult(result) = message else {
        return Vec::new();
    };
    denials(&result.output)
        .into_iter()
        .map(|denial| {
            report(Report::KernelDenied(pb::KernelDenied {
                call_id: result.call_id.clone(),
                errno: denial.errno.to_string(),
                line: denial.line,
            }))
        })
        .collect()
}
