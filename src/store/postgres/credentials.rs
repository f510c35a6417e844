//! Credentials: token hashes and what each stands for, on the read pool (each write is one
//! autocommit statement; nothing orders them against run commits).

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;

use super::pg_error;
use crate::domain::{Credential, CredentialKind, Role, Scope};
use crate::store::StoreError;

const COLUMNS: &str = "hash, name, kind, role, teams, projects, run_id, created_at, revoked_at";

/// Inserts a credential; `NameTaken` when a live one has its name, or its hash is stored.
pub(super) async fn insert(client: &Object, credential: &Credential) -> Result<(), StoreError> {
    let (kind, role, teams, projects, run_id) = match &credential.kind {
        CredentialKind::Operator { role, scope } => (
            "operator",
            Some(role.as_str()),
            Some(&scope.teams),
            Some(&scope.projects),
            None,
        ),
        CredentialKind::Worker { run_id } => ("worker", None, None, None, Some(run_id.as_str())),
    };
    let statement = client
        .prepare_cached(&format!(
            "INSERT INTO credentials ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .await
        .map_err(pg_error("prepare insert credential"))?;
    let inserted = client
        .execute(
            &statement,
            &[
                &credential.hash,
                &credential.name,
                &kind,
                &role,
                &teams,
                &projects,
                &run_id,
                &credential.created_at.to_rfc3339(),
                &credential.revoked_at.map(|at| at.to_rfc3339()),
            ],
        )
        .await;
    match inserted {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            Err(StoreError::NameTaken(credential.name.clone()))
        }
        Err(e) => Err(pg_error("insert credential")(e)),
    }
}

/// The credential of a token hash.
pub(super) async fn by_hash(client: &Object, hash: &str) -> Result<Option<Credential>, StoreError> {
    let statement = client
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM credentials WHERE hash = $1"
        ))
        .await
        .map_err(pg_error("prepare read credential"))?;
    client
        .query_opt(&statement, &[&hash])
        .await
        .map_err(pg_error("read credential"))?
        .map(|row| decode(&row))
        .transpose()
}

/// Every operator credential, oldest first (ties by name), as SQLite orders them.
pub(super) async fn operators(client: &Object) -> Result<Vec<Credential>, StoreError> {
    let statement = client
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM credentials WHERE kind = 'operator'
             ORDER BY created_at COLLATE \"C\", name COLLATE \"C\""
        ))
        .await
        .map_err(pg_error("prepare list credentials"))?;
    client
        .query(&statement, &[])
        .await
        .map_err(pg_error("list credentials"))?
        .iter()
        .map(decode)
        .collect()
}

/// Marks the live operator credential `name` revoked and returns it.
pub(super) async fn revoke(
    client: &Object,
    name: &str,
    at: DateTime<Utc>,
) -> Result<Option<Credential>, StoreError> {
    let statement = client
        .prepare_cached(&format!(
            "UPDATE credentials SET revoked_at = $2
             WHERE name = $1 AND kind = 'operator' AND revoked_at IS NULL
             RETURNING {COLUMNS}"
        ))
        .await
        .map_err(pg_error("prepare revoke credential"))?;
    client
        .query_opt(&statement, &[&name, &at.to_rfc3339()])
        .await
        .map_err(pg_error("revoke credential"))?
        .map(|row| decode(&row))
        .transpose()
}

fn decode(row: &Row) -> Result<Credential, StoreError> {
    let name: String = row.get(1);
    let corrupt = |what: &str| StoreError::Corrupt {
        run_id: None,
        seq: None,
        detail: format!("credential {name:?}: {what}"),
    };
    let kind: &str = row.get(2);
    let role: Option<&str> = row.get(3);
    let run_id: Option<String> = row.get(6);
    let kind = match (kind, role, run_id) {
        ("operator", Some(role), None) => CredentialKind::Operator {
            role: role.parse::<Role>().map_err(|e| corrupt(&e.to_string()))?,
            scope: Scope {
                teams: row
                    .get::<_, Option<Vec<String>>>(4)
                    .ok_or_else(|| corrupt("no teams"))?,
                projects: row
                    .get::<_, Option<Vec<String>>>(5)
                    .ok_or_else(|| corrupt("no projects"))?,
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
        created_at: time(row.get(7))?,
        revoked_at: row.get::<_, Option<&str>>(8).map(time).transpose()?,
        hash: row.get(0),
        name: name.clone(),
        kind,
    })
}
