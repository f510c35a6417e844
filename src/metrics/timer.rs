//! The decision latency of one worker session, measured at the gRPC edge.
//!
//! The request is stamped when the run's actor reads it off the session's stream, and the
//! stamp is taken back when the answer for the same call is handed to the transport. Both
//! ends live in `grpc/worker_service.rs`, outside the coordinator: the commit, the judge
//! and the outbox all fall in between without any of them knowing.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use xxhash_rust::xxh3::xxh3_64;

/// Requests stamped and not yet answered that one session keeps; past it the oldest stamp
/// is forgotten (its answer then goes unmeasured). A worker that reads its stream has a
/// handful outstanding; this only bounds one that does not.
const MAX_OUTSTANDING: usize = 1024;

/// The stamps of a session's unanswered tool calls, oldest first. Keyed by a hash of the
/// call id so that stamping allocates nothing once the queue has grown to its working size.
#[derive(Default)]
pub struct DecisionTimer {
    stamps: Mutex<VecDeque<(u64, Instant)>>,
}

impl DecisionTimer {
    /// A tool call was read off the stream now.
    pub fn received(&self, call_id: &str) {
        let mut stamps = self.lock();
        if stamps.len() >= MAX_OUTSTANDING {
            stamps.pop_front();
        }
        stamps.push_back((xxh3_64(call_id.as_bytes()), Instant::now()));
    }

    /// The answer to `call_id` is being sent: how long since the call was read, when it was
    /// stamped. Answers come in the order of their calls, so the match is almost always
    /// the first stamp; an answer nothing was stamped for (an operator's final answer to
    /// an ask) finds none.
    pub fn answered(&self, call_id: &str) -> Option<Duration> {
        let key = xxh3_64(call_id.as_bytes());
        let mut stamps = self.lock();
        let index = stamps.iter().position(|(stamp, _)| *stamp == key)?;
        let (_, at) = stamps.remove(index)?;
        Some(at.elapsed())
    }

    /// A call that gets no answer (it was refused with an in-stream error) drops its stamp.
    pub fn forget(&self, call_id: &str) {
        let key = xxh3_64(call_id.as_bytes());
        let mut stamps = self.lock();
        if let Some(index) = stamps.iter().position(|(stamp, _)| *stamp == key) {
            stamps.remove(index);
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<(u64, Instant)>> {
        self.stamps.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_finds_its_own_stamp_and_only_once() {
        let timer = DecisionTimer::default();
        timer.received("a");
        timer.received("b");
        assert!(timer.answered("b").is_some());
        assert!(
            timer.answered("b").is_none(),
            "a second answer is not measured"
        );
        timer.forget("a");
        assert!(timer.answered("a").is_none());
    }

    #[test]
    fn the_oldest_stamp_goes_when_too_many_wait() {
        let timer = DecisionTimer::default();
        for n in 0..=MAX_OUTSTANDING {
            timer.received(&n.to_string());
        }
        assert!(timer.answered("0").is_none());
        assert!(timer.answered(&MAX_OUTSTANDING.to_string()).is_some());
    }
}
