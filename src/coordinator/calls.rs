//! Tool calls and their results: decisions, step counting, limits, the stall tracker.

use chrono::TimeDelta;
use tracing::{debug, warn};

use super::actor::{Phase, RunActor};
use super::decided::{AskWait, CallState, Lookup};
use super::messages::{Push, SessionError};
use super::restore::call_from_store;
use super::RUNPLANE;
use crate::domain::event::{CallResult, Decided};
use crate::domain::{
    Decision, EventKind, Status, ToolCallRequest, ToolCallResponse, ToolCallResult,
};
use crate::policy::{evaluate_off_runtime, ToolCall, Verdict};
use crate::store::StoreError;

impl RunActor {
    /// Decides a tool call, commits the decision, then answers.
    pub(super) async fn on_tool_call(
        &mut self,
        request: ToolCallRequest,
    ) -> Result<(), StoreError> {
        if let Some(error) = self.foreign_run(&request.run_id, &request.call_id) {
            self.push(Push::Error(error));
            return Ok(());
        }
        self.find_call(&request.call_id).await?;
        if let Some(call) = self.calls.get(&request.call_id) {
            // Answering a different call with an old decision would allow what was never
            // judged: the repeat must be the same call.
            let push = if call.fingerprint == request.fingerprint() {
                Push::Decision(self.response(&request.call_id, call.decision, call.reason.clone()))
            } else {
                Push::Error(SessionError::invalid(
                    &request.call_id,
                    format!(
                        "call_id: {} was already used for a different call (a {} call)",
                        request.call_id, call.tool
                    ),
                ))
            };
            self.push(push);
            return Ok(());
        }
        // Only a working run decides tool calls: once the agent has completed and its
        // delivery is awaited, the work being delivered must not change.
        let refusal = if self.run.status != Status::Running {
            Some("run is not running")
        } else if self.phase != Phase::Working {
            Some("the run completed and waits for its delivery")
        } else {
            None
        };
        if let Some(reason) = refusal {
            self.decide(&request, Verdict::deny(reason.to_string()), String::new());
            return self.commit_and_answer(&request.call_id).await;
        }
        if let Some(reason) = self.limit_reached() {
            self.decide(&request, Verdict::deny(reason.clone()), String::new());
            self.end_by_limit_in_same_commit(reason, &request.call_id)
                .await?;
            return Ok(());
        }
        let workspace_root = self.session.as_ref().and_then(|s| s.workspace_root.clone());
        let call = ToolCall {
            tool: &request.tool,
            command: &request.command,
            path: &request.path,
            resolved_path: &request.resolved_path,
            paths: &request.paths,
            url: &request.url,
            input: &request.input,
            workspace_root: workspace_root.as_deref(),
        };
        // A long line is judged on the blocking pool so that it cannot stall the runtime's
        // threads (every other session on them); awaiting it here keeps the session's
        // messages in order. A judge that fails denies: it never allows, never crashes.
        let verdict = match evaluate_off_runtime(&self.profile, &call).await {
            Ok(verdict) => verdict,
            Err(failed) => {
                warn!(call_id = %request.call_id, tool = %request.tool, "{failed}; denied");
                failed.deny()
            }
        };
        // Only an ask of the profile is looked up in the run's grants: its denies stand.
        let (verdict, grant) = self.with_grants(&call, verdict).await;
        let now = self.shared.clock.now();
        let run = self.run_mut();
        run.step_count = run.step_count.saturating_add(1);
        run.touch(now);
        self.decide(&request, verdict, grant);
        self.commit_and_answer(&request.call_id).await
    }

    /// Brings a call this run decided long ago back among the recent ones, from the log in
    /// the store (see `decided.rs`); a recent or never-decided call costs nothing.
    async fn find_call(&mut self, call_id: &str) -> Result<(), StoreError> {
        if !matches!(self.calls.lookup(call_id), Lookup::MaybeOlder) {
            return Ok(());
        }
        // Everything decided so far must be in the log before it is searched.
        self.attention.settled().await;
        if let Some(error) = self.attention.take_failure() {
            return Err(error);
        }
        let store = &*self.shared.store;
        if let Some(call) = call_from_store(store, &self.run.id, call_id).await? {
            debug!(%call_id, "an older call read back from the store");
            self.calls.insert(call_id.to_string(), call);
        }
        Ok(())
    }

