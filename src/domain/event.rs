//! A run's append-only log, typed. Every kind of event the server records is a variant of
//! `EventKind` with its payload; `EventKind::name` and `EventKind::attributes` give its
//! stored form (a kind name and text attributes, as the log has always held them, so
//! existing data dirs load unchanged), and `EventKind::parse` is the one way back. An
//! event that cannot be read back — an unknown kind, a missing or malformed attribute,
//! an attribute this build does not know — is an error, never a guess: a decision read
//! wrongly would be replayed wrongly.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::attributes::{Reader, Writer};
use super::grant::{Grant, GrantMatch, GrantRevoked};
use super::sandbox::{self, SandboxReport};
use super::{Decision, DeliverMode, Status, ToolCallRequest};

/// One entry of a run's log.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The run the event belongs to.
    pub run_id: String,
    /// Per-run sequence number: starts at 1, gapless, assigned by the run's owner.
    pub seq: u64,
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// `run.created`: an operator started the run.
    Created(Created),
    /// `run.started`: the first worker attached.
    Started {
        /// The worker that attached.
        worker_id: String,
    },
    /// `run.worker.attached`.
    WorkerAttached {
        /// The worker.
        worker_id: String,
        /// Whether the run was already running (a re-attach or a takeover).
        resumed: bool,
        /// The worker's workspace, when it said.
        workspace_root: String,
    },
    /// `run.worker.detached`.
    WorkerDetached {
        /// The worker.
        worker_id: String,
        /// Why: `stream closed`, `taken over`, `server shutdown`, …
        reason: String,
    },
    /// `run.toolcall.approved`, `.denied` or `.asked` (by the decision).
    Decided(Decided),
    /// `run.toolcall.resolved`: an ask answered by an operator or by runplane.
    Resolved(Resolved),
    /// `run.toolcall.result`.
    Result(CallResult),
    /// `run.grant.added`: an operator answered an ask for the rest of the run.
    GrantAdded(Grant),
    /// `run.grant.revoked`: an operator withdrew a grant.
    GrantRevoked(GrantRevoked),
    /// `run.stall_detected`.
    StallDetected {
        /// The profile's threshold that was reached.
        threshold: i32,
    },
    /// `run.qualitygate.started`.
    GateStarted {
        /// Whether the tests must pass.
        require_tests_pass: bool,
        /// Whether the linter must pass.
        require_lint_pass: bool,
    },
    /// `run.qualitygate.passed`.
    GatePassed(GateReport),
    /// `run.qualitygate.failed`.
    GateFailed(GateReport),
    /// `run.delivery.requested`.
    DeliveryRequested {
        /// How the changes are handed over.
        mode: DeliverMode,
    },
    /// `run.delivery.succeeded`.
    DeliverySucceeded(Delivery),
    /// `run.delivery.failed`.
    DeliveryFailed(Delivery),
    /// `run.completed`, `run.failed`, `run.cancelled` or `run.timeout` (by the status).
    Ended(Ended),
    /// `sandbox.enforced`, `sandbox.off`, `sandbox.egress_refused`, `sandbox.denied`:
    /// the worker's reports about the agent's kernel sandbox.
    Sandbox(SandboxReport),
}

/// `run.created`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Created {
    /// The run's policy profile.
    pub policy_profile: String,
    /// The hash of the profile's version the run is pinned to (judged by for its whole
    /// life, restarts included); empty in logs written before versions were recorded.
    pub policy_hash: String,
    /// The task.
    pub task_id: String,
    /// The agent.
    pub agent_id: String,
    /// The project.
    pub project_id: String,
    /// The operator who started it.
    pub by: String,
}

