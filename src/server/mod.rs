//! Assembles and runs the gRPC server: store, coordinator, services, reflection, health,
//! and the operator console (its files, and gRPC-Web for its calls) on the same address.

mod config;
mod console;
mod observe;
mod reload;
mod retention;
mod tls;

pub use config::{
    ServeConfig, StoreConfig, TlsFiles, DEFAULT_ATTACH_TIMEOUT, DEFAULT_DATA_DIR,
    DEFAULT_LEASE_TTL, DEFAULT_LISTEN, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_REATTACH_GRACE,
    DEFAULT_SHUTDOWN_TIMEOUT,
};
pub use retention::{
    Retention, BATCH as RETENTION_BATCH, DEFAULT_RETENTION_INTERVAL, PAUSE as RETENTION_PAUSE,
};

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic_health::server::HealthReporter;
use tonic_web::GrpcWebLayer;
use tower::layer::util::{Identity, Stack};
use tracing::{info, warn};

use self::console::ConsoleLayer;
use crate::auth::{ensure_admin_token, AuthMode, Authenticator, BootstrapError};
use crate::coordinator::{Coordinator, CoordinatorConfig};
use crate::grpc::access::AccessLayer;
use crate::grpc::{pb, AccessApi, PolicyApi, RunApi, WorkerApi};
use crate::metrics::{serve_metrics, Metrics};
use crate::policy::{LiveProfiles, ProfileRegistry};
use crate::store::{
    PostgresStore, PostgresStoreOptions, RunStore, SqliteStore, SqliteStoreOptions,
};
use crate::webhook::{AskNotifier, WebhookError};
use observe::ObservedFeed;

/// The database file inside the data directory.
pub const DATABASE_FILE: &str = "runplane.db";
/// HTTP/2 pings on idle connections, so dead peers and silent NAT drops are noticed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is closed.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The data directory could not be created.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The store could not be opened or restored.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A policy file is invalid; the server does not start on a bad policy.
    #[error(transparent)]
    Policy(#[from] crate::policy::LoadError),
    /// The listen address could not be bound.
    #[error("listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The reflection service could not be built from the descriptor sets.
    #[error("reflection: {0}")]
    Reflection(tonic_reflection::server::Error),
    /// The transport failed.
    #[error("gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The admin token could not be made or checked.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// A TLS file could not be read or used.
    #[error("TLS: {0}")]
    Tls(String),
    /// An ask webhook cannot be posted to.
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    /// The SIGHUP handler could not be installed.
    #[error("listening for SIGHUP: {0}")]
    Signal(std::io::Error),
}

/// A server bound to its address, not yet serving. Tests bind port 0 and read the address.
pub struct BoundServer {
    /// The bound socket.
    listener: TcpListener,
    /// The coordinator the services share (kept to shut it down).
    coordinator: Coordinator,
    /// The store, for the policy service's replays (they read logs, never write).
    store: Arc<dyn RunStore>,
    /// The profiles, for the policy service (which reloads them) and the coordinator.
    profiles: Arc<LiveProfiles>,
    /// Resolves every request's token.
    auth: Arc<Authenticator>,
    /// Settings.
    config: ServeConfig,
    /// What the server counts.
    metrics: Arc<Metrics>,
    /// The `/metrics` listener, when `metrics_listen` is set.
    metrics_listener: Option<TcpListener>,
    /// The retention task, when `retention` is set; stopped when this is dropped, which
    /// `serve` does when it returns.
    retention: Option<retention::RetentionTask>,
}

/// Opens the store, loads the policies, restores live runs and binds the address.
pub async fn bind(config: ServeConfig) -> Result<BoundServer, ServeError> {
    create_data_dir(&config)?;
    crate::webhook::check_urls(&config.ask_webhooks)?;
    // Policies first: a bad policy file fails before the database is opened or migrated.
    let profiles = load_profiles(&config)?;
    let metrics = new_metrics(&profiles.current());
    let store = open_store(&config, &metrics).await?;
    let auth = Arc::new(Authenticator::new(Arc::clone(&store), config.auth));
    // Before the address is bound: a client that can connect finds the token file there.
    bootstrap_admin(&auth, &config).await?;
    bind_parts(config, store, profiles, auth, metrics).await
}

