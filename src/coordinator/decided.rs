//! The calls a run has decided, held in bounded memory: the most recent ones whole, the
//! older ones only as members of a Bloom filter, and the store (which has every decision
//! in the log) asked about an older one when the filter says it may be one.
//!
//! A run's worker may run for days. Keeping every decided call in memory made the server
//! grow with history: about 450 bytes per decision while the run lived (1.77 GB after 4 M
//! decisions of the bench's load). Only recent calls are ever looked up in practice: a
//! result follows its decision closely, and a re-attached worker repeats only what was
//! unanswered when its stream broke. Calls that wait for an operator are never moved out,
//! so every pending ask is in memory for its deadline and for `ListPendingAsks`.
//!
//! An id the filter has never seen is certainly new (a Bloom filter has no false
//! negatives), so a new call costs no store read. A false positive costs one store lookup
//! and finds nothing; at the filter's capacity that happens for fewer than 1 in 1,000 new
//! calls, and more often beyond it (a run past about 100,000 calls).

use std::collections::{HashMap, VecDeque};

use chrono::{DateTime, Utc};
use sbbf_rs_safe::Filter;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::domain::Decision;

/// What the actor knows about one call_id.
#[derive(Debug, Clone)]
pub(super) struct CallState {
    /// The tool, for the stall tracker when the result comes.
    pub tool: String,
    /// `ToolCallRequest::fingerprint` of the call: a repeat must match it. The call's text
    /// (its input can be 64 KiB) is in the log, where operators read pending asks.
    pub fingerprint: [u8; 32],
    /// The current decision: ask while pending, else final.
    pub decision: Decision,
    /// Why, as sent to the worker.
    pub reason: String,
    /// Set while the call waits for an operator.
    pub ask: Option<AskWait>,
    /// Whether a result was recorded (a repeat is acknowledged, not counted).
    pub result_recorded: bool,
}

/// A call waiting for an operator's answer.
#[derive(Debug, Clone)]
pub(super) struct AskWait {
    /// When it becomes a deny; `None` when the profile lets asks wait forever.
    pub deadline: Option<DateTime<Utc>>,
}

/// Calls held whole: far more than a worker has in flight (parallel calls, unacknowledged
/// results) when its stream breaks.
pub(super) const RECENT_CALLS: usize = 256;

/// Older call ids the filter is sized for (128 KiB at `BITS_PER_OLDER_CALL`, allocated only
/// once a run has decided more than `RECENT_CALLS` calls).
const OLDER_CALLS: usize = 65_536;
/// 16 bits per id: about 0.1 % false positives at `OLDER_CALLS` for a split-block filter.
const BITS_PER_OLDER_CALL: usize = 16;

/// Where a call id stands.
pub(super) enum Lookup {
    /// A recent call.
    Recent,
    /// Possibly a call decided long ago: only the store can tell.
    MaybeOlder,
    /// Never decided in this run.
    New,
}

/// A run's decided calls; see the module doc.
#[derive(Default)]
pub(super) struct DecidedCalls {
    /// The recent calls, by id.
    recent: HashMap<String, CallState>,
    /// `recent`'s ids, oldest first: the next to move out is at the front.
    order: VecDeque<String>,
    /// The ids moved out of `recent`; `None` until the first one is.
    older: Option<OlderCalls>,
}

/// A split-block Bloom filter of call ids: each id sets and tests bits of one 32-byte
/// block, so a decision costs one cache miss, not one per hash. (A classic filter cost
/// about ten misses per decision, 4 points of the bench's ratio with 200 runs' filters
/// competing for the cache.)
struct OlderCalls {
    filter: Filter,
    /// Random, so a worker cannot choose ids that collide on purpose to make every new
    /// call cost a store lookup.
    seed: u64,
}

impl OlderCalls {
    fn new() -> OlderCalls {
        let mut seed = [0u8; 8];
        // Without randomness the hash key stays fixed: still correct, only predictable.
        let _ = getrandom::fill(&mut seed);
        OlderCalls {
            filter: Filter::new(BITS_PER_OLDER_CALL, OLDER_CALLS),
            seed: u64::from_le_bytes(seed),
        }
    }