    /// Records a decision for a new call in the change being built; `grant` names the
    /// grants that decided it (empty: the profile did).
    fn decide(&mut self, request: &ToolCallRequest, verdict: Verdict, grant: String) {
        let Verdict {
            decision,
            reason,
            rule_index,
            part,
        } = verdict;
        let now = self.shared.clock.now();
        let seconds = self.profile.profile().termination.ask_timeout_seconds;
        let ask = (decision == Decision::Ask).then(|| AskWait {
            // Past what a timestamp can hold, an ask simply waits (like 0).
            deadline: (seconds > 0)
                .then(|| TimeDelta::try_seconds(seconds).and_then(|t| now.checked_add_signed(t)))
                .flatten(),
        });
        self.record(EventKind::Decided(Decided {
            call_id: request.call_id.clone(),
            tool: request.tool.clone(),
            command: request.command.clone(),
            path: request.path.clone(),
            // Recorded only when given (empty attributes are left out): the log shows
            // which real file a call was decided for.
            resolved_path: request.resolved_path.clone(),
            paths: request.paths.clone(),
            url: request.url.clone(),
            input: request.input.clone(),
            decision,
            reason: reason.clone(),
            rule_index,
            part: part.unwrap_or_default(),
            step_count: self.run.step_count,
            deadline: ask.as_ref().and_then(|a| a.deadline),
            profile: self.profile.profile().name.clone(),
            profile_hash: self.profile.hash().to_string(),
            grant,
        }));
        debug!(call_id = %request.call_id, tool = %request.tool, %decision, reason = %reason, "decided");
        self.shared
            .config
            .metrics
            .decided(decision, &self.run.policy_profile);
        if ask.is_some() {
            self.asking.insert(request.call_id.clone());
        }
        self.calls.insert(
            request.call_id.clone(),
            CallState {
                tool: request.tool.clone(),
                fingerprint: request.fingerprint(),
                decision,
                reason,
                ask,
                result_recorded: false,
            },
        );
    }

    /// Commits the change, then sends the call's decision. An allow or deny goes out from
    /// the commit's completion, without the actor waiting for it; an ask waits, so the
    /// worker never hears of an ask that operators cannot see in the store.
    async fn commit_and_answer(&mut self, call_id: &str) -> Result<(), StoreError> {
        let Some(call) = self.calls.get(call_id) else {
            return self.commit().await;
        };
        let response = self.response(call_id, call.decision, call.reason.clone());
        if call.decision != Decision::Ask {
            self.commit_then_send(vec![Push::Decision(response)]);
            return Ok(());
        }
        self.commit().await?;
        self.push(Push::Decision(response));
        Ok(())
    }

    /// A limit denial: the deny, the timeout and the terminate go out after one commit.
    async fn end_by_limit_in_same_commit(
        &mut self,
        reason: String,
        call_id: &str,
    ) -> Result<(), StoreError> {
        let response = self.response(call_id, Decision::Deny, reason.clone());
        self.change.answer_after(Push::Decision(response));
        self.end_by_limit(reason).await
    }

    fn response(&self, call_id: &str, decision: Decision, reason: String) -> ToolCallResponse {
        ToolCallResponse {
            run_id: self.run.id.clone(),
            call_id: call_id.to_string(),
            decision,
            reason,
        }
    }

    /// The first limit the run has reached, as the reason the worker sees.
    pub(super) fn limit_reached(&self) -> Option<String> {
        let limits = &self.profile.profile().termination;
        if limits.max_steps > 0 && self.run.step_count >= limits.max_steps {
            return Some(format!("step limit reached ({} steps)", limits.max_steps));
        }
        if limits.max_cost > 0.0 && self.run.cost_usd >= limits.max_cost {
            return Some(format!("cost limit reached (${})", limits.max_cost));
        }
        if self
            .time_limit_deadline()
            .is_some_and(|at| at <= self.shared.clock.now())
        {
            return Some(format!("time limit reached ({} s)", limits.timeout_seconds));
        }
        None
    }

