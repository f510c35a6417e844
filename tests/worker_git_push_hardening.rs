//! Delivery pushes with the user's credentials, never the repository's: real git pushing
//! from an armed repository (`git_traps`) to a local repository the agent made (its hooks
//! never run) and to an HTTP remote that asks for credentials (the user's global helper
//! answers, the agent's never runs).

mod git_traps;

use std::convert::Infallible;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use base64::Engine;
use git_traps::{agent_works, armed, git, global, Armed};
use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use runplane::domain::DeliverMode;
use runplane::worker::git::{GitError, Workspace};

/// A bare repository at `path` (as an agent could make one) whose receiving hooks, in its
/// hooks directory and in its own core.hooksPath, leave markers.
fn armed_remote(armed: &Armed, path: &Path) {
    git(
        armed.root.path(),
        &["init", "-q", "--bare", path.to_str().unwrap()],
    );
    let hooks = armed.root.path().join("traps/remote-hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for hook in [
        "pre-receive",
        "update",
        "post-receive",
        "post-update",
        "reference-transaction",
    ] {
        let trap = armed.trap(&format!("remote-{hook}"), "exit 0");
        std::fs::copy(&trap, path.join("hooks").join(hook)).unwrap();
        std::fs::copy(&trap, hooks.join(hook)).unwrap();
    }
    git(path, &["config", "core.hooksPath", hooks.to_str().unwrap()]);
    git(
        path,
        &["config", "receive.denyCurrentBranch", "updateInstead"],
    );
}

#[tokio::test]
async fn a_push_to_a_local_repository_the_agent_chose_runs_none_of_its_hooks() {
    let armed = armed();
    let d = armed.repo();
    let remote = armed.root.path().join("agent-remote.git");
    armed_remote(&armed, &remote);
    let url = remote.to_str().unwrap();
    git(&d, &["remote", "add", "origin", url]);
    git(
        &d,
        &[
            "config",
            "remote.origin.receivepack",
            &armed.trap("receivepack", "exit 1").display().to_string(),
        ],
    );
    let workspace = Workspace::new(&d);
    let start = workspace.start().await.unwrap();
    agent_works(&d);
    let delivered = workspace
        .deliver(&start, DeliverMode::Branch, "feat: x", "run-7", "origin")
        .await
        .unwrap();
    let pushed = git(&remote, &["rev-parse", "runplane/run-7"]);
    assert_eq!(Some(pushed), delivered.commit);
    assert_eq!(armed.markers(), Vec::<String>::new());
    // The same push by plain git runs the remote's hooks (the traps are armed).
    let plain = Command::new("git")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "push",
            "-q",
            "--receive-pack=git receive-pack",
            url,
            "HEAD:refs/heads/plain",
        ])
        .current_dir(&d)
        .output()
        .unwrap();
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    assert!(armed.markers().contains(&"remote-pre-receive".to_string()));
}

/// An HTTP git remote that asks for credentials, records the ones it gets, and refuses.
async fn credential_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/repo.git", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let record = record.clone();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let auth = req
                    .headers()
                    .get("authorization")
                    .map(|v| v.to_str().unwrap().to_string());
                let mut response = Response::new(Empty::<Bytes>::new());
                match auth {
                    None => {
                        *response.status_mut() = hyper::StatusCode::UNAUTHORIZED;
                        response.headers_mut().insert(
                            "www-authenticate",
                            hyper::header::HeaderValue::from_static("Basic realm=\"git\""),
                        );
                    }
                    Some(auth) => {
                        record.lock().unwrap().push(auth);
                        *response.status_mut() = hyper::StatusCode::FORBIDDEN;
                    }
                }
                async move { Ok::<_, Infallible>(response) }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    (url, seen)
}

#[tokio::test]
async fn the_push_asks_the_users_credential_helper_never_the_repositorys() {
    let armed = armed();
    let d = armed.repo();
    let (url, seen) = credential_server().await;
    git(&d, &["remote", "add", "origin", &url]);
    let workspace = Workspace::new(&d);
    let start = workspace.start().await.unwrap();
    agent_works(&d);
    let err = workspace
        .deliver(&start, DeliverMode::Branch, "feat: x", "run-9", "origin")
        .await
        .unwrap_err();
    assert!(matches!(err, GitError::Failed { .. }), "{err}");
    let basic = base64::engine::general_purpose::STANDARD.encode("op:global-secret");
    assert_eq!(seen.lock().unwrap().clone(), vec![format!("Basic {basic}")]);
    assert!(
        global().helper_marker.exists(),
        "the global helper answered"
    );
    assert_eq!(
        armed.markers(),
        Vec::<String>::new(),
        "the local helper never ran"
    );
    // Plain git asks the agent's helper (the trap is armed).
    // (Async: the remote is served on this test's runtime.)
    let plain = tokio::process::Command::new("git")
        .args(["push", "-q", "origin", "HEAD:refs/heads/plain"])
        .current_dir(&d)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .await
        .unwrap();
    assert!(!plain.status.success());
    let fired = armed.markers();
    assert!(fired.contains(&"local-helper".to_string()), "{fired:?}");
    let stolen = base64::engine::general_purpose::STANDARD.encode("agent:stolen");
    assert_eq!(
        seen.lock().unwrap().last(),
        Some(&format!("Basic {stolen}"))
    );
}
