//! The live feed the server gives its coordinator: the coordinator's own broadcast feed,
//! with every committed event also counted in the metrics and, for asks, handed to the
//! ask webhooks. Watching committed events keeps both outside the coordinator: they need
//! no hook in its code, and they see only what the store holds.
//!
//! `publish` runs wherever a commit completes, the store's writer thread included, so
//! everything here is an atomic add or a `try_send`.

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::coordinator::{LiveFeed, LocalFeed};
use crate::domain::{Decision, Event, EventKind, Status};
use crate::metrics::Metrics;
use crate::webhook::AskNotifier;

/// Committed events buffered for watchers, as in `Coordinator::start`.
const EVENT_FEED: usize = 4096;

/// The detach reason the coordinator records when a newer attach takes a run over.
const TAKEN_OVER: &str = "taken over";

/// A [`LocalFeed`] that also counts and notifies.
pub(super) struct ObservedFeed {
    inner: LocalFeed,
    metrics: Arc<Metrics>,
    asks: Option<AskNotifier>,
}

impl ObservedFeed {
    pub(super) fn new(metrics: Arc<Metrics>, asks: Option<AskNotifier>) -> ObservedFeed {
        ObservedFeed {
            inner: LocalFeed::new(EVENT_FEED),
            metrics,
            asks,
        }
    }

    fn observe(&self, event: &Arc<Event>) {
        let metrics = &self.metrics;
        match &event.kind {
            EventKind::Created(_) => metrics.run_entered(Status::Pending),
            EventKind::Started { .. } => metrics.run_entered(Status::Running),
            EventKind::GateStarted { .. } => metrics.run_entered(Status::QualityGate),
            EventKind::Ended(ended) => metrics.run_entered(ended.status),
            EventKind::WorkerAttached { .. } => metrics.attached(),
            EventKind::WorkerDetached { reason, .. } if reason == TAKEN_OVER => {
                metrics.taken_over();
            }
            EventKind::Decided(decided) if decided.decision == Decision::Ask => {
                metrics.ask_opened();
            }
            EventKind::Resolved(_) => metrics.ask_closed(),
            EventKind::Sandbox(report) => {
                metrics.sandbox_reported(report.name());
                return;
            }
            _ => return,
        }
        if let Some(asks) = &self.asks {
            asks.notify(event);
        }
    }
}

impl LiveFeed for ObservedFeed {
    fn publish(&self, event: Arc<Event>) {
        self.observe(&event);
        self.inner.publish(event);
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.inner.subscribe()
    }
}
