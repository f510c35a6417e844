//! The egress proxy serving, against real sockets on 127.0.0.1: tunnels to a TCP echo
//! listener, forwarding to real hyper servers (streamed bodies included), kept-alive
//! connections judged request by request, the connection limit, and the proxy's end.

mod egress_support;

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;

use egress_support::*;
use http_body_util::StreamBody;
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use runplane::worker::egress::{EgressProxy, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::unbounded_channel;
use tokio::sync::oneshot;

#[tokio::test]
async fn connect_to_an_allowed_endpoint_tunnels_bytes_both_ways() {
    let (echo, accepted) = echo().await;
    let port = echo.port();
    // An IP literal the list names exactly, and a name in another case with a trailing dot.
    for (allowed, target) in [
        ("127.0.0.1", format!("127.0.0.1:{port}")),
        ("localhost", format!("LOCALHOST.:{port}")),
    ] {
        let (proxy, mut refused) = proxy(vec![endpoint(allowed, port)]).await;
        let mut stream = tunnel(&proxy, &target).await;
        stream.write_all(b"ping").await.unwrap();
        assert_eq!(read_exact(&mut stream, 4).await, b"ping");
        let big = vec![7u8; 256 * 1024];
        stream.write_all(&big).await.unwrap();
        assert_eq!(read_exact(&mut stream, big.len()).await, big);
        // The client closes its side: the echo's close comes back through the tunnel.
        stream.shutdown().await.unwrap();
        let mut tail = Vec::new();
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut tail))
            .await
            .unwrap()
            .unwrap();
        assert!(tail.is_empty());
        assert!(refused.try_recv().is_err(), "nothing refused");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_allowed_endpoint_that_does_not_answer_gets_502_and_no_refusal() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (proxy, mut refused) = proxy(vec![endpoint("127.0.0.1", port)]).await;
    let request = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
    let response = exchange(&proxy, &request).await;
    assert_eq!(response.status_line, "HTTP/1.1 502 Bad Gateway");
    let get = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(
        exchange(&proxy, &get).await.status_line,
        "HTTP/1.1 502 Bad Gateway"
    );
    assert!(refused.try_recv().is_err());
}

#[tokio::test]
async fn plain_http_is_forwarded_in_origin_form_without_hop_by_hop_headers() {
    let (server, served) = upstream().await;
    let port = server.port();
    let (proxy, mut refused) = proxy(vec![endpoint("127.0.0.1", port)]).await;
    let request = format!(
        "POST http://127.0.0.1:{port}/submit?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n\
         Connection: close, X-Hop\r\nX-Hop: 1\r\nX-End: 2\r\nContent-Length: 5\r\n\r\nhello"
    );
    let response = exchange(&proxy, &request).await;
    assert_eq!(response.status_line, "HTTP/1.1 200 OK");
    assert_eq!(
        String::from_utf8(response.body).unwrap(),
        format!(
            "POST /submit?q=1\nhost: 127.0.0.1:{port}\nproxy-authorization: -\n\
             proxy-connection: -\nx-hop: -\nx-end: 2\nhello"
        )
    );
    assert_eq!(served.load(Ordering::SeqCst), 1);
    assert!(refused.try_recv().is_err());
}

#[tokio::test]
async fn a_streamed_response_arrives_chunk_by_chunk() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (release, held) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let held = std::sync::Mutex::new(Some(held));
        let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
            let held = held.lock().unwrap().take();
            async move {
                let (sender, frames) = tokio::sync::mpsc::channel(1);
                tokio::spawn(async move {
                    let event =
                        |text: &'static str| Ok::<_, Infallible>(Frame::data(Bytes::from(text)));
                    sender.send(event("data: one\n\n")).await.unwrap();
                    // The rest waits until the client has seen the first event.
                    if let Some(held) = held {
                        let _ = held.await;
                    }
                    sender.send(event("data: two\n\n")).await.unwrap();
                });
                let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(frames));
                let mut response = Response::new(body);
                response.headers_mut().insert(
                    "content-type",
                    hyper::header::HeaderValue::from_static("text/event-stream"),
                );
                Ok::<_, Infallible>(response)
            }
        });
        hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await
            .unwrap();
    });
    let (proxy, _refused) = proxy(vec![endpoint("127.0.0.1", port)]).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let request =
        format!("GET http://127.0.0.1:{port}/events HTTP/1.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (head, mut bytes) = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&bytes).contains("data: one\n\n") {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("the first event arrives while the upstream holds the rest")
            .unwrap();
        assert_ne!(n, 0);
        bytes.extend_from_slice(&buf[..n]);
    }
    assert!(!String::from_utf8_lossy(&bytes).contains("two"));
    release.send(()).unwrap();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut bytes))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        "B\r\ndata: one\n\n\r\nB\r\ndata: two\n\n\r\n0\r\n\r\n"
    );
}

