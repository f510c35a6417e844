//! The agent's sandbox against the real kernel, through the entry point the agent is
//! started by (`runplane exec-agent --sandbox SPEC`): for each class of escape a process
//! tries it and fails with the exact error, and an honest neighbour succeeds. Needs
//! bubblewrap and Landlock ABI 6: without them each test says what is missing and stops,
//! and under `RUNPLANE_REQUIRE_SANDBOX=1` (`.ci/run`, which installs bubblewrap) it fails.

#[path = "common/host.rs"]
mod host;

use std::path::{Path, PathBuf};
use std::process::Command;

use runplane::policy::EgressEndpoint;
use runplane::sandbox::materialise::materialise;
use runplane::sandbox::plan::{compile, PlanInput};
use runplane::sandbox::{bwrap, missing, Spec};
use runplane::worker::egress::{EgressProxy, Refusal};

/// A sandbox around a fresh workspace, fake home and private directory.
struct Sandbox {
    _dirs: Vec<tempfile::TempDir>,
    _placeholders: runplane::sandbox::materialise::Placeholders,
    workspace: PathBuf,
    home: PathBuf,
    spec: PathBuf,
    proxy: EgressProxy,
    refusals: tokio::sync::mpsc::UnboundedReceiver<Refusal>,
    env: Vec<(String, String)>,
    /// The `runplane` that starts the sandbox (`runplane-confine` beside it).
    runplane: PathBuf,
}

/// These places must be the host's, as a real home and checkout are.
fn dir(prefix: &str) -> tempfile::TempDir {
    host::host_dir(prefix)
}

impl Sandbox {
    async fn new(egress: &[&str]) -> Option<Sandbox> {
        let missing = missing();
        if std::env::var_os("RUNPLANE_REQUIRE_SANDBOX").is_some() {
            assert!(
                missing.is_empty(),
                "the sandbox is required here: {missing:?}"
            );
        }
        if !missing.is_empty() {
            eprintln!("skipped: the sandbox cannot run here: {missing:?}");
            return None;
        }
        let (ws, home, private, tmp) = (dir("ws"), dir("home"), dir("private"), dir("tmp"));
        let canon = |d: &tempfile::TempDir| std::fs::canonicalize(d.path()).expect("canonical");
        let (workspace, home_dir) = (canon(&ws), canon(&home));
        std::fs::create_dir_all(workspace.join(".git/hooks")).expect("git dir");
        std::fs::write(workspace.join(".git/config"), "[core]\n").expect("git config");
        std::fs::write(workspace.join(".env"), "KEY=1\n").expect(".env");
        std::fs::create_dir_all(workspace.join("runplane-data")).expect("data dir");
        std::fs::write(workspace.join("runplane-data/operator.token"), "tok\n").expect("token");
        std::fs::create_dir_all(home_dir.join(".ssh")).expect("ssh");
        std::fs::write(home_dir.join(".ssh/id_rsa"), "KEY\n").expect("key");
        // A profile's own protected path and writable place.
        std::fs::write(workspace.join("Makefile"), "test:\n").expect("Makefile");
        std::fs::create_dir_all(home_dir.join(".cache/pip")).expect("cache");
        let input = PlanInput {
            workspace: workspace.clone(),
            home: home_dir.clone(),
            run_tmp: canon(&tmp),
            private: canon(&private),
            secrets: runplane::policy::presets()[1].secrets.clone(),
            protected: vec!["Makefile".into()],
            writable: vec!["~/.cache/pip".into()],
            egress: egress.iter().map(|e| e.to_string()).collect(),
            ..PlanInput::default()
        };
        let plan = compile(&input);
        let (refused_tx, refusals) = tokio::sync::mpsc::unbounded_channel();
        let allowed = plan
            .egress
            .iter()
            .map(|e| EgressEndpoint::parse(e).expect("endpoint"))
            .collect();
        let proxy = EgressProxy::start(allowed, refused_tx)
            .await
            .expect("proxy");
        let (mounts, placeholders) = materialise(&plan, &canon(&private)).expect("placed");
        let spec = Spec {
            bwrap: bwrap::args(&mounts),
            writable: mounts.writable.clone(),
            connect_ports: vec![proxy.addr().port()],
        };
        let spec_path = canon(&private).join("sandbox.json");
        spec.write(&spec_path).expect("spec");
        let url = format!("http://{}", proxy.addr());
        Some(Sandbox {
            _dirs: vec![ws, home, private, tmp],
            _placeholders: placeholders,
            workspace,
            home: home_dir,
            spec: spec_path,
            proxy,
            refusals,
            env: vec![
                ("HTTP_PROXY".into(), url.clone()),
                ("HTTPS_PROXY".into(), url),
            ],
            runplane: env!("CARGO_BIN_EXE_runplane").into(),
        })
    }

