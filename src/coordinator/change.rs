//! The change a step of the actor builds, and how it reaches the store and then the
//! worker: events are recorded into the change, the change is committed (awaited, or
//! handed to the store with its answers waiting in the session's outbox), and only a
//! durable change is ever told to the worker.

use std::sync::Arc;

use tracing::warn;

use super::actor::RunActor;
use super::messages::{CloseReason, Push};
use super::outbox::CutOff;
use crate::domain::{Event, EventKind, Run};
use crate::store::{Commit, StoreError};

impl RunActor {
    /// Adds an event to the change being built.
    pub(super) fn record(&mut self, kind: EventKind) {
        let event = Event {
            run_id: self.run.id.clone(),
            seq: self.next_seq + self.pending_events.len() as u64,
            at: self.shared.clock.now(),
            kind,
        };
        self.pending_events.push(Arc::new(event));
    }

    /// The run, to change it. The store drops its reference to the last committed run
    /// before it answers, so this copies the run only if someone else still holds it.
    pub(super) fn run_mut(&mut self) -> &mut Run {
        Arc::make_mut(&mut self.run)
    }

    /// Makes the change durable. Only after this returns may the worker hear of it.
    pub(super) async fn commit(&mut self) -> Result<(), StoreError> {
        let (commit, events) = self.take_commit();
        self.shared.store.commit(commit).await?;
        self.shared.publish(events);
        for push in std::mem::take(&mut self.deferred) {
            self.push(push);
        }
        Ok(())
    }

    /// The change as a commit, with its events for watchers; from here on the actor counts
    /// it as stored (a failed commit stops the actor).
    pub(super) fn take_commit(&mut self) -> (Commit, Vec<Arc<Event>>) {
        if self.run.version == self.stored_version {
            // Every committed change bumps the version, even one that only appends events:
            // optimistic concurrency then also catches a second writer of the same log.
            let now = self.shared.clock.now();
            self.run_mut().touch(now);
        }
        let events = std::mem::take(&mut self.pending_events);
        let stall = std::mem::take(&mut self.stall_changed).then(|| self.stall.clone());
        let commit = Commit {
            run: Arc::clone(&self.run),
            expected_version: Some(self.stored_version),
            events: events.clone(),
            stall,
        };
        self.stored_version = self.run.version;
        self.next_seq += events.len() as u64;
        (commit, events)
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
        let (commit, events) = self.take_commit();
        let outbox = self.session.as_ref().map(|session| {
            let mut released = std::mem::take(&mut self.deferred);
            released.extend(answers);
            session.outbox.begin_commit(released);
            Arc::clone(&session.outbox)
        });
        self.deferred.clear();
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