#[tokio::test]
async fn each_request_on_a_kept_alive_connection_is_judged_on_its_own() {
    let (allowed, allowed_served) = upstream().await;
    let (other, other_served) = upstream().await;
    let (proxy, mut refused) = proxy(vec![endpoint("127.0.0.1", allowed.port())]).await;
    let mut sender = client(&proxy).await;
    let allowed_url = format!("http://127.0.0.1:{}/a", allowed.port());
    let other_url = format!("http://127.0.0.1:{}/b?token=x", other.port());
    for round in 0..2 {
        let (status, body) = get(&mut sender, &allowed_url, None).await;
        assert_eq!(status, 200, "round {round}");
        assert!(body.starts_with("GET /a\n"), "{body}");
        let (status, body) = get(&mut sender, &other_url, None).await;
        assert_eq!(status, 403, "round {round}");
        assert_eq!(
            body,
            format!(
                "runplane egress proxy: 127.0.0.1:{} is not in the run's egress allow list\n",
                other.port()
            )
        );
        assert_eq!(
            refused.try_recv().unwrap(),
            refusal(
                "127.0.0.1",
                other.port(),
                "GET",
                "not in the run's egress allow list"
            )
        );
    }
    assert_eq!(allowed_served.load(Ordering::SeqCst), 2);
    assert_eq!(other_served.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_host_header_cannot_send_a_request_to_another_host() {
    let (allowed, allowed_served) = upstream().await;
    let (other, other_served) = upstream().await;
    let (proxy, mut refused) = proxy(vec![endpoint("127.0.0.1", allowed.port())]).await;
    let mut sender = client(&proxy).await;
    let allowed_authority = format!("127.0.0.1:{}", allowed.port());
    let other_authority = format!("127.0.0.1:{}", other.port());
    // The URL names the allowed host, the Host header the other: it goes where the URL
    // says, and the upstream sees the URL's authority.
    let url = format!("http://{allowed_authority}/x");
    let (status, body) = get(&mut sender, &url, Some(&other_authority)).await;
    assert_eq!(status, 200);
    assert!(
        body.starts_with(&format!("GET /x\nhost: {allowed_authority}\n")),
        "{body}"
    );
    // The URL names the other host, the Host header the allowed one: refused.
    let url = format!("http://{other_authority}/x");
    let (status, _) = get(&mut sender, &url, Some(&allowed_authority)).await;
    assert_eq!(status, 403);
    assert_eq!(refused.try_recv().unwrap().port, other.port());
    assert_eq!(allowed_served.load(Ordering::SeqCst), 1);
    assert_eq!(other_served.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn past_the_connection_limit_a_client_gets_503() {
    let (echo, _) = echo().await;
    let port = echo.port();
    let (tx, mut refused) = unbounded_channel();
    let limits = Limits { max_connections: 1 };
    let proxy = EgressProxy::start_with_limits(vec![endpoint("127.0.0.1", port)], tx, limits)
        .await
        .unwrap();
    let mut open = tunnel(&proxy, &format!("127.0.0.1:{port}")).await;
    let get = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n");
    let response = exchange(&proxy, &get).await;
    assert_eq!(response.status_line, "HTTP/1.1 503 Service Unavailable");
    assert_eq!(
        String::from_utf8(response.body).unwrap(),
        "runplane egress proxy: too many connections (the limit is 1); retry later\n"
    );
    assert!(refused.try_recv().is_err(), "capacity is not a refusal");
    // Once the tunnel ends its slot is free again.
    open.shutdown().await.unwrap();
    let mut rest = Vec::new();
    open.read_to_end(&mut rest).await.unwrap();
    drop(open);
    let target = format!("127.0.0.1:{port}");
    let mut served = false;
    for _ in 0..200 {
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        let request = format!("CONNECT {target} HTTP/1.1\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let (head, _) = read_head(&mut stream).await;
        if head.starts_with("HTTP/1.1 200 ") {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(served, "the slot is released when the tunnel ends");
}

#[tokio::test]
async fn dropping_the_proxy_ends_its_tunnels() {
    let (echo, _) = echo().await;
    let port = echo.port();
    let (proxy, _refused) = proxy(vec![endpoint("127.0.0.1", port)]).await;
    let mut stream = tunnel(&proxy, &format!("127.0.0.1:{port}")).await;
    stream.write_all(b"x").await.unwrap();
    assert_eq!(read_exact(&mut stream, 1).await, b"x");
    drop(proxy);
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut rest))
        .await
        .expect("the tunnel ends with the proxy");
    assert!(ended.is_err() || rest.is_empty());
}
