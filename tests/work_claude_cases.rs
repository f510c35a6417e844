//! More of `runplane work` with the real Claude Code 2.1.328 (`RUNPLANE_CLAUDE_BIN`) and the
//! scripted model stand-in (`tests/agents/fake_anthropic.py`): a stall, edits judged by
//! path, WebFetch by host, MCP tools by name glob, the whole input in the log, a
//! subagent's calls, and the gate, rollback and deliveries with real git. Without
//! `RUNPLANE_CLAUDE_BIN` each test says so and stops.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::agents::{assert_success, next_ask, AgentRun, Kind, WorkOptions};
use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use runplane::grpc::pb;
use runplane::grpc::pb::RunStatus::{Completed, Failed};
use serde_json::{json, Value};

/// The Claude Code binary, or `None` (said on stderr): the test then stops.
fn claude() -> Option<String> {
    Kind::Claude.binary()
}

/// A server whose one profile is `profile` (named `cases`), a run of it, and a git
/// workspace (`git_repo`: README, build/keep, src/).
struct Case {
    server: TestServer,
    run_id: String,
    _repo: tempfile::TempDir,
    workspace: PathBuf,
}

async fn case(profile: &str, mode: pb::DeliverMode) -> Case {
    let server = TestServer::with(Options {
        policy: Some(format!("name = \"cases\"\nmode = \"default\"\n{profile}")),
        ..Options::default()
    })
    .await;
    let run_id = server.start_delivering_run("cases", mode).await;
    let repo = git_repo();
    let workspace = std::fs::canonicalize(repo.path()).unwrap();
    Case {
        server,
        run_id,
        _repo: repo,
        workspace,
    }
}

impl Case {
    async fn start(&self, claude: &str, script: Value, options: WorkOptions) -> AgentRun {
        AgentRun::start(
            Kind::Claude,
            claude,
            &self.server,
            &self.run_id,
            &self.workspace,
            script,
            options,
        )
        .await
    }

    /// Runs the script to the end, `runplane work` given `flags`.
    async fn work(&self, claude: &str, script: Value, flags: Vec<String>) -> Output {
        let options = WorkOptions {
            flags,
            ..WorkOptions::default()
        };
        self.start(claude, script, options).await.finish().await
    }

    async fn events(&self) -> Vec<pb::RunEvent> {
        self.server.events(&self.run_id).await
    }

    async fn run(&self) -> pb::Run {
        self.server.get_run(&self.run_id).await
    }

    fn file(&self, name: &str) -> PathBuf {
        self.workspace.join(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name)).unwrap()
    }

    /// Writes files into the workspace and commits them.
    fn commit_files(&self, files: &[(&str, &str)]) {
        for (name, text) in files {
            std::fs::write(self.file(name), text).unwrap();
        }
        git(&self.workspace, &["add", "-A"]);
        git(&self.workspace, &["commit", "-q", "-m", "fixture"]);
    }
}

/// The events of type `kind`.
fn of_type<'a>(events: &'a [pb::RunEvent], kind: &str) -> Vec<&'a pb::RunEvent> {
    events.iter().filter(|e| e.r#type == kind).collect()
}

/// Attribute `key` of every event of type `kind` (empty when the event has none).
fn attrs<'a>(events: &'a [pb::RunEvent], kind: &str, key: &str) -> Vec<&'a str> {
    of_type(events, kind)
        .into_iter()
        .map(|e| e.attributes.get(key).map_or("", String::as_str))
        .collect()
}

/// Attributes `a` and `b` of every event of type `kind`.
fn pairs<'a>(events: &'a [pb::RunEvent], kind: &str, a: &str, b: &str) -> Vec<(&'a str, &'a str)> {
    let (first, second) = (attrs(events, kind, a), attrs(events, kind, b));
    first.into_iter().zip(second).collect()
}

/// Whether any event names `tool`.
fn mentions(events: &[pb::RunEvent], tool: &str) -> bool {
    events
        .iter()
        .any(|e| e.attributes.get("tool").is_some_and(|t| t == tool))
}

