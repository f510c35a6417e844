//! CPU time per thread group, from `/proc/self/task/*/schedstat`.
//!
//! On a shared machine the round trips per second swing with whatever else runs, but the
//! CPU one round trip costs moves much less: other jobs take cores away, they do not make
//! our code run more instructions. So each phase also reports CPU time per round trip,
//! split by who spent it (server runtime, store threads, client), which is what A/B
//! comparisons of a change should look at.

use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

/// The thread groups of the bench process, by thread name prefix.
const GROUPS: [(&str, &str); 3] = [
    ("bench-server", "server"),
    ("rp-store", "store"),
    ("bench-client", "client"),
];

/// Run time per thread group since the thread started; threads that exit in between are
/// not counted (the bench's long-lived threads do not).
#[derive(Clone, Default)]
pub struct CpuSnapshot {
    by_group: BTreeMap<&'static str, Duration>,
}

impl CpuSnapshot {
    /// Reads every thread of this process. A kernel without schedstat gives an empty
    /// snapshot (and the report says nothing about CPU).
    pub fn take() -> Self {
        let mut by_group: BTreeMap<&'static str, Duration> = BTreeMap::new();
        let Ok(tasks) = fs::read_dir("/proc/self/task") else {
            return Self::default();
        };
        for task in tasks.flatten() {
            let path = task.path();
            let (Ok(comm), Ok(schedstat)) = (
                fs::read_to_string(path.join("comm")),
                fs::read_to_string(path.join("schedstat")),
            ) else {
                continue;
            };
            let Some(ns) = schedstat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
            else {
                continue;
            };
            let group = GROUPS
                .iter()
                .find(|(prefix, _)| comm.trim().starts_with(prefix))
                .map_or("other", |(_, name)| *name);
            *by_group.entry(group).or_default() += Duration::from_nanos(ns);
        }
        Self { by_group }
    }

    /// CPU spent by each group between `earlier` and `self`.
    pub fn since(&self, earlier: &CpuSnapshot) -> CpuSplit {
        let by_group = self
            .by_group
            .iter()
            .map(|(group, now)| {
                let before = earlier.by_group.get(group).copied().unwrap_or_default();
                (*group, now.saturating_sub(before))
            })
            .collect();
        CpuSplit { by_group }
    }
}

/// CPU time spent by each thread group during a phase.
#[derive(Clone, Default)]
pub struct CpuSplit {
    pub by_group: BTreeMap<&'static str, Duration>,
}

impl CpuSplit {
    /// Microseconds of CPU per round trip for one group (0 when it spent none).
    pub fn micros_per(&self, group: &str, round_trips: u64) -> f64 {
        let spent = self.by_group.get(group).copied().unwrap_or_default();
        spent.as_secs_f64() * 1e6 / round_trips.max(1) as f64
    }

    /// Microseconds of CPU per round trip, all groups together.
    pub fn total_micros_per(&self, round_trips: u64) -> f64 {
        let spent: Duration = self.by_group.values().sum();
        spent.as_secs_f64() * 1e6 / round_trips.max(1) as f64
    }

    /// Cores kept busy over `elapsed`, all groups together: how close a phase came to
    /// the machine's limit (2 on the machine of BENCHMARKS.md), where waiting for a core
    /// starts to show in the latency.
    pub fn cores_busy(&self, elapsed: Duration) -> f64 {
        let spent: Duration = self.by_group.values().sum();
        spent.as_secs_f64() / elapsed.as_secs_f64().max(1e-9)
    }

    /// Whether anything was measured (schedstat present).
    pub fn is_measured(&self) -> bool {
        !self.by_group.is_empty()
    }
}
