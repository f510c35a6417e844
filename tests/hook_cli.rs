//! `runplane hook`, the real binary, as an agent runs it: the worker's allow and deny come
//! out as the agents read them, and every failure before a tool runs blocks the tool (exit
//! 2, the reason on stderr) — no socket, no answer, a bad answer, an ask, no answer in time.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;

const PRE_TOOL_USE: &str = include_str!("fixtures/hooks/claude_PreToolUse_Bash.json");
const STOP: &str = include_str!("fixtures/hooks/claude_Stop.json");

fn hook(socket: &Path, payload: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args([
            "hook",
            "--agent",
            "claude-code",
            "--deadline",
            "1",
            "--socket",
        ])
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A worker that reads one request and answers with `answer` (`None`: closes at once;
/// `Some("hang")`: never answers).
fn worker(dir: &Path, answer: Option<&'static str>) -> (PathBuf, JoinHandle<String>) {
    let socket = dir.join("worker.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).unwrap();
        match answer {
            None => {}
            Some("hang") => std::thread::sleep(std::time::Duration::from_secs(3)),
            Some(text) => writeln!(&stream, "{text}").unwrap(),
        }
        line
    });
    (socket, handle)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_workers_allow_and_deny_come_out_as_the_agent_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, seen) = worker(
        dir.path(),
        Some(r#"{"decision":"allow","reason":"rules[2] (Bash allow) matches"}"#),
    );
    let output = hook(&socket, PRE_TOOL_USE);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        printed,
        serde_json::json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "rules[2] (Bash allow) matches"
        }})
    );
    let request: serde_json::Value = serde_json::from_str(&seen.join().unwrap()).unwrap();
    assert_eq!(request["v"], 1);
    assert_eq!(request["agent"], "claude-code");
    assert_eq!(
        request["payload"],
        serde_json::from_str::<serde_json::Value>(PRE_TOOL_USE).unwrap()
    );

    let dir = tempfile::tempdir().unwrap();
    let (socket, _) = worker(dir.path(), Some(r#"{"decision":"deny","reason":"no"}"#));
    let output = hook(&socket, PRE_TOOL_USE);
    assert_eq!(output.status.code(), Some(0));
    assert!(text(&output.stdout).contains(r#""permissionDecision":"deny""#));
}

#[test]
fn every_failure_before_a_tool_runs_blocks_it() {
    let cases: [(Option<&'static str>, &str); 5] = [
        (
            None,
            "runplane: the worker closed the connection without answering; the tool is blocked",
        ),
        (
            Some("{not json"),
            "runplane: the worker's answer is not valid: ",
        ),
        (
            Some(r#"{"decision":"ask"}"#),
            "runplane: the worker answered Some(\"ask\"), not allow or deny; the tool is blocked",
        ),
        (
            Some(r#"{"reason":"?"}"#),
            "runplane: the worker answered None, not allow or deny; the tool is blocked",
        ),
        (
            Some("hang"),
            "runplane: no answer from the worker within 1 s; the tool is blocked",
        ),
    ];
    for (answer, wanted) in cases {
        let dir = tempfile::tempdir().unwrap();
        let (socket, _) = worker(dir.path(), answer);
        let output = hook(&socket, PRE_TOOL_USE);
        assert_eq!(output.status.code(), Some(2), "{answer:?}");
        assert!(output.stdout.is_empty(), "{answer:?}");
        assert!(
            text(&output.stderr).starts_with(wanted),
            "{answer:?}: {}",
            text(&output.stderr)
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = hook(&dir.path().join("absent.sock"), PRE_TOOL_USE);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).starts_with("runplane: cannot reach the worker at"));
    let garbage = hook(&dir.path().join("absent.sock"), "{tool_name: Bash");
    assert_eq!(garbage.status.code(), Some(2));
    assert!(text(&garbage.stderr).starts_with("runplane: the hook payload is not JSON"));
}

#[test]
fn a_stop_the_worker_cannot_hear_does_not_keep_the_agent_going() {
    let dir = tempfile::tempdir().unwrap();
    let output = hook(&dir.path().join("absent.sock"), STOP);
    assert_eq!(output.status.code(), Some(0));
    assert!(text(&output.stderr).starts_with("runplane: cannot reach the worker at"));
    assert!(!text(&output.stderr).contains("blocked"));
}

/// The worker's side of the socket (`worker::hook_server`) with the real hook binary: the
/// handler's answer reaches the agent, and a request it cannot answer blocks the tool.
#[tokio::test(flavor = "multi_thread")]
async fn the_hook_server_answers_through_the_real_hook() {
    use runplane::worker::hook_server::{Handler, HookServer};
    use runplane::worker::hook_wire::{Agent, HookAnswer};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let handler: Handler = Arc::new(|request| {
        Box::pin(async move {
            assert_eq!(request.agent, Agent::ClaudeCode);
            match request.payload["tool_input"]["command"].as_str() {
                Some(command) if command.starts_with("touch") => Ok(HookAnswer {
                    decision: Some("deny".into()),
                    reason: format!("no {command}"),
                }),
                _ => Err("cannot judge this".to_string()),
            }
        })
    });
    let server = HookServer::bind(&dir.path().join("hooks.sock"), handler).unwrap();
    let socket = server.path().to_path_buf();
    let denied = tokio::task::spawn_blocking({
        let socket = socket.clone();
        move || hook(&socket, PRE_TOOL_USE)
    })
    .await
    .unwrap();
    assert_eq!(denied.status.code(), Some(0));
    assert!(text(&denied.stdout)
        .contains("\"permissionDecisionReason\":\"no touch /tmp/probe_bash && echo made\""));
    let other = PRE_TOOL_USE.replace("touch /tmp/probe_bash && echo made", "ls");
    let blocked = tokio::task::spawn_blocking(move || hook(&socket, &other))
        .await
        .unwrap();
    assert_eq!(blocked.status.code(), Some(2));
    assert!(
        text(&blocked.stderr).ends_with("the tool is blocked\n"),
        "{}",
        text(&blocked.stderr)
    );
    drop(server);
    assert!(!dir.path().join("hooks.sock").exists());
}
