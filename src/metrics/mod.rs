//! Prometheus metrics: what the server counts, and their OpenMetrics text.
//!
//! Every metric is registered once, when the server is assembled, and the handles the hot
//! paths touch are made then too: a decision costs an atomic add and one histogram
//! observation, never a label lookup or an allocation. The names, types and labels are
//! documented in `docs/OPERATIONS.md`; `http.rs` serves them.

mod histogram;
mod http;
mod timer;

pub use http::serve_metrics;
pub use timer::DecisionTimer;

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::domain::{Decision, SandboxReport, Status};
use crate::store::GroupObserver;
use histogram::AtomicHistogram;

/// The decisions, in the order of the cached counters of a profile.
const DECISIONS: [Decision; 3] = [Decision::Allow, Decision::Deny, Decision::Ask];

/// Labels of `runplane_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    decision: &'static str,
    profile: String,
}

/// Labels of `runplane_runs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

/// Labels of the counters split by a gRPC code name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: &'static str,
}

/// Labels of the webhook deliveries.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// Labels of `runplane_sandbox_reports_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReportLabel {
    kind: &'static str,
}

/// What became of one webhook notice for one receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookOutcome {
    /// The receiver answered 2xx.
    Delivered,
    /// An attempt failed and another one follows.
    Retry,
    /// Given up: the last attempt failed, or the receiver refused it (4xx).
    Failed,
    /// Not attempted: the receiver's queue was full.
    Dropped,
}

impl WebhookOutcome {
    const ALL: [WebhookOutcome; 4] = [
        WebhookOutcome::Delivered,
        WebhookOutcome::Retry,
        WebhookOutcome::Failed,
        WebhookOutcome::Dropped,
    ];

    fn as_str(self) -> &'static str {
        match self {
            WebhookOutcome::Delivered => "delivered",
            WebhookOutcome::Retry => "retry",
            WebhookOutcome::Failed => "failed",
            WebhookOutcome::Dropped => "dropped",
        }
    }
}

/// The server's metrics. Shared as `Arc<Metrics>`; every method takes `&self`.
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    /// The decision counters of each profile known at start, in `DECISIONS` order.
    by_profile: HashMap<String, [Counter; 3]>,
    decision_latency: AtomicHistogram,
    commit_latency: Histogram,
    group_size: Histogram,
    live_sessions: Gauge,
    pending_asks: Gauge,
    /// Runs entering each status, in `Status::ALL` order.
    runs: [Counter; 7],
    attaches: Counter,
    takeovers: Counter,
    session_errors: Family<CodeLabel, Counter>,
    auth_failures: Family<CodeLabel, Counter>,
    /// In `WebhookOutcome::ALL` order.
    webhooks: [Counter; 4],
    runs_purged: Counter,
    /// In `SandboxReport::KINDS` order.
    sandbox_reports: [Counter; 4],
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Latency buckets: 50 µs doubling to about 1.6 s, covering an in-memory answer and a
/// group commit waiting on a full fsync alike.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_05, 2.0, 16)
}

