//! The event journal: where events land when they are committed, and how they move into
//! the indexed log later, run by run.
//!
//! Reading a run's log needs the `(run_no, seq)` index of `events`, but with a thousand
//! runs interleaved every appended event lands on its own leaf page of that index, so each
//! commit wrote a whole 4 KiB page to the WAL for a 200-byte row (measured on a 2-core machine: it
//! held the writer to ~40k commits/s). So a commit appends its events to `event_journal`,
//! a rowid table without an index, where consecutive rows share the last page. The writer
//! remembers the journal's rows by run and, a slice per group, moves them into `events`
//! sorted by run, so one index leaf takes all of a run's rows of a segment at once.
//!
//! The journal is split in segments: the hot one takes appends; once it holds
//! `segment_rows` rows it is sealed, and its rows move over the next groups (each group
//! moves about twice what it appended, so the moving keeps up without ever stalling the
//! writer for a whole segment). When a sealed segment has moved, range deletes of the
//! same slice size drop its rows from the journal. Until then a moved row is in both tables with the same
//! values; readers merge the two by `seq`. At open, whatever the journal still holds (a
//! crash, a shutdown) is moved in one transaction before anything else runs.

use std::collections::BTreeMap;
use std::mem;

use super::encode::EncodedEvent;

/// The rows of one segment, by run, each run's in sequence order.
#[derive(Default)]
struct Segment {
    runs: BTreeMap<i64, Vec<EncodedEvent>>,
    rows: usize,
    /// The smallest journal rowid in the segment not yet deleted (0: none appended yet).
    first_id: i64,
    /// The largest journal rowid in the segment: a sealed segment is deleted up to it.
    last_id: i64,
}

/// What the writer remembers of the journal. Changed only after the transaction that wrote
/// the rows (or moved them) has committed, so it always describes committed rows.
pub(super) struct Journal {
    /// Rows per segment before it is sealed.
    segment_rows: usize,
    /// Takes the appends.
    hot: Segment,
    /// The segment being moved: the rows it still holds have not moved yet.
    sealed: Option<Segment>,
}

/// The journal's part of one group transaction.
pub(super) enum Move {
    /// Nothing to do.
    Nothing,
    /// Copy these runs' rows into `events`.
    Rows(Vec<(i64, Vec<EncodedEvent>)>),
    /// Every row of the sealed segment has moved: delete journal rows up to this rowid
    /// (a slice of the segment, or the rest of it).
    Truncate(i64),
}

/// Each group moves (or deletes) at least this many rows while a sealed segment has some,
/// so that a trickle of appends still empties it. Small, because at low load it is what a
/// one-commit group pays on top of its own write.
const MIN_MOVE: usize = 32;

impl Journal {
    /// An empty journal (the store empties the table at open).
    pub(super) fn new(segment_rows: usize) -> Journal {
        Journal {
            segment_rows: segment_rows.max(1),
            hot: Segment::default(),
            sealed: None,
        }
    }

    /// The last sequence number of a run's rows still in the journal.
    pub(super) fn last_seq(&self, run_no: i64) -> Option<u64> {
        let newest_first = [Some(&self.hot), self.sealed.as_ref()];
        newest_first
            .into_iter()
            .flatten()
            .find_map(|segment| segment.runs.get(&run_no)?.last().map(|row| row.seq))
    }

    /// A run's rows still in the journal, newest first.
    pub(super) fn rows_newest_first(&self, run_no: i64) -> impl Iterator<Item = &EncodedEvent> {
        let newest_first = [Some(&self.hot), self.sealed.as_ref()];
        newest_first
            .into_iter()
            .flatten()
            .filter_map(move |segment| segment.runs.get(&run_no))
            .flat_map(|rows| rows.iter().rev())
    }

    /// Records rows a committed group appended, with the smallest and largest rowid it
    /// wrote.
    pub(super) fn appended(
        &mut self,
        runs: Vec<(i64, Vec<EncodedEvent>)>,
        first_id: i64,
        last_id: i64,
    ) {
        for (run_no, rows) in runs {
            self.hot.rows += rows.len();
            self.hot.runs.entry(run_no).or_default().extend(rows);
        }
        if self.hot.first_id == 0 {
            self.hot.first_id = first_id;
        }
        self.hot.last_id = self.hot.last_id.max(last_id);
        self.seal_if_full();
    }

    /// Takes the next slice of work: whole runs of the sealed segment, about twice as many
    /// rows as the group `appended`, or the final truncate.
    pub(super) fn plan(&mut self, appended: usize) -> Move {
        let Some(sealed) = &mut self.sealed else {
            return Move::Nothing;
        };
        let budget = appended.saturating_mul(2).max(MIN_MOVE);
        if sealed.runs.is_empty() {
            let slice_end = sealed
                .first_id
                .saturating_add(i64::try_from(budget).unwrap_or(i64::MAX) - 1);
            return Move::Truncate(slice_end.min(sealed.last_id));
        }
        let mut taken = Vec::new();
        let mut rows = 0;
        while rows < budget {
            let Some((run_no, run_rows)) = sealed.runs.pop_first() else {
                break;
            };
            rows += run_rows.len();
            taken.push((run_no, run_rows));
        }
        sealed.rows -= rows;
        Move::Rows(taken)
    }

    /// Settles a planned move once its transaction has ended: a committed move is done,
    /// one that was rolled back is planned again later.
    pub(super) fn settle(&mut self, planned: Move, committed: bool) {
        match planned {
            Move::Nothing => {}
            Move::Rows(runs) => {
                if !committed {
                    if let Some(sealed) = &mut self.sealed {
                        for (run_no, rows) in runs {
                            sealed.rows += rows.len();
                            sealed.runs.insert(run_no, rows);
                        }
                    }
                }
            }
            Move::Truncate(upto) => {
                if let (true, Some(sealed)) = (committed, &mut self.sealed) {
                    if upto >= sealed.last_id {
                        self.sealed = None;
                        self.seal_if_full();
                    } else {
                        sealed.first_id = upto + 1;
                    }
                }
            }
        }
    }

