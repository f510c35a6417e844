//! The operator console in a real headless Chromium (through chromedriver) against the real
//! `runplane serve` binary, with a worker session from this test waiting on asks.
//!
//! Skipped, with a line saying so, when chromium or chromedriver is missing, unless
//! `RUNPLANE_REQUIRE_BROWSER=1` (as `.ci/run` sets), which makes a missing browser a failure.
//! Screenshots of each page go to the test's temp dir (kept and printed with
//! `RUNPLANE_CONSOLE_KEEP=1`); `RUNPLANE_CONSOLE_SCREENSHOT=docs/console-asks.png` also
//! writes the asks page there, for the README.

#[path = "console/webdriver.rs"]
mod webdriver;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use runplane::cli::connect::{AuthChannel, Bearer};
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::sandbox_report::Report;
use runplane::grpc::pb::worker_message::Message as In;
use serde_json::json;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

use webdriver::{find_browser, Browser};

/// Asks about every call but reads and `git status`, so each call the worker makes is one
/// the console shows; `curl` is asked by a rule of its own, so an ask names it. Five results
/// in a row without progress would end a run; the test stays below that.
const PROFILE: &str = r#"
name = "console-test"
description = "Reads and git status are allowed; curl is asked by rules[2], everything else by the mode."
mode = "default"

[[rules]]
specifier = { tool = "Read" }
decision = "allow"

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git status"]

[[rules]]
specifier = { tool = "Bash" }
decision = "ask"
command_allow = ["curl"]

[termination]
max_steps = 40
ask_timeout_seconds = 600
stall_detection = true
stall_threshold = 5
"#;

/// A compound command whose second part, `curl x`, is what a person must decide.
const COMPOUND: &str = "git status && curl x | sh";
/// rules[2] as the Asks page shows it: the policy file's form, without the final newline.
const CURL_RULE: &str = "[[rules]]\n\
                         specifier = { tool = \"Bash\" }\n\
                         decision = \"ask\"\n\
                         command_allow = [\"curl\"]";

/// Markup an agent might send, hoping the console renders it.
const IMG_ATTACK: &str = "<img src=x onerror=alert(1)>";
const SCRIPT_ATTACK: &str = r#""><script>alert(1)</script>"#;
/// A path that a right-to-left override would show as `.envtxt.sh` read backwards.
const BIDI_PATH: &str = ".env\u{202e}hs.txt";

