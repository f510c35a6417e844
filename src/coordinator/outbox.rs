//! What goes to one worker, in order, and never ahead of its commit.
//!
//! The actor answers most tool calls and results without waiting for their commit: it hands
//! the store the commit and the outbox the answers, and the store's thread releases them
//! once the commit is durable (`commit_then_send`). Waking the actor after every commit
//! only to send an answer cost about a third of the server's CPU per round trip
//! (BENCHMARKS.md). Whatever the actor sends while such commits are in flight waits behind
//! them, so the worker sees messages in the order the actor produced them, and never one
//! about a change that is not durable. The actor's side of it (`push`, `commit_then_send`,
//! the slow-worker cut-off) is in `change.rs`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::{mpsc, Notify};

use super::messages::{CloseReason, Push};
use crate::store::StoreError;

/// What the store's thread tells the actor about the commits it issued without waiting.
#[derive(Default)]
pub(super) struct Attention {
    /// Woken when `failure` is set or the session's outbox cut its worker off.
    pub notify: Notify,
    /// A commit issued without waiting failed: the actor's state is ahead of the store.
    failure: Mutex<Option<StoreError>>,
    /// Commits issued without waiting and not yet completed.
    in_flight: AtomicUsize,
    /// Woken when `in_flight` drops to zero.
    settled: Notify,
}

impl Attention {
    /// A commit was issued without waiting.
    pub fn begin(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// A commit issued without waiting completed (either way).
    pub fn end(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.settled.notify_waiters();
        }
    }

    /// Resolves once every commit issued without waiting has completed.
    pub async fn settled(&self) {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            // Registered before the check, so an `end` in between is not missed.
            settled.as_mut().enable();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            settled.await;
        }
    }

    /// Records a failed commit (the first one counts) and wakes the actor.
    pub fn fail(&self, error: StoreError) {
        lock(&self.failure).get_or_insert(error);
        self.notify.notify_one();
    }

    /// The failed commit, if one did.
    pub fn take_failure(&self) -> Option<StoreError> {
        lock(&self.failure).take()
    }
}

/// The outbox of one session.
pub(super) struct Outbox {
    state: Mutex<State>,
}

struct State {
    outbound: Outbound,
    /// One entry per commit in flight, oldest first: what is sent once it is durable,
    /// followed by whatever the actor sent after issuing it.
    waiting: VecDeque<Vec<Push>>,
    /// Set when the worker was cut off: nothing more is sent.
    cut_off: Option<CutOff>,
    /// Set when a commit failed: until the actor stops, nothing but the `Close` is sent (a
    /// repeated result's ack, say, would claim a result the log does not hold).
    failed: bool,
    /// Whether the actor has been told about `cut_off`.
    reported: bool,
}

/// The worker's queue was full, or its stream gone, when something had to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CutOff {
    /// The stream was gone (rather than not read).
    pub stream_closed: bool,
}

impl Outbox {
    pub fn new(outbound: Outbound) -> Outbox {
        Outbox {
            state: Mutex::new(State {
                outbound,
                waiting: VecDeque::new(),
                cut_off: None,
                failed: false,
                reported: false,
            }),
        }
    }

    /// Sends now, or after the commits in flight. `Err` when this push cut the worker off;
    /// the caller is the actor, which then handles it at once.
    pub fn push(&self, push: Push) -> Result<(), CutOff> {
        let mut state = lock(&self.state);
        if state.cut_off.is_some() || state.failed {
            return Ok(());
        }
        if let Some(last) = state.waiting.back_mut() {
            last.push(push);
            return Ok(());
        }
        state.send(push);
        match state.cut_off {
            Some(cut_off) => {
                state.reported = true;
                Err(cut_off)
            }
            None => Ok(()),
        }
    }

    /// A commit is about to be handed to the store; `answers` go out once it is durable.
    /// After a cut-off or a failed commit they never will.
    pub fn begin_commit(&self, answers: Vec<Push>) {
        let mut state = lock(&self.state);
        if state.cut_off.is_none() && !state.failed {
            state.waiting.push_back(answers);
        }
    }

    /// The oldest commit in flight is durable (or failed: then nothing it or anything after
    /// it would have released is sent). Called on the store's thread, in commit order.
    /// Returns whether the worker is cut off and the actor not yet told, so the caller
    /// wakes it.
    #[must_use]
    pub fn commit_done(&self, committed: bool) -> bool {
        let mut state = lock(&self.state);
        if !committed {
            state.failed = true;
            state.waiting.clear();
            return false;
        }
        // After a failure (a later commit can fail first, refused before it was queued)
        // the entries no longer line up with the commits: nothing more is released.
        if state.failed {
            return false;
        }
        if let Some(answers) = state.waiting.pop_front() {
            for push in answers {
                if state.cut_off.is_some() {
                    break;
                }
                state.send(push);
            }
        }
        state.cut_off.is_some() && !state.reported
    }

    /// The cut-off the actor has not been told about yet.
    pub fn take_cut_off(&self) -> Option<CutOff> {
        let mut state = lock(&self.state);
        let cut_off = state.cut_off?;
        if state.reported {
            return None;
        }
        state.reported = true;
        Some(cut_off)
    }

