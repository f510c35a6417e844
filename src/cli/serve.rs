//! `runplane serve`: settings from flags, `RUNPLANE_*` variables and a TOML file, then the
//! server until SIGINT or SIGTERM.
//!
//! Precedence is flags > environment > config file > defaults. The merge is the pure
//! function [`resolve`], which takes the environment as a closure so that tests can check
//! precedence without touching the process environment.

use std::future::Future;
use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Deserialize;
use tracing_subscriber::EnvFilter;
use url::Url;

use super::escape::EscapedFields;
use crate::auth::AuthMode;
use crate::server::{self, Retention, ServeConfig, TlsFiles, DEFAULT_DATA_DIR};
use crate::store::Synchronous;

pub use super::serve_store::StoreKind;
use super::serve_store::{
    parse_lease_seconds, parse_store, parse_synchronous, store_config, store_from_file,
};

/// Environment variable naming the config file, for deployments that configure by
/// environment only.
pub const CONFIG_ENV: &str = "RUNPLANE_CONFIG";

/// Exit code of a bad configuration, distinct from a server that failed at run time so
/// that supervisors can tell "fix the config" from "try again".
const EXIT_BAD_CONFIG: u8 = 2;

/// Flags of `runplane serve`. All optional, so that [`resolve`] can tell "not given" from
/// a default and let the environment and the config file fill the gap.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Address to listen on [env: RUNPLANE_LISTEN] [default: 127.0.0.1:50051]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Directory of the server's files (the admin token, and the SQLite database), created
    /// if missing [env: RUNPLANE_DATA_DIR] [default: ./runplane-data]
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Where runs are stored: `sqlite` (the embedded database in the data directory) or a
    /// PostgreSQL URL (`postgres://user:password@host:port/database`) that several servers
    /// may share [env: RUNPLANE_STORE] [default: sqlite]
    #[arg(long, value_name = "sqlite|postgres://…", value_parser = parse_store)]
    pub store: Option<StoreKind>,
    /// With PostgreSQL: seconds a run's lease lasts unless its server renews it (a third
    /// of it apart), so how soon a surviving server takes over the runs of one that died
    /// [env: RUNPLANE_LEASE_SECONDS] [default: 15]
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub lease_seconds: Option<u64>,
    /// Directory of custom policy profiles (.toml, .yaml); without it only the presets
    /// exist [env: RUNPLANE_POLICY_DIR]
    #[arg(long, value_name = "DIR")]
    pub policy_dir: Option<PathBuf>,
    /// TOML file with any of these settings in snake_case (listen, data_dir, policy_dir,
    /// store, lease_seconds, reattach_grace_seconds, synchronous, max_message_bytes,
    /// shutdown_timeout_seconds,
    /// log_format, metrics_listen, ask_webhooks = [..], public_url, retain_finished_days);
    /// relative paths in it are relative to the file [env: RUNPLANE_CONFIG]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seconds a dropped worker has to re-attach before its run fails as "worker lost"
    /// [env: RUNPLANE_REATTACH_GRACE_SECONDS] [default: 60]
    #[arg(long, value_name = "SECS")]
    pub reattach_grace: Option<u64>,
    /// Disk durability of each commit: normal survives a crash of runplane, full also a
    /// power loss, at several times the cost [env: RUNPLANE_SYNCHRONOUS] [default: normal]
    #[arg(long, value_name = "normal|full", value_parser = parse_synchronous)]
    pub synchronous: Option<Synchronous>,
    /// Largest gRPC message in either direction, in bytes: bounds what one client can make
    /// the server hold [env: RUNPLANE_MAX_MESSAGE_BYTES] [default: 4194304]
    #[arg(long, value_name = "N")]
    pub max_message_bytes: Option<NonZeroUsize>,
    /// Seconds shutdown waits for live sessions before it stops anyway
    /// [env: RUNPLANE_SHUTDOWN_TIMEOUT_SECONDS] [default: 10]
    #[arg(long, value_name = "SECS")]
    pub shutdown_timeout: Option<u64>,
    /// Log format on stderr; the level comes from RUST_LOG (default info)
    /// [env: RUNPLANE_LOG_FORMAT] [default: text]
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Whether every RPC needs a token. `off` lets anyone who reaches the port do
    /// anything, for throwaway local experiments only, and is warned about at every start
    /// [env: RUNPLANE_AUTH] [default: on]
    #[arg(long, value_name = "on|off", value_parser = parse_auth)]
    pub auth: Option<AuthMode>,
    /// PEM certificate chain: serve TLS instead of plaintext (needs --tls-key)
    /// [env: RUNPLANE_TLS_CERT]
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert [env: RUNPLANE_TLS_KEY]
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: worker sessions must present a client certificate signed by
    /// one of them (mTLS) [env: RUNPLANE_TLS_CLIENT_CA]
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics, without a token: bind it to a
    /// private address [env: RUNPLANE_METRICS_LISTEN] [default: not served]
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// POST every new ask and its resolution or expiry as JSON to this http:// URL;
    /// repeatable [env: RUNPLANE_ASK_WEBHOOKS, comma-separated]
    #[arg(long = "ask-webhook", value_name = "URL")]
    pub ask_webhooks: Vec<Url>,
    /// The console's address, for the links in ask webhooks [env: RUNPLANE_PUBLIC_URL]
    /// [default: http://<listen address>]
    #[arg(long, value_name = "URL")]
    pub public_url: Option<Url>,
    /// Delete finished runs, with their events, once they completed more than N days ago:
    /// in the background, at start and hourly [env: RUNPLANE_RETAIN_FINISHED_DAYS]
    /// [default: keep forever]
    #[arg(long, value_name = "N")]
    pub retain_finished_days: Option<NonZeroU32>,
}

