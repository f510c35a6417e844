//! The checkpointer thread: copies the WAL back into the database file off the writer's
//! thread. With SQLite's automatic checkpoints the commit that crosses the threshold pays
//! for the copy, which is what made p99 commit latency 12–14 ms instead of 2.4 ms in the
//! measurements of DESIGN §5.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use rusqlite::Connection;

use super::schema::WAL_SIZE_LIMIT;

/// How long a restarting checkpoint may wait for readers. It holds the write lock while it
/// waits, so this bounds how long it can stall the writer; if it times out, the next round
/// tries again.
const RESTART_WAIT: Duration = Duration::from_millis(100);

/// Runs a passive checkpoint every `interval` until `stop` fires or is dropped.
///
/// A passive checkpoint never blocks the writer, but under a steady write load it never
/// quite catches up either, and SQLite only rewinds the WAL to its start when a
/// checkpoint has caught up just before a write begins. So once the WAL holds more than
/// `WAL_SIZE_LIMIT`, a RESTART follows: it blocks the writer, but only for the frames not
/// yet copied, and makes the next write start the WAL over (`journal_size_limit` then
/// trims the file). A passive pass over a big WAL takes ~100 ms, during which the writer
/// adds thousands of frames, and a RESTART right after it stalled every commit for 25–110
/// ms; so further passive passes go first, each copying what the previous one left (a
/// shrinking remainder), until few frames are left for the RESTART to copy while it holds
/// the writer.
pub(super) fn run(conn: Connection, interval: Duration, stop: Receiver<()>) {
    if let Err(e) = conn.busy_timeout(RESTART_WAIT) {
        tracing::warn!(error = %e, "checkpointer: could not set busy_timeout");
    }
    let page_size: i64 = match conn.pragma_query_value(None, "page_size", |r| r.get(0)) {
        Ok(size) => size,
        Err(e) => {
            tracing::error!(error = %e, "checkpointer: cannot read page_size; not running");
            return;
        }
    };
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(interval) {
        let Some(mut pass) = checkpoint(&conn, "PASSIVE") else {
            continue;
        };
        if pass.frames.saturating_mul(page_size) <= WAL_SIZE_LIMIT {
            continue;
        }
        for _ in 0..MAX_CATCH_UP_PASSES {
            if pass.frames - pass.copied <= RESTART_REMAINDER {
                break;
            }
            match checkpoint(&conn, "PASSIVE") {
                Some(next) => pass = next,
                None => break,
            }
        }
        checkpoint(&conn, "RESTART");
    }
}

/// Frames a RESTART may be left to copy while it holds the writer (~1 ms of copying).
const RESTART_REMAINDER: i64 = 256;

/// Passive passes before a RESTART at most; under a write load faster than the copy the
/// remainder does not shrink, and the RESTART then runs anyway.
const MAX_CATCH_UP_PASSES: usize = 4;

/// What one checkpoint reported.
struct Pass {
    /// Frames in the WAL.
    frames: i64,
    /// Frames copied into the database file so far.
    copied: i64,
}

/// Runs one checkpoint and returns what it reported, or `None` if SQLite refused (logged;
/// the next round retries).
fn checkpoint(conn: &Connection, mode: &str) -> Option<Pass> {
    let result = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    match result {
        Ok((busy, frames, copied)) => {
            tracing::trace!(mode, busy, frames, copied, "wal checkpoint");
            Some(Pass { frames, copied })
        }
        Err(e) => {
            tracing::warn!(mode, error = %e, "wal checkpoint failed");
            None
        }
    }
}