/// As [`bind`], on a store the caller opened instead of the data directory's SQLite file
/// (`store` is then not used, and no admin token file is made: the
/// caller makes its tokens through [`BoundServer::authenticator`]). The benchmark uses it to measure the
/// server with a store that does not write, which tells the store's share of the cost.
pub async fn bind_with_store(
    config: ServeConfig,
    store: Arc<dyn RunStore>,
) -> Result<BoundServer, ServeError> {
    crate::webhook::check_urls(&config.ask_webhooks)?;
    let profiles = load_profiles(&config)?;
    // The caller's store reports no group commits: its options are its own.
    let metrics = new_metrics(&profiles.current());
    let auth = Arc::new(Authenticator::new(Arc::clone(&store), config.auth));
    bind_parts(config, store, profiles, auth, metrics).await
}

/// The metrics, with the decision counters of every loaded profile made up front.
fn new_metrics(profiles: &ProfileRegistry) -> Arc<Metrics> {
    let names = profiles.names();
    Arc::new(Metrics::new(names.iter().map(String::as_str)))
}

/// Creates the data directory if it is missing.
fn create_data_dir(config: &ServeConfig) -> Result<(), ServeError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|source| ServeError::DataDir {
        path: config.data_dir.clone(),
        source,
    })
}

/// The presets and the profiles of the policy directory.
fn load_profiles(config: &ServeConfig) -> Result<Arc<LiveProfiles>, ServeError> {
    Ok(Arc::new(LiveProfiles::load(config.policy_dir.as_deref())?))
}

/// The store `serve` runs on: the SQLite database in the data directory, or PostgreSQL.
/// Any other store comes in through [`bind_with_store`]. Only SQLite reports its commit
/// groups to the metrics.
async fn open_store(
    config: &ServeConfig,
    metrics: &Arc<Metrics>,
) -> Result<Arc<dyn RunStore>, ServeError> {
    match &config.store {
        StoreConfig::Sqlite { synchronous } => {
            let mut options = SqliteStoreOptions::new(config.data_dir.join(DATABASE_FILE));
            options.synchronous = *synchronous;
            options.observer = Some(Arc::clone(metrics) as _);
            Ok(Arc::new(SqliteStore::open(options)?))
        }
        StoreConfig::Postgres { url, lease_ttl } => {
            let mut options = PostgresStoreOptions::new(url.clone());
            options.lease_ttl = *lease_ttl;
            Ok(Arc::new(PostgresStore::open(options).await?))
        }
    }
}

/// Makes the admin token file on the first start with authentication on, and checks it on
/// later ones.
async fn bootstrap_admin(auth: &Authenticator, config: &ServeConfig) -> Result<(), ServeError> {
    if auth.enabled() {
        ensure_admin_token(auth, &config.data_dir).await?;
    }
    Ok(())
}

/// Binds the addresses and restores live runs on `store`. The address is bound first: the
/// ask webhooks link to it, and restoring can already end asks.
async fn bind_parts(
    config: ServeConfig,
    store: Arc<dyn RunStore>,
    profiles: Arc<LiveProfiles>,
    auth: Arc<Authenticator>,
    metrics: Arc<Metrics>,
) -> Result<BoundServer, ServeError> {
    let listener = listen(config.listen).await?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(listen(addr).await?),
        None => None,
    };
    // Read before any actor runs, so that every ask closed from here on is counted off it.
    metrics.set_pending_asks(store.pending_asks(None).await?.len());
    let asks = if config.ask_webhooks.is_empty() {
        None
    } else {
        let public_url = public_url(&config, &listener);
        Some(AskNotifier::start(
            &config.ask_webhooks,
            public_url,
            Arc::clone(&store),
            Arc::clone(&metrics),
        )?)
    };
    let feed = Arc::new(ObservedFeed::new(Arc::clone(&metrics), asks));
    // Started once the coordinator has restored the live runs, so its first pass does not
    // compete with the restore's reads.
    let retention = config
        .retention
        .map(|retention| (Arc::clone(&store), retention));
    let coordinator = Coordinator::start_with_feed(
        Arc::clone(&store),
        feed,
        Arc::clone(&profiles),
        CoordinatorConfig {
            reattach_grace: config.reattach_grace,
            issue_worker_tokens: auth.enabled(),
            metrics: Arc::clone(&metrics),
        },
    )
    .await?;
    let retention = retention
        .map(|(store, retention)| retention::spawn(store, retention, Arc::clone(&metrics)));
    Ok(BoundServer {
        listener,
        retention,
        coordinator,
        store,
        profiles,
        auth,
        config,
        metrics,
        metrics_listener,
    })
}

