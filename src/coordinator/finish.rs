//! The end of a run the worker reports: completion, the quality gate, delivery.

use super::actor::{Phase, RunActor};
use super::messages::{DeliveryOutcome, GateOutcome, Push, RunCompletion, SessionError};
use crate::domain::event::{Delivery, GateReport};
use crate::domain::{EventKind, Status};
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