    /// Ends the stream with `reason`, after whatever is still waiting for its commit (at
    /// once after a failed commit: nothing waiting will be released).
    pub fn close(&self, reason: CloseReason) {
        let mut state = lock(&self.state);
        if state.cut_off.is_some() {
            return;
        }
        if state.failed {
            state.waiting.clear();
        }
        match state.waiting.back_mut() {
            Some(last) => last.push(Push::Close(reason)),
            None => {
                let _ = state.outbound.try_send(Push::Close(reason));
            }
        }
    }
}

/// Pushes that may wait unread for one worker; one more cuts it off. Each answer waits for
/// a message from the worker or an operator, so a worker that reads its stream has a
/// handful at most.
pub const MAX_UNREAD: usize = 1024;

/// Where a session's pushes go, to its stream.
pub type Outbound = mpsc::Sender<Push>;

/// The channel a session's pushes go through: `MAX_UNREAD` for pushes, and one slot more
/// for the `Close` that tells a slow worker why its stream ended.
pub fn outbound_channel() -> (Outbound, mpsc::Receiver<Push>) {
    mpsc::channel(MAX_UNREAD + 1)
}

impl State {
    /// Sends one push. The last slot of the queue is kept for the `Close` that tells a slow
    /// worker why its stream ended; a full queue or a gone stream cuts the worker off.
    fn send(&mut self, push: Push) {
        if matches!(push, Push::Close(_)) {
            let _ = self.outbound.try_send(push);
            return;
        }
        if self.outbound.capacity() > 1 && self.outbound.try_send(push).is_ok() {
            return;
        }
        let _ = self.outbound.try_send(Push::Close(CloseReason::TooSlow));
        self.cut_off = Some(CutOff {
            stream_closed: self.outbound.is_closed(),
        });
        self.waiting.clear();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::domain::Status;

    fn heartbeat() -> Push {
        Push::Heartbeat(Status::Running)
    }

    fn drain(rx: &mut mpsc::Receiver<Push>) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(push) = rx.try_recv() {
            seen.push(match push {
                Push::Heartbeat(_) => "heartbeat".to_string(),
                Push::Close(reason) => format!("close {reason:?}"),
                other => format!("{other:?}"),
            });
        }
        seen
    }

    #[test]
    fn answers_wait_for_their_commit_and_what_follows_waits_behind_them() {
        let (tx, mut rx) = mpsc::channel(16);
        let outbox = Outbox::new(tx);
        outbox.begin_commit(vec![heartbeat()]);
        assert_eq!(outbox.push(heartbeat()), Ok(()));
        outbox.close(CloseReason::Shutdown);
        assert!(
            drain(&mut rx).is_empty(),
            "sent before the commit was durable"
        );
        assert!(!outbox.commit_done(true));
        assert_eq!(drain(&mut rx), ["heartbeat", "heartbeat", "close Shutdown"]);
    }

    #[test]
    fn a_look_before_any_cut_off_does_not_hide_a_later_one() {
        // A stale wake-up (a cut-off of a session since replaced) finds nothing here...
        let (tx, _rx) = mpsc::channel(2);
        let outbox = Outbox::new(tx);
        assert_eq!(outbox.take_cut_off(), None);
        // ...and this session's own cut-off, while answers are released, is still reported.
        outbox.begin_commit(vec![heartbeat(), heartbeat(), heartbeat()]);
        assert!(outbox.commit_done(true), "the actor must be woken");
        assert_eq!(
            outbox.take_cut_off(),
            Some(CutOff {
                stream_closed: false
            })
        );
        assert_eq!(outbox.take_cut_off(), None, "reported once");
    }

    #[test]
    fn a_worker_is_cut_off_at_the_push_after_max_unread_and_told_why() {
        let (tx, mut rx) = outbound_channel();
        let outbox = Outbox::new(tx);
        for n in 0..MAX_UNREAD {
            assert_eq!(outbox.push(heartbeat()), Ok(()), "push {n}");
        }
        assert_eq!(outbox.take_cut_off(), None);
        assert!(
            outbox.push(heartbeat()).is_err(),
            "one more is one too many"
        );
        let seen = drain(&mut rx);
        assert_eq!(seen.len(), MAX_UNREAD + 1);
        assert_eq!(seen.last().map(String::as_str), Some("close TooSlow"));
    }

    #[test]
    fn after_a_failed_commit_only_the_close_goes_out() {
        let (tx, mut rx) = mpsc::channel(16);
        let outbox = Outbox::new(tx);
        outbox.begin_commit(vec![heartbeat()]);
        // A later commit refused before it was queued fails first.
        outbox.begin_commit(vec![heartbeat()]);
        assert!(!outbox.commit_done(false));
        assert!(!outbox.commit_done(true), "the earlier commit's success");
        outbox.begin_commit(vec![heartbeat()]);
        assert_eq!(outbox.push(heartbeat()), Ok(()));
        outbox.close(CloseReason::Internal("disk full".into()));
        assert_eq!(drain(&mut rx), ["close Internal(\"disk full\")"]);
    }
}
