//! Where a commit's outcome goes, for the stores that write on a task or thread of their
//! own: a committer waiting on a future (`RunStore::commit`) or a callback
//! (`RunStore::commit_then`).

use tokio::sync::oneshot;

use super::{CommitDone, StoreError};

/// Dropped unanswered (the writer stopped first), it answers `Closed`: a waiter sees its
/// channel close, a callback is called with it.
pub(crate) struct Reply(Option<ReplyTo>);

enum ReplyTo {
    /// A committer waiting on a future.
    Wait(oneshot::Sender<Result<(), StoreError>>),
    /// A callback, run on the writer (`RunStore::commit_then`).
    Then(CommitDone),
}

impl Reply {
    pub(crate) fn wait(waiter: oneshot::Sender<Result<(), StoreError>>) -> Reply {
        Reply(Some(ReplyTo::Wait(waiter)))
    }

    pub(crate) fn then(done: CommitDone) -> Reply {
        Reply(Some(ReplyTo::Then(done)))
    }

    pub(crate) fn send(mut self, outcome: Result<(), StoreError>) {
        match self.0.take() {
            // A waiter that gave up is no reason to stop.
            Some(ReplyTo::Wait(waiter)) => {
                let _ = waiter.send(outcome);
            }
            Some(ReplyTo::Then(done)) => done(outcome),
            None => {}
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(ReplyTo::Then(done)) = self.0.take() {
            done(Err(StoreError::Closed));
        }
    }
}