    fn hash(&self, call_id: &str) -> u64 {
        xxh3_64_with_seed(call_id.as_bytes(), self.seed)
    }

    fn insert(&mut self, call_id: &str) {
        let hash = self.hash(call_id);
        self.filter.insert_hash(hash);
    }

    fn may_contain(&self, call_id: &str) -> bool {
        self.filter.contains_hash(self.hash(call_id))
    }
}

impl DecidedCalls {
    /// Where `call_id` stands.
    pub fn lookup(&self, call_id: &str) -> Lookup {
        if self.recent.contains_key(call_id) {
            Lookup::Recent
        } else if self.older.as_ref().is_some_and(|f| f.may_contain(call_id)) {
            Lookup::MaybeOlder
        } else {
            Lookup::New
        }
    }

    /// A recent call.
    pub fn get(&self, call_id: &str) -> Option<&CallState> {
        self.recent.get(call_id)
    }

    /// A recent call, to change it.
    pub fn get_mut(&mut self, call_id: &str) -> Option<&mut CallState> {
        self.recent.get_mut(call_id)
    }

    /// The recent calls (every pending ask among them).
    pub fn iter(&self) -> impl Iterator<Item = (&String, &CallState)> {
        self.recent.iter()
    }

    /// Holds a call as recent: a new decision, or an older call read back from the store.
    /// The oldest recent calls that do not wait for an operator move out.
    pub fn insert(&mut self, call_id: String, call: CallState) {
        if self.recent.insert(call_id.clone(), call).is_none() {
            self.order.push_back(call_id);
        }
        self.move_out_oldest();
    }

    fn move_out_oldest(&mut self) {
        // Each id is looked at once at most: when every recent call waits for an operator,
        // they all stay.
        let mut looked_at = 0;
        while self.recent.len() > RECENT_CALLS && looked_at < self.order.len() {
            looked_at += 1;
            let Some(call_id) = self.order.pop_front() else {
                break;
            };
            if self.recent.get(&call_id).is_some_and(|c| c.ask.is_some()) {
                self.order.push_back(call_id);
                continue;
            }
            self.recent.remove(&call_id);
            self.older
                .get_or_insert_with(OlderCalls::new)
                .insert(&call_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(ask: bool) -> CallState {
        CallState {
            tool: "Bash".into(),
            fingerprint: [0; 32],
            decision: if ask { Decision::Ask } else { Decision::Allow },
            reason: String::new(),
            ask: ask.then_some(AskWait { deadline: None }),
            result_recorded: false,
        }
    }

    #[test]
    fn old_calls_move_out_and_stay_known_as_possibly_decided() {
        let mut calls = DecidedCalls::default();
        for i in 0..RECENT_CALLS + 10 {
            calls.insert(format!("c{i}"), call(false));
        }
        assert_eq!(calls.recent.len(), RECENT_CALLS);
        assert!(matches!(calls.lookup("c0"), Lookup::MaybeOlder));
        assert!(matches!(calls.lookup("c9"), Lookup::MaybeOlder));
        assert!(matches!(calls.lookup("c10"), Lookup::Recent));
        assert!(matches!(calls.lookup("never"), Lookup::New));
    }

    #[test]
    fn pending_asks_never_move_out() {
        let mut calls = DecidedCalls::default();
        calls.insert("asked".into(), call(true));
        for i in 0..RECENT_CALLS * 3 {
            calls.insert(format!("c{i}"), call(false));
        }
        assert!(matches!(calls.lookup("asked"), Lookup::Recent));
        assert_eq!(calls.recent.len(), RECENT_CALLS);
        // All waiting: nothing can move out, and inserting still terminates.
        let mut asks = DecidedCalls::default();
        for i in 0..RECENT_CALLS + 5 {
            asks.insert(format!("a{i}"), call(true));
        }
        assert_eq!(asks.recent.len(), RECENT_CALLS + 5);
        assert!(asks.older.is_none());
    }

    #[test]
    fn without_moving_out_there_is_no_filter() {
        let mut calls = DecidedCalls::default();
        for i in 0..RECENT_CALLS {
            calls.insert(format!("c{i}"), call(false));
        }
        assert!(calls.older.is_none());
        assert!(matches!(calls.lookup("c300"), Lookup::New));
    }
}
