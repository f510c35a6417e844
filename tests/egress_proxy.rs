//! The egress proxy against real sockets on 127.0.0.1: tunnels to a TCP echo listener,
//! forwarding to real hyper servers (streamed bodies included), and every way a request is
//! refused, with the exact status, body and refusal report.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use runplane::policy::EgressEndpoint;
use runplane::worker::egress::{AllowList, EgressProxy, Limits, Refusal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::oneshot;

/// How long a test waits for bytes it expects before it fails (a guard against hanging,
/// not a measurement).
const PATIENCE: Duration = Duration::from_secs(10);

fn endpoint(host: &str, port: u16) -> EgressEndpoint {
    EgressEndpoint {
        host: host.into(),
        port,
    }
}

async fn proxy(allowed: Vec<EgressEndpoint>) -> (EgressProxy, UnboundedReceiver<Refusal>) {
    let (tx, rx) = unbounded_channel();
    (EgressProxy::start(allowed, tx).await.unwrap(), rx)
}

fn refusal(host: &str, port: u16, method: &str, reason: &str) -> Refusal {
    Refusal {
        host: host.into(),
        port,
        method: method.into(),
        reason: reason.into(),
    }
}

/// A TCP echo listener that counts the connections it accepts.
async fn echo() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
                let _ = write.shutdown().await;
            });
        }
    });
    (addr, accepted)
}

/// A hyper server that answers each request with what it received: the request target,
/// the Host header, the hop-by-hop headers a proxy must strip (`-` when absent), `x-end`,
/// and the body; it counts the requests it serves.
async fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = count.clone();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                count.fetch_add(1, Ordering::SeqCst);
                async move {
                    let header = |name: &str| {
                        req.headers()
                            .get(name)
                            .map_or("-".to_string(), |v| v.to_str().unwrap().to_string())
                    };
                    let mut text = format!("{} {}\n", req.method(), req.uri());
                    for name in [
                        "host",
                        "proxy-authorization",
                        "proxy-connection",
                        "x-hop",
                        "x-end",
                    ] {
                        text += &format!("{name}: {}\n", header(name));
                    }
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    text += &String::from_utf8_lossy(&body);
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    (addr, served)
}

/// A response read off a raw socket.
#[derive(Debug)]
struct Raw {
    status_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses a whole response (the connection closed after it): head, then the body by
/// `content-length`, `chunked`, or to the end.
fn parse(bytes: &[u8]) -> Raw {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(bytes)));
    let head = String::from_utf8(bytes[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap().to_string();
    let headers: Vec<(String, String)> = lines
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.to_ascii_lowercase(), value.trim().to_string())
        })
        .collect();
    let mut rest = &bytes[end + 4..];
    let mut raw = Raw {
        status_line,
        headers,
        body: Vec::new(),
    };
    if let Some(length) = raw.header("content-length") {
        raw.body = rest[..length.parse::<usize>().unwrap()].to_vec();
    } else if raw.header("transfer-encoding") == Some("chunked") {
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16);
            let size = size.unwrap();
            if size == 0 {
                break;
            }
            raw.body
                .extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
            rest = &rest[line_end + 2 + size + 2..];
        }
    } else {
        raw.body = rest.to_vec();
    }
    raw
}

/// Sends `request` on a new connection to the proxy and reads until the proxy closes it.
async fn exchange(proxy: &EgressProxy, request: &str) -> Raw {
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut bytes))
        .await
        .expect("the proxy closes the connection")
        .unwrap();
    parse(&bytes)
}

/// Reads a response head off `stream`, returning it and any bytes after it.
async fn read_head(stream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8(bytes[..end + 4].to_vec()).unwrap();
            return (head, bytes[end + 4..].to_vec());
        }
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("a response head")
            .unwrap();
        assert_ne!(
            n,
            0,
            "closed before a head: {:?}",
            String::from_utf8_lossy(&bytes)
        );
        bytes.extend_from_slice(&buf[..n]);
    }
}

