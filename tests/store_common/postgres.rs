//! A real PostgreSQL for the store tests: each test gets a fresh, empty database.
//!
//! - `RUNPLANE_TEST_POSTGRES_URL` set (a `postgresql://` URL whose role may create
//!   databases): the tests use that server.
//! - Otherwise, when PostgreSQL is installed (`initdb` and `pg_ctl` in
//!   `RUNPLANE_TEST_POSTGRES_BIN`, or else on the `PATH`, in `/usr/local/bin` or
//!   `/usr/lib/postgresql/*/bin`), the first test of a test binary
//!   starts a private server in a temp dir on a free port on 127.0.0.1, shared by the
//!   binary's tests. PostgreSQL refuses to run as root: as root it runs as the `postgres`
//!   user. A watchdog shell started beside it stops it and removes its dir within a second
//!   of the test process ending, however it ends.
//! - Neither: each PostgreSQL test says `skipped: no PostgreSQL …` and passes, unless
//!   `RUNPLANE_REQUIRE_POSTGRES=1`, when it fails (CI sets it).
//!
//! Every test gets its own database (`CREATE DATABASE t_<random>`), so the tests of a
//! binary run in parallel on one server.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Once, OnceLock};

use runplane::store::{PostgresStore, PostgresStoreOptions};

/// What a test says when there is no server.
pub const SKIPPED: &str =
    "skipped: no PostgreSQL (set RUNPLANE_TEST_POSTGRES_URL or install postgres)";

/// A fresh database; dropped, it is removed from a server the test did not start.
pub struct TestDatabase {
    /// Its connection URL.
    pub url: String,
    /// The server's URL and the database's name, to drop it from an outside server.
    drop_from: Option<(String, String)>,
}

impl TestDatabase {
    /// A store on this database, with a small pool.
    pub async fn open(&self) -> PostgresStore {
        PostgresStore::open(self.options()).await.unwrap()
    }

