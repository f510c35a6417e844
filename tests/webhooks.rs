//! Ask webhooks against local receivers: one POST per new ask and one per resolution or
//! expiry, with the documented fields; a receiver that is down or never answers delays
//! no decision.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use runplane::grpc::pb;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// What one POST brought: its request line and its JSON body.
struct Posted {
    request_line: String,
    body: Value,
}

/// A receiver that answers every request 200 and hands each one to the test.
async fn receiver() -> (SocketAddr, mpsc::UnboundedReceiver<Posted>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                if let Some(posted) = read_request(stream).await {
                    let _ = tx.send(posted);
                }
            });
        }
    });
    (addr, rx)
}

/// Reads one request (headers, then `Content-Length` bytes of body) and answers 200.
async fn read_request(mut stream: TcpStream) -> Option<Posted> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while data.len() < head_end + length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
    let body = serde_json::from_slice(&data[head_end..head_end + length]).ok()?;
    let _ = stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .await;
    Some(Posted {
        request_line: head.lines().next().unwrap_or_default().to_string(),
        body,
    })
}

async fn next_post(posts: &mut mpsc::UnboundedReceiver<Posted>) -> Posted {
    tokio::time::timeout(PATIENCE, posts.recv())
        .await
        .expect("a webhook POST in time")
        .expect("the receiver runs")
}

/// No further POST arrives for a moment.
async fn no_more(posts: &mut mpsc::UnboundedReceiver<Posted>) {
    let more = tokio::time::timeout(Duration::from_millis(500), posts.recv()).await;
    assert!(
        more.is_err(),
        "unexpected POST: {:?}",
        more.ok().flatten().map(|p| p.body)
    );
}

#[tokio::test]
async fn each_ask_and_its_answer_are_posted_once_with_their_fields() {
    let (addr, mut posts) = receiver().await;
    let server = TestServer::with(Options {
        ask_webhooks: vec![format!("http://{addr}/hooks/runplane?team=a")],
        ..Options::default()
    })
    .await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let asked = worker.call("c<1>", "Edit", "", "/etc/hosts").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);

    let opened = next_post(&mut posts).await;
    assert_eq!(opened.request_line, "POST /hooks/runplane?team=a HTTP/1.1");
    let body = &opened.body;
    assert_eq!(body["event"], "ask.opened");
    assert_eq!(body["run_id"], run_id.as_str());
    assert_eq!(body["agent_id"], "agent-1");
    assert_eq!(body["task_id"], "task-1");
    assert_eq!(body["project_id"], "proj-1");
    assert_eq!(body["call_id"], "c<1>");
    assert_eq!(body["tool"], "Edit");
    assert_eq!(body["path"], "/etc/hosts");
    assert_eq!(body["command"], "");
    assert_eq!(body["url"], "");
    assert_eq!(body["rule"], Value::Null, "the mode's default asked");
    assert_eq!(body["reason"], asked.reason.as_str());
    assert!(body["deadline"].as_str().is_some_and(|d| d.ends_with('Z')));
    assert_eq!(body["decision"], Value::Null);
    assert_eq!(body["by"], Value::Null);
    let link = format!("http://{}/#/asks/{run_id}/c%3C1%3E", server.addr);
    assert_eq!(body["link"], link.as_str());
    let text = body["text"].as_str().unwrap();
    assert!(text.contains("agent-1") && text.contains("Edit `/etc/hosts`"));
    assert!(text.ends_with(&format!("<{link}|answer>")), "{text}");

    server
        .resolve(&run_id, "c<1>", pb::Decision::Allow, "looks fine")
        .await;
    // The worker hears the final answer too.
    match worker.recv().await {
        pb::coordinator_message::Message::ToolCallResponse(r) => assert_eq!(r.call_id, "c<1>"),
        other => panic!("expected the final decision, got {other:?}"),
    }
    let resolved = next_post(&mut posts).await.body;
    assert_eq!(resolved["event"], "ask.resolved");
    assert_eq!(resolved["decision"], "allow");
    assert_eq!(resolved["by"], "admin");
    assert_eq!(resolved["reason"], "looks fine");
    assert_eq!(resolved["call_id"], "c<1>");
    assert_eq!(resolved["tool"], "Edit", "the ask's own call is carried");
    assert_eq!(resolved["path"], "/etc/hosts");
    assert!(resolved["text"]
        .as_str()
        .unwrap()
        .contains("allowed by admin"));
    no_more(&mut posts).await;

    // An ask its run's end denies.
    let asked = worker.call("c2", "Edit", "", "/etc/motd").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    assert_eq!(next_post(&mut posts).await.body["event"], "ask.opened");
    server.cancel(&run_id, "stop").await;
    let denied = next_post(&mut posts).await.body;
    assert_eq!(denied["event"], "ask.resolved");
    assert_eq!(denied["decision"], "deny");
    assert_eq!(denied["by"], "runplane");
    no_more(&mut posts).await;
}

#[tokio::test]
async fn an_ask_that_times_out_is_posted_as_expired() {
    let (addr, mut posts) = receiver().await;
    let server = TestServer::with(Options {
        policy: Some(limits_profile("expires", "ask_timeout_seconds = 1")),
        ask_webhooks: vec![format!("http://{addr}/")],
        ..Options::default()
    })
    .await;
    let run_id = server.start_run("expires").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let asked = worker.call("c1", "Edit", "", "ask/x").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    let opened = next_post(&mut posts).await.body;
    assert_eq!(opened["event"], "ask.opened");
    assert_eq!(opened["rule"], 1);
    let expired = next_post(&mut posts).await.body;
    assert_eq!(expired["event"], "ask.expired");
    assert_eq!(expired["decision"], "deny");
    assert_eq!(expired["by"], "runplane");
    assert_eq!(expired["deadline"], opened["deadline"]);
    no_more(&mut posts).await;
}

#[tokio::test]
async fn receivers_that_are_down_or_silent_delay_no_decision() {
    // A port nothing listens on any more, and a receiver that accepts and never answers.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_addr = closed.local_addr().unwrap();
    drop(closed);
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let server = TestServer::with(Options {
        metrics: true,
        ask_webhooks: vec![
            format!("http://{closed_addr}/"),
            format!("http://{silent_addr}/"),
        ],
        ..Options::default()
    })
    .await;
    let run_id = server.start_run("headless-safe-sandbox").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let asked = worker.call("c1", "Edit", "", "/etc/hosts").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    // While both receivers fail the ask's notice, the worker's next calls are answered.
    for call_id in ["c2", "c3", "c4"] {
        let allowed = tokio::time::timeout(
            Duration::from_secs(2),
            worker.call(call_id, "Read", "", "/work/repo/a.txt"),
        )
        .await
        .expect("the allow is not held up by the webhooks");
        assert_eq!(decision(&allowed), pb::Decision::Allow);
    }
    // The refused connection is retried, and counted as such.
    let metrics = server.metrics_addr.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = scrape(metrics).await;
        let retries = text
            .lines()
            .find_map(|l| l.strip_prefix("runplane_webhook_deliveries_total{outcome=\"retry\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if retries >= 1.0 {
            assert!(text.contains("runplane_webhook_deliveries_total{outcome=\"delivered\"} 0"));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no retry counted:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The metrics text, by a plain HTTP/1.1 GET.
async fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}
