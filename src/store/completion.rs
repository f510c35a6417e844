//! A finished run's completion time as the stores compare it: as text.
//!
//! Neither store has a column for `completed_at`; it is in run_json, RFC 3339 as serde
//! writes it: 0, 3, 6 or 9 fractional digits and a `Z`. Both index that text among
//! terminal runs (SQLite `runs_finished`, PostgreSQL `runs_finished` with `COLLATE "C"`),
//! and retention compares it with a cutoff written with 9 digits. Then `completed_at <
//! cutoff` as text is never true for a run that completed at or after the cutoff: up to
//! the seconds both texts are fixed-width and compare as times; where a shorter fraction
//! ends, its `Z` sorts above the cutoff's digit. A run completed less than a second before
//! the cutoff may wait for the next pass, never the other way round. (A column would be
//! exact, but would change the commit path of both stores for a background job.)

use chrono::{DateTime, SecondsFormat, Utc};

/// The cutoff as text that compares safely with a stored `completed_at` (see above).
pub(crate) fn cutoff_text(cutoff: DateTime<Utc>) -> String {
    cutoff.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

/// Whether a run that completed at `completed` is before `cutoff` as the stores compare
/// it: what `MemoryStore` uses, so that it agrees with them to the nanosecond.
pub(crate) fn completed_before(completed: DateTime<Utc>, cutoff: DateTime<Utc>) -> bool {
    // As serde writes it into run_json.
    completed.to_rfc3339_opts(SecondsFormat::AutoSi, true) < cutoff_text(cutoff)
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration, TimeZone, Utc};

    use super::{completed_before, cutoff_text};

    /// As serde writes a `completed_at`.
    fn stored(at: DateTime<Utc>) -> String {
        serde_json::to_value(at)
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Text order never says "before" for a time at or after the cutoff, whatever the
    /// number of fractional digits serde chose; it says "before" for whole seconds earlier.
    #[test]
    fn text_comparison_never_purges_a_run_at_or_after_the_cutoff() {
        let base = Utc.timestamp_opt(1_780_000_000, 0).unwrap();
        let offsets_ns = [0, 1, 999, 1_000, 120_000, 123_456, 500_000_000, 999_999_999];
        for &cut in &offsets_ns {
            let cutoff = base + Duration::nanoseconds(cut);
            for &at in &offsets_ns {
                for seconds in [-1, 0, 1] {
                    let completed = base + Duration::seconds(seconds) + Duration::nanoseconds(at);
                    let before = stored(completed) < cutoff_text(cutoff);
                    assert_eq!(completed_before(completed, cutoff), before);
                    if completed >= cutoff {
                        assert!(!before, "{completed} vs cutoff {cutoff}");
                    }
                    if seconds < 0 {
                        assert!(before, "{completed} vs cutoff {cutoff}");
                    }
                }
            }
        }
    }
}
