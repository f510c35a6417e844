//! Connections, their pragmas, and the versioned schema.
//!
//! `docs/STORE.md` explains the layout; the SQL here is the source of truth.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::{db_err, Synchronous};
use crate::store::StoreError;

/// Ordered migrations; version N is `MIGRATIONS[N - 1]`. Append only: a released entry
/// never changes, because databases in the field have already run it.
const MIGRATIONS: &[&str] = &[
    // 1: runs, their event logs, and the indexes the reads need.
    "
    -- run_no is the rowid: events refer to runs by this small integer instead of the
    -- 36-byte id, which keeps the (run_no, seq) index dense (see docs/STORE.md).
    CREATE TABLE runs (
        run_no     INTEGER PRIMARY KEY,
        id         TEXT    NOT NULL UNIQUE,
        task_id    TEXT    NOT NULL,
        agent_id   TEXT    NOT NULL,
        project_id TEXT    NOT NULL,
        status     TEXT    NOT NULL,
        created_at INTEGER NOT NULL,  -- unix microseconds, for ordering and paging only
        version    INTEGER NOT NULL,
        run_json   TEXT    NOT NULL,  -- the whole Run, the authority for every field
        stall_json TEXT               -- the StallTracker, NULL until one is committed
    );
    CREATE INDEX runs_created ON runs (created_at DESC, id DESC);
    CREATE INDEX runs_task    ON runs (task_id, created_at DESC, id DESC);
    CREATE INDEX runs_project ON runs (project_id, created_at DESC, id DESC);
    CREATE INDEX runs_agent   ON runs (agent_id, created_at DESC, id DESC);
    CREATE INDEX runs_status  ON runs (status, created_at DESC, id DESC);
    -- Only live runs: what a restart restores. Stays small however many runs have ended.
    CREATE INDEX runs_live ON runs (run_no)
        WHERE status NOT IN ('completed', 'failed', 'cancelled', 'timeout');

    -- A rowid table, so rows are appended in commit order; the unique index is the only
    -- structure touched at scattered places (one spot per run).
    CREATE TABLE events (
        run_no     INTEGER NOT NULL,
        seq        INTEGER NOT NULL,
        kind       TEXT    NOT NULL,
        at         INTEGER NOT NULL,  -- unix microseconds
        attributes TEXT    NOT NULL   -- JSON object of strings
    );
    CREATE UNIQUE INDEX events_run_seq ON events (run_no, seq);
    ",
    // 2: the event journal, and each run's progress apart from the rest of the run.
    //
    // Commits append events to `event_journal` (no index: consecutive rows share a page)
    // and the writer moves them into `events` run by run; see journal.rs.
    //
    // `run_progress` holds what every tool call changes: a ~100-byte row per run, so the
    // runs written by one group share a few pages instead of each dirtying the page of its
    // ~500-byte `runs` row. `run_json` is rewritten only when something else changes, and
    // its copies of these fields are stale: readers take them from here.
    "
    CREATE TABLE event_journal (
        id         INTEGER PRIMARY KEY,
        run_no     INTEGER NOT NULL,
        seq        INTEGER NOT NULL,
        kind       TEXT    NOT NULL,
        at         INTEGER NOT NULL,
        attributes TEXT    NOT NULL
    );
    CREATE TABLE run_progress (
        run_no     INTEGER PRIMARY KEY,
        version    INTEGER NOT NULL,
        step_count INTEGER NOT NULL,
        cost_usd   REAL    NOT NULL,
        updated_at TEXT    NOT NULL,  -- RFC 3339, as in run_json
        stall_json TEXT
    );
    INSERT INTO run_progress (run_no, version, step_count, cost_usd, updated_at, stall_json)
        SELECT run_no, version, json_extract(run_json, '$.step_count'),
               json_extract(run_json, '$.cost_usd'), json_extract(run_json, '$.updated_at'),
               stall_json
        FROM runs;
    -- runs without version and stall_json, rebuilt (DROP COLUMN trips over the comments
    -- in version 1's definition), with version 1's indexes.
    CREATE TABLE runs_v2 (
        run_no     INTEGER PRIMARY KEY,
        id         TEXT    NOT NULL UNIQUE,
        task_id    TEXT    NOT NULL,
        agent_id   TEXT    NOT NULL,
        project_id TEXT    NOT NULL,
        status     TEXT    NOT NULL,
        created_at INTEGER NOT NULL,
        run_json   TEXT    NOT NULL
    );
    INSERT INTO runs_v2 (run_no, id, task_id, agent_id, project_id, status, created_at, run_json)
        SELECT run_no, id, task_id, agent_id, project_id, status, created_at, run_json FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_v2 RENAME TO runs;
    CREATE INDEX runs_created ON runs (created_at DESC, id DESC);
    CREATE INDEX runs_task    ON runs (task_id, created_at DESC, id DESC);
    CREATE INDEX runs_project ON runs (project_id, created_at DESC, id DESC);
    CREATE INDEX runs_agent   ON runs (agent_id, created_at DESC, id DESC);
    CREATE INDEX runs_status  ON runs (status, created_at DESC, id DESC);
    CREATE INDEX runs_live ON runs (run_no)
        WHERE status NOT IN ('completed', 'failed', 'cancelled', 'timeout');
    ",
    // 3: a run's progress rides on the journal row of each commit's last event (NULL on
    // the others) instead of updating `run_progress` in place, where every commit dirtied
    // a page of its own; the journal's move applies it (rows.rs). `run_progress` plus the
    // journal rows with a newer version is the run's progress.
    "
    ALTER TABLE event_journal ADD COLUMN version    INTEGER;
    ALTER TABLE event_journal ADD COLUMN step_count INTEGER;
    ALTER TABLE event_journal ADD COLUMN cost_usd   REAL;
    ALTER TABLE event_journal ADD COLUMN updated_at TEXT;
    ALTER TABLE event_journal ADD COLUMN stall_json TEXT;
    ",
    // 4: credentials. Only a token's SHA-256 is stored, never the token: a copy of the
    // database authenticates nobody. Names are unique among tokens that are not revoked,
    // so `tokens revoke NAME` means one token.
    "
    CREATE TABLE credentials (
        hash       TEXT PRIMARY KEY,  -- SHA-256 of the token, lowercase hex
        name       TEXT NOT NULL,
        kind       TEXT NOT NULL,     -- 'operator' or 'worker'
        role       TEXT,              -- operator tokens: viewer, operator or admin
        teams      TEXT,              -- operator tokens: JSON array, empty for any team
        projects   TEXT,              -- operator tokens: JSON array, empty for any project
        run_id     TEXT,              -- worker tokens: the one run they open sessions for
        created_at TEXT NOT NULL,     -- RFC 3339
        revoked_at TEXT               -- RFC 3339; NULL while the token works
    );
    CREATE UNIQUE INDEX credentials_live_name ON credentials (name) WHERE revoked_at IS NULL;
    ",
    // 5: the calls waiting for an operator, each with a copy of its `run.toolcall.asked`
    // event, so `ListPendingAsks` reads them without replaying logs. A commit inserts the
    // row with the ask and deletes it with the answer (`run.toolcall.resolved`). Filled
    // here from the logs of the live runs, the journal's rows included (migrations run
    // before the journal is moved, and a moved row may still be in both).
    "
    CREATE TABLE pending_asks (
        run_no     INTEGER NOT NULL,
        call_id    TEXT    NOT NULL,
        seq        INTEGER NOT NULL,  -- the asked event's
        at         INTEGER NOT NULL,
        attributes TEXT    NOT NULL,
        PRIMARY KEY (run_no, call_id)
    ) WITHOUT ROWID;
    INSERT OR REPLACE INTO pending_asks (run_no, call_id, seq, at, attributes)
        WITH log AS (
            SELECT run_no, seq, kind, at, attributes FROM events
            UNION SELECT run_no, seq, kind, at, attributes FROM event_journal)
        SELECT e.run_no, json_extract(e.attributes, '$.call_id'), e.seq, e.at, e.attributes
        FROM log e JOIN runs r ON r.run_no = e.run_no
        WHERE e.kind = 'run.toolcall.asked'
          AND r.status NOT IN ('completed', 'failed', 'cancelled', 'timeout')
          AND NOT EXISTS (
              SELECT 1 FROM log x
              WHERE x.run_no = e.run_no AND x.seq > e.seq
                AND x.kind = 'run.toolcall.resolved'
                AND json_extract(x.attributes, '$.call_id') = json_extract(e.attributes, '$.call_id'));
    ",
    // 6: indexes for what grows with history. A status with a project or an agent (a
    // dashboard's "running in project P") walked one of the two indexes and filtered by
    // the other, through every run when few or none match both (20 ms at 100,000 runs);
    // with both as the key it walks only matching rows. The team is only in run_json, so
    // a scoped listing walked every run until it had a page; this index on the very
    // expression `list_runs` filters by (SQLite matches it textually) walks only the
    // team's runs, in page order. Retention deletes finished runs oldest completion first and their worker
    // tokens by run: both would otherwise scan their whole table for every batch.
    // `completed_at` is RFC 3339 text in run_json; retention compares it as text (why
    // that is safe: store/completion.rs).
    "
    CREATE INDEX runs_project_status ON runs (project_id, status, created_at DESC, id DESC);
    CREATE INDEX runs_agent_status   ON runs (agent_id,   status, created_at DESC, id DESC);
    CREATE INDEX runs_team ON runs
        (IFNULL(json_extract(run_json, '$.team_id'), ''), created_at DESC, id DESC);
    CREATE INDEX runs_finished ON runs (json_extract(run_json, '$.completed_at'))
        WHERE status IN ('completed', 'failed', 'cancelled', 'timeout');
    CREATE INDEX credentials_run ON credentials (run_id) WHERE run_id IS NOT NULL;
    ",
    // 7: the policy versions runs are pinned to, each stored once under its content hash
    // (SHA-256 of the canonical text), so a run restored after its file changed or went
    // away is still judged by the rules it started with.
    "
    CREATE TABLE policy_versions (
        hash       TEXT PRIMARY KEY,  -- SHA-256 of source, lowercase hex
        name       TEXT NOT NULL,
        source     TEXT NOT NULL,     -- the profile's canonical TOML
        first_seen TEXT NOT NULL      -- RFC 3339
    ) WITHOUT ROWID;
    ",
];

/// The statuses `runs_live` excludes, as its `WHERE` clause spells them. A query uses the
/// partial index only when it repeats this clause word for word.
pub(super) const LIVE_CLAUSE: &str =
    "status NOT IN ('completed', 'failed', 'cancelled', 'timeout')";

/// How long a connection waits for a lock before giving up. Long, because the only
/// contenders are our own writer, an occasional truncating checkpoint, and other
/// processes opening the file.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a connection with the settings every connection shares.
pub(super) fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(db_err(&format!("open {}", path.display())))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(db_err("set busy_timeout"))?;
    Ok(conn)
}