/// The `input` attribute of an event, as JSON.
fn input_of(event: &pb::RunEvent) -> Value {
    serde_json::from_str(&event.attributes["input"]).unwrap()
}

/// The tools the stand-in was offered in Claude Code's first request.
fn offered_tools(scratch: &Path) -> Vec<String> {
    let log = std::fs::read_to_string(scratch.join("requests.jsonl")).unwrap();
    let first: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    serde_json::from_value(first["tool_names"].clone()).unwrap()
}

/// Processes (not zombies) whose working directory is `dir`, with their names: Claude Code
/// and whatever it started there.
fn processes_in(dir: &Path) -> Vec<(i32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            let name = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            cwd.starts_with(dir).then(|| (pid, name.trim().to_string()))
        })
        .collect()
}

/// Whether `done` holds within `limit` (checked every 50 ms).
async fn eventually(limit: Duration, mut done: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while !done().await {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

const STALL: &str = r#"
rules = [
    { specifier = { tool = "Read" }, decision = "allow" },
    { specifier = { tool = "Bash" }, decision = "allow", command_allow = ["touch"] },
    { specifier = { tool = "Write" }, decision = "allow" },
]

[termination]
stall_detection = true
stall_threshold = 3
"#;

#[tokio::test(flavor = "multi_thread")]
async fn three_identical_failing_reads_stall_the_run_and_claude_code_is_stopped() {
    let Some(claude) = claude() else { return };
    let case = case(STALL, pb::DeliverMode::Unspecified).await;
    let missing = json!({"name": "Read", "input": {"file_path": case.file("missing.txt")}});
    let touch =
        |n: u32| json!({"name": "Bash", "input": {"command": format!("touch after-stall-{n}")}});
    let script = json!([missing, missing, missing, touch(1), touch(2), touch(3)]);
    let run = case.start(&claude, script, WorkOptions::default()).await;
    let ended = async || status(&case.run().await) != pb::RunStatus::Running;
    assert!(eventually(PATIENCE * 3, ended).await, "the run never ended");
    // The agent gets SIGTERM, then SIGKILL after 3 s: gone well within 15 s.
    let output = tokio::time::timeout(Duration::from_secs(15), run.finish())
        .await
        .expect("runplane work and Claude Code are gone soon after the stall");
    assert!(!output.status.success(), "a stalled run is not a success");
    assert!(stderr(&output).contains("RUN_STATUS_FAILED stall detected"));
    let run = case.run().await;
    assert_eq!(status(&run), Failed);
    assert_eq!(run.error, "stall detected");
    let events = case.events().await;
    assert_eq!(attrs(&events, "run.stall_detected", "threshold"), ["3"]);
    // Claude Code reports a failed Read as PostToolUseFailure.
    let results = pairs(&events, "run.toolcall.result", "tool", "success");
    assert_eq!(results, [("Read", "false"); 3]);
    assert_eq!(attrs(&events, "run.toolcall.approved", "tool"), ["Read"; 3]);
    // The next call may reach runplane before Claude Code is stopped: it is denied.
    for reason in attrs(&events, "run.toolcall.denied", "reason") {
        assert_eq!(reason, "run is not running");
    }
    for n in 1..=3 {
        assert!(!case.file(&format!("after-stall-{n}")).exists());
    }
    let left = left_running(&case, Duration::from_secs(2)).await;
    assert!(left.is_empty(), "left running after the stall: {left:?}");
}

const EDIT: &str = r#"
[[rules]]
specifier = { tool = "Edit" }
decision = "allow"
path_allow = ["src/**"]
path_deny = ["**/.env"]
[[rules]]
specifier = { tool = "Edit" }
decision = "deny"
"#;

/// Claude Code 2.1.328 has no multi-file edit tool (no MultiEdit): it refuses a MultiEdit
/// call itself, before any hook, and every Edit names one file, judged by its path.
#[tokio::test(flavor = "multi_thread")]
async fn edits_are_judged_by_path_and_multiedit_never_reaches_runplane() {
    let Some(claude) = claude() else { return };
    let case = case(EDIT, pb::DeliverMode::Unspecified).await;
    case.commit_files(&[("src/a.rs", "fn a() {}\n"), (".env", "K=1\n")]);
    let edit = |name: &str, old: &str, new: &str| {
        let input = json!({"file_path": case.file(name), "old_string": old, "new_string": new});
        json!({"name": "Edit", "input": input})
    };
    let multi = json!({"name": "MultiEdit", "input": {"file_path": case.file("src/a.rs"),
        "edits": [{"old_string": "fn a", "new_string": "fn m"}]}});
    let script = json!([
        multi,
        edit("src/a.rs", "fn a", "fn b"),
        edit(".env", "K=1", "K=2")
    ]);
    let mut run = case.start(&claude, script, WorkOptions::default()).await;
    // The stand-in's request log outlives `finish`.
    let scratch = std::mem::replace(&mut run.scratch, tempfile::tempdir().unwrap());
    assert_success(&run.finish().await);
    let tools = offered_tools(scratch.path());
    assert!(tools.iter().any(|t| t == "Edit"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "MultiEdit"), "{tools:?}");
    assert_eq!(case.read("src/a.rs"), "fn b() {}\n");
    assert_eq!(case.read(".env"), "K=1\n");
    let events = case.events().await;
    let approved = case.file("src/a.rs").display().to_string();
    assert_eq!(attrs(&events, "run.toolcall.approved", "path"), [approved]);
    let env = case.file(".env").display().to_string();
    let denied = pairs(&events, "run.toolcall.denied", "path", "rule_index");
    assert_eq!(denied, [(env.as_str(), "1")]);
    assert!(events.iter().all(|e| !e.attributes.contains_key("paths")));
    assert!(!mentions(&events, "MultiEdit"));
    // The input is what Claude Code hands its hooks: its default for replace_all added.
    let edit = of_type(&events, "run.toolcall.approved")[0];
    assert_eq!(input_of(edit)["replace_all"], json!(false));
}

const WEB: &str = r#"
[[rules]]
specifier = { tool = "WebFetch" }
decision = "allow"
domain_allow = ["docs.rs", "*.docs.rs"]
domain_deny = ["private.docs.rs"]
[[rules]]
specifier = { tool = "WebFetch" }
decision = "deny"
"#;

/// WebFetch is deferred in 2.1.328 (offered after ToolSearch) yet callable directly and
/// hooked; a URL with userinfo reaches the hook too (Claude Code then says "Invalid URL").
#[tokio::test(flavor = "multi_thread")]
async fn webfetch_is_judged_by_the_host_of_its_url() {
    let Some(claude) = claude() else { return };
    let case = case(WEB, pb::DeliverMode::Unspecified).await;
    let urls = [
        "https://docs.rs/serde",
        "https://private.docs.rs/x",
        "https://evil.example/x",
        "https://docs.rs@evil.example/x",
    ];
    let script: Vec<Value> = urls
        .iter()
        .map(|url| json!({"name": "WebFetch", "input": {"url": url, "prompt": "summarise"}}))
        .collect();
    assert_success(&case.work(&claude, json!(script), Vec::new()).await);
    let events = case.events().await;
    assert_eq!(attrs(&events, "run.toolcall.approved", "url"), &urls[..1]);
    assert_eq!(attrs(&events, "run.toolcall.denied", "url"), &urls[1..]);
    let rules = attrs(&events, "run.toolcall.denied", "rule_index");
    assert_eq!(rules, ["1"; 3]);
    // Only the allowed fetch ran (offline it fails; online it may not).
    assert_eq!(attrs(&events, "run.toolcall.result", "tool"), ["WebFetch"]);
}

const MCP: &str = r#"
rules = [
    { specifier = { tool = "mcp__github__delete_*" }, decision = "deny" },
    { specifier = { tool = "mcp__github__*" }, decision = "allow" },
]
"#;

/// A stdio MCP server (`python3 -c`) with tools create_issue and delete_repo; each call it
/// runs is appended to the file named by its first argument.
const MCP_SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    method, result = m.get("method"), None
    if "id" not in m:
        continue
    if method == "initialize":
        result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "github", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": n, "description": n, "inputSchema": {"type": "object"}}
                            for n in ("create_issue", "delete_repo")]}
    elif method == "tools/call":
        open(sys.argv[1], "a").write(m["params"]["name"] + "\n")
        result = {"content": [{"type": "text", "text": "done"}]}
    error = {"code": -32601, "message": "unknown method"}
    reply = {"result": result} if result is not None else {"error": error}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], **reply}), flush=True)