/// How the server's logs are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The config file: every setting of `serve`, all optional. Unknown keys are refused so a
/// typo is an error naming the key rather than a setting silently left at its default.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// See `--listen`.
    pub listen: Option<SocketAddr>,
    /// See `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// See `--policy-dir`.
    pub policy_dir: Option<PathBuf>,
    /// See `--reattach-grace`.
    pub reattach_grace_seconds: Option<u64>,
    /// See `--store`.
    #[serde(default, deserialize_with = "store_from_file")]
    pub store: Option<StoreKind>,
    /// See `--synchronous`.
    pub synchronous: Option<Synchronous>,
    /// See `--lease-seconds`.
    pub lease_seconds: Option<u64>,
    /// See `--max-message-bytes`.
    pub max_message_bytes: Option<NonZeroUsize>,
    /// See `--shutdown-timeout`.
    pub shutdown_timeout_seconds: Option<u64>,
    /// See `--log-format`.
    pub log_format: Option<LogFormat>,
    /// See `--auth`.
    #[serde(default, deserialize_with = "auth_from_file")]
    pub auth: Option<AuthMode>,
    /// See `--tls-cert`.
    pub tls_cert: Option<PathBuf>,
    /// See `--tls-key`.
    pub tls_key: Option<PathBuf>,
    /// See `--tls-client-ca`.
    pub tls_client_ca: Option<PathBuf>,
    /// See `--metrics-listen`.
    pub metrics_listen: Option<SocketAddr>,
    /// See `--ask-webhook`.
    pub ask_webhooks: Option<Vec<Url>>,
    /// See `--public-url`.
    pub public_url: Option<Url>,
    /// See `--retain-finished-days`.
    pub retain_finished_days: Option<NonZeroU32>,
}

impl ConfigFile {
    /// Parses the text of a config file; `origin` only names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<ConfigFile, ConfigError> {
        toml::from_str(text).map_err(|err| ConfigError::File {
            path: origin.to_path_buf(),
            message: err.to_string(),
        })
    }

    /// Reads and parses a config file, and makes its relative paths relative to the file:
    /// a config file is written next to what it describes, not for the directory that
    /// happens to be current when the server starts.
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::File {
            path: path.to_path_buf(),
            message: err.to_string(),
        })?;
        let mut file = ConfigFile::parse(&text, path)?;
        let base = path.parent().unwrap_or(Path::new(""));
        // `join` keeps an absolute path as it is.
        for path in [
            &mut file.data_dir,
            &mut file.policy_dir,
            &mut file.tls_cert,
            &mut file.tls_key,
            &mut file.tls_client_ca,
        ] {
            *path = path.take().map(|p| base.join(p));
        }
        Ok(file)
    }
}

/// Why the settings could not be assembled. The message names where the bad value came
/// from: the config file (with the key) or the environment variable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read or parsed (syntax, unknown key, bad value).
    #[error("config file {}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong, from the TOML parser (it names the key and the line).
        message: String,
    },
    /// The TLS settings are incomplete.
    #[error("{0}")]
    Tls(String),
    /// Two settings that cannot go together.
    #[error("{0}")]
    Conflict(String),
    /// An environment variable holds a value its setting cannot take.
    #[error("{var}: invalid value {value:?}: {problem}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it was refused.
        problem: String,
    },
}

