//! `runplane serve` settings: flags > environment > config file > defaults, and errors that
//! name the bad key, flag or variable. The environment is a closure here, never the
//! process's, so these tests cannot disturb each other.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use runplane::cli::serve::{resolve, ConfigFile, LogFormat, ServeArgs};
use runplane::cli::{Cli, Command};
use runplane::server::{ServeConfig, StoreConfig, DEFAULT_LEASE_TTL, DEFAULT_MAX_MESSAGE_BYTES};
use runplane::store::Synchronous;

/// The `serve` flags of a command line.
fn flags(args: &[&str]) -> ServeArgs {
    let argv = ["runplane", "serve"].iter().chain(args);
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Serve(args),
        }) => args,
        Ok(other) => panic!("not serve: {other:?}"),
        Err(err) => panic!("{err}"),
    }
}

/// An environment of exactly these variables.
fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| vars.get(name).cloned()
}

fn file(text: &str) -> ConfigFile {
    ConfigFile::parse(text, Path::new("runplane.toml")).unwrap()
}

const FILE: &str = r#"
listen = "127.0.0.1:3000"
data_dir = "/from/file"
reattach_grace_seconds = 30
"#;

const ENV: &[(&str, &str)] = &[
    ("RUNPLANE_LISTEN", "127.0.0.1:2000"),
    ("RUNPLANE_DATA_DIR", "/from/env"),
    ("RUNPLANE_REATTACH_GRACE_SECONDS", "20"),
];

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

#[test]
fn defaults_when_nothing_is_set() {
    let (config, log) = resolve(flags(&[]), env(&[]), None).unwrap();
    let defaults = ServeConfig::new("./runplane-data");
    assert_eq!(config.listen, addr("127.0.0.1:50051"));
    assert_eq!(config.data_dir, PathBuf::from("./runplane-data"));
    assert_eq!(config.policy_dir, None);
    assert_eq!(config.reattach_grace, Duration::from_secs(60));
    assert_eq!(config.store, defaults.store);
    assert_eq!(config.max_message_bytes, DEFAULT_MAX_MESSAGE_BYTES);
    assert_eq!(config.shutdown_timeout, defaults.shutdown_timeout);
    assert_eq!(log, LogFormat::Text);
}

#[test]
fn file_overrides_defaults() {
    let (config, _) = resolve(flags(&[]), env(&[]), Some(file(FILE))).unwrap();
    assert_eq!(config.listen, addr("127.0.0.1:3000"));
    assert_eq!(config.data_dir, PathBuf::from("/from/file"));
    assert_eq!(config.reattach_grace, Duration::from_secs(30));
}

#[test]
fn env_overrides_file() {
    let (config, _) = resolve(flags(&[]), env(ENV), Some(file(FILE))).unwrap();
    assert_eq!(config.listen, addr("127.0.0.1:2000"));
    assert_eq!(config.data_dir, PathBuf::from("/from/env"));
    assert_eq!(config.reattach_grace, Duration::from_secs(20));
}

#[test]
fn flags_override_env_and_file() {
    let args = flags(&[
        "--listen",
        "127.0.0.1:1000",
        "--data-dir",
        "/from/flag",
        "--reattach-grace",
        "10",
    ]);
    let (config, _) = resolve(args, env(ENV), Some(file(FILE))).unwrap();
    assert_eq!(config.listen, addr("127.0.0.1:1000"));
    assert_eq!(config.data_dir, PathBuf::from("/from/flag"));
    assert_eq!(config.reattach_grace, Duration::from_secs(10));
}

#[test]
fn each_setting_is_taken_from_its_own_highest_source() {
    // The flag sets only the address; the rest falls through to env, then to the file.
    let args = flags(&["--listen", "127.0.0.1:1000"]);
    let vars = env(&[("RUNPLANE_DATA_DIR", "/from/env")]);
    let (config, _) = resolve(args, vars, Some(file(FILE))).unwrap();
    assert_eq!(config.listen, addr("127.0.0.1:1000"));
    assert_eq!(config.data_dir, PathBuf::from("/from/env"));
    assert_eq!(config.reattach_grace, Duration::from_secs(30));
}

