//! Attach, detach, cancel, ask resolution and the ways a run ends.

use tracing::info;

use super::actor::{AttachError, CallState, RunActor, Session};
use super::messages::{CloseReason, CoordinatorError, Push};
use super::RUNPLANE;
use crate::domain::event::{Ended, Resolved};
use crate::domain::{Decision, EventKind, Run, Status, ToolCallResponse};
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

    /// Gives a pending ask its final decision and tells the worker.
    pub(super) async fn resolve(
        &mut self,
        call_id: &str,
        decision: Decision,
        reason: String,
        by: &str,
        note: String,
    ) -> Result<ToolCallResponse, CoordinatorError> {
        if decision == Decision::Ask {
            return Err(CoordinatorError::InvalidArgument(
                "decision: must be allow or deny".into(),
            ));
        }
        let Some(call) = self.calls.get_mut(call_id).filter(|c| c.ask.is_some()) else {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "call {call_id} of run {} is not waiting for an answer",
                self.run.id
            )));
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
        self.commit().await?;
        self.shared.ask_closed(&self.run.id, call_id);
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

    /// A limit ended the run as timeout; the worker is told to stop.
    pub(super) async fn end_by_limit(&mut self, reason: String) -> Result<(), StoreError> {
        self.end_run(Status::Timeout, reason, RUNPLANE).await
    }

    /// Ends the run by a cancel or a limit: the worker is told `cancel` or `terminate`.
    pub(super) async fn end_run(
        &mut self,
        status: Status,
        reason: String,
        by: &str,
    ) -> Result<(), StoreError> {
        let farewell = if status == Status::Cancelled {
            Farewell::Cancel
        } else {
            Farewell::Terminate
        };
        self.end(status, reason, by, farewell).await
    }

    /// Ends the run on its own (completed, or failed by its gate): the worker is sent
    /// `finished`.
    pub(super) async fn finish(&mut self, status: Status, error: String) -> Result<(), StoreError> {
        self.end(status, error, "", Farewell::Finished).await
    }

    /// Moves the run to a terminal status and denies its pending asks, in one commit; then
    /// tells the worker. After `finished` the server closes the stream, so the session's
    /// detach is recorded with the end, before the terminal event. After `cancel` or
    /// `terminate` the stream stays open until the worker closes it (later calls are
    /// denied), and its detach follows the terminal event.
    async fn end(
        &mut self,
        status: Status,
        reason: String,
        by: &str,
        farewell: Farewell,
    ) -> Result<(), StoreError> {
        let now = self.shared.clock.now();
        if self.run_mut().transition(status, now).is_err() {
            return Ok(());
        }
        self.run_mut().error = reason.clone();
        let denied = self.deny_pending_asks(&format!("run is {status}"));
        if let (Some(session), Farewell::Finished) = (&self.session, farewell) {
            self.record(EventKind::WorkerDetached {
                worker_id: session.worker_id.clone(),
                reason: "run finished".into(),
            });
        }
        self.record(EventKind::Ended(Ended {
            status,
            reason: reason.clone(),
            by: by.to_string(),
        }));
        self.commit().await?;
        info!(%status, reason = %reason, by, "run ended");
        // The reason first, so a worker waiting on an ask learns why before its deny.
        match farewell {
            Farewell::Cancel => self.push(Push::Cancel { reason }),
            Farewell::Terminate => self.push(Push::Terminate { status, reason }),
            Farewell::Finished => {}
        }
        self.push_final_denies(denied);
        if farewell == Farewell::Finished {
            self.push(Push::Finished(Box::new(Run::clone(&self.run))));
            self.close_session(CloseReason::Finished);
        }
        Ok(())
    }

    /// Tells the worker the final deny of each ask its run's end answered.
    fn push_final_denies(&mut self, denied: Vec<(String, CallState)>) {
        for (call_id, call) in denied {
            self.shared.ask_closed(&self.run.id, &call_id);
            self.push(Push::Decision(ToolCallResponse {
                run_id: self.run.id.clone(),
                call_id,
                decision: Decision::Deny,
                reason: call.reason,
            }));
        }
    }

    /// Final denies for every pending ask, recorded in the change being built.
    fn deny_pending_asks(&mut self, reason: &str) -> Vec<(String, CallState)> {
        let mut denied = Vec::new();
        let mut ids: Vec<String> = self
            .calls
            .iter()
            .filter(|(_, c)| c.ask.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        for call_id in ids {
            let Some(call) = self.calls.get_mut(&call_id) else {
                continue;
            };
            call.decision = Decision::Deny;
            call.reason = reason.to_string();
            call.ask = None;
            let snapshot = call.clone();
            self.record(EventKind::Resolved(Resolved {
                call_id: call_id.clone(),
                decision: Decision::Deny,
                reason: reason.to_string(),
                by: RUNPLANE.to_string(),
                note: String::new(),
            }));
            denied.push((call_id, snapshot));
        }
        denied
    }
}

/// How the worker hears that its run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Farewell {
    /// `cancel`: an operator ended it.
    Cancel,
    /// `terminate`: a limit or a stall ended it.
    Terminate,
    /// `finished`: it ended on its own.
    Finished,
}