/// A tool call and the decision made on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The worker's id for the call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The shell command, for Bash.
    pub command: String,
    /// The file or directory.
    pub path: String,
    /// `path` as the worker resolved it.
    pub resolved_path: String,
    /// Every further file the call touches.
    pub paths: Vec<String>,
    /// The URL a web tool fetches.
    pub url: String,
    /// The tool's whole input (JSON text).
    pub input: String,
    /// The decision.
    pub decision: Decision,
    /// Why.
    pub reason: String,
    /// The rule that decided, by index in the profile; `None`: the mode's default.
    pub rule_index: Option<usize>,
    /// The part of a command line that decided, when it was one part of several.
    pub part: String,
    /// The run's step count after the call.
    pub step_count: i32,
    /// When an ask times out; `None`: it waits until answered (and for other decisions).
    pub deadline: Option<DateTime<Utc>>,
    /// The profile that decided; empty in logs written before it was recorded.
    pub profile: String,
    /// The hash of that profile's version; empty in logs written before it was recorded.
    pub profile_hash: String,
    /// The grants that decided a call the profile asked about (`g1`, or `g1,g3` when
    /// several parts of a command line were covered); empty when the profile decided.
    pub grant: String,
}

impl Decided {
    /// The call as the worker sent it (the run id is not recorded per event).
    pub fn request(&self, run_id: &str) -> ToolCallRequest {
        ToolCallRequest {
            run_id: run_id.to_string(),
            call_id: self.call_id.clone(),
            tool: self.tool.clone(),
            command: self.command.clone(),
            path: self.path.clone(),
            resolved_path: self.resolved_path.clone(),
            paths: self.paths.clone(),
            url: self.url.clone(),
            input: self.input.clone(),
        }
    }
}

/// `run.toolcall.resolved`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The call.
    pub call_id: String,
    /// The final decision.
    pub decision: Decision,
    /// Why.
    pub reason: String,
    /// Who answered (`runplane` for the server itself).
    pub by: String,
    /// Free text the operator gave, kept apart from `by`.
    pub note: String,
}

/// `run.toolcall.result`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CallResult {
    /// The call.
    pub call_id: String,
    /// Its tool.
    pub tool: String,
    /// Whether the tool succeeded.
    pub success: bool,
    /// The tool's error text.
    pub error: String,
    /// The result's cost.
    pub cost_usd: f64,
    /// The run's total cost after it.
    pub total_cost_usd: f64,
    /// Size of the output (the output itself is not stored).
    pub output_bytes: u64,
    /// How long the tool ran, when the worker said.
    pub duration_ms: Option<u128>,
}

/// The worker's gate result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GateReport {
    /// Whether the tests passed; `None`: not run.
    pub tests_passed: Option<bool>,
    /// Whether the linter passed; `None`: not run.
    pub lint_passed: Option<bool>,
    /// Why the gate could not run.
    pub error: String,
}

/// The worker's delivery result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delivery {
    /// The patch file written.
    pub patch_path: String,
    /// The commit made.
    pub commit_hash: String,
    /// The branch pushed.
    pub branch_name: String,
    /// The pull request opened.
    pub pr_url: String,
    /// Why it failed.
    pub error: String,
}

/// The run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// Completed, failed, cancelled or timeout.
    pub status: Status,
    /// Why (the run's error).
    pub reason: String,
    /// Who ended it, for a cancel or a limit; empty when the run finished on its own.
    pub by: String,
}

/// A stored event that cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event {kind:?}: {problem}")]
pub struct EventError {
    /// The stored kind name.
    pub kind: String,
    /// What is wrong.
    pub problem: String,
}

/// The stored attributes: names are this module's constants, empty values are left out.
pub type Attributes = BTreeMap<&'static str, String>;

const APPROVED: &str = "run.toolcall.approved";
const DENIED: &str = "run.toolcall.denied";
const ASKED: &str = "run.toolcall.asked";
const GRANT_ADDED: &str = "run.grant.added";
const GRANT_REVOKED: &str = "run.grant.revoked";

