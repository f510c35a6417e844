//! Replay: the recorded tool calls of a run judged again under a candidate profile, to
//! see what a policy change would have changed before it is made.
//!
//! Pure: it reads a run's log one event at a time, in order, and keeps only what a later
//! call depends on (the workspace root of the session at the time, and the step count).
//! The store driver (`crate::replay`) feeds it page by page, for the CLI on a data
//! directory and for `PolicyService.Replay` alike, so the two cannot disagree.
//!
//! A call's recorded decision is the one the policy gave when it was made: for an ask,
//! the ask, whatever the operator answered later — and for a call a grant of the run
//! decided (which grants do only for calls the profile asked about), the ask too. Grants
//! are operators' answers, so replay does not apply them.

use std::collections::BTreeMap;

use crate::domain::event::{Decided, Event, EventKind};
use crate::domain::Decision;
use crate::policy::judge::eval::{ToolCall, Verdict};
use crate::policy::judge::offload::{guarded, JudgeFailed};
use crate::policy::profile::compile::CompiledProfile;

/// A decision with what made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// Allow, ask or deny.
    pub decision: Decision,
    /// The deciding rule, by index in its profile; `None`: the profile's mode.
    pub rule_index: Option<usize>,
    /// The sentence given with the decision.
    pub reason: String,
    /// The part of a command line that decided; empty when the whole call did.
    pub part: String,
}

impl From<Verdict> for Judged {
    fn from(verdict: Verdict) -> Judged {
        Judged {
            decision: verdict.decision,
            rule_index: verdict.rule_index,
            reason: verdict.reason,
            part: verdict.part.unwrap_or_default(),
        }
    }
}

/// A recorded call that the candidate profile decides differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The run.
    pub run_id: String,
    /// The call's sequence number in the run's log.
    pub seq: u64,
    /// The worker's id for the call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The shell command, for Bash.
    pub command: String,
    /// The file or directory.
    pub path: String,
    /// The session's workspace root the call was judged with again; empty: none.
    pub workspace_root: String,
    /// What the policy decided when the call was made.
    pub recorded: Judged,
    /// What the candidate profile decides.
    pub replayed: Judged,
}

/// What replaying one event gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not a decision: nothing to judge.
    NotACall,
    /// A call the policy never judged (refused because the run was not working or had
    /// reached a limit): no profile would decide it otherwise.
    Unjudged,
    /// Judged again, to the same decision.
    Same(Decision),
    /// Judged again, to another decision.
    Changed(Box<Change>),
}

/// The counts of a replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Runs replayed.
    pub runs: u64,
    /// Calls judged again.
    pub calls: u64,
    /// Calls the policy never judged, left out (see [`Outcome::Unjudged`]).
    pub unjudged: u64,
    /// Changed calls by recorded and replayed decision.
    pub changed: BTreeMap<(Decision, Decision), u64>,
}

impl Tally {
    /// Counts one outcome.
    pub fn count(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::NotACall => {}
            Outcome::Unjudged => self.unjudged += 1,
            Outcome::Same(_) => self.calls += 1,
            Outcome::Changed(change) => {
                self.calls += 1;
                *self
                    .changed
                    .entry((change.recorded.decision, change.replayed.decision))
                    .or_default() += 1;
            }
        }
    }

    /// How many calls changed in all.
    pub fn changed_calls(&self) -> u64 {
        self.changed.values().sum()
    }
}

/// The replay of one run's log, fed its events in sequence order.
#[derive(Debug, Clone)]
pub struct RunReplay {
    run_id: String,
    /// The attached session's workspace root; `None` without one, or when the worker
    /// named none (as the coordinator holds it).
    workspace_root: Option<String>,
    /// The step count after the last decision: the coordinator counts a step for each
    /// call the policy judges and for no other, so a decision that leaves the count as it
    /// was is a refusal the policy had no part in.
    steps: i32,
}

impl RunReplay {
    /// The replay of `run_id`, before its first event.
    pub fn new(run_id: &str) -> RunReplay {
        RunReplay {
            run_id: run_id.to_string(),
            workspace_root: None,
            steps: 0,
        }
    }

    /// Takes the next event of the run's log and judges it again with `profile` if it
    /// is a decision.
    pub fn feed(&mut self, profile: &CompiledProfile, event: &Event) -> Outcome {
        match &event.kind {
            EventKind::WorkerAttached { workspace_root, .. } => {
                self.workspace_root = (!workspace_root.is_empty()).then(|| workspace_root.clone());
                Outcome::NotACall
            }
            EventKind::WorkerDetached { .. } => {
                self.workspace_root = None;
                Outcome::NotACall
            }
            EventKind::Decided(decided) => {
                let judged = decided.step_count > self.steps;
                self.steps = self.steps.max(decided.step_count);
                if judged {
                    self.judge(profile, event.seq, decided)
                } else {
                    Outcome::Unjudged
                }
            }
            _ => Outcome::NotACall,
        }
    }