/// A connection that cannot write, to a database that must exist: for reading a data
/// directory beside the server that owns it (see `SqliteStore::open_read_only`).
fn open_read_only(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(db_err(&format!("open {} read-only", path.display())))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(db_err("set busy_timeout"))?;
    Ok(conn)
}

/// Refuses a database whose schema is not the one this code reads: a read-only
/// connection cannot migrate it, and older or newer tables would be read wrongly.
pub(super) fn check_version(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let found = schema_version(conn)?;
    let latest = latest_version();
    if found != latest {
        return Err(StoreError::Database(format!(
            "{}: schema version {found}, this runplane reads version {latest} \
             (a `runplane serve` of this version on the data directory migrates it)",
            path.display()
        )));
    }
    Ok(())
}

/// The writer's connection: WAL, the chosen durability, and no automatic checkpoints —
/// the checkpointer thread does them, so a commit never waits for one.
pub(super) fn open_writer(
    path: &Path,
    synchronous: Synchronous,
    wal_size_limit: u64,
) -> Result<Connection, StoreError> {
    let conn = open_connection(path)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(db_err("set journal_mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Database(format!(
            "{}: journal_mode is {mode}, WAL is required",
            path.display()
        )));
    }
    let sync = match synchronous {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    conn.pragma_update(None, "synchronous", sync)
        .map_err(db_err("set synchronous"))?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)
        .map_err(db_err("set wal_autocheckpoint"))?;
    conn.pragma_update(
        None,
        "journal_size_limit",
        i64::try_from(wal_size_limit).unwrap_or(i64::MAX),
    )
    .map_err(db_err("set journal_size_limit"))?;
    // 16 MiB of page cache: the pages a batch dirties (one index leaf per live run) stay
    // hot instead of being re-read from the OS on every batch.
    conn.pragma_update(None, "cache_size", -16 * 1024)
        .map_err(db_err("set cache_size"))?;
    Ok(conn)
}

