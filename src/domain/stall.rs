//! Detects an agent that keeps working without changing anything.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use xxhash_rust::xxh3::xxh3_64;

/// Threshold used when the configured one is zero or negative.
pub const DEFAULT_STALL_THRESHOLD: i32 = 5;

/// How many recent output hashes a step is compared against.
const RING_SIZE: usize = 3;

/// The tools whose successful, new output counts as progress, in any ASCII case (as the
/// policy compares tool names).
const PROGRESS_TOOLS: [&str; 3] = ["Edit", "Write", "Bash"];

/// Counts consecutive steps without progress.
///
/// A step is progress when its tool is Edit, Write or Bash (any case), it succeeded, and the xxh3-64
/// hash of its output is not among the last three recorded outputs. Every step's hash is
/// recorded, progress or not. Serialisable so the store can persist it across restarts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StallTracker {
    /// Steps without progress needed to call the run stalled (always > 0).
    threshold: i32,
    /// Consecutive steps without progress so far.
    consecutive: i32,
    /// Hashes of the most recent outputs, oldest first, at most `RING_SIZE`.
    recent: VecDeque<u64>,
}

impl StallTracker {
    /// A tracker that reports a stall after `threshold` steps without progress; zero or
    /// negative means `DEFAULT_STALL_THRESHOLD`.
    pub fn new(threshold: i32) -> StallTracker {
        StallTracker {
            threshold: if threshold <= 0 {
                DEFAULT_STALL_THRESHOLD
            } else {
                threshold
            },
            consecutive: 0,
            recent: VecDeque::with_capacity(RING_SIZE),
        }
    }

    /// Records one step and returns whether the run is now stalled.
    pub fn record_step(&mut self, tool: &str, success: bool, output: &str) -> bool {
        let hash = xxh3_64(output.as_bytes());
        let progress = success
            && PROGRESS_TOOLS.iter().any(|t| t.eq_ignore_ascii_case(tool))
            && !self.recent.contains(&hash);
        if self.recent.len() == RING_SIZE {
            self.recent.pop_front();
        }
        self.recent.push_back(hash);
        if progress {
            self.consecutive = 0;
        } else {
            self.consecutive = self.consecutive.saturating_add(1);
        }
        self.is_stalled()
    }

    /// Whether the consecutive steps without progress reached the threshold.
    pub fn is_stalled(&self) -> bool {
        self.consecutive >= self.threshold
    }

    /// Forgets every recorded step.
    pub fn reset(&mut self) {
        self.consecutive = 0;
        self.recent.clear();
    }

    /// The effective threshold.
    pub fn threshold(&self) -> i32 {
        self.threshold
    }

    /// Consecutive steps without progress so far.
    pub fn consecutive(&self) -> i32 {
        self.consecutive
    }
}
