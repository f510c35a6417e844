//! The versioned schema, applied when a store opens.
//!
//! `docs/STORE.md` ("PostgreSQL") explains the layout; the SQL here is the source of truth.
//! All pending migrations run in one transaction that first takes a transaction-scoped
//! advisory lock, so several processes opening the same database at once apply each
//! migration once, and a failed migration leaves the database as it was.

use deadpool_postgres::Object;

use super::pg_error;
use crate::store::StoreError;

/// Ordered migrations; version N is `MIGRATIONS[N - 1]`. Append only: a released entry
/// never changes, because databases in the field have already run it (a change to the
/// commit function is a new entry with `CREATE OR REPLACE FUNCTION`).
const MIGRATIONS: &[&str] = &[
    // 1: runs, their event logs, credentials, and the commit function.
    r#"
    -- run_no is what events refer to: an 8-byte key keeps the (run_no, seq) primary key of
    -- events dense, where the 36-byte id would make every entry ~5 times as large.
    -- `id` compares bytewise (COLLATE "C") so pages order exactly as SQLite's do, whatever
    -- the database's locale.
    CREATE TABLE runs (
        run_no     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id         text COLLATE "C" NOT NULL UNIQUE,
        task_id    text NOT NULL,          -- as created: never updated
        agent_id   text NOT NULL,          -- as created: never updated
        project_id text NOT NULL,          -- as created: never updated
        team_id    text NOT NULL,          -- as the run is now ('' when none)
        status     text NOT NULL,          -- as the run is now: Status::as_str()
        created_at timestamptz NOT NULL,   -- microseconds; for ordering and paging only
        version    bigint NOT NULL,
        last_seq   bigint NOT NULL,        -- the log's last seq (0: empty)
        run_json   text NOT NULL,          -- the whole Run (serde JSON): the authority
        stall_json text                    -- the StallTracker (serde JSON), NULL until committed
    ) WITH (fillfactor = 80);              -- room on the page for HOT updates
    CREATE INDEX runs_created ON runs (created_at DESC, id DESC);
    CREATE INDEX runs_task    ON runs (task_id,    created_at DESC, id DESC);
    CREATE INDEX runs_project ON runs (project_id, created_at DESC, id DESC);
    CREATE INDEX runs_agent   ON runs (agent_id,   created_at DESC, id DESC);
    CREATE INDEX runs_status  ON runs (status,     created_at DESC, id DESC);
    CREATE INDEX runs_team    ON runs (team_id,    created_at DESC, id DESC);
    -- Only live runs: what a restart restores. Stays small however many runs have ended.
    CREATE INDEX runs_live ON runs (run_no)
        WHERE status NOT IN ('completed', 'failed', 'cancelled', 'timeout');

    CREATE TABLE events (
        run_no     bigint NOT NULL,
        seq        bigint NOT NULL,
        kind       text NOT NULL,
        at         timestamptz NOT NULL,   -- microseconds
        attributes text NOT NULL,          -- JSON object of strings
        PRIMARY KEY (run_no, seq)
    );

    -- The calls waiting for an operator, each with a copy of its `run.toolcall.asked` event:
    -- `ListPendingAsks` reads them without replaying logs. runplane_commit inserts a row
    -- with an asked decision and deletes it with the call's `run.toolcall.resolved`.
    CREATE TABLE pending_asks (
        run_no     bigint NOT NULL,
        call_id    text NOT NULL,
        seq        bigint NOT NULL,
        at         timestamptz NOT NULL,
        attributes text NOT NULL,
        PRIMARY KEY (run_no, call_id)
    );
    CREATE INDEX pending_asks_at ON pending_asks (at);

    -- Which process owns a live run: only the owner's commits of it are accepted. `epoch`
    -- rises with every claim, so a process that lost the run (and even one that claimed it
    -- back since) cannot write with what it held before. A lease lapses at `expires_at`
    -- unless its owner renews it.
    CREATE TABLE run_leases (
        run_no     bigint PRIMARY KEY,
        owner      text NOT NULL,
        epoch      bigint NOT NULL,
        expires_at timestamptz NOT NULL
    );

    -- Only a token's SHA-256 is stored, never the token. Names are unique among tokens that
    -- are not revoked. Times are RFC 3339 text, as in SQLite: they keep nanoseconds.
    CREATE TABLE credentials (
        hash       text PRIMARY KEY,
        name       text NOT NULL,
        kind       text NOT NULL,          -- 'operator' or 'worker'
        role       text,                   -- operator tokens
        teams      text[],                 -- operator tokens: empty for any team
        projects   text[],                 -- operator tokens: empty for any project
        run_id     text,                   -- worker tokens
        created_at text NOT NULL,
        revoked_at text
    );
    CREATE UNIQUE INDEX credentials_live_name ON credentials (name) WHERE revoked_at IS NULL;

    -- (No parameter or variable is called `found`: in PL/pgSQL that is the FOUND flag.)
    -- One commit, checked before it writes anything: the checks of SqliteStore's writer.
    -- The writer sends a group's calls pipelined in one transaction; the EXCEPTION block is
    -- a savepoint, so a call that fails anyway (a duplicate event key, a text PostgreSQL
    -- refuses) is undone alone and reported in `outcome = 'error'` with its SQLSTATE,
    -- and the rest of the group commits.
    CREATE FUNCTION runplane_commit(
        p_id text, p_expected bigint, p_version bigint,
        p_task_id text, p_agent_id text, p_project_id text, p_team_id text,
        p_status text, p_created_at timestamptz, p_run_json text, p_stall_json text,
        p_seqs bigint[], p_kinds text[], p_ats timestamptz[], p_attributes text[],
        p_owner text, p_epoch bigint,
        OUT outcome text, OUT stored_version bigint, OUT last bigint, OUT detail text)
    LANGUAGE plpgsql AS $fn$
    DECLARE
        v_run_no  bigint;
        v_version bigint;
        v_last    bigint;
        v_owner   text;
        v_epoch   bigint;
        v_count   int := coalesce(array_length(p_seqs, 1), 0);
    BEGIN
        IF p_expected IS NULL THEN
            IF v_count > 0 AND p_seqs <> ARRAY(SELECT generate_series(1, v_count)::bigint) THEN
                outcome := 'gap'; last := 0; RETURN;
            END IF;
            INSERT INTO runs (id, task_id, agent_id, project_id, team_id, status, created_at,
                              version, last_seq, run_json, stall_json)
            VALUES (p_id, p_task_id, p_agent_id, p_project_id, p_team_id, p_status,
                    p_created_at, p_version, v_count, p_run_json, p_stall_json)
            ON CONFLICT (id) DO NOTHING
            RETURNING run_no INTO v_run_no;
            IF v_run_no IS NULL THEN
                SELECT version INTO stored_version FROM runs WHERE id = p_id;
                outcome := 'conflict'; RETURN;
            END IF;
        ELSE
            SELECT run_no, version, last_seq INTO v_run_no, v_version, v_last
                FROM runs WHERE id = p_id FOR UPDATE;
            IF NOT FOUND THEN
                outcome := 'not_found'; RETURN;
            END IF;
            -- FOR SHARE: a claim waits until this transaction is over, so the new owner
            -- reads the run after this write, never before it.
            SELECT owner, epoch INTO v_owner, v_epoch
                FROM run_leases WHERE run_no = v_run_no FOR SHARE;
            IF FOUND AND (p_owner IS DISTINCT FROM v_owner OR p_epoch IS DISTINCT FROM v_epoch) THEN
                outcome := 'fenced'; RETURN;
            END IF;
            IF v_version <> p_expected THEN
                outcome := 'conflict'; stored_version := v_version; RETURN;
            END IF;
            IF p_version <= p_expected THEN
                outcome := 'no_raise'; RETURN;
            END IF;
            IF v_count > 0 AND p_seqs <> ARRAY(
                    SELECT generate_series(v_last + 1, v_last + v_count)::bigint) THEN
                outcome := 'gap'; last := v_last; RETURN;
            END IF;
            UPDATE runs SET version = p_version, team_id = p_team_id, status = p_status,
                            last_seq = v_last + v_count, run_json = p_run_json,
                            stall_json = coalesce(p_stall_json, stall_json)
                WHERE run_no = v_run_no;
        END IF;
        IF v_count > 0 THEN
            INSERT INTO events (run_no, seq, kind, at, attributes)
                SELECT v_run_no, e.seq, e.kind, e.at, e.attributes
                FROM unnest(p_seqs, p_kinds, p_ats, p_attributes) AS e(seq, kind, at, attributes);
            -- Asks first, answers after: both may be in one commit.
            INSERT INTO pending_asks (run_no, call_id, seq, at, attributes)
                SELECT v_run_no, e.attributes::json ->> 'call_id', e.seq, e.at, e.attributes
                FROM unnest(p_seqs, p_kinds, p_ats, p_attributes) AS e(seq, kind, at, attributes)
                WHERE e.kind = 'run.toolcall.asked'
                ON CONFLICT (run_no, call_id) DO UPDATE
                    SET seq = excluded.seq, at = excluded.at, attributes = excluded.attributes;
            DELETE FROM pending_asks p
                USING unnest(p_kinds, p_attributes) AS e(kind, attributes)
                WHERE p.run_no = v_run_no AND e.kind = 'run.toolcall.resolved'
                  AND p.call_id = e.attributes::json ->> 'call_id';
        END IF;
        outcome := 'ok';
    EXCEPTION
        -- Not caught here: query_canceled (a statement timeout), which aborts the group.
        WHEN OTHERS THEN
            outcome := 'error'; detail := SQLSTATE || ' ' || SQLERRM;
    END
    $fn$;
    "#,
    // 2: a status with a project or an agent, which walked one index and filtered by the
    // other (through every run when none match both: 9 ms at 100,000 runs), walks only the
    // matching rows. And what retention needs so a batch costs what it deletes: finished
    // runs by completion (only in run_json; compared bytewise, COLLATE "C", as RFC 3339
    // text: store/completion.rs says why that is safe) and worker tokens by run.
    r#"
    CREATE INDEX runs_project_status ON runs (project_id, status, created_at DESC, id DESC);
    CREATE INDEX runs_agent_status   ON runs (agent_id,   status, created_at DESC, id DESC);
    CREATE INDEX runs_finished ON runs (((run_json::json ->> 'completed_at') COLLATE "C"))
        WHERE status IN ('completed', 'failed', 'cancelled', 'timeout');
    CREATE INDEX credentials_run ON credentials (run_id) WHERE run_id IS NOT NULL;
    "#,
    // 3: commands from one process to the owner of a run (`peers.rs`).
    r#"
    -- A sender inserts a row and notifies `runplane_command`; the owner takes it (sets
    -- taken_by, so only one process ever runs it), runs it, stores its answer and notifies
    -- `runplane_answer`; the sender reads the answer and deletes the row. A sender that
    -- gives up deletes its row if nobody took it, so a command runs at most once.
    CREATE TABLE run_commands (
        id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id   text COLLATE "C" NOT NULL,
        body     text NOT NULL,
        sent_at  timestamptz NOT NULL DEFAULT now(),
        taken_by text,                     -- the owner that took it; NULL until then
        answer   text                      -- the owner's answer; NULL until then
    );
    CREATE INDEX run_commands_untaken ON run_commands (id) WHERE taken_by IS NULL;
    CREATE INDEX run_commands_sent ON run_commands (sent_at);
    "#,
    // 4: the policy versions runs are pinned to, each stored once under its content hash
    // (SHA-256 of the canonical text), so a run restored after its file changed or went
    // away is still judged by the rules it started with.
    r#"
    CREATE TABLE policy_versions (
        hash       text COLLATE "C" PRIMARY KEY,  -- SHA-256 of source, lowercase hex
        name       text NOT NULL,
        source     text NOT NULL,                 -- the profile's canonical TOML
        first_seen timestamptz NOT NULL
    );
    "#,
];