/// The console's address for webhook links: the setting, else the bound address.
fn public_url(config: &ServeConfig, listener: &TcpListener) -> String {
    if let Some(url) = &config.public_url {
        return url.as_str().trim_end_matches('/').to_string();
    }
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let addr = listener.local_addr().unwrap_or(config.listen);
    format!("{scheme}://{addr}")
}

/// Binds the listen address.
async fn listen(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Binds and serves until `shutdown` resolves (see `BoundServer::serve`), reloading the
/// policy directory at every SIGHUP (on Unix).
pub async fn serve(
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    // Before anything slow: a SIGHUP during startup must not end the process, which is
    // what it does without a handler.
    #[cfg(unix)]
    let hangups = reload::on_hangup().map_err(ServeError::Signal)?;
    let bound = bind(config).await?;
    #[cfg(unix)]
    let reloads = hangups.spawn(bound.profiles());
    let served = bound.serve(shutdown).await;
    #[cfg(unix)]
    reloads.abort();
    served
}

impl BoundServer {
    /// The address clients connect to (the real port when bound to port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        self.listener
            .local_addr()
            .map_err(|source| ServeError::Bind {
                addr: self.config.listen,
                source,
            })
    }

    /// The coordinator the services share (to ask it what the API does not show, such as
    /// which runs this process owns).
    pub fn coordinator(&self) -> Coordinator {
        self.coordinator.clone()
    }

    /// The profiles new runs get, reloadable.
    pub fn profiles(&self) -> Arc<LiveProfiles> {
        Arc::clone(&self.profiles)
    }

    /// Checks tokens and makes operator tokens, against this server's store.
    pub fn authenticator(&self) -> Arc<Authenticator> {
        Arc::clone(&self.auth)
    }

    /// Where `/metrics` is served (the real port when bound to port 0); `None`: not served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|listener| listener.local_addr().ok())
    }

    /// Serves until `shutdown` resolves; then tells live sessions to re-attach later, and
    /// waits at most `shutdown_timeout` for connections to close before returning anyway.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let BoundServer {
            listener,
            coordinator,
            store,
            profiles,
            auth,
            config,
            metrics,
            metrics_listener,
            retention: _retention,
        } = self;
        let (health, health_service) = tonic_health::server::health_reporter();
        report_serving(&health).await;
        let routes = routes(&coordinator, store, profiles, &auth, &config, &metrics)?
            .add_service(health_service);
        let addr = listener.local_addr().ok();
        warn_about_exposure(&config, addr);
        info!(addr = ?addr, data_dir = %config.data_dir.display(), "runplane serving");
        // Dropped when `serve` returns, which stops the metrics listener too.
        let (_stop_metrics, metrics_stopped) = oneshot::channel::<()>();
        if let Some(listener) = metrics_listener {
            info!(addr = ?listener.local_addr().ok(), "metrics at /metrics");
            tokio::spawn(serve_metrics(listener, Arc::clone(&metrics), async {
                let _ = metrics_stopped.await;
            }));
        }
        let (stop_accepting, stopped) = oneshot::channel::<()>();
        let server = transport(&config, auth, metrics)?
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming(listener), async {
                let _ = stopped.await;
            });
        tokio::pin!(server);
        tokio::select! {
            result = &mut server => return result.map_err(ServeError::from),
            () = shutdown => {}
        }
        shut_down(
            &health,
            &coordinator,
            stop_accepting,
            config.shutdown_timeout,
            server,
        )
        .await
    }
}

/// After the shutdown signal: reports not serving, tells live sessions to re-attach later,
/// stops accepting and waits for `server`'s connections to close, all within `timeout`.
async fn shut_down(
    health: &HealthReporter,
    coordinator: &Coordinator,
    stop_accepting: oneshot::Sender<()>,
    timeout: Duration,
    mut server: Pin<&mut impl Future<Output = Result<(), tonic::transport::Error>>>,
) -> Result<(), ServeError> {
    info!("shutting down: telling live sessions to re-attach later");
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    // One deadline for the whole shutdown, so it never takes longer than the setting.
    let deadline = tokio::time::Instant::now() + timeout;
    coordinator.shutdown(timeout).await;
    let _ = stop_accepting.send(());
    match tokio::time::timeout_at(deadline, &mut server).await {
        Ok(result) => result?,
        Err(_) => warn!("connections still open after the shutdown timeout; closing them"),
    }
    info!("stopped");
    Ok(())
}