"#;

/// An MCP tool Claude Code does not have is refused by Claude Code itself ("No such tool
/// available"), before any hook; so a real MCP server is configured, through a wrapper
/// that adds `--mcp-config` to the agent's command line.
#[tokio::test(flavor = "multi_thread")]
async fn mcp_tools_are_judged_by_tool_name_globs() {
    let Some(claude) = claude() else { return };
    let case = case(MCP, pb::DeliverMode::Unspecified).await;
    let mcp = tempfile::tempdir().unwrap();
    // The MCP server runs in the agent's sandbox, so it may write only where the agent
    // may: its log of calls goes in the workspace.
    let (config, calls) = (
        mcp.path().join("mcp.json"),
        case.workspace.join("calls.txt"),
    );
    let servers = json!({"mcpServers": {"github": {"type": "stdio", "command": "python3",
        "args": ["-c", MCP_SERVER, calls]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let wrapper = mcp.path().join("with-mcp");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec \"$@\" --mcp-config '{}' --strict-mcp-config\n",
            config.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = json!([
        {"name": "mcp__github__create_issue", "input": {"title": "bug"}},
        {"name": "mcp__github__delete_repo", "input": {"title": "all"}},
        {"name": "mcp__gitlab__create_issue", "input": {"title": "no such server"}},
    ]);
    let options = WorkOptions {
        wrapper: Some(wrapper),
        ..WorkOptions::default()
    };
    assert_success(&case.start(&claude, script, options).await.finish().await);
    assert_eq!(std::fs::read_to_string(&calls).unwrap(), "create_issue\n");
    let events = case.events().await;
    let approved = pairs(&events, "run.toolcall.approved", "tool", "rule_index");
    assert_eq!(approved, [("mcp__github__create_issue", "1")]);
    let denied = pairs(&events, "run.toolcall.denied", "tool", "rule_index");
    assert_eq!(denied, [("mcp__github__delete_repo", "0")]);
    let approved = of_type(&events, "run.toolcall.approved")[0];
    assert_eq!(input_of(approved), json!({"title": "bug"}));
    // A tool Claude Code does not have never reaches its hooks.
    assert!(!mentions(&events, "mcp__gitlab__create_issue"));
}

const INPUT: &str = r#"
rules = [
    { specifier = { tool = "Bash" }, decision = "allow", command_allow = ["echo"] },
]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_whole_input_is_in_the_log_and_shown_to_the_operator() {
    let Some(claude) = claude() else { return };
    let case = case(INPUT, pb::DeliverMode::Unspecified).await;
    let echo = json!({"command": "echo hello", "description": "Print a greeting", "timeout": 5000});
    let touch = json!({"command": "touch marker", "description": "Create the marker file"});
    let script = json!([{"name": "Bash", "input": echo}, {"name": "Bash", "input": touch}]);
    let run = case.start(&claude, script, WorkOptions::default()).await;
    let ask = next_ask(&case.server, &case.run_id).await;
    assert_eq!(ask.command, "touch marker");
    assert_eq!(serde_json::from_str::<Value>(&ask.input).unwrap(), touch);
    let deny = pb::ResolveAskRequest {
        run_id: case.run_id.clone(),
        call_id: ask.call_id,
        decision: pb::Decision::Deny as i32,
        reason: "operator".into(),
        resolver: String::new(),
        ..Default::default()
    };
    case.server.runs().await.resolve_ask(deny).await.unwrap();
    assert_success(&run.finish().await);
    assert!(!case.file("marker").exists());
    let events = case.events().await;
    assert_eq!(input_of(of_type(&events, "run.toolcall.approved")[0]), echo);
    assert_eq!(input_of(of_type(&events, "run.toolcall.asked")[0]), touch);
}

const SUBAGENT: &str = r#"
rules = [
    { specifier = { tool = "Agent" }, decision = "allow" },
    { specifier = { tool = "Bash" }, decision = "deny", command_allow = ["touch sub-denied"] },
    { specifier = { tool = "Bash" }, decision = "allow", command_allow = ["touch"] },
    { specifier = { tool = "Write" }, decision = "allow" },
]
"#;

/// The `Agent` tool starts the subagent in the background by default in 2.1.328; `claude
/// -p` waits for it before it exits.
#[tokio::test(flavor = "multi_thread")]
async fn a_subagents_calls_are_judged_and_the_agent_call_by_name() {
    let Some(claude) = claude() else { return };
    let case = case(SUBAGENT, pb::DeliverMode::Unspecified).await;
    let agent = json!({"description": "helper", "prompt": "SUBAGENT:x touch two files",
        "subagent_type": "general-purpose"});
    let script = json!({
        "main": [{"name": "Agent", "input": agent}],
        "sub": {"x": [
            {"name": "Bash", "input": {"command": "touch sub-allowed", "description": "a"}},
            {"name": "Bash", "input": {"command": "touch sub-denied", "description": "d"}},
        ]},
        "final": "done",
    });
    assert_success(&case.work(&claude, script, Vec::new()).await);
    assert!(case.file("sub-allowed").exists());
    assert!(!case.file("sub-denied").exists());
    let events = case.events().await;
    let approved = pairs(&events, "run.toolcall.approved", "tool", "rule_index");
    assert_eq!(approved, [("Agent", "0"), ("Bash", "2")]);
    let commands = attrs(&events, "run.toolcall.approved", "command");
    assert_eq!(commands, ["", "touch sub-allowed"]);
    assert_eq!(
        input_of(of_type(&events, "run.toolcall.approved")[0]),
        agent
    );
    let denied = pairs(&events, "run.toolcall.denied", "command", "rule_index");
    assert_eq!(denied, [("touch sub-denied", "1")]);
    assert_eq!(status(&case.run().await), Completed);
}

const GATE: &str = r#"
rules = [
    { specifier = { tool = "Write" }, decision = "allow" },
]

[quality_gate]
require_tests_pass = true
rollback_on_gate_fail = true
"#;

/// The agent writes src/lib.rs (new) and README (tracked); the gate's tests are
/// `test_command` (`runplane work --test-command`); the run ends `expected`. A `branch`
/// delivery pushes to a bare repository added as `origin`.
async fn gated(
    claude: &str,
    mode: pb::DeliverMode,
    test_command: &str,
    expected: pb::RunStatus,
) -> Case {
    let case = case(GATE, mode).await;
    let mut flags = vec!["--test-command".to_string(), test_command.to_string()];
    if mode == pb::DeliverMode::Branch {
        let bare = case.server.dir.path().join("remote.git");
        git(
            case.server.dir.path(),
            &["init", "-q", "--bare", "remote.git"],
        );
        git(
            &case.workspace,
            &["remote", "add", "origin", bare.to_str().unwrap()],
        );
        flags.extend(["--remote".to_string(), "origin".to_string()]);
    }
    let script = json!([
        {"name": "Write",
         "input": {"file_path": case.file("src/lib.rs"), "content": "pub fn f() {}\n"}},
        {"name": "Write", "input": {"file_path": case.file("README"), "content": "changed\n"}},
    ]);
    let output = case.work(claude, script, flags).await;
    let run = case.run().await;
    assert_eq!(status(&run), expected, "{}", run.error);
    let completed = expected == Completed;
    assert_eq!(output.status.success(), completed, "{}", stderr(&output));
    case
}

#[tokio::test(flavor = "multi_thread")]
async fn a_passing_gate_delivers_a_local_commit() {
    let Some(claude) = claude() else { return };
    let tests = "grep -q 'pub fn' src/lib.rs";
    let case = gated(&claude, pb::DeliverMode::CommitLocal, tests, Completed).await;
    let events = case.events().await;
    assert_eq!(of_type(&events, "run.qualitygate.passed").len(), 1);
    assert_eq!(of_type(&events, "run.delivery.succeeded").len(), 1);
    let files = git(
        &case.workspace,
        &["show", "--name-only", "--format=", "HEAD"],
    );
    assert_eq!(files, "README\nsrc/lib.rs");
    assert_eq!(git(&case.workspace, &["rev-list", "--count", "HEAD"]), "2");
    assert_eq!(git(&case.workspace, &["status", "--porcelain"]), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_gate_with_rollback_fails_the_run_and_restores_the_workspace() {
    let Some(claude) = claude() else { return };
    let tests = "grep -q 'fn g' src/lib.rs";
    let case = gated(&claude, pb::DeliverMode::CommitLocal, tests, Failed).await;
    let error = case.run().await.error;
    assert!(error.starts_with("quality gate failed"), "{error}");
    let events = case.events().await;
    assert_eq!(of_type(&events, "run.qualitygate.failed").len(), 1);
    assert!(of_type(&events, "run.delivery.requested").is_empty());
    assert_eq!(
        attrs(&events, "run.toolcall.result", "success"),
        ["true"; 2]
    );
    assert!(!case.file("src/lib.rs").exists());
    assert_eq!(case.read("README"), "r\n");
    assert_eq!(git(&case.workspace, &["status", "--porcelain"]), "");
    assert_eq!(git(&case.workspace, &["rev-list", "--count", "HEAD"]), "1");
}

#[tokio::test(flavor = "multi_thread")]
async fn branch_delivery_pushes_runplane_run_id_to_the_remote() {
    let Some(claude) = claude() else { return };
    let case = gated(
        &claude,
        pb::DeliverMode::Branch,
        "test -f src/lib.rs",
        Completed,
    )
    .await;
    let branch = format!("runplane/{}", case.run_id);
    let events = case.events().await;
    assert_eq!(of_type(&events, "run.delivery.succeeded").len(), 1);
    let remote = case.server.dir.path().join("remote.git");
    let pushed = git(&remote, &["rev-parse", &branch]);
    assert_eq!(pushed, git(&case.workspace, &["rev-parse", "HEAD"]));
    assert_eq!(
        git(&remote, &["show", &format!("{branch}:src/lib.rs")]),
        "pub fn f() {}"
    );
    assert_eq!(
        git(&remote, &["show", &format!("{branch}:README")]),
        "changed"
    );
    assert_eq!(git(&remote, &["rev-list", "--count", &branch]), "2");
}

const WRITE: &str = r#"
rules = [
    { specifier = { tool = "Write" }, decision = "allow", path_allow = ["src/**"] },
]
"#;

/// A Write of a 70 KB file: its `input` is over the server's 64 KiB cap for a stored text.
/// The worker cuts the longest strings of the input to fit (the decision is made on the
/// path, as the profile says) instead of sending a request the server refuses — which once
/// left the hook waiting out `--hook-timeout`.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_whose_input_is_over_64_kib_is_decided_on_its_path() {
    let Some(claude) = claude() else { return };
    let case = case(WRITE, pb::DeliverMode::Unspecified).await;
    let content = "x".repeat(70_000);
    let script = json!([
        {"name": "Write", "input": {"file_path": case.file("src/big.txt"), "content": content}},
    ]);
    // No time bound: a hook left waiting would end in a block, and the file would be
    // missing.
    let output = case
        .start(&claude, script, WorkOptions::default())
        .await
        .finish()
        .await;
    assert_success(&output);
    let events = case.events().await;
    assert_eq!(attrs(&events, "run.toolcall.approved", "tool"), ["Write"]);
    assert_eq!(case.read("src/big.txt"), content);
}

const TAIL: &str = r#"
rules = [
    { specifier = { tool = "Bash" }, decision = "allow", command_allow = ["tail"] },
]
"#;

/// A run whose agent is running an allowed `tail -f README` (Claude Code refuses a
/// standalone `sleep 30` itself, before its hooks; its Bash commands run in process groups
/// of their own).
async fn tailing(claude: &str) -> (Case, AgentRun) {
    let case = case(TAIL, pb::DeliverMode::Unspecified).await;
    let tail = json!({"command": "tail -f README", "description": "Follow the readme"});
    let script = json!([{"name": "Bash", "input": tail}]);
    let run = case.start(claude, script, WorkOptions::default()).await;
    let tailing = async || processes_in(&case.workspace).iter().any(|p| p.1 == "tail");
    assert!(
        eventually(PATIENCE, tailing).await,
        "the allowed tail never ran"
    );
    (case, run)
}

/// Kills (by pid) what is still running in the workspace after `limit`, and returns it.
async fn left_running(case: &Case, limit: Duration) -> Vec<(i32, String)> {
    eventually(limit, async || processes_in(&case.workspace).is_empty()).await;
    let left = processes_in(&case.workspace);
    for (pid, _) in &left {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    left
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_ends_claude_code_and_the_command_it_is_running() {
    let Some(claude) = claude() else { return };
    let (case, run) = tailing(&claude).await;
    let cancel = pb::CancelRunRequest {
        run_id: case.run_id.clone(),
        reason: "stop".into(),
    };
    case.server.runs().await.cancel_run(cancel).await.unwrap();
    let output = tokio::time::timeout(Duration::from_secs(5), run.finish()).await;
    assert!(!output.expect("runplane work ends").status.success());
    let left = left_running(&case, Duration::from_secs(2)).await;
    assert!(left.is_empty(), "left running after the cancel: {left:?}");
}

/// A SIGTERM to `runplane work` (or a Ctrl-C) stops the agent and what it runs, and fails
/// the run saying why; it once ended the worker alone, the agent running on orphaned.
#[tokio::test(flavor = "multi_thread")]
async fn a_terminated_worker_takes_claude_code_with_it() {
    let Some(claude) = claude() else { return };
    let (case, mut run) = tailing(&claude).await;
    let worker = Pid::from_raw(run.worker.id().unwrap() as i32);
    kill(worker, Signal::SIGTERM).unwrap();
    run.worker.wait().await.unwrap();
    let left = left_running(&case, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "left running after the worker: {left:?}");
    let ended = case.run().await;
    assert_eq!(status(&ended), pb::RunStatus::Failed);
    assert_eq!(ended.error, "runplane work was stopped by SIGTERM");
}

/// A worker killed outright (SIGKILL: no chance to stop anything) still takes Claude Code
/// with it: the agent is started through `runplane exec-agent`, which has the kernel kill
/// it when its worker dies.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_worker_takes_claude_code_with_it() {
    let Some(claude) = claude() else { return };
    let (case, mut run) = tailing(&claude).await;
    run.worker.kill().await.unwrap();
    let gone = eventually(Duration::from_secs(5), async || {
        !processes_in(&case.workspace)
            .iter()
            .any(|p| p.1 == "claude")
    })
    .await;
    let left = left_running(&case, Duration::from_secs(1)).await;
    assert!(gone, "Claude Code outlived its killed worker: {left:?}");
}
