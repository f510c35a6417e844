//! The change a step of the actor builds, and how it reaches the store and then the
//! worker: events are recorded into the change, the change is committed (awaited, or
//! handed to the store with its answers waiting in the session's outbox), and only a
//! durable change is ever told to the worker.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tracing::warn;

use super::actor::RunActor;
use super::messages::{CloseReason, Push};
use super::outbox::CutOff;
use crate::domain::{Event, EventKind, Run, StallTracker};
use crate::store::{Commit, StoreError};

/// What one step writes to a run: its events, whether the stall tracker changed, and the
/// answers that may reach the worker only once it is durable. The run itself is changed in
/// place (`run_mut`) and taken whole when the change becomes a commit. Every commit of a
/// run is built here, by its actor or, for a run without one yet (its creation, a run
/// failed at restore), by the coordinator.
#[derive(Default)]
pub(super) struct Change {
    /// The events recorded, in sequence order.
    events: Vec<Arc<Event>>,
    /// Whether the stall tracker was fed.
    stall_changed: bool,
    /// Pushes released once the change is committed.
    answers: Vec<Push>,
}

impl Change {
    /// A change holding one event.
    pub fn of(run_id: &str, seq: u64, at: DateTime<Utc>, kind: EventKind) -> Change {
        let mut change = Change::default();
        change.record(run_id, seq, at, kind);
        change
    }

    /// Adds an event: `first_seq` is the sequence number the change's first event takes.
    pub fn record(&mut self, run_id: &str, first_seq: u64, at: DateTime<Utc>, kind: EventKind) {
        self.events.push(Arc::new(Event {
            run_id: run_id.to_string(),
            seq: first_seq + self.events.len() as u64,
            at,
            kind,
        }));
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Marks the stall tracker as changed: the commit then carries it.
    pub fn stall_fed(&mut self) {
        self.stall_changed = true;
    }

    /// Adds an answer to release once the change is committed.
    pub fn answer_after(&mut self, push: Push) {
        self.answers.push(push);
    }

    /// The commit of `run` (at `expected_version`, `None` to create it) with this change's
    /// events and, if it was fed, the run's `stall` tracker; the events again for the live
    /// feed; the answers.
    pub fn into_commit(
        self,
        run: Arc<Run>,
        expected_version: Option<i64>,
        stall: Option<&StallTracker>,
    ) -> (Commit, Vec<Arc<Event>>, Vec<Push>) {
        let commit = Commit {
            run,
            expected_version,
            events: self.events.clone(),
            stall: stall.filter(|_| self.stall_changed).cloned(),
        };
        (commit, self.events, self.answers)
    }
}

impl RunActor {
    /// Adds an event to the change being built.
    pub(super) fn record(&mut self, kind: EventKind) {
        let at = self.shared.clock.now();
        self.change.record(&self.run.id, self.next_seq, at, kind);
    }

    /// The run, to change it. The store drops its reference to the last committed run
    /// before it answers, so this copies the run only if someone else still holds it.
    pub(super) fn run_mut(&mut self) -> &mut Run {
        Arc::make_mut(&mut self.run)
    }

    /// Makes the change durable. Only after this returns may the worker hear of it.
    pub(super) async fn commit(&mut self) -> Result<(), StoreError> {
        let (commit, events, answers) = self.take_commit();
        self.shared.store.commit(commit).await?;
        self.shared.publish(events);
        for push in answers {
            self.push(push);
        }
        Ok(())
    }

    /// The change as a commit, with its events for watchers and its answers; from here on
    /// the actor counts it as stored (a failed commit stops the actor).
    pub(super) fn take_commit(&mut self) -> (Commit, Vec<Arc<Event>>, Vec<Push>) {
        if self.run.version == self.stored_version {
            // Every committed change bumps the version, even one that only appends events:
            // optimistic concurrency then also catches a second writer of the same log.
            let now = self.shared.clock.now();
            self.run_mut().touch(now);
        }
        let change = std::mem::take(&mut self.change);
        let expected_version = Some(self.stored_version);
        let built = change.into_commit(Arc::clone(&self.run), expected_version, Some(&self.stall));
        self.stored_version = self.run.version;
        self.next_seq += built.1.len() as u64;
        built
    }

