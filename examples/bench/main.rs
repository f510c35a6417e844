//! End-to-end benchmark of runplane against the bare-stream limit.
//!
//! ```text
//! cargo run --release --example bench -- [--sessions N] [--connections K] [--duration SECS]
//!     [--rate R] [--server URL [--token T]] [--quick] [--json] [--write-md BENCHMARKS.md]
//!     [--soak MINUTES] [--store postgres://… --replicas N]
//! ```
//!
//! In one process: a runplane server (fresh SQLite in a temp dir, the `bench` profile in a
//! policy dir there) and a bare tonic echo of `WorkerService` on two loopback ports, each
//! on its own tokio runtime; the client on a third. C sessions over K HTTP/2 connections
//! drive each: ping-pong (the maximum rate), then open loop at 50 % of runplane's maximum
//! (or `--rate`). A third server, runplane on a store that keeps nothing
//! (`null_store.rs`), gets both phases too: the gap between it and runplane is what the
//! store costs, the gap between it and the echo what the rest of runplane costs. Then
//! the memory of idle sessions on a server child process, and the store
//! alone under many committers. `--server URL` targets a running runplane instead (it must
//! load the profile that `--print-profile` prints, e.g. via `--policy-dir`; `--token` or
//! `RUNPLANE_TOKEN` is the operator token the runs are started with, unless it runs with
//! `--auth off`).
//!
//! Authentication is on, as in `runplane serve`: the in-process server's admin token
//! (`<data dir>/operator.token`) starts the runs, and every session attaches with its run's
//! worker token. The store that keeps nothing keeps no credentials either, so that server
//! runs with authentication off.
//!
//! Every decision and result is committed before it is answered, as always; the store uses
//! the server's defaults (`synchronous=normal`).

mod cpu;
mod echo;
mod history;
mod history_seed;
mod idle;
mod load;
mod null_store;
mod replicas;
mod report;
mod soak;
mod store;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;

/// The same allocator as the `runplane` binary, so the in-process server measures as the
/// real one runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use load::{Mode, Target};

/// The bench profile: the mix's reads, greps, edits and shell lines allowed, two denied
/// (a read of `.env`, `rm -rf /` after `&&`), no step, cost or time limit so a run never
/// ends mid-bench, stall detection off (the outputs repeat).
pub const PROFILE: &str = r#"name = "bench"
description = "Benchmark mix: most calls allowed, some denied; no limits."
mode = "default"

[[rules]]
specifier = { tool = "Read" }
decision = "deny"
path_allow = ["**/.env", "secrets/**"]

[[rules]]
specifier = { tool = "Read" }
decision = "allow"

[[rules]]
specifier = { tool = "Grep" }
decision = "allow"

[[rules]]
specifier = { tool = "Edit" }
decision = "allow"
path_allow = ["src/**", "tests/**"]
path_deny = ["**/.env"]

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
command_allow = ["curl", "wget", "rm -rf"]

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["cargo test", "cargo build", "git status", "git diff", "git rev-parse", "grep", "echo", "cat"]

[[rules]]
specifier = { tool = "Write" }
decision = "allow"
path_allow = ["src/**", "**/*.txt"]

[termination]
max_steps = 0
timeout_seconds = 0
max_cost = 0.0
stall_detection = false
ask_timeout_seconds = 0
"#;