#[test]
fn an_empty_variable_counts_as_unset() {
    let vars = env(&[("RUNPLANE_LISTEN", ""), ("RUNPLANE_DATA_DIR", "")]);
    let (config, _) = resolve(flags(&[]), vars, Some(file(FILE))).unwrap();
    assert_eq!(config.listen, addr("127.0.0.1:3000"));
    assert_eq!(config.data_dir, PathBuf::from("/from/file"));
}

#[test]
fn every_file_key_is_read() {
    let text = r#"
        listen = "0.0.0.0:7000"
        data_dir = "/d"
        policy_dir = "/p"
        reattach_grace_seconds = 5
        synchronous = "full"
        max_message_bytes = 1024
        shutdown_timeout_seconds = 3
        log_format = "json"
    "#;
    let (config, log) = resolve(flags(&[]), env(&[]), Some(file(text))).unwrap();
    assert_eq!(config.listen, addr("0.0.0.0:7000"));
    assert_eq!(config.policy_dir, Some(PathBuf::from("/p")));
    assert_eq!(
        config.store,
        StoreConfig::Sqlite {
            synchronous: Synchronous::Full
        }
    );
    assert_eq!(config.max_message_bytes, 1024);
    assert_eq!(config.shutdown_timeout, Duration::from_secs(3));
    assert_eq!(log, LogFormat::Json);
}

#[test]
fn every_variable_is_read() {
    let vars = env(&[
        ("RUNPLANE_POLICY_DIR", "/p"),
        ("RUNPLANE_SYNCHRONOUS", "full"),
        ("RUNPLANE_MAX_MESSAGE_BYTES", "2048"),
        ("RUNPLANE_SHUTDOWN_TIMEOUT_SECONDS", "4"),
        ("RUNPLANE_LOG_FORMAT", "json"),
    ]);
    let (config, log) = resolve(flags(&[]), vars, None).unwrap();
    assert_eq!(config.policy_dir, Some(PathBuf::from("/p")));
    assert_eq!(
        config.store,
        StoreConfig::Sqlite {
            synchronous: Synchronous::Full
        }
    );
    assert_eq!(config.max_message_bytes, 2048);
    assert_eq!(config.shutdown_timeout, Duration::from_secs(4));
    assert_eq!(log, LogFormat::Json);
}

#[test]
fn an_unknown_key_in_the_file_is_an_error_naming_it() {
    let err = ConfigFile::parse("lisen = \"127.0.0.1:1\"\n", Path::new("my.toml")).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("lisen"), "{message}");
    assert!(message.contains("my.toml"), "{message}");
}

