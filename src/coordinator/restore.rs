//! Rebuilds a run's actor state from what the store holds: the run row, the stall tracker,
//! and the event log (the record of every decided call); and restoring a run whose actor
//! stopped on a store failure, with backoff; a run whose pinned profile version is gone
//! fails.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use tokio::sync::mpsc;

use super::actor::{Command, Phase};
use super::change::Change;
use super::decided::{AskWait, CallState, DecidedCalls};
use super::grants::Grants;
use super::{ActorState, Coordinator, CoordinatorError, Shared};
use crate::domain::event::{Decided, Ended};
use crate::domain::grant::grants_from_log;
use crate::domain::{Decision, Event, EventKind, Run, StallTracker, Status};
use crate::store::{RunStore, StoreError, StoredRun};

/// Whether the log ends with a delivery the worker has not reported on: the status alone
/// cannot tell (a delivering run is still running or in its gate status).
pub(super) fn delivery_outstanding(events: &[Event]) -> bool {
    events
        .iter()
        .rev()
        .find_map(|e| match e.kind {
            EventKind::DeliveryRequested { .. } => Some(true),
            EventKind::DeliverySucceeded(_) | EventKind::DeliveryFailed(_) => Some(false),
            _ => None,
        })
        .unwrap_or(false)
}

/// The worker whose session the log shows open (attached, never detached): the server
/// that held it stopped without a word (killed, or its store failed).
pub(super) fn unclosed_session(events: &[Event]) -> Option<String> {
    events.iter().fold(None, |open, event| match &event.kind {
        EventKind::WorkerAttached { worker_id, .. } => Some(worker_id.clone()),
        EventKind::WorkerDetached { .. } => None,
        _ => open,
    })
}

/// The calls of a run as its log tells them (the recent ones whole).
pub(super) fn calls_from_log(events: &[Event]) -> DecidedCalls {
    let mut calls = DecidedCalls::default();
    for event in events {
        apply(&mut calls, event);
    }
    calls
}

/// What one event of the log changes of the call it is about. A change to a call that
/// has moved out of the recent ones is dropped: the store is asked again when the call is
/// needed.
fn apply(calls: &mut DecidedCalls, event: &Event) {
    match &event.kind {
        EventKind::Decided(decided) => {
            calls.insert(decided.call_id.clone(), CallState::from_log(decided));
        }
        EventKind::Resolved(resolved) => {
            if let Some(call) = calls.get_mut(&resolved.call_id) {
                call.decision = resolved.decision;
                call.reason = resolved.reason.clone();
                call.ask = None;
            }
        }
        EventKind::Result(result) => {
            if let Some(call) = calls.get_mut(&result.call_id) {
                call.result_recorded = true;
            }
        }
        _ => {}
    }
}

/// Events read per page when one call is looked for in a run's log.
const CALL_SEARCH_PAGE: usize = 1_000;

/// A call as the run's log in the store tells it; `None` if the run never decided it. Reads
/// the log a page at a time: it is asked only for a call older than the recent ones.
pub(super) async fn call_from_store(
    store: &dyn RunStore,
    run_id: &str,
    call_id: &str,
) -> Result<Option<CallState>, StoreError> {
    let mut found = DecidedCalls::default();
    let mut from_seq = 1;
    loop {
        let page = store
            .list_events(run_id, from_seq, CALL_SEARCH_PAGE)
            .await?;
        for event in page.iter().filter(|e| e.kind.call_id() == Some(call_id)) {
            apply(&mut found, event);
        }
        match page.last() {
            Some(last) if page.len() == CALL_SEARCH_PAGE => from_seq = last.seq + 1,
            _ => return Ok(found.get(call_id).cloned()),
        }
    }
}

impl CallState {
    /// A call as its decision was recorded.
    fn from_log(decided: &Decided) -> CallState {
        let request = decided.request("");
        CallState {
            tool: decided.tool.clone(),
            fingerprint: request.fingerprint(),
            decision: decided.decision,
            reason: decided.reason.clone(),
            ask: (decided.decision == Decision::Ask).then_some(AskWait {
                deadline: decided.deadline,
            }),
            result_recorded: false,
        }
    }
}

/// First wait before restoring a run whose actor stopped on a store failure.
const RESTORE_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between restore attempts while the store keeps failing.
const RESTORE_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Restores a run whose actor stopped because a store write failed: its in-memory state
/// was dropped, and without an actor its timers (grace, time limit, ask timeouts) would not
/// run. Retries with backoff until the run is running again, is over, or the server stops.
pub(super) fn restore_later(shared: Arc<Shared>, run_id: String) {
    let coordinator = Coordinator { shared };
    tokio::spawn(async move {
        let mut wait = RESTORE_BACKOFF;
        loop {
            tokio::time::sleep(wait).await;
            match coordinator.live_actor(&run_id, false).await {
                Ok(_) => return info!(%run_id, "run restored after a store failure"),
                Err(
                    CoordinatorError::Unavailable
                    | CoordinatorError::NotFound(_)
                    | CoordinatorError::FailedPrecondition(_)
                    | CoordinatorError::Store(StoreError::Fenced { .. }),
                ) => return,
                Err(err) => warn!(%run_id, error = %err, "restoring the run failed; retrying"),
            }
            wait = (wait * 2).min(RESTORE_BACKOFF_MAX);
        }
    });
}

impl Coordinator {
    /// Rebuilds a live run's actor from the store; `None` when the run cannot go on. The
    /// run is judged by the profile version it started with, whatever the policy directory
    /// holds now; a run whose version cannot be found fails: deciding its calls under
    /// another profile would be a guess.
    pub(super) async fn restore(
        &self,
        stored: StoredRun,
    ) -> Result<Option<mpsc::Sender<Command>>, StoreError> {
        let StoredRun { run, stall, events } = stored;
        let next_seq = events.last().map_or(1, |e| e.seq + 1);
        let profile = match self.pinned_profile(&run, &events).await? {
            Ok(profile) => profile,
            Err(reason) => {
                self.fail_unrestorable(run, next_seq, reason).await?;
                return Ok(None);
            }
        };
        let stall = stall
            .unwrap_or_else(|| StallTracker::new(profile.profile().termination.stall_threshold));
        // A running run's worker is gone with the old server: give it the full grace.
        let grace_deadline = (run.status != Status::Pending)
            .then(|| self.shared.grace_deadline())
            .flatten();
        let phase = if delivery_outstanding(&events) {
            Phase::Delivering
        } else if run.status == Status::QualityGate {
            Phase::Gate
        } else {
            Phase::Working
        };
        Ok(Some(self.spawn_actor(ActorState {
            unclosed_session: unclosed_session(&events),
            calls: calls_from_log(&events),
            grants: Grants::from_log(grants_from_log(&events)),
            run,
            profile,
            stall,
            next_seq,
            grace_deadline,
            phase,
        })))
    }

    async fn fail_unrestorable(
        &self,
        mut run: Run,
        seq: u64,
        reason: String,
    ) -> Result<(), StoreError> {
        warn!(run_id = %run.id, %reason, "failing a run at restore");
        let expected_version = Some(run.version);
        let now = self.shared.clock.now();
        if run.transition(Status::Failed, now).is_err() {
            return Ok(());
        }
        run.error = reason.clone();
        let ended = EventKind::Ended(Ended {
            status: Status::Failed,
            reason,
            by: String::new(),
        });
        let (commit, events, _) =
            Change::of(&run.id, seq, now, ended).into_commit(Arc::new(run), expected_version, None);
        self.shared.store.commit(commit).await?;
        self.shared.publish(events);
        Ok(())
    }
}