    /// The actor's state is ahead of the store: the worker is told, and the run comes back
    /// from what was committed.
    pub(super) fn stop_after_store_failure(&mut self, error: &StoreError) {
        if let StoreError::Fenced { .. } = error {
            // Not restored here: the run's new owner runs it, and this process must not
            // write for it again.
            warn!("another process owns the run now; its actor here stops");
            self.close_session(CloseReason::Moved);
            return;
        }
        warn!(%error, "store write failed; the run's actor stops and is restored from the store");
        self.close_session(CloseReason::Internal(error.to_string()));
        super::restore::restore_later(Arc::clone(&self.shared), self.run.id.clone());
    }

    /// Makes the change durable and sends `answers` once it is, without waiting: the
    /// actor goes on as if the commit succeeded. If it fails, nothing it or any later
    /// change would have sent reaches the worker (every later commit fails on the version
    /// too), and `attention` makes the loop stop the actor as a failed `commit` would.
    pub(super) fn commit_then_send(&mut self, answers: Vec<Push>) {
        let (commit, events, mut released) = self.take_commit();
        released.extend(answers);
        let outbox = self.session.as_ref().map(|session| {
            session.outbox.begin_commit(released);
            Arc::clone(&session.outbox)
        });
        // Only the event feed: a callback holding `Shared` (and through it the store) could
        // be the store's last owner and drop it on its own writer thread.
        let feed = self.shared.events.clone();
        let attention = Arc::clone(&self.attention);
        attention.begin();
        self.shared.store.commit_then(
            commit,
            Box::new(move |outcome| {
                match outcome {
                    Ok(()) => {
                        for event in events {
                            feed.publish(event);
                        }
                        if outbox.is_some_and(|outbox| outbox.commit_done(true)) {
                            attention.notify.notify_one();
                        }
                    }
                    Err(error) => {
                        if let Some(outbox) = outbox {
                            let _ = outbox.commit_done(false);
                        }
                        attention.fail(error);
                    }
                }
                attention.end();
            }),
        );
    }

    /// A commit issued without waiting failed (returned, so the loop stops the actor), or
    /// the worker was cut off while answers were released.
    pub(super) fn on_attention(&mut self) -> Result<(), StoreError> {
        if let Some(error) = self.attention.take_failure() {
            return Err(error);
        }
        let cut_off = self.session.as_ref().and_then(|s| s.outbox.take_cut_off());
        if let Some(cut_off) = cut_off {
            self.cut_off(cut_off);
        }
        Ok(())
    }

    /// Sends to the attached worker, after whatever still waits for its commit. A worker
    /// that does not read its stream is dropped rather than allowed to stall the run; it
    /// may re-attach.
    pub(super) fn push(&mut self, push: Push) {
        let Some(session) = &self.session else { return };
        if let Err(cut_off) = session.outbox.push(push) {
            self.cut_off(cut_off);
        }
    }

    /// The outbox found the worker's queue full or its stream gone: the session is over.
    fn cut_off(&mut self, cut_off: CutOff) {
        let Some(session) = self.session.take() else {
            return;
        };
        // The log says which way it ended (`run_loop` commits it).
        let reason = if cut_off.stream_closed {
            "stream closed"
        } else {
            warn!("worker does not read its stream; detaching it");
            "worker does not read its stream"
        };
        let worker_id = session.worker_id;
        self.record(EventKind::WorkerDetached {
            worker_id,
            reason: reason.to_string(),
        });
        if !self.run.status.is_terminal() {
            self.grace_deadline = self.shared.grace_deadline();
        }
    }

    /// Ends the attached stream with a reason, after what still waits for its commit.
    pub(super) fn close_session(&mut self, reason: CloseReason) {
        if let Some(session) = self.session.take() {
            session.outbox.close(reason);
        }
    }
}