/// Flags.
#[derive(Parser, Clone)]
#[command(about = "runplane end-to-end benchmark against a bare tonic echo")]
pub struct Args {
    /// Concurrent sessions (one run each).
    #[arg(long)]
    sessions: Option<usize>,
    /// HTTP/2 connections the sessions share.
    #[arg(long)]
    connections: Option<usize>,
    /// Seconds per measured phase.
    #[arg(long)]
    duration: Option<f64>,
    /// Open-loop rate, round trips per second [default: 50 % of runplane's ping-pong rate].
    #[arg(long)]
    rate: Option<f64>,
    /// A running runplane server to measure instead of the in-process one.
    #[arg(long)]
    server: Option<String>,
    /// Operator token for `--server` (StartRun needs the operator role); not needed when it
    /// runs with `--auth off`. Unused without `--server`: the in-process servers' tokens are
    /// read from their data directories.
    #[arg(long, env = "RUNPLANE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Idle sessions for the memory figure.
    #[arg(long)]
    idle_sessions: Option<usize>,
    /// Concurrent committers for the store figure.
    #[arg(long)]
    committers: Option<usize>,
    /// Small and short (under 30 s): the CI smoke test.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the figures into this Markdown file (between bench markers).
    #[arg(long)]
    write_md: Option<PathBuf>,
    /// Only the soak: memory under MINUTES of half load on a server child, then after its
    /// runs end (see soak.rs); prints its samples and exits.
    #[arg(long, value_name = "MINUTES")]
    soak: Option<f64>,
    /// A PostgreSQL server for `--replicas` (its role needs CREATEDB: each configuration
    /// runs on a database of its own, dropped after).
    #[arg(long, value_name = "postgres://…", requires = "replicas")]
    store: Option<String>,
    /// Only the replica comparison: the ping-pong rate on SQLite with one server, then on
    /// `--store` with 1, 2, … N replicas; prints a table and exits.
    #[arg(long, value_name = "N", requires = "store")]
    replicas: Option<usize>,
    /// Measure the store alone and exit (for comparing store changes quickly).
    #[arg(long)]
    store_only: bool,
    /// Only the reads on a long history, then exit: a SQLite file (seeded when missing) or
    /// a `postgresql://` URL (seeded when its database holds no runs); see history.rs.
    #[arg(long, value_name = "FILE_OR_URL")]
    history: Option<String>,
    /// `--history`: runs in the history, the live ones included.
    #[arg(long, default_value_t = 100_000)]
    history_runs: usize,
    /// `--history`: events per finished run.
    #[arg(long, default_value_t = 100)]
    history_events: usize,
    /// `--history`: live runs (the newest), each with one call waiting for an operator.
    #[arg(long, default_value_t = 200)]
    history_live: usize,
    /// `--history`: calls per read.
    #[arg(long, default_value_t = 2_000)]
    history_calls: usize,
    /// `--history`: instead of the reads, commits (`--committers`, `--duration` each)
    /// alone and then while retention deletes the finished runs older than DAYS days.
    #[arg(long, value_name = "DAYS")]
    history_purge_days: Option<i64>,
    /// Print the bench profile (TOML) and exit.
    #[arg(long)]
    print_profile: bool,
    /// Internal: serve runplane only (the idle-memory child).
    #[arg(long, num_args = 2, value_names = ["DATA_DIR", "POLICY_DIR"], hide = true)]
    serve_child: Option<Vec<PathBuf>>,
}

/// The settings a run uses, after `--quick` and the defaults.
#[derive(Clone, serde::Serialize)]
pub struct Settings {
    pub sessions: usize,
    pub connections: usize,
    pub duration_secs: f64,
    pub warmup_secs: f64,
    pub idle_sessions: usize,
    pub committers: usize,
    pub quick: bool,
}

