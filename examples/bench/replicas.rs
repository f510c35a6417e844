//! `--store postgres://… --replicas N`: the maximum (ping-pong) rate and its latency for
//! one runplane on SQLite, then for 1, 2, … N replicas on one PostgreSQL database, in one
//! run on one machine.
//!
//! Each replica is a runplane server on a runtime of its own (as in a process of its own)
//! with its own data directory, connections and lease owner id, authentication on. Each
//! PostgreSQL configuration gets a fresh database, created beside the one the URL names
//! (its role needs CREATEDB) and dropped after, so no configuration inherits another's
//! runs. The sessions are spread over the replicas round-robin, as a load balancer would
//! spread workers; each run is started at the replica its worker attaches to.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use tokio_postgres::NoTls;

use crate::load::{self, Mode, PhaseResult, Target};
use crate::{progress, Args, Settings};

/// One configuration's result.
pub struct ReplicaFigures {
    /// `sqlite` or `postgres`.
    pub store: &'static str,
    /// Replicas serving the load.
    pub replicas: usize,
    /// The ping-pong phase.
    pub max: PhaseResult,
}

/// Measures SQLite on one replica, then PostgreSQL on 1..=`replicas`.
pub fn run(
    args: &Args,
    settings: &Settings,
    url: &str,
    replicas: usize,
    dir: &Path,
    policy_dir: &Path,
) -> anyhow::Result<Vec<ReplicaFigures>> {
    let mut figures = Vec::new();
    figures.push(measure(
        args,
        settings,
        None,
        1,
        &dir.join("sqlite"),
        policy_dir,
    )?);
    for n in 1..=replicas.max(1) {
        let database = Database::create(url, n)?;
        let measured = measure(
            args,
            settings,
            Some(&database.url),
            n,
            &dir.join(format!("postgres-{n}")),
            policy_dir,
        );
        database.drop_it()?;
        figures.push(measured?);
    }
    Ok(figures)
}

/// Starts `n` replicas (on `postgres`, or one on SQLite), runs the load over all of them,
/// and stops them.
fn measure(
    args: &Args,
    settings: &Settings,
    postgres: Option<&str>,
    n: usize,
    dir: &Path,
    policy_dir: &Path,
) -> anyhow::Result<ReplicaFigures> {
    let store = if postgres.is_some() {
        "postgres"
    } else {
        "sqlite"
    };
    progress(args, &format!("{store}: {n} replica(s)"));
    let mut runtimes = Vec::new();
    let mut servers = Vec::new();
    for r in 0..n {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name(format!("bench-replica-{r}"))
            .enable_all()
            .build()?;
        let mut config = runplane::server::ServeConfig::new(dir.join(format!("replica-{r}")));
        config.listen = "127.0.0.1:0".parse()?;
        config.policy_dir = Some(policy_dir.to_path_buf());
        if let Some(url) = postgres {
            config.store = runplane::server::StoreConfig::Postgres {
                url: url.to_string(),
                lease_ttl: runplane::server::DEFAULT_LEASE_TTL,
            };
        }
        let data_dir = config.data_dir.clone();
        let bound = runtime.block_on(runplane::server::bind(config))?;
        let addr = bound.local_addr()?;
        runtime.spawn(async move {
            if let Err(e) = bound.serve(std::future::pending()).await {
                eprintln!("replica: {e}");
            }
        });
        servers.push((format!("http://{addr}"), crate::admin_token(&data_dir)?));
        runtimes.push(runtime);
    }
    let client = tokio::runtime::Builder::new_multi_thread()
        .thread_name("bench-client")
        .enable_all()
        .build()?;
    let max = client.block_on(drive(settings, &servers))?;
    progress(
        args,
        &format!(
            "{store}, {n} replica(s): {:.0} round trips/s",
            max.round_trips_per_sec()
        ),
    );
    drop(client);
    for runtime in runtimes {
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
    Ok(ReplicaFigures {
        store,
        replicas: n,
        max,
    })
}

/// Opens the sessions over every replica's connections, warms up, and measures.
async fn drive(settings: &Settings, servers: &[(String, String)]) -> anyhow::Result<PhaseResult> {
    let per_replica = settings.connections.div_ceil(servers.len()).max(1);
    let mut replicas = Vec::new();
    for (url, token) in servers {
        replicas.push((load::connect(url, per_replica).await?, token.clone()));
    }
    let mut opening = Vec::with_capacity(settings.sessions);
    for i in 0..settings.sessions {
        let (channels, token) = &replicas[i % replicas.len()];
        let channel = channels[(i / replicas.len()) % channels.len()].clone();
        let token = token.clone();
        opening.push(tokio::spawn(async move {
            load::open_session(channel, Target::Runplane, "bench", Some(&token), i).await
        }));
    }
    let mut sessions = Vec::with_capacity(opening.len());
    for session in opening {
        sessions.push(session.await??);
    }
    let warmup = Duration::from_secs_f64(settings.warmup_secs);
    let (sessions, _) = load::run_phase(sessions, Mode::PingPong, warmup).await?;
    let duration = Duration::from_secs_f64(settings.duration_secs);
    let (_, max) = load::run_phase(sessions, Mode::PingPong, duration).await?;
    Ok(max)
}

/// The figures as a Markdown table.
pub fn table(figures: &[ReplicaFigures]) -> String {
    let mut out = String::from(
        "| store | replicas | round trips/s | decision p50 (ms) | decision p99 (ms) |\n\
         |---|---|---|---|---|\n",
    );
    for f in figures {
        let ms = |q: f64| f.max.decision_ns.value_at_quantile(q) as f64 / 1e6;
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} |\n",
            f.store,
            f.replicas,
            f.max.round_trips_per_sec(),
            ms(0.5),
            ms(0.99),
        ));
    }
    out
}

/// A database made for one configuration.
struct Database {
    /// The server's URL (the database the user named), to drop it from.
    admin: String,
    /// The new database's name.
    name: String,
    /// The new database's URL.
    url: String,
}

impl Database {
    fn create(url: &str, n: usize) -> anyhow::Result<Database> {
        let name = format!("runplane_bench_{}_{n}", std::process::id());
        let mut parsed = url::Url::parse(url).context("--store: not a URL")?;
        parsed.set_path(&format!("/{name}"));
        let database = Database {
            admin: url.to_string(),
            name,
            url: parsed.to_string(),
        };
        database.execute(&format!("CREATE DATABASE {}", database.name))?;
        Ok(database)
    }

    fn drop_it(&self) -> anyhow::Result<()> {
        self.execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
    }

    fn execute(&self, sql: &str) -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&self.admin, NoTls)
                .await
                .context("connect to --store")?;
            tokio::spawn(connection);
            client
                .batch_execute(sql)
                .await
                .with_context(|| format!("{sql} (the role needs CREATEDB)"))
        })
    }
}
