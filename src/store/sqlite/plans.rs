//! The query plans of the reads that must cost a page, not the history: each uses an
//! index, none sorts (a temp B-tree for ORDER BY would mean reading every matching run
//! before the first is returned), none scans a table. A dropped or mismatched index
//! fails here, long before a store with 100,000 runs notices (BENCHMARKS.md, "History").
//! SQLite plans without statistics (the server never runs ANALYZE), so the plan of an
//! empty database is the plan of a full one.

use rusqlite::Connection;

use super::{read, retention, schema};
use crate::domain::{Scope, Status};
use crate::store::{PageCursor, RunQuery};

/// The plan's lines, as `EXPLAIN QUERY PLAN` prints them.
fn plan(conn: &Connection, sql: &str) -> Vec<String> {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    // Unbound parameters are NULL: the plan does not depend on them without statistics.
    let mut rows = stmt.raw_query();
    let mut lines = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        lines.push(row.get::<_, String>(3).unwrap());
    }
    lines
}

fn migrated() -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    schema::migrate(&mut conn).unwrap();
    conn
}

/// Asserts the plan reads `table` through `access` (what follows `USING`, `COVERING`
/// aside: `INDEX name`, `INTEGER PRIMARY KEY`), scans no table and, unless `sort_ok`,
/// does not sort.
fn assert_uses(conn: &Connection, sql: &str, table: &str, access: &str, sort_ok: bool) {
    let lines = plan(conn, sql);
    let text = lines.join("\n");
    assert!(
        lines.iter().any(|line| {
            let line = line.replace("USING COVERING INDEX", "USING INDEX");
            [
                format!("SEARCH {table} USING {access} "),
                format!("SCAN {table} USING {access}"),
            ]
            .iter()
            .any(|start| line.starts_with(start.as_str()))
        }),
        "{table} not read through {access}:\n{text}\n{sql}"
    );
    assert!(
        sort_ok || !text.contains("TEMP B-TREE"),
        "sorts:\n{text}\n{sql}"
    );
    for line in &lines {
        assert!(
            !line.starts_with("SCAN") || line.contains("USING"),
            "scans a table:\n{text}\n{sql}"
        );
    }
}

/// The statement `list_runs` sends for `query`.
fn list_sql(query: &RunQuery) -> String {
    let status = query.status.map(|s| s.as_str());
    let cursor = query
        .after
        .as_ref()
        .map(|c| (c.created_at.timestamp_micros(), c.id.as_str()));
    read::list_statement(query, &status, &cursor, &51).0
}

#[test]
fn every_listing_walks_an_index_in_page_order() {
    let conn = migrated();
    let cursor = Some(PageCursor {
        created_at: chrono::Utc::now(),
        id: "run".into(),
    });
    let text = |value: &str| Some(value.to_string());
    let cases: Vec<(RunQuery, &str)> = vec![
        (RunQuery::default(), "INDEX runs_created"),
        (
            RunQuery {
                status: Some(Status::Running),
                ..RunQuery::default()
            },
            "INDEX runs_status",
        ),
        (
            RunQuery {
                task_id: text("task"),
                ..RunQuery::default()
            },
            "INDEX runs_task",
        ),
        (
            RunQuery {
                project_id: text("project"),
                ..RunQuery::default()
            },
            "INDEX runs_project",
        ),
        (
            RunQuery {
                agent_id: text("agent"),
                ..RunQuery::default()
            },
            "INDEX runs_agent",
        ),
        (
            RunQuery {
                project_id: text("project"),
                status: Some(Status::Failed),
                ..RunQuery::default()
            },
            "INDEX runs_project_status",
        ),
        (
            RunQuery {
                agent_id: text("agent"),
                status: Some(Status::Running),
                ..RunQuery::default()
            },
            "INDEX runs_agent_status",
        ),
        (
            RunQuery {
                scope: Scope {
                    teams: vec!["red".into()],
                    projects: Vec::new(),
                },
                ..RunQuery::default()
            },
            "INDEX runs_team",
        ),
    ];
    for (query, index) in cases {
        assert_uses(&conn, &list_sql(&query), "runs", index, false);
        let next_page = RunQuery {
            after: cursor.clone(),
            ..query
        };
        let sql = list_sql(&next_page);
        assert_uses(&conn, &sql, "runs", index, false);
        // The cursor is a range on the index, not a filter on every row after the start.
        let lines = plan(&conn, &sql).join("\n");
        assert!(lines.contains("(created_at,id)<(?,?)"), "{lines}");
    }
}

#[test]
fn get_run_and_pending_asks_find_rows_by_key() {
    let conn = migrated();
    let get = read::get_run_statement();
    let by_id = "INDEX sqlite_autoindex_runs_1";
    assert_uses(&conn, &get, "runs", by_id, false);
    assert_uses(&conn, &get, "run_progress", "INTEGER PRIMARY KEY", false);
    // One run's asks are sorted: a handful of rows, never the history.
    let asks = read::PENDING_ASKS_OF_RUN;
    assert_uses(&conn, asks, "r", by_id, true);
    assert_uses(&conn, asks, "p", "PRIMARY KEY", true);
}

#[test]
fn retention_walks_the_finished_runs_by_completion() {
    let conn = migrated();
    let finished = retention::FINISHED_BEFORE;
    assert_uses(&conn, finished, "runs", "INDEX runs_finished", false);
}
