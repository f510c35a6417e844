//! Policy versions, on the read pool: each write is one autocommit statement, and a
//! version is stored before the first run that names it.

use deadpool_postgres::Object;

use super::pg_error;
use crate::domain::PolicyVersion;
use crate::store::StoreError;

/// Stores a version unless its hash is stored already (by this process or another).
pub(super) async fn insert(client: &Object, version: &PolicyVersion) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(
            "INSERT INTO policy_versions (hash, name, source, first_seen)
             VALUES ($1, $2, $3, $4) ON CONFLICT (hash) DO NOTHING",
        )
        .await
        .map_err(pg_error("prepare insert policy version"))?;
    client
        .execute(
            &statement,
            &[
                &version.hash,
                &version.name,
                &version.source,
                &version.first_seen,
            ],
        )
        .await
        .map_err(pg_error("insert policy version"))?;
    Ok(())
}

/// The version of a hash.
pub(super) async fn by_hash(
    client: &Object,
    hash: &str,
) -> Result<Option<PolicyVersion>, StoreError> {
    let statement = client
        .prepare_cached("SELECT name, source, first_seen FROM policy_versions WHERE hash = $1")
        .await
        .map_err(pg_error("prepare read policy version"))?;
    let row = client
        .query_opt(&statement, &[&hash])
        .await
        .map_err(pg_error("read policy version"))?;
    row.map(|row| {
        Ok(PolicyVersion {
            hash: hash.to_string(),
            name: row.try_get(0).map_err(pg_error("read policy version"))?,
            source: row.try_get(1).map_err(pg_error("read policy version"))?,
            first_seen: row.try_get(2).map_err(pg_error("read policy version"))?,
        })
    })
    .transpose()
}
