//! Wall-clock time that follows tokio's clock.
//!
//! Timestamps in runs and events are wall-clock, but timers run on tokio's monotonic clock.
//! Deriving one from the other keeps them consistent, and lets tests with
//! `tokio::time::pause()` move both together.

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;

/// Maps between tokio instants and UTC timestamps.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// The wall-clock time at `base_instant`.
    base_utc: DateTime<Utc>,
    /// A tokio instant taken together with `base_utc`.
    base_instant: Instant,
}

impl Clock {
    /// A clock anchored at the present moment.
    pub fn new() -> Clock {
        Clock {
            base_utc: Utc::now(),
            base_instant: Instant::now(),
        }
    }

    /// The current time.
    pub fn now(&self) -> DateTime<Utc> {
        let elapsed = Instant::now().saturating_duration_since(self.base_instant);
        self.base_utc + TimeDelta::from_std(elapsed).unwrap_or(TimeDelta::MAX)
    }

    /// The tokio instant at which `at` is reached (now, if it has passed).
    pub fn instant_at(&self, at: DateTime<Utc>) -> Instant {
        let now = Instant::now();
        match (at - self.now()).to_std() {
            // Beyond what an `Instant` can hold: a year stands for "not in this process's
            // lifetime", and the timer is simply computed again when it fires.
            Ok(ahead) => now
                .checked_add(ahead)
                .unwrap_or_else(|| now + std::time::Duration::from_secs(365 * 24 * 3600)),
            Err(_) => now,
        }
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}