/// Marks runplane's services serving in the health service.
async fn report_serving(health: &HealthReporter) {
    health
        .set_serving::<pb::run_service_server::RunServiceServer<RunApi>>()
        .await;
    health
        .set_serving::<pb::worker_service_server::WorkerServiceServer<WorkerApi>>()
        .await;
    health
        .set_serving::<pb::policy_service_server::PolicyServiceServer<PolicyApi>>()
        .await;
}

/// Reflection and runplane's services, each held to the message size limit in both
/// directions.
fn routes(
    coordinator: &Coordinator,
    store: Arc<dyn RunStore>,
    profiles: Arc<LiveProfiles>,
    auth: &Arc<Authenticator>,
    config: &ServeConfig,
    metrics: &Arc<Metrics>,
) -> Result<Routes, ServeError> {
    let limit = config.max_message_bytes;
    let reflection_v1 = reflection().build_v1().map_err(ServeError::Reflection)?;
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .map_err(ServeError::Reflection)?;
    let run_api = pb::run_service_server::RunServiceServer::new(RunApi {
        coordinator: coordinator.clone(),
        max_message_bytes: limit,
    })
    .max_decoding_message_size(limit)
    .max_encoding_message_size(limit);
    let worker_api = pb::worker_service_server::WorkerServiceServer::new(WorkerApi {
        coordinator: coordinator.clone(),
        auth: Arc::clone(auth),
        require_client_cert: config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        attach_timeout: config.attach_timeout,
        metrics: Arc::clone(metrics),
    })
    .max_decoding_message_size(limit)
    .max_encoding_message_size(limit);
    let policy_api =
        pb::policy_service_server::PolicyServiceServer::new(PolicyApi { profiles, store })
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit);
    let access_api = pb::access_service_server::AccessServiceServer::new(AccessApi {
        auth: Arc::clone(auth),
    })
    .max_decoding_message_size(limit)
    .max_encoding_message_size(limit);
    Ok(Routes::default()
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(run_api)
        .add_service(worker_api)
        .add_service(policy_api)
        .add_service(access_api))
}

/// The layers in front of the services, outermost first: the console's files (every `GET`),
/// gRPC-Web turned into gRPC, the credential check.
type Layers = Stack<AccessLayer, Stack<GrpcWebLayer, Stack<ConsoleLayer, Identity>>>;

/// The transport every service is served through: TLS when configured, every call's
/// credential checked before any service runs, HTTP/2 keepalive pings, Nagle's algorithm
/// off. HTTP/1.1 is accepted too, for browsers: the console's page and its gRPC-Web calls
/// (docs/CONSOLE.md).
fn transport(
    config: &ServeConfig,
    auth: Arc<Authenticator>,
    metrics: Arc<Metrics>,
) -> Result<Server<Layers>, ServeError> {
    let mut builder = Server::builder();
    if let Some(files) = &config.tls {
        builder = builder.tls_config(tls::server_config(files)?)?;
    }
    Ok(builder
        .accept_http1(true)
        .layer(ConsoleLayer)
        .layer(GrpcWebLayer::new())
        .layer(AccessLayer::new(auth, metrics))
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .tcp_nodelay(true))
}

/// The accepted connections, with Nagle's algorithm off: the builder's `tcp_nodelay` is
/// not applied to a listener handed over like this, and without it a unary response
/// (headers, message and trailers written separately) waits on the client's delayed ACK,
/// about 40 ms a call.
fn incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Warns when the server is open to more than it should be: authentication off (at every
/// start, so it is never forgotten), or plaintext on an address other hosts can reach.
fn warn_about_exposure(config: &ServeConfig, addr: Option<SocketAddr>) {
    if config.auth == AuthMode::Off {
        warn!(
            "authentication is OFF (--auth off): anyone who reaches this port can start and \
             cancel runs and answer asks; use this only for throwaway local experiments"
        );
    }
    let loopback = addr.is_some_and(|a| a.ip().is_loopback());
    if config.tls.is_none() && !loopback {
        warn!(
            addr = ?addr,
            "listening beyond loopback without TLS: tokens and tool calls cross the network \
             in the clear; pass --tls-cert and --tls-key"
        );
    }
}

/// Reflection over runplane's API and the health service, so `grpcurl list` shows both.
fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}
