//! Checkpoints: copying the WAL back into the database file, mostly off the writer's
//! thread. With SQLite's automatic checkpoints the commit that crosses the threshold pays
//! for the copy, which is what made p99 commit latency 12–14 ms instead of 2.4 ms at 50k rows/s
//! from 1,000 waiting producers on a 2-core machine.
//!
//! The checkpointer thread runs a passive checkpoint every `interval`. A passive
//! checkpoint never blocks the writer, and it copies every frame that was in the WAL when
//! it began; but the writer appends while it copies, and SQLite starts the WAL over only
//! when a write transaction begins with *every* frame copied. Under a steady load that
//! never happens by itself, so the WAL would grow without bound.
//!
//! Starting it over used to be a `RESTART` checkpoint from this thread. That one takes the
//! writer's lock through SQLite's busy handler, which sleeps in steps of 1, 2, 5, 10, …
//! ms while the writer keeps taking the lock back, and the writer then sleeps the same way
//! until the RESTART is done: it stalled every commit for 8–140 ms about once a second at
//! 16k round trips/s, and that was the p99 (BENCHMARKS.md). Now, once the WAL is past
//! `wal_size_limit`, this thread asks the writer itself to finish the job between two
//! groups ([`finish`]): with no other writer, its passive pass copies the few frames
//! written since this thread's last pass, and the writer's next transaction starts the WAL
//! over. No lock changes hands, nobody sleeps. What is left of the pause is the writer's
//! pass itself, 1-4 ms, because this thread syncs the database file just before (see
//! `run`).

use std::fs::File;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use super::writer::Job;

/// Runs a passive checkpoint every `interval` until `stop` fires or is dropped; hands the
/// last bit of a long WAL to the writer through `writer`.
pub(super) fn run(
    conn: Connection,
    database: Arc<File>,
    interval: Duration,
    wal_size_limit: u64,
    stop: Receiver<()>,
    writer: Sender<Job>,
) {
    let wal_size_limit = i64::try_from(wal_size_limit).unwrap_or(i64::MAX);
    let page_size: i64 = match conn.pragma_query_value(None, "page_size", |r| r.get(0)) {
        Ok(size) => size,
        Err(e) => {
            tracing::error!(error = %e, "checkpointer: cannot read page_size; not running");
            return;
        }
    };
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(interval) {
        let Some(mut last) = checkpoint(&conn) else {
            continue;
        };
        if last.frames.saturating_mul(page_size) <= wal_size_limit {
            continue;
        }
        // Each catch-up pass copies what was written during the one before, a shrinking
        // remainder, so the writer is left with little to copy while commits wait.
        let catch_up = |mut last: Pass| {
            for _ in 0..MAX_CATCH_UP_PASSES {
                let Some(next) = checkpoint(&conn) else { break };
                let newly_copied = next.copied - last.copied;
                last = next;
                if newly_copied <= WRITER_REMAINDER {
                    break;
                }
            }
            last
        };
        last = catch_up(last);
        // SQLite syncs the database file only after a pass that copied the whole WAL,
        // which under load is only ever the writer's: that pass then flushed seconds of
        // copied pages (24-41 ms measured) while every commit waited. Flushing them here
        // first leaves the writer only what the last catch-up copies. (Syncing after
        // every pass instead made p99 worse: 16-91 ms against 10-19 ms, BENCHMARKS.md.)
        if let Err(e) = database.sync_data() {
            tracing::warn!(error = %e, "checkpointer: sync the database file");
        }
        catch_up(last);
        let (done, finished) = mpsc::sync_channel(1);
        if writer.send(Job::FinishCheckpoint(done)).is_err() {
            return;
        }
        // Dropped unanswered only when the writer stops, which `stop` then says too.
        if let Ok(false) = finished.recv() {
            tracing::debug!("writer's checkpoint left frames behind (a reader holds them)");
        }
    }
}

/// The writer's part, run on its connection between two groups: a passive checkpoint of
/// what is left. Returns whether the WAL is now fully copied, which makes the writer's next
/// transaction start it over. A reader still using old frames keeps them, and the WAL
/// starts over at a later round.
pub(super) fn finish(conn: &Connection) -> bool {
    checkpoint(conn).is_some_and(|pass| pass.copied == pass.frames)
}

/// Frames the writer may be left to copy while commits wait (well under a millisecond of
/// copying at the measured rates).
const WRITER_REMAINDER: i64 = 256;

/// Catch-up passes before the writer's at most; under a write load faster than the copy
/// the remainder does not shrink, and the writer then copies what is left anyway.
const MAX_CATCH_UP_PASSES: usize = 4;

/// What one checkpoint reported.
struct Pass {
    /// Frames in the WAL.
    frames: i64,
    /// Frames copied into the database file so far.
    copied: i64,
}

/// Runs one passive checkpoint and returns what it reported, or `None` if SQLite refused
/// (logged; the next round retries).
fn checkpoint(conn: &Connection) -> Option<Pass> {
    let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    match result {
        Ok((busy, frames, copied)) => {
            tracing::trace!(busy, frames, copied, "wal checkpoint");
            Some(Pass { frames, copied })
        }
        Err(e) => {
            tracing::warn!(error = %e, "wal checkpoint failed");
            None
        }
    }
}