/// A connection for reads; `query_only` turns a bug that writes into an error. With
/// `read_only`, the file is opened read-only as well, and must exist.
pub(super) fn open_reader(path: &Path, read_only: bool) -> Result<Connection, StoreError> {
    let conn = if read_only {
        open_read_only(path)?
    } else {
        open_connection(path)?
    };
    conn.pragma_update(None, "query_only", true)
        .map_err(db_err("set query_only"))?;
    Ok(conn)
}

/// The newest schema version this code knows.
pub(super) fn latest_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// The schema version a database is at; 0 for a fresh one.
fn schema_version(conn: &Connection) -> Result<i64, StoreError> {
    conn.query_row(
        "SELECT coalesce(max(version), 0) FROM schema_migrations",
        [],
        |row| row.get(0),
    )
    .map_err(db_err("read schema version"))
}

/// Brings the schema up to date, one transaction per migration. Each checks the version
/// again under the write lock, so two processes opening the same new file do not both
/// apply it.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    INTEGER PRIMARY KEY,
             applied_at TEXT NOT NULL
         )",
    )
    .map_err(db_err("create schema_migrations"))?;
    let latest = latest_version();
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let version = index as i64 + 1;
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db_err("begin migration"))?;
        let current = schema_version(&tx)?;
        if current > latest {
            return Err(StoreError::Database(format!(
                "database schema version {current} is newer than this runplane ({latest})"
            )));
        }
        let applied: Option<i64> = tx
            .query_row(
                "SELECT version FROM schema_migrations WHERE version = ?1",
                [version],
                |row| row.get(0),
            )
            .optional()
            .map_err(db_err("read schema_migrations"))?;
        if applied.is_some() {
            continue;
        }
        tx.execute_batch(sql)
            .map_err(db_err(&format!("apply migration {version}")))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
            rusqlite::params![version, chrono::Utc::now().to_rfc3339()],
        )
        .map_err(db_err(&format!("record migration {version}")))?;
        tx.commit()
            .map_err(db_err(&format!("commit migration {version}")))?;
        tracing::info!(version, "applied store migration");
    }
    Ok(())
}