impl Metrics {
    /// Registers every metric, with the decision counters of `profiles` made up front.
    pub fn new<'a>(profiles: impl IntoIterator<Item = &'a str>) -> Metrics {
        let mut registry = Registry::with_prefix("runplane");
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "decisions",
            "Tool calls decided, by decision and policy profile",
            decisions.clone(),
        );
        let by_profile = profiles
            .into_iter()
            .map(|profile| {
                let counters = DECISIONS.map(|decision| {
                    decisions
                        .get_or_create(&DecisionLabels {
                            decision: decision.as_str(),
                            profile: profile.to_string(),
                        })
                        .clone()
                });
                (profile.to_string(), counters)
            })
            .collect();
        let decision_latency = AtomicHistogram::new(latency_buckets());
        registry.register_with_unit(
            "decision_latency",
            "From a tool call read off the worker's stream to its answer handed to the \
             transport, commit included",
            Unit::Seconds,
            decision_latency.clone(),
        );
        let commit_latency = Histogram::new(latency_buckets());
        registry.register_with_unit(
            "store_commit_latency",
            "Time per group transaction of the SQLite writer (BEGIN to COMMIT)",
            Unit::Seconds,
            commit_latency.clone(),
        );
        let group_size = Histogram::new(exponential_buckets(1.0, 2.0, 11));
        registry.register(
            "store_group_commits",
            "Commits per group transaction of the SQLite writer",
            group_size.clone(),
        );
        let live_sessions = Gauge::default();
        registry.register(
            "live_sessions",
            "Worker session streams open now",
            live_sessions.clone(),
        );
        let pending_asks = Gauge::default();
        registry.register(
            "pending_asks",
            "Tool calls waiting for an operator's answer",
            pending_asks.clone(),
        );
        let run_family = Family::<StatusLabel, Counter>::default();
        registry.register(
            "runs",
            "Runs that entered each status (pending at creation)",
            run_family.clone(),
        );
        let runs = Status::ALL.map(|status| {
            run_family
                .get_or_create(&StatusLabel {
                    status: status.as_str(),
                })
                .clone()
        });
        let attaches = Counter::default();
        registry.register(
            "worker_attaches",
            "Worker attaches to runs, re-attaches and takeovers included",
            attaches.clone(),
        );
        let takeovers = Counter::default();
        registry.register(
            "worker_takeovers",
            "Attaches that took a run over from a worker still attached",
            takeovers.clone(),
        );
        let session_errors = Family::<CodeLabel, Counter>::default();
        registry.register(
            "session_errors",
            "In-stream errors sent to workers (the session goes on), by gRPC code",
            session_errors.clone(),
        );
        let auth_failures = Family::<CodeLabel, Counter>::default();
        registry.register(
            "auth_failures",
            "Requests and worker attaches refused for their credentials, by gRPC code",
            auth_failures.clone(),
        );
        let webhook_family = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "webhook_deliveries",
            "Ask webhook deliveries per receiver, by outcome",
            webhook_family.clone(),
        );
        let webhooks = WebhookOutcome::ALL.map(|outcome| {
            webhook_family
                .get_or_create(&OutcomeLabel {
                    outcome: outcome.as_str(),
                })
                .clone()
        });
        let runs_purged = Counter::default();
        registry.register(
            "runs_purged",
            "Finished runs deleted by retention (--retain-finished-days), with their logs",
            runs_purged.clone(),
        );
        let report_family = Family::<ReportLabel, Counter>::default();
        registry.register(
            "sandbox_reports",
            "Workers' reports on the agent's sandbox, by event kind: agents started in it \
             (sandbox.enforced) or without it (sandbox.off), connections the egress proxy \
             refused, refusals that tool results showed (sandbox.denied)",
            report_family.clone(),
        );
        let sandbox_reports = SandboxReport::KINDS
            .map(|kind| report_family.get_or_create(&ReportLabel { kind }).clone());
        Metrics {
            registry,
            decisions,
            by_profile,
            decision_latency,
            commit_latency,
            group_size,
            live_sessions,
            pending_asks,
            runs,
            attaches,
            takeovers,
            session_errors,
            auth_failures,
            webhooks,
            runs_purged,
            sandbox_reports,
        }
    }

    /// A tool call was decided under `profile`.
    pub fn decided(&self, decision: Decision, profile: &str) {
        let index = match decision {
            Decision::Allow => 0,
            Decision::Deny => 1,
            Decision::Ask => 2,
        };
        match self.by_profile.get(profile) {
            Some(counters) => {
                counters[index].inc();
            }
            // A profile a reload added has no counters made up front: counted through
            // the family, a little slower.
            None => {
                self.decisions
                    .get_or_create(&DecisionLabels {
                        decision: decision.as_str(),
                        profile: profile.to_string(),
                    })
                    .inc();
            }
        }
    }

    /// A decision reached the transport `took` after its call was read.
    pub fn decision_answered(&self, took: Duration) {
        self.decision_latency.observe(took.as_secs_f64());
    }

    /// A worker session stream opened; it counts as live until the guard is dropped.
    pub fn session_opened(&self) -> LiveSession {
        self.live_sessions.inc();
        LiveSession(self.live_sessions.clone())
    }

    /// An in-stream error with this gRPC code was sent to a worker.
    pub fn session_error(&self, code: &'static str) {
        self.session_errors.get_or_create(&CodeLabel { code }).inc();
    }

    /// A request or an attach was refused for its credentials.
    pub fn auth_failed(&self, code: tonic::Code) {
        let code = match code {
            tonic::Code::Unauthenticated => "UNAUTHENTICATED",
            tonic::Code::PermissionDenied => "PERMISSION_DENIED",
            // Anything else (the store could not be read, a malformed request) is not a
            // verdict on the credentials.
            _ => return,
        };
        self.auth_failures.get_or_create(&CodeLabel { code }).inc();
    }

    /// Sets the pending asks, from the store at start.
    pub fn set_pending_asks(&self, count: usize) {
        self.pending_asks
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// An ask was committed.
    pub fn ask_opened(&self) {
        self.pending_asks.inc();
    }

    /// An ask was answered, timed out or denied by its run's end.
    pub fn ask_closed(&self) {
        self.pending_asks.dec();
    }

    /// A run entered `status`.
    pub fn run_entered(&self, status: Status) {
        if let Some(index) = Status::ALL.iter().position(|s| *s == status) {
            self.runs[index].inc();
        }
    }

    /// A worker attached to a run.
    pub fn attached(&self) {
        self.attaches.inc();
    }

    /// An attach took a run over from another worker.
    pub fn taken_over(&self) {
        self.takeovers.inc();
    }

    /// One webhook delivery's outcome.
    pub fn webhook(&self, outcome: WebhookOutcome) {
        if let Some(index) = WebhookOutcome::ALL.iter().position(|o| *o == outcome) {
            self.webhooks[index].inc();
        }
    }

    /// Retention deleted `count` finished runs.
    pub fn runs_purged(&self, count: usize) {
        self.runs_purged.inc_by(count as u64);
    }

    /// A worker's report on the sandbox was recorded as an event of `kind`.
    pub fn sandbox_reported(&self, kind: &str) {
        if let Some(index) = SandboxReport::KINDS.iter().position(|k| *k == kind) {
            self.sandbox_reports[index].inc();
        }
    }

    /// Every metric as OpenMetrics text.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

impl GroupObserver for Metrics {
    fn group_written(&self, commits: usize, took: Duration) {
        self.commit_latency.observe(took.as_secs_f64());
        self.group_size.observe(commits as f64);
    }
}

/// A live worker session, counted in `runplane_live_sessions` until dropped.
pub struct LiveSession(Gauge);

impl Drop for LiveSession {
    fn drop(&mut self) {
        self.0.dec();
    }
}
