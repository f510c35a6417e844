//! Settings of `runplane serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::auth::AuthMode;
use crate::store::Synchronous;

/// Default address: loopback only, so a fresh `serve` is not reachable from the network.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
/// Default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "./runplane-data";
/// How long a run waits for its worker to re-attach before it fails with "worker lost".
pub const DEFAULT_REATTACH_GRACE: Duration = Duration::from_secs(60);
/// How long a run's lease on PostgreSQL lasts unless its server renews it.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);
/// Largest gRPC message accepted or sent (4 MiB, gRPC's customary default): bounds the
/// memory one bad client can make the server hold.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// How long a new session may take to send its `attach`: a connection that opens streams
/// and never attaches (no credentials are checked before the attach) holds nothing longer.
pub const DEFAULT_ATTACH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long shutdown waits for sessions to drain before it stops anyway.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything the server needs to start. Built by the CLI from flags, `RUNPLANE_*`
/// environment variables and a TOML config file (flags win), or directly by tests.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to listen on; port 0 picks a free port (tests).
    pub listen: SocketAddr,
    /// Directory of the server's files (the admin token, and the SQLite database when the
    /// store is SQLite); created if missing.
    pub data_dir: PathBuf,
    /// Which store, with its own settings.
    pub store: StoreConfig,
    /// Directory of custom policy profiles (`.toml`, `.yaml`); `None`: presets only.
    pub policy_dir: Option<PathBuf>,
    /// How long a dropped worker may take to re-attach.
    pub reattach_grace: Duration,
    /// Largest gRPC message, both directions.
    pub max_message_bytes: usize,
    /// Bound on the graceful-shutdown wait.
    pub shutdown_timeout: Duration,
    /// How long a session may take to send its first message.
    pub attach_timeout: Duration,
    /// Whether every RPC needs credentials (on unless explicitly turned off).
    pub auth: AuthMode,
    /// TLS for the listener; `None`: plaintext (warned about off loopback).
    pub tls: Option<TlsFiles>,
    /// Where `GET /metrics` is served (plain HTTP/1.1, no token); `None`: not served. The
    /// metrics are counted either way.
    pub metrics_listen: Option<SocketAddr>,
    /// Receivers of the ask webhooks (`http://` only).
    pub ask_webhooks: Vec<url::Url>,
    /// The console's address, for the links in ask webhooks; `None`: `http://` (or
    /// `https://` with TLS) and the bound listen address.
    pub public_url: Option<url::Url>,
    /// Deletes finished runs once they completed this long ago; `None`: keeps them forever.
    pub retention: Option<super::Retention>,
}

/// The store `serve` runs on. Each store's settings live in its own variant, so a setting
/// of one store is never read by another.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// The embedded SQLite database `runplane.db` in the data directory.
    Sqlite {
        /// Disk durability of each group commit.
        synchronous: Synchronous,
    },
    /// A PostgreSQL database several servers may share.
    Postgres {
        /// Its connection string (`postgres://user:password@host:port/database`); may
        /// hold a password, so it is never printed.
        url: String,
        /// How long a run's lease lasts unless renewed: how soon another server takes
        /// over the runs of one that died.
        lease_ttl: Duration,
    },
}

/// Without the connection string: it may hold a password.
impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreConfig::Sqlite { synchronous } => f
                .debug_struct("Sqlite")
                .field("synchronous", synchronous)
                .finish(),
            StoreConfig::Postgres { lease_ttl, .. } => f
                .debug_struct("Postgres")
                .field("url", &"<redacted>")
                .field("lease_ttl", lease_ttl)
                .finish(),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig::Sqlite {
            synchronous: Synchronous::default(),
        }
    }
}

/// The PEM files of the server's TLS identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// The private key.
    pub key: PathBuf,
    /// CA certificates that sign worker client certificates; when set, a worker session
    /// needs a client certificate (mTLS) signed by one of them.
    pub client_ca: Option<PathBuf>,
}

impl ServeConfig {
    /// Defaults for everything but the data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> ServeConfig {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            data_dir: data_dir.into(),
            policy_dir: None,
            reattach_grace: DEFAULT_REATTACH_GRACE,
            store: StoreConfig::default(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            attach_timeout: DEFAULT_ATTACH_TIMEOUT,
            auth: AuthMode::On,
            tls: None,
            metrics_listen: None,
            ask_webhooks: Vec::new(),
            public_url: None,
            retention: None,
        }
    }
}