#[test]
fn a_bad_value_in_the_file_is_an_error_naming_the_key() {
    let err = ConfigFile::parse("synchronous = \"sometimes\"\n", Path::new("my.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("synchronous"), "{err}");
}

#[test]
fn a_bad_listen_flag_is_an_error_naming_the_flag() {
    let err = Cli::try_parse_from(["runplane", "serve", "--listen", "nowhere"]).unwrap_err();
    assert!(err.to_string().contains("--listen"), "{err}");
}

#[test]
fn a_bad_listen_variable_is_an_error_naming_the_variable() {
    let vars = env(&[("RUNPLANE_LISTEN", "nowhere")]);
    let err = resolve(flags(&[]), vars, None).unwrap_err().to_string();
    assert!(err.contains("RUNPLANE_LISTEN"), "{err}");
    assert!(err.contains("nowhere"), "{err}");
}

#[test]
fn a_bad_variable_is_an_error_even_when_the_file_is_fine() {
    let vars = env(&[("RUNPLANE_REATTACH_GRACE_SECONDS", "soon")]);
    let err = resolve(flags(&[]), vars, Some(file(FILE))).unwrap_err();
    assert!(
        err.to_string().contains("RUNPLANE_REATTACH_GRACE_SECONDS"),
        "{err}"
    );
}

#[test]
fn a_flag_hides_a_bad_variable() {
    // The flag wins, so the variable is never read, let alone parsed.
    let vars = env(&[("RUNPLANE_LISTEN", "nowhere")]);
    let (config, _) = resolve(flags(&["--listen", "127.0.0.1:1000"]), vars, None).unwrap();
    assert_eq!(config.listen, addr("127.0.0.1:1000"));
}

#[test]
fn zero_message_bytes_is_refused() {
    assert!(Cli::try_parse_from(["runplane", "serve", "--max-message-bytes", "0"]).is_err());
    let vars = env(&[("RUNPLANE_MAX_MESSAGE_BYTES", "0")]);
    let err = resolve(flags(&[]), vars, None).unwrap_err();
    assert!(
        err.to_string().contains("RUNPLANE_MAX_MESSAGE_BYTES"),
        "{err}"
    );
}

#[test]
fn relative_paths_in_a_loaded_file_are_relative_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runplane.toml");
    std::fs::write(
        &path,
        "data_dir = \"data\"\npolicy_dir = \"/abs/policies\"\n",
    )
    .unwrap();
    let loaded = ConfigFile::load(&path).unwrap();
    assert_eq!(loaded.data_dir, Some(dir.path().join("data")));
    assert_eq!(loaded.policy_dir, Some(PathBuf::from("/abs/policies")));
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let err = ConfigFile::load(Path::new("/nonexistent/runplane.toml")).unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/runplane.toml"),
        "{err}"
    );
}

#[test]
fn the_store_comes_from_the_flag_the_variable_or_the_file() {
    let url = "postgres://runplane:pw@db:5432/runplane";
    let postgres = StoreConfig::Postgres {
        url: url.into(),
        lease_ttl: DEFAULT_LEASE_TTL,
    };
    let from_file = file(&format!("store = \"{url}\"\n"));
    let (config, _) = resolve(flags(&[]), env(&[]), Some(from_file)).unwrap();
    assert_eq!(config.store, postgres);
    let (config, _) = resolve(flags(&[]), env(&[("RUNPLANE_STORE", url)]), None).unwrap();
    assert_eq!(config.store, postgres);
    let (config, _) = resolve(
        flags(&["--store", "sqlite"]),
        env(&[("RUNPLANE_STORE", url)]),
        None,
    )
    .unwrap();
    assert_eq!(config.store, StoreConfig::default());
    // The password is never printed.
    assert_eq!(
        format!("{postgres:?}"),
        "Postgres { url: \"<redacted>\", lease_ttl: 15s }"
    );
    let err = ConfigFile::parse("store = \"oracle\"\n", Path::new("my.toml")).unwrap_err();
    assert!(
        err.to_string()
            .contains("expected sqlite or a postgres:// URL"),
        "{err}"
    );
}

#[test]
fn the_lease_time_is_a_postgres_setting_only() {
    let url = "postgres://db/runplane";
    let (config, _) = resolve(
        flags(&["--store", url, "--lease-seconds", "3"]),
        env(&[]),
        None,
    )
    .unwrap();
    assert_eq!(
        config.store,
        StoreConfig::Postgres {
            url: url.into(),
            lease_ttl: Duration::from_secs(3),
        }
    );
    let from_file = file(&format!("store = \"{url}\"\nlease_seconds = 7\n"));
    let (config, _) = resolve(flags(&[]), env(&[]), Some(from_file)).unwrap();
    assert!(
        matches!(config.store, StoreConfig::Postgres { lease_ttl, .. } if lease_ttl == Duration::from_secs(7))
    );
    let err = resolve(flags(&["--lease-seconds", "3"]), env(&[]), None).unwrap_err();
    assert!(
        err.to_string()
            .contains("lease_seconds is for servers sharing PostgreSQL"),
        "{err}"
    );
    let err = resolve(
        flags(&["--store", url]),
        env(&[("RUNPLANE_LEASE_SECONDS", "0")]),
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("at least 1"), "{err}");
}