impl EventKind {
    /// The stored kind name (`run.toolcall.approved`, …).
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Created(_) => "run.created",
            EventKind::Started { .. } => "run.started",
            EventKind::WorkerAttached { .. } => "run.worker.attached",
            EventKind::WorkerDetached { .. } => "run.worker.detached",
            EventKind::Decided(decided) => match decided.decision {
                Decision::Allow => APPROVED,
                Decision::Deny => DENIED,
                Decision::Ask => ASKED,
            },
            EventKind::Resolved(_) => "run.toolcall.resolved",
            EventKind::Result(_) => "run.toolcall.result",
            EventKind::GrantAdded(_) => GRANT_ADDED,
            EventKind::GrantRevoked(_) => GRANT_REVOKED,
            EventKind::StallDetected { .. } => "run.stall_detected",
            EventKind::GateStarted { .. } => "run.qualitygate.started",
            EventKind::GatePassed(_) => "run.qualitygate.passed",
            EventKind::GateFailed(_) => "run.qualitygate.failed",
            EventKind::DeliveryRequested { .. } => "run.delivery.requested",
            EventKind::DeliverySucceeded(_) => "run.delivery.succeeded",
            EventKind::DeliveryFailed(_) => "run.delivery.failed",
            EventKind::Sandbox(report) => report.name(),
            EventKind::Ended(ended) => match ended.status {
                Status::Completed => "run.completed",
                Status::Cancelled => "run.cancelled",
                Status::Timeout => "run.timeout",
                _ => "run.failed",
            },
        }
    }

    /// The tool call the event is about: its decision, its resolution or its result.
    pub fn call_id(&self) -> Option<&str> {
        match self {
            EventKind::Decided(decided) => Some(&decided.call_id),
            EventKind::Resolved(resolved) => Some(&resolved.call_id),
            EventKind::Result(result) => Some(&result.call_id),
            _ => None,
        }
    }

    /// Whether the event ends the run (the last event a watch sends).
    pub fn is_terminal(&self) -> bool {
        matches!(self, EventKind::Ended(_))
    }

    /// The stored attributes.
    pub fn attributes(&self) -> Attributes {
        let w = Writer(Attributes::new());
        match self {
            EventKind::Created(c) => w
                .text("policy_profile", &c.policy_profile)
                .text("policy_hash", &c.policy_hash)
                .text("task_id", &c.task_id)
                .text("agent_id", &c.agent_id)
                .text("project_id", &c.project_id)
                .text("by", &c.by),
            EventKind::Started { worker_id } => w.text("worker_id", worker_id),
            EventKind::WorkerAttached {
                worker_id,
                resumed,
                workspace_root,
            } => w
                .text("worker_id", worker_id)
                .value("resumed", resumed)
                .text("workspace_root", workspace_root),
            EventKind::WorkerDetached { worker_id, reason } => {
                w.text("worker_id", worker_id).text("reason", reason)
            }
            EventKind::Decided(d) => w
                .text("call_id", &d.call_id)
                .text("tool", &d.tool)
                .text("command", &d.command)
                .text("path", &d.path)
                .text("resolved_path", &d.resolved_path)
                .text("paths", &encode_paths(&d.paths))
                .text("url", &d.url)
                .text("input", &d.input)
                .value("decision", d.decision)
                .text("reason", &d.reason)
                .maybe("rule_index", d.rule_index)
                .text("part", &d.part)
                .value("step_count", d.step_count)
                .maybe("deadline", d.deadline.map(|t| t.to_rfc3339()))
                .text("profile", &d.profile)
                .text("profile_hash", &d.profile_hash)
                .text("grant", &d.grant),
            EventKind::Resolved(r) => w
                .text("call_id", &r.call_id)
                .value("decision", r.decision)
                .text("reason", &r.reason)
                .text("by", &r.by)
                .text("note", &r.note),
            EventKind::Result(r) => w
                .text("call_id", &r.call_id)
                .text("tool", &r.tool)
                .value("success", r.success)
                .text("error", &r.error)
                .value("cost_usd", r.cost_usd)
                .value("total_cost_usd", r.total_cost_usd)
                .value("output_bytes", r.output_bytes)
                .maybe("duration_ms", r.duration_ms),
            EventKind::GrantAdded(g) => {
                let (name, value) = match &g.matcher {
                    GrantMatch::Command(command) => ("command", command),
                    GrantMatch::Prefix(prefix) => ("prefix", prefix),
                    GrantMatch::PathGlob(glob) => ("path_glob", glob),
                };
                w.text("grant_id", &g.id)
                    .text("call_id", &g.call_id)
                    .text("tool", &g.tool)
                    .text(name, value)
                    .value("decision", g.decision)
                    .text("by", &g.by)
                    .text("note", &g.note)
            }
            EventKind::GrantRevoked(r) => w
                .text("grant_id", &r.grant_id)
                .text("reason", &r.reason)
                .text("by", &r.by),
            EventKind::StallDetected { threshold } => w.value("threshold", threshold),
            EventKind::GateStarted {
                require_tests_pass,
                require_lint_pass,
            } => w
                .value("require_tests_pass", require_tests_pass)
                .value("require_lint_pass", require_lint_pass),
            EventKind::GatePassed(g) | EventKind::GateFailed(g) => w
                .maybe("tests_passed", g.tests_passed)
                .maybe("lint_passed", g.lint_passed)
                .text("error", &g.error),
            EventKind::DeliveryRequested { mode } => w.value("mode", mode),
            EventKind::DeliverySucceeded(d) | EventKind::DeliveryFailed(d) => w
                .text("patch_path", &d.patch_path)
                .text("commit_hash", &d.commit_hash)
                .text("branch_name", &d.branch_name)
                .text("pr_url", &d.pr_url)
                .text("error", &d.error),
            EventKind::Ended(e) => w.text("reason", &e.reason).text("by", &e.by),
            EventKind::Sandbox(report) => report.write(w),
        }
        .0
    }

    /// Reads a stored event back.
    pub fn parse<'a>(
        kind: &'a str,
        attributes: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<EventKind, EventError> {
        let mut r = Reader {
            kind,
            attributes: attributes.into_iter().collect(),
        };
        let event = match kind {
            "run.created" => EventKind::Created(Created {
                policy_profile: r.text("policy_profile"),
                policy_hash: r.text("policy_hash"),
                task_id: r.text("task_id"),
                agent_id: r.text("agent_id"),
                project_id: r.text("project_id"),
                by: r.text("by"),
            }),
            "run.started" => EventKind::Started {
                worker_id: r.text("worker_id"),
            },
            "run.worker.attached" => EventKind::WorkerAttached {
                worker_id: r.text("worker_id"),
                resumed: r.value("resumed")?,
                workspace_root: r.text("workspace_root"),
            },
            "run.worker.detached" => EventKind::WorkerDetached {
                worker_id: r.text("worker_id"),
                reason: r.text("reason"),
            },
            APPROVED | DENIED | ASKED => EventKind::Decided(decided(&mut r)?),
            "run.toolcall.resolved" => EventKind::Resolved(Resolved {
                call_id: r.required("call_id")?,
                decision: r.value("decision")?,
                reason: r.text("reason"),
                by: r.text("by"),
                note: r.text("note"),
            }),
            "run.toolcall.result" => EventKind::Result(CallResult {
                call_id: r.required("call_id")?,
                tool: r.text("tool"),
                success: r.value("success")?,
                error: r.text("error"),
                cost_usd: r.value("cost_usd")?,
                total_cost_usd: r.value("total_cost_usd")?,
                output_bytes: r.value("output_bytes")?,
                duration_ms: r.maybe("duration_ms")?,
            }),
            GRANT_ADDED => EventKind::GrantAdded(grant(&mut r)?),
            GRANT_REVOKED => EventKind::GrantRevoked(GrantRevoked {
                grant_id: r.required("grant_id")?,
                reason: r.text("reason"),
                by: r.text("by"),
            }),
            "run.stall_detected" => EventKind::StallDetected {
                threshold: r.value("threshold")?,
            },
            "run.qualitygate.started" => EventKind::GateStarted {
                require_tests_pass: r.value("require_tests_pass")?,
                require_lint_pass: r.value("require_lint_pass")?,
            },
            "run.qualitygate.passed" => EventKind::GatePassed(gate(&mut r)?),
            "run.qualitygate.failed" => EventKind::GateFailed(gate(&mut r)?),
            "run.delivery.requested" => EventKind::DeliveryRequested {
                mode: r.value("mode")?,
            },
            "run.delivery.succeeded" => EventKind::DeliverySucceeded(delivery(&mut r)),
            "run.delivery.failed" => EventKind::DeliveryFailed(delivery(&mut r)),
            "run.completed" | "run.failed" | "run.cancelled" | "run.timeout" => {
                EventKind::Ended(Ended {
                    status: kind["run.".len()..]
                        .parse()
                        .map_err(|_| r.error("not a final status".into()))?,
                    reason: r.text("reason"),
                    by: r.text("by"),
                })
            }
            sandbox::ENFORCED | sandbox::OFF | sandbox::EGRESS_REFUSED | sandbox::DENIED => {
                EventKind::Sandbox(SandboxReport::read(kind, &mut r)?)
            }
            _ => return Err(r.error("unknown kind".into())),
        };
        r.finish(event)
    }
}