    pub fn options(&self) -> PostgresStoreOptions {
        PostgresStoreOptions {
            pool_size: 4,
            ..PostgresStoreOptions::new(self.url.clone())
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let Some((server, name)) = self.drop_from.take() else {
            return;
        };
        // Drop runs inside the test's runtime, which may not block on a future: a thread
        // with its own runtime does it. Best effort.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(admin) = connect(&server).await {
                    let _ = admin
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// A fresh database on the test server, or `None` when there is no server (the caller
/// returns: the test is skipped). Panics when `RUNPLANE_REQUIRE_POSTGRES=1` and there is none.
pub async fn database() -> Option<TestDatabase> {
    if let Ok(server) = std::env::var("RUNPLANE_TEST_POSTGRES_URL") {
        let name = create_database(&server).await;
        return Some(TestDatabase {
            url: with_database(&server, &name),
            drop_from: Some((server, name)),
        });
    }
    static SHARED: OnceLock<Result<PrivateServer, String>> = OnceLock::new();
    match SHARED.get_or_init(PrivateServer::start) {
        Ok(server) => {
            let name = create_database(&server.admin_url()).await;
            Some(TestDatabase {
                url: server.url(&name),
                drop_from: None,
            })
        }
        Err(why) => skip(why),
    }
}

/// A server of the test's own, to stop in the middle of a test; `None` when PostgreSQL is
/// not installed (the test is skipped; with `RUNPLANE_REQUIRE_POSTGRES=1` it fails).
pub fn private_server() -> Option<PrivateServer> {
    match PrivateServer::start() {
        Ok(server) => Some(server),
        Err(why) => skip(&why),
    }
}

/// Says the test is skipped, or fails it when PostgreSQL is required.
fn skip<T>(why: &str) -> Option<T> {
    if std::env::var("RUNPLANE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
        panic!("RUNPLANE_REQUIRE_POSTGRES=1, but no PostgreSQL: {why}");
    }
    // Once per binary past the test harness's capture, so `cargo test` shows it.
    static SAID: Once = Once::new();
    SAID.call_once(|| {
        let _ = writeln!(std::io::stderr(), "{SKIPPED}: {why}");
    });
    eprintln!("{SKIPPED}");
    None
}

/// A PostgreSQL server in a temp dir, as the `postgres` user when this process is root.
pub struct PrivateServer {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
    as_postgres: bool,
    stopped: bool,
}

impl PrivateServer {
    /// Creates a cluster and starts it on a free port; the error says why it cannot.
    pub fn start() -> Result<PrivateServer, String> {
        let bin = find_bin()?;
        let as_postgres = is_root();
        if as_postgres && !succeeds(Command::new("id").args(["-u", "postgres"])) {
            return Err("running as root and there is no postgres user".into());
        }
        let dir =
            std::env::temp_dir().join(format!("runplane-pg-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        if as_postgres && !succeeds(Command::new("chown").arg("postgres").arg(&dir)) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("chown postgres {}", dir.display()));
        }
        let mut server = PrivateServer {
            dir,
            port: 0,
            bin,
            as_postgres,
            stopped: true,
        };
        server.watchdog();
        let data = server.data().display().to_string();
        let initdb = server.command("initdb", &["-D", &data, "-A", "trust", "-U", "runplane"]);
        server.run(initdb, &["--no-sync", "-E", "UTF8", "--locale=C"])?;
        // A port free now may be taken before the server binds it: try a few.
        let mut last_error = String::new();
        for _ in 0..3 {
            server.port = free_port()?;
            let options = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200",
                server.port,
                server.dir.display()
            );
            let log = server.dir.join("log").display().to_string();
            let start = server.command(
                "pg_ctl",
                &["-D", &data, "-o", &options, "-l", &log, "-w", "-t", "30"],
            );
            match server.run(start, &["start"]) {
                Ok(()) => {
                    server.stopped = false;
                    return Ok(server);
                }
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// The URL of a database on this server.
    pub fn url(&self, database: &str) -> String {
        format!("postgresql://runplane@127.0.0.1:{}/{database}", self.port)
    }

    /// The URL of the `postgres` database, to create others from.
    pub fn admin_url(&self) -> String {
        self.url("postgres")
    }

    /// A fresh database on this server.
    pub async fn database(&self) -> TestDatabase {
        let name = create_database(&self.admin_url()).await;
        TestDatabase {
            url: self.url(&name),
            drop_from: None,
        }
    }

    /// Stops the server now (`-m fast`: sessions are ended, as an administrator's shutdown
    /// does). Idempotent.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let data = self.data().display().to_string();
        let stop = self.command("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]);
        if let Err(e) = self.run(stop, &[]) {
            eprintln!("could not stop the test PostgreSQL: {e}");
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("db")
    }

    /// A command for one of PostgreSQL's programs, as `postgres` when this is root.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let program = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.args(args);
        command
    }

    fn run(&self, mut command: Command, more: &[&str]) -> Result<(), String> {
        let output = command
            .args(more)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{command:?}: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            Err(format!(
                "{command:?}: {}\n{}{}\n{log}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
            ))
        }
    }

    /// A shell that waits for this process to end, then stops the server (if it still
    /// runs) and removes its dir: a static's destructor never runs, and a test process may
    /// end by a panic or a signal. Its output goes nowhere, so it holds no pipe of the test
    /// runner's open.
    fn watchdog(&self) {
        let data = self.data();
        let stop = self.command(
            "pg_ctl",
            &[
                "-D",
                &data.display().to_string(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
        let stop = std::iter::once(stop.get_program())
            .chain(stop.get_args())
            .map(|part| shell_quote(&part.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ");
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             if [ -f {pidfile} ]; then {stop}; fi; rm -rf {dir}",
            pid = std::process::id(),
            pidfile = shell_quote(&data.join("postmaster.pid").display().to_string()),
            dir = shell_quote(&self.dir.display().to_string()),
        );
        let spawned = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Err(e) = spawned {
            eprintln!("no watchdog for the test PostgreSQL: {e}");
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Creates an empty database with a random name on the server; returns its name.
async fn create_database(server: &str) -> String {
    let name = format!("t_{}", uuid::Uuid::now_v7().simple());
    let admin = connect(server)
        .await
        .unwrap_or_else(|e| panic!("connect to the test PostgreSQL: {e}"));
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("create database {name}: {e}"));
    name
}

async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// `server` (a `postgresql://` URL) with its database replaced by `name`.
fn with_database(server: &str, name: &str) -> String {
    let mut url = url::Url::parse(server)
        .unwrap_or_else(|e| panic!("RUNPLANE_TEST_POSTGRES_URL is not a URL: {e}"));
    url.set_path(&format!("/{name}"));
    url.to_string()
}

/// The directory holding `initdb` and `pg_ctl`: `RUNPLANE_TEST_POSTGRES_BIN` when set, else
/// the first of the `PATH`, `/usr/local/bin` and Debian's `/usr/lib/postgresql/*/bin`.
fn find_bin() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("RUNPLANE_TEST_POSTGRES_BIN") {
        let bin = PathBuf::from(bin);
        return if bin.join("initdb").is_file() && bin.join("pg_ctl").is_file() {
            Ok(bin)
        } else {
            Err(format!("no initdb and pg_ctl in {}", bin.display()))
        };
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    dirs.push(PathBuf::from("/usr/local/bin"));
    // Debian's layout, newest version first.
    if let Ok(versions) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = versions
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.path().join("bin"))
            .collect();
        versions.sort_by_key(|dir| std::cmp::Reverse(version_of(dir)));
        dirs.extend(versions);
    }
    dirs.into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .ok_or_else(|| "initdb and pg_ctl not found".to_string())
}

/// `15` for `/usr/lib/postgresql/15/bin`.
fn version_of(bin: &Path) -> u32 {
    bin.parent()
        .and_then(|dir| dir.file_name())
        .and_then(|name| name.to_str())
        .and_then(|name| name.parse().ok())
        .unwrap_or(0)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A port on 127.0.0.1 that nothing listens on right now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("find a free port: {e}"))
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