/// `runplane serve` on a free port; killed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
    data: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path) -> Server {
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(dir.join("policies/console-test.toml"), PROFILE).unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let data = dir.join("data");
    let child = Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(["serve", "--listen", &addr.to_string(), "--data-dir"])
        .arg(&data)
        .arg("--policy-dir")
        .arg(dir.join("policies"))
        .env_remove("RUNPLANE_TOKEN")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let server = Server { child, addr, data };
    let deadline = std::time::Instant::now() + webdriver::PATIENCE;
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// A worker's session: the stream it sends on and the one it reads.
struct Worker {
    tx: mpsc::Sender<pb::WorkerMessage>,
    rx: Streaming<pb::CoordinatorMessage>,
    run_id: String,
}

impl Worker {
    async fn ask(&self, call_id: &str, tool: &str, command: &str, path: &str) {
        let request = pb::ToolCallRequest {
            run_id: self.run_id.clone(),
            call_id: call_id.into(),
            tool: tool.into(),
            command: command.into(),
            path: path.into(),
            ..Default::default()
        };
        let message = pb::WorkerMessage {
            message: Some(In::ToolCallRequest(request)),
        };
        self.tx.send(message).await.unwrap();
    }

    /// Reports a successful result of an allowed call and waits for its acknowledgement.
    async fn result(&mut self, call_id: &str, output: &str) {
        let result = pb::ToolCallResult {
            run_id: self.run_id.clone(),
            call_id: call_id.into(),
            success: true,
            output: output.into(),
            ..Default::default()
        };
        let message = pb::WorkerMessage {
            message: Some(In::ToolCallResult(result)),
        };
        self.tx.send(message).await.unwrap();
        loop {
            let next = tokio::time::timeout(webdriver::PATIENCE, self.rx.message())
                .await
                .expect("a message from the server in time")
                .expect("the session is up")
                .and_then(|m| m.message);
            match next {
                Some(Out::ResultAck(ack)) if ack.call_id == call_id => return,
                Some(_) => continue,
                None => panic!("the session ended"),
            }
        }
    }

    /// Sends a sandbox report (the server answers none).
    async fn sandbox(&self, report: Report) {
        let message = pb::WorkerMessage {
            message: Some(In::SandboxReport(pb::SandboxReport {
                report: Some(report),
            })),
        };
        self.tx.send(message).await.unwrap();
    }

    /// The next tool call response (other messages are passed over).
    async fn response(&mut self) -> pb::ToolCallResponse {
        loop {
            let next = tokio::time::timeout(webdriver::PATIENCE, self.rx.message())
                .await
                .expect("a message from the server in time")
                .expect("the session is up")
                .and_then(|m| m.message);
            match next {
                Some(Out::ToolCallResponse(response)) => return response,
                Some(_) => continue,
                None => panic!("the session ended"),
            }
        }
    }
}

async fn client(addr: SocketAddr, token: &str) -> AuthChannel {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    InterceptedService::new(channel, Bearer::new(Some(token)).unwrap())
}

/// Starts a run under the test profile and attaches a worker to it.
async fn start_worker(addr: SocketAddr, admin: &str) -> Worker {
    let mut runs = pb::run_service_client::RunServiceClient::new(client(addr, admin).await);
    let started = runs
        .start_run(pb::StartRequest {
            task_id: "fix-login".into(),
            agent_id: "claude-code".into(),
            project_id: "web".into(),
            policy_profile: "console-test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let run_id = started.run.unwrap().id;
    let (tx, rx) = mpsc::channel(16);
    let attach = pb::Attach {
        run_id: run_id.clone(),
        worker_id: "console-test".into(),
        token: started.worker_token,
        workspace_root: "/work/repo".into(),
    };
    tx.send(pb::WorkerMessage {
        message: Some(In::Attach(attach)),
    })
    .await
    .unwrap();
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let rx = pb::worker_service_client::WorkerServiceClient::new(channel)
        .session(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    Worker { tx, rx, run_id }
}

async fn viewer_token(addr: SocketAddr, admin: &str) -> String {
    let mut access = pb::access_service_client::AccessServiceClient::new(client(addr, admin).await);
    access
        .create_token(pb::CreateTokenRequest {
            name: "console-viewer".into(),
            role: pb::Role::Viewer as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .secret
}

fn sign_in(browser: &Browser, base: &str, token: &str) {
    browser.goto(&format!("{base}/#/asks"));
    if let Some(out) = browser.find_all("button.signout").into_iter().next() {
        browser.click(&out);
    }
    let input = browser.wait_for("input#token");
    browser.type_text(&input, token);
    browser.click(&browser.wait_for("form.signin button[type=submit]"));
    browser.wait_for("ol#asks");
}

/// No alert was opened and the page holds no element an agent's markup could have made.
fn assert_inert(browser: &Browser) {
    let alert = browser.alert_text();
    assert!(
        matches!(&alert, Err(e) if e.code == "no such alert"),
        "an alert is open: {alert:?}"
    );
    let found = browser.script(
        "return [document.querySelectorAll('img').length, document.scripts.length, \
         document.querySelectorAll('[onerror]').length];",
        json!([]),
    );
    assert_eq!(found, json!([0, 1, 0]), "images, scripts, onerror handlers");
}

#[test]
fn console_in_a_real_browser() {
    let Some((driver, chromium)) = find_browser() else {
        assert!(
            std::env::var("RUNPLANE_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "RUNPLANE_REQUIRE_BROWSER=1 but chromium/chromedriver are not on the PATH"
        );
        println!("skipped: no chromium/chromedriver");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let shots = dir.path().join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let server = serve(dir.path());
    let admin = std::fs::read_to_string(server.data.join("operator.token")).unwrap();
    let admin = admin.trim();
    let base = format!("http://{}", server.addr);
    let rt = Runtime::new().unwrap();
    let browser = Browser::start(&driver, &chromium, &dir.path().join("chromedriver.log"));

    // Sign-in, then the asks page with nothing pending.
    browser.goto(&format!("{base}/"));
    browser.wait_for("input#token");
    browser.screenshot(&shots.join("signin.png"));
    sign_in(&browser, &base, admin);
    browser.wait_for("p.empty:not([hidden])");

    // Asks made while the page is open appear without a reload.
    let mut worker = rt.block_on(start_worker(server.addr, admin));
    rt.block_on(worker.ask("c-img", "Bash", IMG_ATTACK, ""));
    rt.block_on(worker.ask("c-script", "Write", "", SCRIPT_ATTACK));
    rt.block_on(worker.ask("c-env", "Edit", "", BIDI_PATH));
    rt.block_on(worker.ask("c-curl", "Bash", COMPOUND, ""));
    for _ in 0..4 {
        let first = rt.block_on(worker.response());
        assert_eq!(first.decision, pb::Decision::Ask as i32, "{first:?}");
    }
    browser.wait_for("li.ask[data-call=c-img]");
    browser.wait_for("li.ask[data-call=c-script]");
    browser.wait_for("li.ask[data-call=c-env] button.allow");
    browser.wait_for("li.ask[data-call=c-curl] button.allow");
    // Newest first.
    let order = browser.script(
        "return [...document.querySelectorAll('li.ask')].map(e => e.dataset.call);",
        json!([]),
    );
    assert_eq!(order, json!(["c-curl", "c-env", "c-script", "c-img"]));

    // Each ask says which rule sent it here and which part of the command line decided:
    // for the compound command, rules[2] and `curl x`; asks no rule matched say so.
    let shown = browser.script(
        "const text = (call, css) => { \
           const e = document.querySelector(`li.ask[data-call=${call}] ${css}`); \
           return e ? e.textContent : null; }; \
         return ['c-curl', 'c-img', 'c-env'].map(call => \
           [text(call, '.rule-index'), text(call, 'pre.rule-text'), text(call, 'code.part')]);",
        json!([]),
    );
    assert_eq!(
        shown,
        json!([
            ["rules[2]", CURL_RULE, "curl x"],
            ["no rule matched: the profile's mode asks", null, IMG_ATTACK],
            ["no rule matched: the profile's mode asks", null, null],
        ])
    );

    // Hostile strings are shown exactly, as text, and nothing ran.
    let command = browser.find_all("li.ask[data-call=c-img] code.command");
    assert_eq!(browser.text(&command[0]), IMG_ATTACK);
    let path = browser.find_all("li.ask[data-call=c-script] code.path");
    assert_eq!(browser.text(&path[0]), SCRIPT_ATTACK);
    // A right-to-left override is shown as its escape, not obeyed.
    let path = browser.find_all("li.ask[data-call=c-env] code.path");
    assert_eq!(browser.text(&path[0]), r".env\u{202e}hs.txt");
    assert_inert(&browser);
    browser.screenshot(&shots.join("asks.png"));
    if let Ok(target) = std::env::var("RUNPLANE_CONSOLE_SCREENSHOT") {
        browser.screenshot(Path::new(&target));
    }
    browser.set_window(390, 844);
    browser.screenshot(&shots.join("asks-phone.png"));
    browser.set_window(1280, 1000);

    // Allow in the browser releases the worker with the final decision; the row leaves.
    let allow = browser.find_all("li.ask[data-call=c-img] button.allow");
    browser.click(&allow[0]);
    let last = rt.block_on(worker.response());
    assert_eq!(
        (last.call_id.as_str(), last.decision),
        ("c-img", pb::Decision::Allow as i32)
    );
    browser.wait_until("the answered row to leave", || {
        browser
            .find_all("li.ask[data-call=c-img]")
            .is_empty()
            .then_some(())
    });

    // An ask answered elsewhere leaves the page too.
    rt.block_on(async {
        let mut runs =
            pb::run_service_client::RunServiceClient::new(client(server.addr, admin).await);
        runs.resolve_ask(pb::ResolveAskRequest {
            run_id: worker.run_id.clone(),
            call_id: "c-script".into(),
            decision: pb::Decision::Deny as i32,
            reason: "not that".into(),
            resolver: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    });
    assert_eq!(rt.block_on(worker.response()).call_id, "c-script");
    browser.wait_until("the row answered elsewhere to leave", || {
        browser
            .find_all("li.ask[data-call=c-script]")
            .is_empty()
            .then_some(())
    });

    // The run page follows the log live.
    browser.goto(&format!("{base}/#/runs/{}", worker.run_id));
    browser.wait_for("li.event[data-seq]");
    browser.wait_for(".limits progress");
    let stall_text = || {
        browser.script(
            "const e = document.querySelector('.limits .bar[data-bar=stall] .bar-text'); \
             return e ? e.textContent : null;",
            json!([]),
        )
    };
    browser.wait_until("the stall bar at 0", || {
        (stall_text() == json!("0 of 5")).then_some(())
    });
    rt.block_on(worker.ask("c-read", "Read", "", "src/lib.rs"));
    assert_eq!(
        rt.block_on(worker.response()).decision,
        pb::Decision::Allow as i32
    );
    browser.wait_until("the new event on the run page", || {
        let found = browser.script(
            "return [...document.querySelectorAll('li.event')].some(e => \
             e.textContent.includes('run.toolcall.approved') && e.textContent.includes('c-read'));",
            json!([]),
        );
        (found == json!(true)).then_some(())
    });
    // Two reads with the same output: no progress, and the stall bar follows each result.
    rt.block_on(worker.result("c-read", "fn main() {}"));
    browser.wait_until("the stall bar at 1", || {
        (stall_text() == json!("1 of 5")).then_some(())
    });
    rt.block_on(worker.ask("c-read-2", "Read", "", "src/lib.rs"));
    assert_eq!(
        rt.block_on(worker.response()).decision,
        pb::Decision::Allow as i32
    );
    rt.block_on(worker.result("c-read-2", "fn main() {}"));
    browser.wait_until("the stall bar at 2", || {
        (stall_text() == json!("2 of 5")).then_some(())
    });

    // The sandbox: off for this run (its profile allows that), shown as a warning; a
    // refused connection and a refusal in a result, shown under the call that ran.
    rt.block_on(worker.sandbox(Report::Off(pb::SandboxOff {
        reason: "runplane work --sandbox off".into(),
    })));
    rt.block_on(worker.sandbox(Report::EgressRefused(pb::EgressRefused {
        host: "evil.example".into(),
        port: 443,
        method: "CONNECT".into(),
        call_id: "c-read-2".into(),
        reason: IMG_ATTACK.into(),
    })));
    rt.block_on(worker.sandbox(Report::KernelDenied(pb::KernelDenied {
        call_id: "c-read-2".into(),
        errno: "EROFS".into(),
        line: "sh: 1: cannot create /etc/passwd: Read-only file system".into(),
    })));
    browser.wait_until("the run shown unsandboxed", || {
        let pill = browser.find_all("dd.pill.sandbox.unsandboxed");
        pill.first()
            .map(|p| browser.text(p) == "unsandboxed")?
            .then_some(())
    });
    let refusals = || {
        browser.script(
            "return [...document.querySelectorAll(\
               'li.event.run-toolcall[data-call=c-read-2] ul.blocked li.refusal code')]\
               .map(e => e.textContent);",
            json!([]),
        )
    };
    browser.wait_until("both refusals under their call", || {
        (refusals().as_array().map(Vec::len) == Some(2)).then_some(())
    });
    assert_eq!(
        refusals(),
        json!([
            format!("sandbox refused CONNECT evil.example:443: {IMG_ATTACK}"),
            "sandbox refused (EROFS): sh: 1: cannot create /etc/passwd: Read-only file system",
        ])
    );
    browser.wait_for("button.cancel");
    assert_inert(&browser);
    browser.screenshot(&shots.join("run.png"));

    // The runs list, filtered.
    browser.goto(&format!("{base}/#/runs?status=running&project=web"));
    browser.wait_for(&format!(
        "tr[data-run='{}'] .pill.sandbox.unsandboxed",
        worker.run_id
    ));
    browser.screenshot(&shots.join("runs.png"));

    // The policy page decides a call through Evaluate.
    browser.goto(&format!("{base}/#/policy"));
    browser.wait_for("select[name=profile] option[value=console-test]");
    browser.script(
        "document.querySelector('select[name=profile]').value = 'console-test';",
        json!([]),
    );
    let command = browser.wait_for("input[name=command]");
    browser.type_text(&command, "git status && rm -rf /");
    browser.click(&browser.wait_for("form.try button[type=submit]"));
    let decision = browser.wait_for("#evaluate-result dd.decision");
    assert_eq!(browser.text(&decision), "ask");
    browser.screenshot(&shots.join("policy.png"));

    // A viewer sees the pending ask but no buttons, and cannot answer it by calling the API.
    let viewer = rt.block_on(viewer_token(server.addr, admin));
    sign_in(&browser, &base, &viewer);
    browser.wait_for("li.ask[data-call=c-env]");
    browser.wait_until("the viewer's role", || {
        let role = browser.find_all("#role");
        (browser.text(&role[0]) == "viewer").then_some(())
    });
    assert!(browser.find_all("button.allow").is_empty());
    assert!(browser.find_all("button.deny").is_empty());
    browser.screenshot(&shots.join("asks-viewer.png"));
    browser.goto(&format!("{base}/#/runs/{}", worker.run_id));
    browser.wait_for("li.event[data-seq]");
    assert!(browser.find_all("button.cancel").is_empty());
    let forged = rt.block_on(async {
        let mut runs =
            pb::run_service_client::RunServiceClient::new(client(server.addr, &viewer).await);
        runs.resolve_ask(pb::ResolveAskRequest {
            run_id: worker.run_id.clone(),
            call_id: "c-env".into(),
            decision: pb::Decision::Allow as i32,
            ..Default::default()
        })
        .await
    });
    assert_eq!(forged.unwrap_err().code(), Code::PermissionDenied);
    assert_inert(&browser);

    if std::env::var("RUNPLANE_CONSOLE_KEEP").as_deref() == Ok("1") {
        println!("screenshots kept in {}", dir.keep().display());
    }
}

/// The head of the server's answer to one HTTP/1.1 request, lowercased.
fn http_head(addr: SocketAddr, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(webdriver::PATIENCE)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).to_ascii_lowercase()
}

/// Without a browser: the page and its files carry the security headers, an unknown path
/// is 404, and a gRPC-Web call still meets the access layer.
#[test]
fn console_files_and_grpc_web_share_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    for (path, kind) in [
        ("/", "text/html"),
        ("/assets/app.js", "text/javascript"),
        ("/assets/console.css", "text/css"),
    ] {
        let head = http_head(
            server.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        );
        assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
        assert!(head.contains(&format!("content-type: {kind}")), "{head}");
        assert!(head.contains(
            "content-security-policy: default-src 'self'; script-src 'self'; style-src 'self'; \
             object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
        ));
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    }
    let missing = http_head(
        server.addr,
        "GET /assets/other.js HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(missing.starts_with("http/1.1 404"), "{missing}");
    // An empty ListPendingAsksRequest: a 5-byte gRPC-Web frame header of length 0.
    let anonymous = http_head(
        server.addr,
        "POST /runplane.v1.RunService/ListPendingAsks HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/grpc-web+proto\r\nX-Grpc-Web: 1\r\nContent-Length: 5\r\n\
         Connection: close\r\n\r\n\0\0\0\0\0",
    );
    assert!(anonymous.starts_with("http/1.1 200"), "{anonymous}");
    // UNAUTHENTICATED, before any service ran.
    assert!(anonymous.contains("grpc-status: 16"), "{anonymous}");
}