impl Settings {
    fn from(args: &Args) -> Settings {
        let (sessions, connections, duration, warmup, idle, committers) = if args.quick {
            (200, 4, 2.0, 0.5, 2_000, 200)
        } else {
            (1_000, 8, 10.0, 2.0, 10_000, 1_000)
        };
        Settings {
            sessions: args.sessions.unwrap_or(sessions),
            connections: args.connections.unwrap_or(connections),
            duration_secs: args.duration.unwrap_or(duration),
            warmup_secs: warmup,
            idle_sessions: args.idle_sessions.unwrap_or(idle),
            committers: args.committers.unwrap_or(committers),
            quick: args.quick,
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(dirs) = &args.serve_child {
        return idle::serve_child(&dirs[0], &dirs[1]);
    }
    if args.print_profile {
        print!("{PROFILE}");
        return Ok(());
    }
    if let Some(target) = &args.history {
        let shape = history_seed::Shape {
            runs: args.history_runs.max(args.history_live + 1),
            events_per_run: args.history_events,
            live: args.history_live,
        };
        let target = if target.starts_with("postgres") || target.contains("host=") {
            history::Target::Postgres(target)
        } else {
            history::Target::Sqlite(std::path::Path::new(target))
        };
        let runtime = tokio::runtime::Runtime::new()?;
        if let Some(days) = args.history_purge_days {
            let settings = Settings::from(&args);
            let duration = Duration::from_secs_f64(settings.duration_secs);
            let figure = runtime.block_on(history::commits_during_purge(
                target,
                shape,
                settings.committers,
                duration,
                days,
            ))?;
            print!("{}", history::purge_table(&figure));
            return Ok(());
        }
        let figures = runtime.block_on(history::run(target, shape, args.history_calls))?;
        print!("{}", history::table(&figures));
        return Ok(());
    }
    let settings = Settings::from(&args);
    let dir = tempfile::tempdir()?;
    if args.store_only {
        let runtime = tokio::runtime::Runtime::new()?;
        let duration = Duration::from_secs_f64(settings.duration_secs);
        let result = runtime.block_on(store::run(dir.path(), settings.committers, duration))?;
        println!("{}", report::store_line(&result));
        return Ok(());
    }
    let policy_dir = dir.path().join("policies");
    std::fs::create_dir_all(&policy_dir)?;
    std::fs::write(policy_dir.join("bench.toml"), PROFILE)?;
    if let (Some(url), Some(n)) = (&args.store, args.replicas) {
        let figures = replicas::run(&args, &settings, url, n, dir.path(), &policy_dir)?;
        print!("{}", replicas::table(&figures));
        return Ok(());
    }
    if let Some(minutes) = args.soak {
        let runtime = tokio::runtime::Runtime::new()?;
        let (sessions, connections) = (settings.sessions, settings.connections);
        let result = runtime.block_on(soak::run(
            dir.path(),
            &policy_dir,
            sessions,
            connections,
            minutes,
        ))?;
        print!("{}", soak::report(&result));
        return Ok(());
    }

    // The servers get their own runtime (as they would in their own process); the client
    // gets another. Both size themselves to the machine's cores.
    let servers = tokio::runtime::Builder::new_multi_thread()
        .thread_name("bench-server")
        .enable_all()
        .build()?;
    let runplane = match &args.server {
        Some(url) => Server {
            url: url.clone(),
            token: args.token.clone(),
        },
        None => start_runplane(&servers, &dir.path().join("data"), &policy_dir, None)?,
    };
    let echo_url = format!("http://{}", servers.block_on(echo::serve())?);
    // The same server on a store that keeps nothing: only next to an in-process runplane,
    // whose store it stands in for.
    let null_store = match &args.server {
        Some(_) => None,
        None => Some(start_runplane(
            &servers,
            &dir.path().join("null-store"),
            &policy_dir,
            Some(std::sync::Arc::new(null_store::NullStore)),
        )?),
    };

    let client = tokio::runtime::Builder::new_multi_thread()
        .thread_name("bench-client")
        .enable_all()
        .build()?;
    let figures = client.block_on(measure(
        &args,
        &settings,
        &runplane,
        null_store.as_ref(),
        &echo_url,
        dir.path(),
        &policy_dir,
    ))?;
    servers.shutdown_timeout(Duration::from_secs(1));

    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::json(&settings, &figures))?
        );
    } else {
        print!("{}", report::table(&settings, &figures));
    }
    if let Some(path) = &args.write_md {
        report::write_md(path, &settings, &figures, &args)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// A runplane server to measure: its URL and the operator token runs are started with
/// (`None`: authentication is off).
pub struct Server {
    pub url: String,
    pub token: Option<String>,
}

/// Starts a runplane server on a loopback port of the servers' runtime, on `store` or
/// (`None`) on SQLite in `data_dir`. On SQLite authentication is on, as in `runplane
/// serve`, and the admin token it wrote to `data_dir` is returned with the URL; on `store`
/// it is off, as no store but the real one keeps the credentials it would check.
fn start_runplane(
    servers: &tokio::runtime::Runtime,
    data_dir: &std::path::Path,
    policy_dir: &std::path::Path,
    store: Option<std::sync::Arc<dyn runplane::store::RunStore>>,
) -> anyhow::Result<Server> {
    let mut config = runplane::server::ServeConfig::new(data_dir);
    config.listen = "127.0.0.1:0".parse()?;
    config.policy_dir = Some(policy_dir.to_path_buf());
    let with_auth = store.is_none();
    if !with_auth {
        config.auth = runplane::auth::AuthMode::Off;
    }
    let bound = servers.block_on(async {
        match store {
            Some(store) => runplane::server::bind_with_store(config, store).await,
            None => runplane::server::bind(config).await,
        }
    })?;
    let addr = bound.local_addr()?;
    let token = if with_auth {
        Some(admin_token(data_dir)?)
    } else {
        None
    };
    let name = data_dir.display().to_string();
    servers.spawn(async move {
        if let Err(e) = bound.serve(std::future::pending()).await {
            eprintln!("runplane server ({name}): {e}");
        }
    });
    Ok(Server {
        url: format!("http://{addr}"),
        token,
    })
}

/// The admin token a server bound with authentication on wrote into its data directory.
pub fn admin_token(data_dir: &std::path::Path) -> anyhow::Result<String> {
    let path = data_dir.join(runplane::auth::ADMIN_TOKEN_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("read the admin token {}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim();
    anyhow::ensure!(!token.is_empty(), "{} is empty", path.display());
    Ok(token.to_string())
}

/// Everything measured.
pub struct Figures {
    pub echo_max: load::PhaseResult,
    pub runplane_max: load::PhaseResult,
    /// runplane on the store that keeps nothing (`None` with `--server`).
    pub null_store_max: Option<load::PhaseResult>,
    /// The same at the open loop's rate.
    pub null_store_half: Option<load::PhaseResult>,
    pub half_rate: f64,
    pub runplane_half: load::PhaseResult,
    pub echo_half: load::PhaseResult,
    pub idle: Option<idle::IdleResult>,
    pub store: store::StoreResult,
}

async fn measure(
    args: &Args,
    settings: &Settings,
    runplane: &Server,
    null_store: Option<&Server>,
    echo_url: &str,
    dir: &std::path::Path,
    policy_dir: &std::path::Path,
) -> anyhow::Result<Figures> {
    let duration = Duration::from_secs_f64(settings.duration_secs);
    let warmup = Duration::from_secs_f64(settings.warmup_secs);
    let (c, k) = (settings.sessions, settings.connections);
    progress(args, &format!("echo: {c} sessions over {k} connections"));
    let channels = load::connect(echo_url, k).await?;
    let echo = load::open_sessions(&channels, Target::Echo, "", None, c).await?;
    let (echo, _) = load::run_phase(echo, Mode::PingPong, warmup).await?;
    let (echo, echo_max) = load::run_phase(echo, Mode::PingPong, duration).await?;
    progress(
        args,
        &format!("echo: {:.0} round trips/s", echo_max.round_trips_per_sec()),
    );

    let (sessions, runplane_max) = runplane_max_rate(args, settings, runplane, "runplane").await?;
    let null_store_max = match null_store {
        Some(server) => Some(
            runplane_max_rate(
                args,
                settings,
                server,
                "runplane on a store that keeps nothing",
            )
            .await?,
        ),
        None => None,
    };
    let (null_sessions, null_store_max) = null_store_max.unzip();
    let half_rate = args
        .rate
        .unwrap_or(runplane_max.round_trips_per_sec() / 2.0);
    let rate = Mode::OpenLoop { rate: half_rate };
    let (sessions, runplane_half) = load::run_phase(sessions, rate, duration).await?;
    drop(sessions);
    let null_store_half = match null_sessions {
        Some(null) => Some(load::run_phase(null, rate, duration).await?.1),
        None => None,
    };
    let (echo, echo_half) = load::run_phase(echo, rate, duration).await?;
    drop(echo);
    progress(
        args,
        &format!("open loop at {half_rate:.0} round trips/s done"),
    );

    // Memory is measured on a child server; with --server there is no child to read.
    let idle = if args.server.is_none() && settings.idle_sessions > 0 {
        progress(
            args,
            &format!(
                "idle: {} sessions on a server child",
                settings.idle_sessions
            ),
        );
        Some(idle::run(dir, policy_dir, settings.idle_sessions, "bench").await?)
    } else {
        None
    };
    progress(args, &format!("store: {} committers", settings.committers));
    let store = store::run(dir, settings.committers, duration).await?;
    Ok(Figures {
        echo_max,
        runplane_max,
        null_store_max,
        null_store_half,
        half_rate,
        runplane_half,
        echo_half,
        idle,
        store,
    })
}

/// Opens the sessions on a runplane server and measures its ping-pong (maximum) rate; the
/// sessions are returned for the open loop.
async fn runplane_max_rate(
    args: &Args,
    settings: &Settings,
    server: &Server,
    name: &str,
) -> anyhow::Result<(Vec<load::Session>, load::PhaseResult)> {
    let (c, k) = (settings.sessions, settings.connections);
    progress(args, &format!("{name}: starting {c} runs and sessions"));
    let channels = load::connect(&server.url, k).await?;
    let token = server.token.as_deref();
    let sessions = load::open_sessions(&channels, Target::Runplane, "bench", token, c).await?;
    let warmup = Duration::from_secs_f64(settings.warmup_secs);
    let (sessions, _) = load::run_phase(sessions, Mode::PingPong, warmup).await?;
    let duration = Duration::from_secs_f64(settings.duration_secs);
    let (sessions, max) = load::run_phase(sessions, Mode::PingPong, duration).await?;
    progress(
        args,
        &format!("{name}: {:.0} round trips/s", max.round_trips_per_sec()),
    );
    Ok((sessions, max))
}

fn progress(args: &Args, message: &str) {
    if !args.json {
        eprintln!("… {message}");
    }
}