/// Moves every row left in the journal into the indexed log and applies the progress it
/// carries, in one transaction, before the writer starts. A row may already be in `events` (a crash between a segment's move
/// and its delete); its copy there is the same, so it is skipped.
pub(super) fn drain_journal(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(db_err("begin journal drain"))?;
    let moved = tx
        .execute(
            "INSERT OR IGNORE INTO events (run_no, seq, kind, at, attributes)
             SELECT run_no, seq, kind, at, attributes FROM event_journal ORDER BY run_no, seq",
            [],
        )
        .map_err(db_err("move journal into the log"))?;
    // The stall first: both statements compare with the version before the drain.
    tx.execute(
        "UPDATE run_progress SET stall_json = newest.stall_json
         FROM (SELECT run_no, max(version) AS version, stall_json FROM event_journal
               WHERE stall_json IS NOT NULL GROUP BY run_no) AS newest
         WHERE newest.run_no = run_progress.run_no AND newest.version > run_progress.version",
        [],
    )
    .map_err(db_err("apply the journal's stall trackers"))?;
    tx.execute(
        "UPDATE run_progress SET version = newest.version, step_count = newest.step_count,
             cost_usd = newest.cost_usd, updated_at = newest.updated_at
         FROM (SELECT run_no, max(version) AS version, step_count, cost_usd, updated_at
               FROM event_journal WHERE version IS NOT NULL GROUP BY run_no) AS newest
         WHERE newest.run_no = run_progress.run_no AND newest.version > run_progress.version",
        [],
    )
    .map_err(db_err("apply the journal's progress"))?;
    tx.execute("DELETE FROM event_journal", [])
        .map_err(db_err("empty the journal"))?;
    tx.commit().map_err(db_err("commit journal drain"))?;
    if moved > 0 {
        tracing::info!(events = moved, "moved the journal's events into the log");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::LIVE_CLAUSE;
    use crate::domain::Status;

    /// The partial index and its queries list the terminal statuses by hand; this keeps
    /// that list equal to the domain's.
    #[test]
    fn live_clause_lists_exactly_the_terminal_statuses() {
        for status in Status::ALL {
            let quoted = format!("'{}'", status.as_str());
            assert_eq!(
                LIVE_CLAUSE.contains(&quoted),
                status.is_terminal(),
                "{status}"
            );
        }
        assert!(super::MIGRATIONS[0].contains(LIVE_CLAUSE));
        assert!(super::MIGRATIONS[1].contains(LIVE_CLAUSE));
    }
}
