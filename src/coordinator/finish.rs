//! How a run ends: the completion the worker reports, the quality gate, delivery, and
//! every way to the terminal status (finished, cancelled, a limit or a stall).

use tracing::info;

use super::actor::{Phase, RunActor};
use super::decided::CallState;
use super::messages::{
    CloseReason, DeliveryOutcome, GateOutcome, Push, RunCompletion, SessionError,
};
use super::RUNPLANE;
use crate::domain::event::{Delivery, Ended, GateReport, Resolved};
use crate::domain::{Decision, EventKind, Run, Status, ToolCallResponse};
use crate::store::StoreError;

impl RunActor {
    /// `complete`: a failed run ends; a completed one goes through the gate and delivery.
    pub(super) async fn on_complete(
        &mut self,
        completion: RunCompletion,
    ) -> Result<(), StoreError> {
        if self.run.status != Status::Running || self.phase != Phase::Working {
            let state = match self.phase {
                Phase::Working => format!("run is {}, not running", self.run.status),
                Phase::Gate => "the run already completed and waits for its quality gate".into(),
                Phase::Delivering => "the run already completed and waits for its delivery".into(),
            };
            self.push(Push::Error(SessionError::precondition(
                "",
                format!("complete: {state}"),
            )));
            return Ok(());
        }
        match completion.status {
            Status::Failed => {
                self.run_mut().output = completion.output;
                let error = if completion.error.is_empty() {
                    "worker reported failure".to_string()
                } else {
                    completion.error
                };
                self.finish(Status::Failed, error).await
            }
            Status::Completed => {
                self.run_mut().output = completion.output;
                let gate = self.profile.profile().quality_gate.clone();
                if !gate.is_enabled() {
                    return self.deliver_or_complete().await;
                }
                let now = self.shared.clock.now();
                if self.run_mut().transition(Status::QualityGate, now).is_err() {
                    return Ok(());
                }
                self.phase = Phase::Gate;
                self.record(EventKind::GateStarted {
                    require_tests_pass: gate.require_tests_pass,
                    require_lint_pass: gate.require_lint_pass,
                });
                self.commit().await?;
                if let Some(request) = self.outstanding_request() {
                    self.push(request);
                }
                Ok(())
            }
            other => {
                self.push(Push::Error(SessionError::invalid(
                    "",
                    format!("complete.status: must be COMPLETED or FAILED, got {other}"),
                )));
                Ok(())
            }
        }
    }

    /// `quality_gate_result`: passed → delivery or completion; failed → failed with
    /// rollback, else completed with the failure noted.
    pub(super) async fn on_gate_result(&mut self, outcome: GateOutcome) -> Result<(), StoreError> {
        if self.phase != Phase::Gate || self.run.status != Status::QualityGate {
            self.push(Push::Error(SessionError::precondition(
                "",
                "quality_gate_result: no quality gate was requested".to_string(),
            )));
            return Ok(());
        }
        let gate = self.profile.profile().quality_gate.clone();
        let mut failures = Vec::new();
        if gate.require_tests_pass && outcome.tests_passed != Some(true) {
            failures.push("tests did not pass");
        }
        if gate.require_lint_pass && outcome.lint_passed != Some(true) {
            failures.push("lint did not pass");
        }
        if !outcome.error.is_empty() {
            failures.push("the gate could not run");
        }
        let recorded = GateReport {
            tests_passed: outcome.tests_passed,
            lint_passed: outcome.lint_passed,
            error: outcome.error.clone(),
        };
        if failures.is_empty() {
            self.record(EventKind::GatePassed(recorded));
            return self.deliver_or_complete().await;
        }
        let mut note = format!("quality gate failed: {}", failures.join(", "));
        if !outcome.error.is_empty() {
            note = format!("{note} ({})", outcome.error);
        }
        self.record(EventKind::GateFailed(recorded));
        if gate.rollback_on_gate_fail {
            self.finish(Status::Failed, note).await
        } else {
            self.completion_note = note;
            self.finish(Status::Completed, self.completion_note.clone())
                .await
        }
    }

    /// Asks for delivery when the run has a deliver mode, else completes it.
    async fn deliver_or_complete(&mut self) -> Result<(), StoreError> {
        let Some(mode) = self.run.deliver_mode else {
            return self
                .finish(Status::Completed, self.completion_note.clone())
                .await;
        };
        self.phase = Phase::Delivering;
        self.record(EventKind::DeliveryRequested { mode });
        self.commit().await?;
        if let Some(request) = self.outstanding_request() {
            self.push(request);
        }
        Ok(())
    }

    /// The gate or delivery request the worker still owes an answer to; sent when it is
    /// asked for and again on every re-attach, so a worker that lost its stream learns it.
    pub(super) fn outstanding_request(&self) -> Option<Push> {
        match self.phase {
            Phase::Working => None,
            Phase::Gate => {
                let gate = &self.profile.profile().quality_gate;
                Some(Push::QualityGate {
                    run_tests: gate.require_tests_pass,
                    run_lint: gate.require_lint_pass,
                    test_command: gate.test_command.clone(),
                    lint_command: gate.lint_command.clone(),
                    rollback_on_fail: gate.rollback_on_gate_fail,
                })
            }
            Phase::Delivering => Some(Push::Deliver {
                mode: self.run.deliver_mode?,
                commit_message: format!(
                    "runplane: task {} (run {})",
                    self.run.task_id, self.run.id
                ),
            }),
        }
    }

    /// `delivery_result`: recorded; the run is completed either way, a failure noted.
    pub(super) async fn on_delivery(&mut self, outcome: DeliveryOutcome) -> Result<(), StoreError> {
        if self.phase != Phase::Delivering || self.run.status.is_terminal() {
            self.push(Push::Error(SessionError::precondition(
                "",
                format!(
                    "delivery_result: no delivery was requested (run is {})",
                    self.run.status
                ),
            )));
            return Ok(());
        }
        let delivery = Delivery {
            patch_path: outcome.patch_path,
            commit_hash: outcome.commit_hash,
            branch_name: outcome.branch_name,
            pr_url: outcome.pr_url,
            error: outcome.error.clone(),
        };
        self.record(if outcome.success {
            EventKind::DeliverySucceeded(delivery)
        } else {
            EventKind::DeliveryFailed(delivery)
        });
        if !outcome.success {
            let note = format!("delivery failed: {}", outcome.error);
            self.completion_note = if self.completion_note.is_empty() {
                note
            } else {
                format!("{}; {note}", self.completion_note)
            };
        }
        self.finish(Status::Completed, self.completion_note.clone())
            .await
    }
}

impl RunActor {
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
