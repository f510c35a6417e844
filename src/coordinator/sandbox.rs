//! The agent's sandbox, as the run's actor sees it: what the run's pinned profile tells
//! the worker at attach, and the worker's reports, each recorded before anything else
//! happens in the run.

use tracing::warn;

use super::actor::RunActor;
use super::messages::{Push, SessionError};
use crate::domain::{EventKind, SandboxPolicy, SandboxReport, Status};
use crate::policy::egress_of;
use crate::store::StoreError;

impl RunActor {
    /// What the run's pinned profile says about the sandbox.
    pub(super) fn sandbox_policy(&self) -> SandboxPolicy {
        let profile = self.profile.profile();
        let egress = egress_of(profile);
        SandboxPolicy {
            profile: profile.name.clone(),
            profile_hash: self.profile.hash().to_string(),
            secrets: profile.secrets.clone(),
            protected: profile.protected.clone(),
            writable: profile.writable.clone(),
            required: profile.sandbox.required,
            egress,
        }
    }

    /// Records a worker's report. A run whose profile requires the sandbox fails when
    /// its worker says the agent runs without one: `runplane work` refuses that itself,
    /// so the report comes from a worker that does not keep the rule.
    pub(super) async fn on_sandbox(&mut self, report: SandboxReport) -> Result<(), StoreError> {
        if let Some(state) = report.state() {
            self.run_mut().sandbox = Some(state);
        }
        let refused_off =
            matches!(report, SandboxReport::Off { .. }) && self.profile.profile().sandbox.required;
        self.record(EventKind::Sandbox(report));
        if refused_off && self.run.status == Status::Running {
            let why = format!(
                "the run's profile {:?} requires the agent's sandbox; a worker that runs the \
                 agent without one is refused",
                self.profile.profile().name
            );
            warn!("{why}");
            self.push(Push::Error(SessionError::precondition("", why.clone())));
            return self.finish(Status::Failed, why).await;
        }
        self.commit().await
    }
}
