//! Sessions and operators: attach, detach, cancel, ask resolution.

use tracing::info;

use super::actor::{AttachError, RunActor, Session};
use super::messages::{CloseReason, CoordinatorError, Push};
use crate::domain::event::Resolved;
use crate::domain::{Decision, EventKind, Remember, Run, Status, ToolCallResponse};
use crate::store::StoreError;

impl RunActor {
    /// Binds a worker's stream to the run; a newer attach takes over from an older one.
    pub(super) async fn attach(&mut self, session: Session) -> Result<(), AttachError> {
        if self.run.status.is_terminal() {
            return Err(AttachError::Refused(CoordinatorError::FailedPrecondition(
                format!("run {} is {}", self.run.id, self.run.status),
            )));
        }
        let now = self.shared.clock.now();
        let resumed = self.run.status != Status::Pending;
        if let Some(old) = &self.session {
            info!(old = %old.worker_id, new = %session.worker_id, "worker takeover");
            let old_worker = old.worker_id.clone();
            self.close_session(CloseReason::TakenOver {
                by_worker: session.worker_id.clone(),
            });
            self.record(EventKind::WorkerDetached {
                worker_id: old_worker,
                reason: "taken over".into(),
            });
        }
        if self.run.status == Status::Pending {
            self.run_mut()
                .transition(Status::Running, now)
                .map_err(|e| {
                    AttachError::Refused(CoordinatorError::FailedPrecondition(e.to_string()))
                })?;
            self.record(EventKind::Started {
                worker_id: session.worker_id.clone(),
            });
        }
        self.record(EventKind::WorkerAttached {
            worker_id: session.worker_id.clone(),
            resumed,
            workspace_root: session.workspace_root.clone().unwrap_or_default(),
        });
        self.commit().await?;
        info!(worker = %session.worker_id, resumed, "worker attached");
        self.grace_deadline = None;
        self.session = Some(session);
        self.push(Push::Attached {
            run: Box::new(Run::clone(&self.run)),
            limits: self.profile.profile().termination.clone(),
            resumed,
            sandbox: Box::new(self.sandbox_policy()),
        });
        if let Some(request) = self.outstanding_request() {
            self.push(request);
        }
        Ok(())
    }

    /// The worker's stream ended: the run waits for a re-attach, for at most the grace
    /// period.
    pub(super) async fn detach(&mut self) -> Result<(), StoreError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        info!(worker = %session.worker_id, "worker detached");
        self.record(EventKind::WorkerDetached {
            worker_id: session.worker_id,
            reason: "stream closed".into(),
        });
        if !self.run.status.is_terminal() {
            self.grace_deadline = self.shared.grace_deadline();
        }
        self.commit().await
    }

    /// An operator ends the run; later requests are denied.
    pub(super) async fn cancel(
        &mut self,
        reason: String,
        by: &str,
    ) -> Result<Run, CoordinatorError> {
        if self.run.status.is_terminal() {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "run {} is already {}",
                self.run.id, self.run.status
            )));
        }
        let reason = if reason.is_empty() {
            format!("cancelled by {by}")
        } else {
            reason
        };
        self.end_run(Status::Cancelled, reason.clone(), by).await?;
        Ok(Run::clone(&self.run))
    }

    /// Gives a pending ask its final decision and tells the worker; with `remember`, the
    /// answer also holds for the later calls of the run it covers (a grant, recorded in
    /// the same commit).
    pub(super) async fn resolve(
        &mut self,
        call_id: &str,
        decision: Decision,
        reason: String,
        by: &str,
        note: String,
        remember: Option<Remember>,
    ) -> Result<ToolCallResponse, CoordinatorError> {
        if decision == Decision::Ask {
            return Err(CoordinatorError::InvalidArgument(
                "decision: must be allow or deny".into(),
            ));
        }
        let run_id = self.run.id.clone();
        let not_waiting = || {
            CoordinatorError::FailedPrecondition(format!(
                "call {call_id} of run {run_id} is not waiting for an answer"
            ))
        };
        if self.calls.get(call_id).is_none_or(|c| c.ask.is_none()) {
            return Err(not_waiting());
        }
        // Checked before anything changes: a grant that does not fit refuses the answer.
        let grant = match &remember {
            Some(remember) => Some(
                self.new_grant(call_id, remember, decision, by, &note)
                    .await?,
            ),
            None => None,
        };
        let Some(call) = self.calls.get_mut(call_id).filter(|c| c.ask.is_some()) else {
            return Err(not_waiting());
        };
        let reason = if reason.is_empty() {
            format!("{decision} by {by}")
        } else {
            reason
        };
        call.decision = decision;
        call.reason = reason.clone();
        call.ask = None;
        self.record(EventKind::Resolved(Resolved {
            call_id: call_id.to_string(),
            decision,
            reason: reason.clone(),
            by: by.to_string(),
            note,
        }));
        if let Some(grant) = grant {
            self.add_grant(grant);
        }
        self.commit().await?;
        info!(call_id, %decision, by, "ask resolved");
        let response = ToolCallResponse {
            run_id: self.run.id.clone(),
            call_id: call_id.to_string(),
            decision,
            reason,
        };
        self.push(Push::Decision(response.clone()));
        Ok(response)
    }
}