    /// A session error when a message names another run.
    fn foreign_run(&self, run_id: &str, call_id: &str) -> Option<SessionError> {
        (!run_id.is_empty() && run_id != self.run.id).then(|| {
            SessionError::invalid(
                call_id,
                format!("run_id: {run_id} is not this session's run {}", self.run.id),
            )
        })
    }

    /// Records a result of an allowed call, feeds the stall tracker, commits, acknowledges.
    pub(super) async fn on_result(&mut self, result: ToolCallResult) -> Result<(), StoreError> {
        if let Some(error) = self.foreign_run(&result.run_id, &result.call_id) {
            self.push(Push::Error(error));
            return Ok(());
        }
        let call_id = result.call_id.clone();
        self.find_call(&call_id).await?;
        let Some(call) = self.calls.get(&call_id) else {
            self.push(Push::Error(SessionError::not_found(
                &call_id,
                format!("call_id: no call {call_id} was decided in this run"),
            )));
            return Ok(());
        };
        if call.decision != Decision::Allow {
            let state = if call.ask.is_some() {
                "is waiting for an operator"
            } else {
                "was not allowed"
            };
            self.push(Push::Error(SessionError::precondition(
                &call_id,
                format!("call_id: call {call_id} {state}; only allowed calls have results"),
            )));
            return Ok(());
        }
        if call.result_recorded {
            self.push(self.result_ack(&call_id));
            return Ok(());
        }
        if self.run.status.is_terminal() {
            self.push(Push::Error(SessionError::precondition(
                &call_id,
                format!("run is {}; results are no longer recorded", self.run.status),
            )));
            return Ok(());
        }
        let total = self.run.cost_usd + result.cost_usd;
        if !total.is_finite() {
            self.push(Push::Error(SessionError::invalid(
                &call_id,
                format!(
                    "cost_usd: {} would make the run's total cost infinite",
                    result.cost_usd
                ),
            )));
            return Ok(());
        }
        let tool = call.tool.clone();
        let now = self.shared.clock.now();
        let run = self.run_mut();
        run.cost_usd = total;
        run.touch(now);
        let stalled = self
            .stall
            .record_step(&tool, result.success, &result.output);
        self.change.stall_fed();
        if let Some(call) = self.calls.get_mut(&call_id) {
            call.result_recorded = true;
        }
        self.record(EventKind::Result(CallResult {
            call_id: call_id.clone(),
            tool,
            success: result.success,
            error: result.error.clone(),
            cost_usd: result.cost_usd,
            total_cost_usd: self.run.cost_usd,
            output_bytes: result.output.len() as u64,
            duration_ms: result.duration.map(|d| d.as_millis()),
        }));
        let limits = &self.profile.profile().termination;
        let ending = if stalled && limits.stall_detection {
            self.record(EventKind::StallDetected {
                threshold: self.stall.threshold(),
            });
            Some((Status::Failed, "stall detected".to_string()))
        } else if limits.max_cost > 0.0 && self.run.cost_usd >= limits.max_cost {
            Some((
                Status::Timeout,
                format!("cost limit reached (${})", limits.max_cost),
            ))
        } else {
            None
        };
        match ending {
            None => {
                let ack = self.result_ack(&call_id);
                self.commit_then_send(vec![ack]);
            }
            Some((status, reason)) => {
                let ack = self.result_ack(&call_id);
                self.change.answer_after(ack);
                self.end_run(status, reason, RUNPLANE).await?;
            }
        }
        Ok(())
    }

    fn result_ack(&self, call_id: &str) -> Push {
        Push::ResultAck {
            call_id: call_id.to_string(),
            step_count: self.run.step_count,
            cost_usd: self.run.cost_usd,
        }
    }
}