/// Opens a tunnel to `target` through the proxy; the head must be a 200.
async fn tunnel(proxy: &EgressProxy, target: &str) -> TcpStream {
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let (head, rest) = read_head(&mut stream).await;
    assert!(
        head.starts_with("HTTP/1.1 200 Connection Established\r\n"),
        "{head}"
    );
    assert!(rest.is_empty());
    stream
}

async fn read_exact(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    tokio::time::timeout(PATIENCE, stream.read_exact(&mut buf))
        .await
        .expect("bytes through the tunnel")
        .unwrap();
    buf
}

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
async fn connect_outside_the_allow_list_gets_403_and_one_refusal() {
    let (echo, accepted) = echo().await;
    let port = echo.port();
    let allowed = vec![endpoint("127.0.0.1", port), endpoint("*.example.com", 443)];
    // (target, the refusal's host, its port)
    let cases = [
        (format!("127.0.0.1:{}", port + 1), "127.0.0.1", port + 1),
        // A name never admits by the address it resolves to.
        (format!("localhost:{port}"), "localhost", port),
        (format!("[::1]:{port}"), "::1", port),
        ("example.com:443".to_string(), "example.com", 443),
        ("a.example.com:80".to_string(), "a.example.com", 80),
        (
            "example.com.evil.net:443".to_string(),
            "example.com.evil.net",
            443,
        ),
    ];
    for (target, host, refused_port) in cases {
        let (proxy, mut refused) = proxy(allowed.clone()).await;
        let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
        let response = exchange(&proxy, &request).await;
        assert_eq!(response.status_line, "HTTP/1.1 403 Forbidden", "{target}");
        let shown = match host {
            "::1" => format!("[::1]:{refused_port}"),
            _ => format!("{host}:{refused_port}"),
        };
        assert_eq!(response.header("connection"), Some("close"));
        assert_eq!(
            String::from_utf8(response.body).unwrap(),
            format!("runplane egress proxy: {shown} is not in the run's egress allow list\n")
        );
        assert_eq!(
            refused.try_recv().unwrap(),
            refusal(
                host,
                refused_port,
                "CONNECT",
                "not in the run's egress allow list"
            )
        );
        assert!(refused.try_recv().is_err(), "one refusal for {target}");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "nothing reached upstream"
    );
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

/// A kept-alive client connection to the proxy, speaking through hyper's client.
async fn client(proxy: &EgressProxy) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// Sends `GET url` (absolute-form) with an optional Host header; status and body.
async fn get(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    url: &str,
    host: Option<&str>,
) -> (u16, String) {
    let mut request = Request::get(url);
    if let Some(host) = host {
        request = request.header("host", host);
    }
    sender.ready().await.unwrap();
    let response = sender
        .send_request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
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
async fn requests_that_are_not_proxy_requests_get_400_and_a_refusal() {
    let (server, served) = upstream().await;
    let port = server.port();
    let (proxy, mut refused) = proxy(vec![endpoint("127.0.0.1", port)]).await;
    let not_proxy = "not a proxy request: the target must be an absolute http:// URL \
                     (or CONNECT host:port)";
    // (request head, the refusal: host, port, method, reason; None: hyper's own parse error)
    let cases: Vec<(String, Option<Refusal>)> = vec![
        (
            "GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n".into(),
            Some(refusal("example.com", 0, "GET", not_proxy)),
        ),
        (
            "FOO /x HTTP/1.1\r\n\r\n".into(),
            Some(refusal("", 0, "FOO", not_proxy)),
        ),
        (
            "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n".into(),
            Some(refusal("a", 0, "OPTIONS", not_proxy)),
        ),
        (
            "CONNECT localhost HTTP/1.1\r\n\r\n".into(),
            Some(refusal(
                "localhost",
                0,
                "CONNECT",
                "CONNECT localhost has no port",
            )),
        ),
        (
            "GET https://127.0.0.1/ HTTP/1.1\r\n\r\n".into(),
            Some(refusal(
                "127.0.0.1",
                443,
                "GET",
                "only http:// URLs are forwarded; https:// goes through CONNECT",
            )),
        ),
        (
            format!("GET http://user:pw@127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
            Some(refusal(
                "127.0.0.1",
                port,
                "GET",
                "credentials in the request's authority",
            )),
        ),
        (
            "GET http://2130706433/ HTTP/1.1\r\n\r\n".into(),
            Some(refusal(
                "2130706433",
                0,
                "GET",
                "\"2130706433\" reads as a number, not a name or an address",
            )),
        ),
        (
            "GET http://127.1/ HTTP/1.1\r\n\r\n".into(),
            Some(refusal(
                "127.1",
                0,
                "GET",
                "\"127.1\" reads as a number, not a name or an address",
            )),
        ),
        ("garbage\r\n\r\n".into(), None),
    ];
    for (head, expected) in cases {
        let response = exchange(&proxy, &head).await;
        assert_eq!(response.status_line, "HTTP/1.1 400 Bad Request", "{head:?}");
        let got = refused.try_recv().unwrap();
        match expected {
            Some(expected) => {
                assert_eq!(
                    String::from_utf8(response.body).unwrap(),
                    format!("runplane egress proxy: {}\n", expected.reason)
                );
                assert_eq!(got, expected, "{head:?}");
            }
            None => {
                assert_eq!(
                    (got.host.as_str(), got.port, got.method.as_str()),
                    ("", 0, "")
                );
                assert!(got.reason.starts_with("malformed request: "), "{got:?}");
            }
        }
        assert!(refused.try_recv().is_err(), "one refusal for {head:?}");
    }
    assert_eq!(served.load(Ordering::SeqCst), 0);
}

#[test]
fn the_allow_list_matches_names_globs_and_exact_addresses() {
    let list = AllowList::new(&[
        endpoint("*.example.com", 443),
        endpoint("api.Anthropic.com", 443),
        endpoint("10.0.0.1", 8080),
        endpoint("[::1]", 8443),
        endpoint("fd00::2", 8443),
        endpoint("crates.io.", 443),
    ])
    .unwrap();
    let cases = [
        ("a.example.com", 443, true),
        ("a.b.example.com", 443, true),
        ("A.Example.COM", 443, true),
        ("a.example.com.", 443, true),
        ("example.com", 443, false),
        ("example.com.evil.net", 443, false),
        ("evilexample.com", 443, false),
        ("a.example.com", 80, false),
        ("API.ANTHROPIC.COM", 443, true),
        ("api.anthropic.com.", 443, true),
        ("crates.io", 443, true),
        ("10.0.0.1", 8080, true),
        ("10.0.0.1.", 8080, true),
        ("10.0.0.1", 443, false),
        ("10.0.0.2", 8080, false),
        ("[::1]", 8443, true),
        ("[fd00::2]", 8443, true),
        ("[FD00:0::2]", 8443, true),
        ("[::2]", 8443, false),
        // A name never admits an address, whatever it resolves to, nor a glob one.
        ("93.184.215.14", 443, false),
        ("[::ffff:10.0.0.1]", 8080, false),
        // What a resolver would read as a number is no name.
        ("167772161", 8080, false),
        ("0xa000001", 8080, false),
        ("a..example.com", 443, false),
        (".example.com", 443, false),
        ("a.example.com/x", 443, false),
        ("", 443, false),
    ];
    for (host, port, admitted) in cases {
        assert_eq!(list.admits(host, port), admitted, "{host}:{port}");
    }
    assert!(AllowList::new(&[endpoint("[not-v6]", 1)]).is_err());
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

#[tokio::test]
async fn a_request_head_over_the_size_limit_is_refused_and_reported() {
    let (proxy, mut refused) = proxy(vec![]).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let head = format!(
        "GET http://example.com/ HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(512 * 1024)
    );
    // The proxy may close before reading it all; what matters is what it reports.
    let _ = stream.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer)).await;
    if !answer.is_empty() {
        assert!(
            answer.starts_with(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{:?}",
            String::from_utf8_lossy(&answer)
        );
    }
    let got = tokio::time::timeout(PATIENCE, refused.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.host.as_str(), got.port, got.method.as_str()),
        ("", 0, "")
    );
    assert!(got.reason.starts_with("malformed request: "), "{got:?}");
}
