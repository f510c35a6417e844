//! Policy versions: written on the writer's connection between commit groups, read on the
//! read pool.

use rusqlite::{params, Connection, OptionalExtension};

use super::db_err;
use crate::domain::PolicyVersion;
use crate::store::StoreError;

/// Stores a version unless its hash is stored already.
pub(super) fn insert(conn: &Connection, version: &PolicyVersion) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO policy_versions (hash, name, source, first_seen) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (hash) DO NOTHING",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            version.hash,
            version.name,
            version.source,
            version.first_seen.to_rfc3339(),
        ])
    })
    .map_err(db_err("insert policy version"))?;
    Ok(())
}

/// The version of a hash.
pub(super) fn by_hash(conn: &Connection, hash: &str) -> Result<Option<PolicyVersion>, StoreError> {
    let row = conn
        .prepare_cached("SELECT name, source, first_seen FROM policy_versions WHERE hash = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([hash], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                ))
            })
            .optional()
        })
        .map_err(db_err("read policy version"))?;
    let Some((name, source, first_seen)) = row else {
        return Ok(None);
    };
    let first_seen = chrono::DateTime::parse_from_rfc3339(&first_seen)
        .map_err(|e| StoreError::Corrupt {
            run_id: None,
            seq: None,
            detail: format!("policy version {hash}: first_seen {first_seen:?}: {e}"),
        })?
        .to_utc();
    Ok(Some(PolicyVersion {
        hash: hash.to_string(),
        name,
        source,
        first_seen,
    }))
}