#[test]
fn metrics_and_webhook_settings_follow_the_same_precedence() {
    let text = r#"
metrics_listen = "127.0.0.1:9464"
ask_webhooks = ["http://hooks.local/a", "http://hooks.local/b"]
public_url = "https://console.example"
"#;
    let urls = |config: &ServeConfig| -> Vec<String> {
        config.ask_webhooks.iter().map(|u| u.to_string()).collect()
    };
    let (config, _) = resolve(flags(&[]), env(&[]), Some(file(text))).unwrap();
    assert_eq!(config.metrics_listen, Some(addr("127.0.0.1:9464")));
    assert_eq!(
        urls(&config),
        ["http://hooks.local/a", "http://hooks.local/b"]
    );
    assert_eq!(
        config.public_url.map(|u| u.to_string()),
        Some("https://console.example/".to_string())
    );
    let vars = env(&[(
        "RUNPLANE_ASK_WEBHOOKS",
        "http://env.local/1, http://env.local/2",
    )]);
    let (config, _) = resolve(flags(&[]), vars, Some(file(text))).unwrap();
    assert_eq!(urls(&config), ["http://env.local/1", "http://env.local/2"]);
    let args = flags(&[
        "--ask-webhook",
        "http://flag.local/x",
        "--ask-webhook",
        "http://flag.local/y",
    ]);
    let vars = env(&[("RUNPLANE_ASK_WEBHOOKS", "http://env.local/1")]);
    let (config, _) = resolve(args, vars, Some(file(text))).unwrap();
    assert_eq!(
        urls(&config),
        ["http://flag.local/x", "http://flag.local/y"]
    );
    let (config, _) = resolve(flags(&[]), env(&[]), None).unwrap();
    assert_eq!(config.metrics_listen, None);
    assert!(config.ask_webhooks.is_empty());
}

#[tokio::test]
async fn an_https_webhook_stops_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServeConfig::new(dir.path());
    config.listen = addr("127.0.0.1:0");
    config.ask_webhooks = vec!["https://hooks.slack.com/services/T/B/secret"
        .parse()
        .unwrap()];
    let error = runplane::server::bind(config).await.err().expect("refused");
    let message = error.to_string();
    assert!(message.contains("https:// is not supported"), "{message}");
    assert!(
        !message.contains("secret"),
        "the URL's path is not shown: {message}"
    );
}

#[test]
fn retention_is_off_by_default_and_follows_the_same_precedence() {
    let (config, _) = resolve(flags(&[]), env(&[]), None).unwrap();
    assert_eq!(config.retention, None);
    let days = |config: &ServeConfig| config.retention.map(|r| r.keep.as_secs() / 86_400);
    let text = "retain_finished_days = 30\n";
    let (config, _) = resolve(flags(&[]), env(&[]), Some(file(text))).unwrap();
    assert_eq!(days(&config), Some(30));
    assert_eq!(
        config.retention.map(|r| r.interval),
        Some(Duration::from_secs(3600))
    );
    let vars = env(&[("RUNPLANE_RETAIN_FINISHED_DAYS", "14")]);
    let (config, _) = resolve(flags(&[]), vars, Some(file(text))).unwrap();
    assert_eq!(days(&config), Some(14));
    let vars = env(&[("RUNPLANE_RETAIN_FINISHED_DAYS", "14")]);
    let args = flags(&["--retain-finished-days", "7"]);
    let (config, _) = resolve(args, vars, Some(file(text))).unwrap();
    assert_eq!(days(&config), Some(7));
    // Zero would delete every run the moment it finishes: refused, not taken as "off".
    let err = resolve(
        flags(&[]),
        env(&[("RUNPLANE_RETAIN_FINISHED_DAYS", "0")]),
        None,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("RUNPLANE_RETAIN_FINISHED_DAYS: invalid value \"0\""),
        "{err}"
    );
    let err = ConfigFile::parse("retain_finished_days = 0\n", Path::new("r.toml")).unwrap_err();
    assert!(err.to_string().contains("retain_finished_days"), "{err}");
}