fn decided(r: &mut Reader<'_>) -> Result<Decided, EventError> {
    let decided = Decided {
        call_id: r.required("call_id")?,
        tool: r.required("tool")?,
        command: r.text("command"),
        path: r.text("path"),
        resolved_path: r.text("resolved_path"),
        paths: decode_paths(&r.text("paths")).map_err(|why| r.error(why))?,
        url: r.text("url"),
        input: r.text("input"),
        decision: r.value("decision")?,
        reason: r.text("reason"),
        rule_index: r.maybe("rule_index")?,
        part: r.text("part"),
        step_count: r.value("step_count")?,
        deadline: r.time("deadline")?,
        profile: r.text("profile"),
        profile_hash: r.text("profile_hash"),
        grant: r.text("grant"),
    };
    // The kind says the decision too; the two must agree.
    let named = match r.kind {
        APPROVED => Decision::Allow,
        DENIED => Decision::Deny,
        _ => Decision::Ask,
    };
    if decided.decision != named {
        return Err(r.error(format!("its decision attribute says {}", decided.decision)));
    }
    Ok(decided)
}

/// `run.grant.added`: exactly one of `command`, `prefix` and `path_glob` says what it
/// covers.
fn grant(r: &mut Reader<'_>) -> Result<Grant, EventError> {
    let mut matchers = [r.text("command"), r.text("prefix"), r.text("path_glob")]
        .into_iter()
        .enumerate()
        .filter(|(_, value)| !value.is_empty());
    let matcher = match (matchers.next(), matchers.next()) {
        (Some((0, command)), None) => GrantMatch::Command(command),
        (Some((1, prefix)), None) => GrantMatch::Prefix(prefix),
        (Some((_, glob)), None) => GrantMatch::PathGlob(glob),
        _ => {
            return Err(r.error(
                "exactly one of \"command\", \"prefix\" and \"path_glob\" must be set".into(),
            ))
        }
    };
    let grant = Grant {
        id: r.required("grant_id")?,
        call_id: r.required("call_id")?,
        tool: r.required("tool")?,
        matcher,
        decision: r.value("decision")?,
        by: r.text("by"),
        note: r.text("note"),
    };
    if grant.decision == Decision::Ask {
        return Err(r.error("a grant allows or denies, never asks".into()));
    }
    Ok(grant)
}

fn gate(r: &mut Reader<'_>) -> Result<GateReport, EventError> {
    Ok(GateReport {
        tests_passed: r.maybe("tests_passed")?,
        lint_passed: r.maybe("lint_passed")?,
        error: r.text("error"),
    })
}

fn delivery(r: &mut Reader<'_>) -> Delivery {
    Delivery {
        patch_path: r.text("patch_path"),
        commit_hash: r.text("commit_hash"),
        branch_name: r.text("branch_name"),
        pr_url: r.text("pr_url"),
        error: r.text("error"),
    }
}

/// `paths` as stored: a JSON array, absent when there are none.
fn encode_paths(paths: &[String]) -> String {
    if paths.is_empty() {
        String::new()
    } else {
        serde_json::to_string(paths).unwrap_or_default()
    }
}

fn decode_paths(text: &str) -> Result<Vec<String>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(text).map_err(|err| format!("attribute \"paths\" cannot be read: {err}"))
}
