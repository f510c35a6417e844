//! Credentials: token hashes and what each stands for. Written on the writer's connection
//! between commit groups (so they never race a group), read on the read pool.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::db_err;
use crate::domain::{Credential, CredentialKind, Role, Scope};
use crate::store::StoreError;

const COLUMNS: &str = "hash, name, kind, role, teams, projects, run_id, created_at, revoked_at";

/// Inserts a credential; `NameTaken` when a live one has its name.
pub(super) fn insert(conn: &Connection, credential: &Credential) -> Result<(), StoreError> {
    let (kind, role, teams, projects, run_id) = match &credential.kind {
        CredentialKind::Operator { role, scope } => (
            "operator",
            Some(role.as_str()),
            Some(json_list(&scope.teams)?),
            Some(json_list(&scope.projects)?),
            None,
        ),
        CredentialKind::Worker { run_id } => ("worker", None, None, None, Some(run_id.as_str())),
    };
    let inserted = conn.execute(
        &format!("INSERT INTO credentials ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
        params![
            credential.hash,
            credential.name,
            kind,
            role,
            teams,
            projects,
            run_id,
            credential.created_at.to_rfc3339(),
            credential.revoked_at.map(|at| at.to_rfc3339()),
        ],
    );
    match inserted {
        Ok(_) => Ok(()),
        Err(rusqlite::Error::SqliteFailure(err, _))
            if err.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            Err(StoreError::NameTaken(credential.name.clone()))
        }
        Err(err) => Err(db_err("insert credential")(err)),
    }
}

/// The credential of a token hash.
pub(super) fn by_hash(conn: &Connection, hash: &str) -> Result<Option<Credential>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM credentials WHERE hash = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([hash], read_row).optional())
    .map_err(db_err("read credential"))?
    .map(decode)
    .transpose()
}

/// Every operator credential, oldest first.
pub(super) fn operators(conn: &Connection) -> Result<Vec<Credential>, StoreError> {
    let rows = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM credentials WHERE kind = 'operator' ORDER BY created_at, name"
        ))
        .and_then(|mut stmt| stmt.query_map([], read_row)?.collect::<Result<Vec<_>, _>>())
        .map_err(db_err("list credentials"))?;
    rows.into_iter().map(decode).collect()
}

/// Marks the live operator credential `name` revoked and returns it.
pub(super) fn revoke(
    conn: &Connection,
    name: &str,
    at: DateTime<Utc>,
) -> Result<Option<Credential>, StoreError> {
    let row = conn
        .prepare_cached(&format!(
            "UPDATE credentials SET revoked_at = ?2
             WHERE name = ?1 AND kind = 'operator' AND revoked_at IS NULL
             RETURNING {COLUMNS}"
        ))
        .and_then(|mut stmt| {
            stmt.query_row(params![name, at.to_rfc3339()], read_row)
                .optional()
        })
        .map_err(db_err("revoke credential"))?;
    row.map(decode).transpose()
}

/// A row as stored, decoded by [`decode`] outside rusqlite's error type.
struct StoredRow {
    hash: String,
    name: String,
    kind: String,
    role: Option<String>,
    teams: Option<String>,
    projects: Option<String>,
    run_id: Option<String>,
    created_at: String,
    revoked_at: Option<String>,
}

fn read_row(row: &Row<'_>) -> rusqlite::Result<StoredRow> {
    Ok(StoredRow {
        hash: row.get(0)?,
        name: row.get(1)?,
        kind: row.get(2)?,
        role: row.get(3)?,
        teams: row.get(4)?,
        projects: row.get(5)?,
        run_id: row.get(6)?,
        created_at: row.get(7)?,
        revoked_at: row.get(8)?,
    })
}

fn decode(row: StoredRow) -> Result<Credential, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt {
        run_id: None,
        seq: None,
        detail: format!("credential {:?}: {what}", row.name),
    };
    let kind = match (row.kind.as_str(), row.role, row.run_id) {
        ("operator", Some(role), None) => CredentialKind::Operator {
            role: role.parse::<Role>().map_err(|e| corrupt(&e.to_string()))?,
            scope: Scope {
                teams: parse_list(row.teams.as_deref()).ok_or_else(|| corrupt("bad teams"))?,
                projects: parse_list(row.projects.as_deref())
                    .ok_or_else(|| corrupt("bad projects"))?,
            },
        },
        ("worker", None, Some(run_id)) => CredentialKind::Worker { run_id },
        _ => return Err(corrupt("impossible kind")),
    };
    let time = |text: &str| {
        DateTime::parse_from_rfc3339(text)
            .map(|at| at.with_timezone(&Utc))
            .map_err(|_| corrupt("bad timestamp"))
    };
    Ok(Credential {
        created_at: time(&row.created_at)?,
        revoked_at: row.revoked_at.as_deref().map(time).transpose()?,
        hash: row.hash,
        name: row.name,
        kind,
    })
}

fn json_list(values: &[String]) -> Result<String, StoreError> {
    serde_json::to_string(values).map_err(|e| StoreError::Database(format!("encode list: {e}")))
}

fn parse_list(text: Option<&str>) -> Option<Vec<String>> {
    serde_json::from_str(text?).ok()
}