/// Merges flags, environment (`env` looks a variable up; empty counts as unset) and the
/// config file over the defaults: flags > env > file > defaults.
pub fn resolve(
    args: ServeArgs,
    env: impl Fn(&str) -> Option<String>,
    file: Option<ConfigFile>,
) -> Result<(ServeConfig, LogFormat), ConfigError> {
    let file = file.unwrap_or_default();
    let env = |var: &str| env(var).filter(|value| !value.is_empty());
    let data_dir = pick(
        args.data_dir,
        &env,
        "RUNPLANE_DATA_DIR",
        from_str,
        file.data_dir,
    )?;
    let mut config = ServeConfig::new(data_dir.unwrap_or_else(|| DEFAULT_DATA_DIR.into()));
    let listen = pick(args.listen, &env, "RUNPLANE_LISTEN", from_str, file.listen)?;
    config.listen = listen.unwrap_or(config.listen);
    config.policy_dir = pick(
        args.policy_dir,
        &env,
        "RUNPLANE_POLICY_DIR",
        from_str,
        file.policy_dir,
    )?;
    let grace = pick(
        args.reattach_grace,
        &env,
        "RUNPLANE_REATTACH_GRACE_SECONDS",
        from_str,
        file.reattach_grace_seconds,
    )?;
    config.reattach_grace = grace.map_or(config.reattach_grace, Duration::from_secs);
    let synchronous = pick(
        args.synchronous,
        &env,
        "RUNPLANE_SYNCHRONOUS",
        parse_synchronous,
        file.synchronous,
    )?;
    let lease = pick(
        args.lease_seconds,
        &env,
        "RUNPLANE_LEASE_SECONDS",
        parse_lease_seconds,
        file.lease_seconds,
    )?;
    let store = pick(args.store, &env, "RUNPLANE_STORE", parse_store, file.store)?;
    config.store = store_config(store, synchronous, lease)?;
    let max_message = pick(
        args.max_message_bytes,
        &env,
        "RUNPLANE_MAX_MESSAGE_BYTES",
        from_str,
        file.max_message_bytes,
    )?;
    config.max_message_bytes = max_message.map_or(config.max_message_bytes, NonZeroUsize::get);
    let shutdown = pick(
        args.shutdown_timeout,
        &env,
        "RUNPLANE_SHUTDOWN_TIMEOUT_SECONDS",
        from_str,
        file.shutdown_timeout_seconds,
    )?;
    config.shutdown_timeout = shutdown.map_or(config.shutdown_timeout, Duration::from_secs);
    let log_format = pick(
        args.log_format,
        &env,
        "RUNPLANE_LOG_FORMAT",
        |value| LogFormat::from_str(value, true),
        file.log_format,
    )?;
    let auth = pick(args.auth, &env, "RUNPLANE_AUTH", parse_auth, file.auth)?;
    config.auth = auth.unwrap_or_default();
    config.tls = tls_files(
        pick(
            args.tls_cert,
            &env,
            "RUNPLANE_TLS_CERT",
            from_str,
            file.tls_cert,
        )?,
        pick(
            args.tls_key,
            &env,
            "RUNPLANE_TLS_KEY",
            from_str,
            file.tls_key,
        )?,
        pick(
            args.tls_client_ca,
            &env,
            "RUNPLANE_TLS_CLIENT_CA",
            from_str,
            file.tls_client_ca,
        )?,
    )?;
    config.metrics_listen = pick(
        args.metrics_listen,
        &env,
        "RUNPLANE_METRICS_LISTEN",
        from_str,
        file.metrics_listen,
    )?;
    let webhooks = (!args.ask_webhooks.is_empty()).then_some(args.ask_webhooks);
    config.ask_webhooks = pick(
        webhooks,
        &env,
        "RUNPLANE_ASK_WEBHOOKS",
        parse_urls,
        file.ask_webhooks,
    )?
    .unwrap_or_default();
    config.public_url = pick(
        args.public_url,
        &env,
        "RUNPLANE_PUBLIC_URL",
        from_str,
        file.public_url,
    )?;
    let retain = pick(
        args.retain_finished_days,
        &env,
        "RUNPLANE_RETAIN_FINISHED_DAYS",
        from_str,
        file.retain_finished_days,
    )?;
    config.retention = retain.map(|days| Retention::days(days.get()));
    Ok((config, log_format.unwrap_or_default()))
}

/// A comma-separated list of URLs (the environment's form of a repeated flag).
fn parse_urls(value: &str) -> Result<Vec<Url>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(from_str)
        .collect()
}