    /// Whether the journal holds unmoved rows of a run.
    pub(super) fn holds(&self, run_no: i64) -> bool {
        [Some(&self.hot), self.sealed.as_ref()]
            .into_iter()
            .flatten()
            .any(|segment| segment.runs.contains_key(&run_no))
    }

    /// Forgets the unmoved rows of runs that were deleted (retention), once the deletion
    /// has committed: they must never move into the log. The rowid ranges stay as they
    /// are; a range delete of the segment then finds fewer rows.
    pub(super) fn forget(&mut self, run_nos: &[i64]) {
        for segment in [Some(&mut self.hot), self.sealed.as_mut()]
            .into_iter()
            .flatten()
        {
            for run_no in run_nos {
                if let Some(rows) = segment.runs.remove(run_no) {
                    segment.rows -= rows.len();
                }
            }
        }
    }

    /// Rows in the journal that have not moved yet.
    #[cfg(test)]
    fn unmoved(&self) -> usize {
        self.hot.rows + self.sealed.as_ref().map_or(0, |s| s.rows)
    }

    fn seal_if_full(&mut self) {
        if self.sealed.is_none() && self.hot.rows >= self.segment_rows {
            self.sealed = Some(mem::take(&mut self.hot));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(seqs: std::ops::RangeInclusive<u64>) -> Vec<EncodedEvent> {
        seqs.map(|seq| EncodedEvent {
            seq,
            kind: "k".into(),
            at: 0,
            attributes: "{}".into(),
            progress: None,
        })
        .collect()
    }

    fn moved_runs(planned: &Move) -> Vec<i64> {
        match planned {
            Move::Rows(runs) => runs.iter().map(|(run_no, _)| *run_no).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn a_full_segment_moves_run_by_run_then_truncates() {
        let mut journal = Journal::new(4);
        journal.appended(vec![(1, rows(1..=2)), (2, rows(1..=1))], 1, 3);
        assert!(matches!(journal.plan(0), Move::Nothing), "not full yet");
        journal.appended(vec![(1, rows(3..=3))], 4, 4);
        assert_eq!(journal.last_seq(1), Some(3));
        assert_eq!(journal.unmoved(), 4);

        // Sealed: newer appends go to the hot segment; last_seq prefers them.
        journal.appended(vec![(1, rows(4..=4))], 5, 5);
        assert_eq!(journal.last_seq(1), Some(4));
        assert_eq!(journal.last_seq(2), Some(1));
        assert_eq!(journal.last_seq(3), None);

        let planned = journal.plan(0);
        assert_eq!(moved_runs(&planned), vec![1, 2]);
        journal.settle(planned, false);
        assert_eq!(journal.unmoved(), 5, "a rolled-back move is planned again");
        let planned = journal.plan(0);
        assert_eq!(moved_runs(&planned), vec![1, 2]);
        journal.settle(planned, true);
        assert_eq!(
            journal.last_seq(2),
            None,
            "moved rows are the index's business"
        );
        assert_eq!(journal.unmoved(), 1);

        let planned = journal.plan(0);
        assert!(matches!(planned, Move::Truncate(4)));
        journal.settle(planned, true);
        assert!(matches!(journal.plan(0), Move::Nothing));
        assert_eq!(journal.last_seq(1), Some(4));
    }

    #[test]
    fn forgotten_runs_never_move() {
        let mut journal = Journal::new(3);
        journal.appended(vec![(1, rows(1..=2)), (2, rows(1..=1))], 1, 3);
        journal.appended(vec![(2, rows(2..=2)), (3, rows(1..=1))], 4, 5);
        assert!(journal.holds(2));
        journal.forget(&[2, 9]);
        assert!(!journal.holds(2));
        assert_eq!(
            journal.unmoved(),
            3,
            "run 1's two rows, sealed; run 3's, hot"
        );
        let planned = journal.plan(0);
        assert_eq!(moved_runs(&planned), vec![1]);
        journal.settle(planned, true);
        assert!(matches!(journal.plan(0), Move::Truncate(3)));
        assert_eq!(journal.last_seq(3), Some(1));
    }

    #[test]
    fn a_move_takes_whole_runs_up_to_twice_the_appends() {
        let mut journal = Journal::new(1);
        let runs = (0..1000).map(|run_no| (run_no, rows(1..=1))).collect();
        journal.appended(runs, 1, 1000);
        let planned = journal.plan(300);
        assert_eq!(moved_runs(&planned).len(), 600);
        journal.settle(planned, true);
        let planned = journal.plan(0);
        assert_eq!(moved_runs(&planned).len(), MIN_MOVE);
        journal.settle(planned, true);
        let planned = journal.plan(200);
        assert_eq!(moved_runs(&planned).len(), 1000 - 600 - MIN_MOVE);
        journal.settle(planned, true);

        // The moved segment is deleted in slices of the same size.
        let planned = journal.plan(100);
        assert!(matches!(planned, Move::Truncate(200)));
        journal.settle(planned, false);
        let planned = journal.plan(100);
        assert!(
            matches!(planned, Move::Truncate(200)),
            "a rolled-back slice repeats"
        );
        journal.settle(planned, true);
        let planned = journal.plan(1000);
        assert!(matches!(planned, Move::Truncate(1000)));
        journal.settle(planned, true);
        assert!(matches!(journal.plan(1000), Move::Nothing));
    }
}