    /// Runs `script` with `sh -c` in the sandbox; (exit code, stdout+stderr).
    fn run(&self, script: &str) -> (i32, String) {
        let out = Command::new(&self.runplane)
            .args(["exec-agent", "--parent", &std::process::id().to_string()])
            .arg("--sandbox")
            .arg(&self.spec)
            .args(["--", "sh", "-c", &format!("exec 2>&1; {script}")])
            .current_dir(&self.workspace)
            .env("HOME", &self.home)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("exec-agent runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code().unwrap_or(-1), text)
    }

    /// Asserts `script` fails and says `error` (the errno's text).
    fn refused(&self, script: &str, error: &str) {
        let (code, text) = self.run(script);
        assert!(
            code != 0 && text.contains(error),
            "{script:?} should fail with {error:?}; exit {code}: {text}"
        );
    }

    fn allowed(&self, script: &str) -> String {
        let (code, text) = self.run(script);
        assert_eq!(code, 0, "{script:?} should succeed: {text}");
        text
    }
}

/// A python3 one-liner, for the calls a shell cannot make (sockets, signals).
fn py(code: &str) -> String {
    format!("python3 -c '{code}'")
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_go_only_to_the_workspace_and_never_to_its_protected_places() {
    let Some(sb) = Sandbox::new(&[]).await else {
        return;
    };
    sb.allowed("echo ok > src.txt && cat src.txt && mkdir -p a/b && echo x > a/b/c");
    sb.allowed("echo tmp > \"$TMPDIR/x\" 2>/dev/null || echo tmp > /tmp/x; cat /tmp/x || true");
    for (script, error) in [
        ("echo x > /etc/runplane-escape", "Read-only file system"),
        ("echo x > ../escape", "Read-only file system"),
        (
            "ln -s /etc e && echo x > e/passwd-escape",
            "Read-only file system",
        ),
        ("echo x > .git/hooks/pre-commit", "Read-only file system"),
        ("echo x >> .git/config", "Read-only file system"),
        ("ln /etc/hostname hard", "Invalid cross-device link"),
        (
            "echo x > mine && mv mine /etc/escape",
            "Read-only file system",
        ),
        (
            &format!("echo x > {}/.bashrc", sb.home.display()),
            "Read-only file system",
        ),
        ("echo x >> Makefile", "Read-only file system"),
        (
            &format!("echo x > {}/.cache/other", sb.home.display()),
            "Read-only file system",
        ),
    ] {
        sb.refused(script, error);
    }
    // The profile's writable place outside the workspace takes writes.
    sb.allowed(&format!(
        "echo x > {0}/.cache/pip/wheel && cat {0}/.cache/pip/wheel",
        sb.home.display()
    ));
    // The sandbox's /tmp is its own: a write there lands nowhere on the host.
    sb.allowed("echo x > /tmp/runplane-escape");
    assert!(!Path::new("/tmp/runplane-escape").exists());
    assert!(!Path::new("/etc/runplane-escape").exists());
    assert!(!sb.workspace.join(".git/hooks/pre-commit").exists());
}

/// A runplane installed under `/tmp` (a clean clone's `target/` in a temp dir) still
/// reaches its `runplane-confine`, although the sandbox's `/tmp` is a fresh one.
#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_starts_from_binaries_under_the_hosts_tmp() {
    let Some(mut sb) = Sandbox::new(&[]).await else {
        return;
    };
    let installed = tempfile::tempdir_in("/tmp").expect("a dir under /tmp");
    for (name, built) in [
        ("runplane", env!("CARGO_BIN_EXE_runplane")),
        ("runplane-confine", env!("CARGO_BIN_EXE_runplane-confine")),
    ] {
        let copy = installed.path().join(name);
        if std::fs::hard_link(built, &copy).is_err() {
            std::fs::copy(built, &copy).expect("a copy of the binary");
        }
    }
    sb.runplane = installed.path().join("runplane");
    assert_eq!(sb.allowed("echo started"), "started\n");
    // Only the binary itself is shown: the rest of the host's /tmp stays out of sight.
    sb.refused(
        &format!("ls {}/runplane", installed.path().display()),
        "No such file or directory",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_and_runplane_tokens_cannot_be_read() {
    let Some(sb) = Sandbox::new(&[]).await else {
        return;
    };
    sb.allowed("cat /etc/hostname >/dev/null && ls src 2>/dev/null; true");
    for script in [
        "cat .env".to_string(),
        "cat runplane-data/operator.token".to_string(),
        format!("cat {}/.ssh/id_rsa", sb.home.display()),
        "cat ~/.ssh/id_rsa".to_string(),
    ] {
        sb.refused(&script, "Permission denied");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_worker_and_other_processes_are_out_of_reach() {
    let Some(sb) = Sandbox::new(&[]).await else {
        return;
    };
    let me = std::process::id();
    sb.refused(&format!("cat /proc/{me}/environ"), "No such file");
    sb.refused(&format!("kill -9 {me}"), "No such process");
    sb.refused(
        &py(&format!("import os; os.kill({me}, 9)")),
        "ProcessLookupError",
    );
    // Its own processes it may signal.
    sb.allowed("sleep 5 & kill $!; wait; true");
}

#[tokio::test(flavor = "multi_thread")]
async fn network_goes_only_through_the_proxy_to_admitted_endpoints() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let other = listener.local_addr().expect("addr").port();
    let allowed_server = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("server");
    let allowed_port = allowed_server.local_addr().expect("addr").port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut stream, _)) = allowed_server.accept().await {
            let mut buffer = [0u8; 1024];
            let _ = stream.read(&mut buffer).await;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nhello\n")
                .await;
        }
    });
    let Some(mut sb) = Sandbox::new(&[&format!("127.0.0.1:{allowed_port}")]).await else {
        return;
    };
    sb.refused(
        &py(&format!(
            "import socket; socket.create_connection((\"127.0.0.1\", {other}))"
        )),
        "Permission denied",
    );
    sb.refused(
        &py("import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"),
        "Operation not permitted",
    );
    sb.refused(
        &py("import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)"),
        "Operation not permitted",
    );
    let fetch = |port: u16| {
        py(&format!(
            "import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:{port}/x\").read().decode())"
        ))
    };
    let text = sb.allowed(&fetch(allowed_port));
    assert!(text.contains("hello"), "{text}");
    sb.refused(&fetch(other), "403");
    let refusal = sb.refusals.recv().await.expect("a refusal");
    assert_eq!(
        (refusal.host.as_str(), refusal.port, refusal.method.as_str()),
        ("127.0.0.1", other, "GET")
    );
    drop(listener);
    let _ = &sb.proxy;
}

/// `runplane-confine`, the step inside the namespaces, starts nothing it was not given a
/// readable spec for.
#[test]
fn the_confine_step_refuses_a_bad_command_line_or_spec() {
    let confine = env!("CARGO_BIN_EXE_runplane-confine");
    let marker = dir("confine-");
    let touch = marker.path().join("ran");
    let touch = touch.to_str().expect("a UTF-8 path");
    for (args, error) in [
        (
            vec!["touch", touch],
            "usage: runplane-confine SPEC -- COMMAND…",
        ),
        (
            vec!["/nonexistent/spec.json", "--"],
            "usage: runplane-confine SPEC -- COMMAND…",
        ),
        (
            vec!["/nonexistent/spec.json", "--", "touch", touch],
            "the sandbox spec /nonexistent/spec.json: No such file or directory",
        ),
    ] {
        let output = Command::new(confine).args(&args).output().expect("runs");
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(error), "{args:?}: {stderr}");
        assert!(!Path::new(touch).exists(), "{args:?} started the command");
    }
}