    fn judge(&self, profile: &CompiledProfile, seq: u64, decided: &Decided) -> Outcome {
        let call = ToolCall {
            tool: &decided.tool,
            command: &decided.command,
            path: &decided.path,
            resolved_path: &decided.resolved_path,
            paths: &decided.paths,
            url: &decided.url,
            input: &decided.input,
            workspace_root: self.workspace_root.as_deref(),
        };
        // As in a session: a judge that fails denies.
        let verdict = guarded(|| profile.evaluate(&call)).unwrap_or_else(JudgeFailed::deny);
        let recorded = if decided.grant.is_empty() {
            decided.decision
        } else {
            Decision::Ask
        };
        if verdict.decision == recorded {
            return Outcome::Same(verdict.decision);
        }
        Outcome::Changed(Box::new(Change {
            run_id: self.run_id.clone(),
            seq,
            call_id: decided.call_id.clone(),
            tool: decided.tool.clone(),
            command: decided.command.clone(),
            path: decided.path.clone(),
            workspace_root: self.workspace_root.clone().unwrap_or_default(),
            recorded: Judged {
                decision: recorded,
                rule_index: decided.rule_index,
                reason: decided.reason.clone(),
                part: decided.part.clone(),
            },
            replayed: verdict.into(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{PermissionRule, PolicyMode, PolicyProfile};
    use chrono::Utc;

    fn profile(rules: Vec<PermissionRule>) -> CompiledProfile {
        let mut profile = PolicyProfile {
            name: "t".into(),
            mode: PolicyMode::AcceptEdits,
            ..PolicyProfile::default()
        };
        profile.rules = rules;
        CompiledProfile::compile(profile).expect("compiles")
    }

    fn event(seq: u64, kind: EventKind) -> Event {
        Event {
            run_id: "r".into(),
            seq,
            at: Utc::now(),
            kind,
        }
    }

    fn attached(root: &str) -> EventKind {
        EventKind::WorkerAttached {
            worker_id: "w".into(),
            resumed: false,
            workspace_root: root.into(),
        }
    }

    fn decided(call_id: &str, path: &str, decision: Decision, steps: i32) -> EventKind {
        EventKind::Decided(Decided {
            call_id: call_id.into(),
            tool: "Edit".into(),
            command: String::new(),
            path: path.into(),
            resolved_path: String::new(),
            paths: Vec::new(),
            url: String::new(),
            input: String::new(),
            decision,
            reason: "recorded".into(),
            rule_index: None,
            part: String::new(),
            step_count: steps,
            deadline: None,
            profile: String::new(),
            profile_hash: String::new(),
            grant: String::new(),
        })
    }

    /// Edits outside the workspace are denied; the rest falls to acceptEdits (allow).
    fn outside_denied() -> CompiledProfile {
        let mut rule = PermissionRule::new("Edit", Decision::Allow);
        rule.path_allow = vec!["**".into()];
        profile(vec![rule])
    }

    #[test]
    fn judges_each_call_with_the_workspace_root_of_its_session() {
        let profile = outside_denied();
        let mut replay = RunReplay::new("r");
        let mut tally = Tally::default();
        let log = [
            event(1, attached("/ws/a")),
            event(2, decided("c1", "/ws/a/x", Decision::Allow, 1)),
            event(3, attached("/ws/b")),
            event(4, decided("c2", "/ws/a/x", Decision::Allow, 2)),
        ];
        let outcomes: Vec<Outcome> = log.iter().map(|e| replay.feed(&profile, e)).collect();
        for outcome in &outcomes {
            tally.count(outcome);
        }
        assert_eq!(outcomes[1], Outcome::Same(Decision::Allow));
        let Outcome::Changed(change) = &outcomes[3] else {
            panic!("c2 changed: {:?}", outcomes[3]);
        };
        assert_eq!(change.call_id, "c2");
        assert_eq!(change.seq, 4);
        assert_eq!(change.workspace_root, "/ws/b");
        assert_eq!(change.recorded.decision, Decision::Allow);
        assert_eq!(change.replayed.decision, Decision::Ask);
        assert_eq!(tally.calls, 2);
        assert_eq!(tally.changed_calls(), 1);
        assert_eq!(
            tally.changed.get(&(Decision::Allow, Decision::Ask)),
            Some(&1)
        );
    }

    #[test]
    fn a_refusal_that_counted_no_step_is_not_judged() {
        let profile = outside_denied();
        let mut replay = RunReplay::new("r");
        let mut tally = Tally::default();
        for e in [
            event(1, attached("/ws")),
            event(2, decided("c1", "/ws/x", Decision::Allow, 1)),
            event(3, decided("c2", "/ws/y", Decision::Deny, 1)),
        ] {
            let outcome = replay.feed(&profile, &e);
            tally.count(&outcome);
        }
        assert_eq!(tally.calls, 1);
        assert_eq!(tally.unjudged, 1);
        assert_eq!(tally.changed_calls(), 0);
    }

    /// A call a grant allowed was an ask of the profile: replayed to an ask, it is the
    /// same; replayed to an allow, it changed from ask.
    #[test]
    fn a_call_a_grant_decided_is_replayed_as_the_ask_it_was() {
        let granted = |call_id: &str, path: &str, steps: i32| {
            let EventKind::Decided(decided) = decided(call_id, path, Decision::Allow, steps) else {
                unreachable!("decided() makes a decision");
            };
            EventKind::Decided(Decided {
                grant: "g1".into(),
                ..decided
            })
        };
        let profile = outside_denied();
        let mut replay = RunReplay::new("r");
        let log = [
            event(1, attached("/ws")),
            event(2, granted("c1", "/elsewhere/x", 1)),
            event(3, granted("c2", "/ws/x", 2)),
        ];
        let outcomes: Vec<Outcome> = log.iter().map(|e| replay.feed(&profile, e)).collect();
        assert_eq!(outcomes[1], Outcome::Same(Decision::Ask));
        let Outcome::Changed(change) = &outcomes[2] else {
            panic!("c2 changed: {:?}", outcomes[2]);
        };
        assert_eq!(change.recorded.decision, Decision::Ask);
        assert_eq!(change.replayed.decision, Decision::Allow);
    }
}
