//! `serve`'s store settings: which store (`--store`), and the settings that belong to one
//! store only (`--synchronous` for SQLite, `--lease-seconds` for PostgreSQL), refused
//! with the other.

use std::time::Duration;

use serde::Deserialize;

use super::serve::ConfigError;
use crate::server::{StoreConfig, DEFAULT_LEASE_TTL};
use crate::store::Synchronous;

/// Parses `normal` or `full`, the names the config file uses too.
/// Which store `--store` names. Its `Debug` leaves out a PostgreSQL URL's password.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded SQLite database in the data directory.
    Sqlite,
    /// A PostgreSQL database, by connection URL.
    Postgres(String),
}

impl std::fmt::Debug for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreKind::Sqlite => f.write_str("Sqlite"),
            StoreKind::Postgres(_) => f.write_str("Postgres(<redacted>)"),
        }
    }
}

/// The store's settings; a setting of the other store is refused, not ignored.
pub(super) fn store_config(
    store: Option<StoreKind>,
    synchronous: Option<Synchronous>,
    lease_seconds: Option<u64>,
) -> Result<StoreConfig, ConfigError> {
    match (store, synchronous, lease_seconds) {
        (None | Some(StoreKind::Sqlite), synchronous, None) => Ok(StoreConfig::Sqlite {
            synchronous: synchronous.unwrap_or_default(),
        }),
        (None | Some(StoreKind::Sqlite), _, Some(_)) => Err(ConfigError::Conflict(
            "lease_seconds is for servers sharing PostgreSQL; the embedded SQLite store has \
             one server, which owns every run"
                .into(),
        )),
        (Some(StoreKind::Postgres(url)), None, lease) => Ok(StoreConfig::Postgres {
            url,
            lease_ttl: lease.map_or(DEFAULT_LEASE_TTL, Duration::from_secs),
        }),
        (Some(StoreKind::Postgres(_)), Some(_), _) => Err(ConfigError::Conflict(
            "synchronous sets the SQLite store's durability; on PostgreSQL it is the \
             database's synchronous_commit"
                .into(),
        )),
    }
}

/// A lease of at least one second.
pub(super) fn parse_lease_seconds(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(seconds) => Ok(seconds),
        Err(e) => Err(e.to_string()),
    }
}

/// `sqlite`, or a `postgres://`/`postgresql://` URL.
pub(super) fn parse_store(value: &str) -> Result<StoreKind, String> {
    if value == "sqlite" {
        Ok(StoreKind::Sqlite)
    } else if value.starts_with("postgres://") || value.starts_with("postgresql://") {
        Ok(StoreKind::Postgres(value.to_string()))
    } else {
        Err("expected sqlite or a postgres:// URL".into())
    }
}

/// `store = "…"` in the config file, read as `--store` reads it.
pub(super) fn store_from_file<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<StoreKind>, D::Error> {
    let value = Option::<String>::deserialize(deserializer)?;
    value
        .map(|value| parse_store(&value).map_err(serde::de::Error::custom))
        .transpose()
}

pub(super) fn parse_synchronous(value: &str) -> Result<Synchronous, String> {
    match value {
        "normal" => Ok(Synchronous::Normal),
        "full" => Ok(Synchronous::Full),
        _ => Err("expected normal or full".to_string()),
    }
}