/// TLS settings from the three paths: a certificate needs its key and the other way
/// round, and a client CA means nothing without TLS.
fn tls_files(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
) -> Result<Option<TlsFiles>, ConfigError> {
    let incomplete = |problem: &str| ConfigError::Tls(problem.to_string());
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (None, None) if client_ca.is_some() => Err(incomplete(
            "--tls-client-ca needs --tls-cert and --tls-key: client certificates are part of TLS",
        )),
        (None, None) => Ok(None),
        (Some(_), None) => Err(incomplete("--tls-cert needs --tls-key")),
        (None, Some(_)) => Err(incomplete("--tls-key needs --tls-cert")),
    }
}

/// Parses `on` or `off`.
fn parse_auth(value: &str) -> Result<AuthMode, String> {
    match value {
        "on" => Ok(AuthMode::On),
        "off" => Ok(AuthMode::Off),
        _ => Err("expected on or off".to_string()),
    }
}

/// `auth = "on"` or `"off"` in the config file.
fn auth_from_file<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<AuthMode>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_auth(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// The flag if given, else the environment variable (parsed), else the file's value.
fn pick<T>(
    flag: Option<T>,
    env: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    parse: impl Fn(&str) -> Result<T, String>,
    file: Option<T>,
) -> Result<Option<T>, ConfigError> {
    if flag.is_some() {
        return Ok(flag);
    }
    match env(var) {
        Some(value) => match parse(&value) {
            Ok(parsed) => Ok(Some(parsed)),
            Err(problem) => Err(ConfigError::Env {
                var,
                value,
                problem,
            }),
        },
        None => Ok(file),
    }
}

/// `FromStr` with the error as text, the shape `pick` and clap both take.
fn from_str<T>(value: &str) -> Result<T, String>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    value.parse().map_err(|err: T::Err| err.to_string())
}

/// Everything `serve` needs before the server starts: the config file (from `--config`
/// or `RUNPLANE_CONFIG`) merged with the flags and the process environment.
fn settings(args: ServeArgs) -> Result<(ServeConfig, LogFormat), ConfigError> {
    let env = |var: &str| std::env::var(var).ok().filter(|value| !value.is_empty());
    let path = args
        .config
        .clone()
        .or_else(|| env(CONFIG_ENV).map(PathBuf::from));
    let file = path.as_deref().map(ConfigFile::load).transpose()?;
    resolve(args, env, file)
}

/// `runplane serve`: exit 2 on a bad configuration, 1 when the server fails, 0 after a
/// clean shutdown.
pub(super) async fn run(args: ServeArgs) -> ExitCode {
    let (config, log_format) = match settings(args) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    init_tracing(log_format);
    let shutdown = match shutdown_signal() {
        Ok(shutdown) => shutdown,
        Err(err) => {
            eprintln!("error: cannot listen for shutdown signals: {err}");
            return ExitCode::FAILURE;
        }
    };
    log_start(&config);
    match server::serve(config, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The first log line: the version and where the server listens and keeps its data.
fn log_start(config: &ServeConfig) {
    let policy_dir = config.policy_dir.as_ref().map_or_else(
        || "none (presets only)".into(),
        |dir| dir.display().to_string(),
    );
    tracing::info!(
        listen = %config.listen,
        data_dir = %config.data_dir.display(),
        policy_dir,
        "starting runplane {}",
        env!("CARGO_PKG_VERSION")
    );
}

/// Logs go to stderr, keeping stdout free; the level comes from `RUST_LOG`, `info` when it
/// is unset or invalid (an invalid one is reported rather than silently ignored).
fn init_tracing(format: LogFormat) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) => EnvFilter::try_new(&directives).unwrap_or_else(|err| {
            eprintln!("warning: RUST_LOG={directives:?} is invalid ({err}); using info");
            EnvFilter::new("info")
        }),
        Err(_) => EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never into a log file.
        .with_ansi(std::io::stderr().is_terminal());
    let installed = match format {
        // Fields carry agent text: escaped so a tailed log cannot be rewritten.
        LogFormat::Text => builder.fmt_fields(EscapedFields).try_init(),
        // serde already writes control characters as JSON escapes.
        LogFormat::Json => builder.json().try_init(),
    };
    if let Err(err) = installed {
        eprintln!("warning: logging is not set up: {err}");
    }
}

/// Resolves at the first SIGINT or SIGTERM. The handlers are installed now, before the
/// server starts, so a signal that arrives during startup is not lost.
#[cfg(unix)]
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        let name = tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        };
        tracing::info!(signal = name, "shutting down");
    })
}

/// Resolves at Ctrl-C, the one shutdown signal outside Unix.
#[cfg(not(unix))]
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    Ok(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::info!(signal = "ctrl-c", "shutting down");
        }
    })
}