/// The latest schema version this build knows.
pub(super) const VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock key migrations hold: "runplane" in ASCII, so it does not collide
/// with another application's key by chance.
const MIGRATION_LOCK: i64 = 0x7275_6e70_6c61_6e65;

/// The statuses `runs_live` excludes, as its `WHERE` clause spells them; queries repeat it
/// so PostgreSQL sees they are within the partial index.
pub(super) const LIVE_CLAUSE: &str =
    "status NOT IN ('completed', 'failed', 'cancelled', 'timeout')";

/// Brings the schema up to date: in one transaction, under the advisory lock, applies the
/// migrations the database has not seen and records each in `schema_migrations`. Refuses a
/// database whose schema is newer than this build.
pub(super) async fn migrate(client: &mut Object) -> Result<(), StoreError> {
    let tx = client
        .transaction()
        .await
        .map_err(pg_error("begin migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg_error("take the migration lock"))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    bigint PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(pg_error("create schema_migrations"))?;
    let current: i64 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            &[],
        )
        .await
        .map_err(pg_error("read schema version"))?
        .get(0);
    if current > VERSION {
        return Err(StoreError::Database(format!(
            "database schema version {current} is newer than this runplane ({VERSION})"
        )));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let version = index as i64 + 1;
        tx.batch_execute(sql)
            .await
            .map_err(pg_error(&format!("apply migration {version}")))?;
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(pg_error(&format!("record migration {version}")))?;
    }
    tx.commit().await.map_err(pg_error("commit migrations"))
}

#[cfg(test)]
mod tests {
    use super::LIVE_CLAUSE;
    use crate::domain::Status;

    /// The partial index and its queries list the terminal statuses by hand; this keeps
    /// them in step with `Status::is_terminal`.
    #[test]
    fn live_clause_lists_exactly_the_terminal_statuses() {
        for status in Status::ALL {
            let quoted = format!("'{}'", status.as_str());
            assert_eq!(
                LIVE_CLAUSE.contains(&quoted),
                status.is_terminal(),
                "{status}"
            );
            assert!(super::MIGRATIONS[0].contains(LIVE_CLAUSE));
        }
    }
}
