//! What the egress proxy tests share: an echo listener, a hyper upstream that answers with
//! what it received, and raw-socket and hyper clients of the proxy.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use runplane::policy::EgressEndpoint;
use runplane::worker::egress::{EgressProxy, Refusal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// How long a test waits for bytes it expects before it fails (a guard against hanging,
/// not a measurement).
pub const PATIENCE: Duration = Duration::from_secs(10);

pub fn endpoint(host: &str, port: u16) -> EgressEndpoint {
    EgressEndpoint {
        host: host.into(),
        port,
    }
}

pub async fn proxy(allowed: Vec<EgressEndpoint>) -> (EgressProxy, UnboundedReceiver<Refusal>) {
    let (tx, rx) = unbounded_channel();
    (EgressProxy::start(allowed, tx).await.unwrap(), rx)
}

pub fn refusal(host: &str, port: u16, method: &str, reason: &str) -> Refusal {
    Refusal {
        host: host.into(),
        port,
        method: method.into(),
        reason: reason.into(),
    }
}

/// A TCP echo listener that counts the connections it accepts.
pub async fn echo() -> (SocketAddr, Arc<AtomicUsize>) {
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
pub async fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
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
pub struct Raw {
    pub status_line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses a whole response (the connection closed after it): head, then the body by
/// `content-length`, `chunked`, or to the end.
pub fn parse(bytes: &[u8]) -> Raw {
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
pub async fn exchange(proxy: &EgressProxy, request: &str) -> Raw {
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
pub async fn read_head(stream: &mut TcpStream) -> (String, Vec<u8>) {
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
pub async fn tunnel(proxy: &EgressProxy, target: &str) -> TcpStream {
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

pub async fn read_exact(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    tokio::time::timeout(PATIENCE, stream.read_exact(&mut buf))
        .await
        .expect("bytes through the tunnel")
        .unwrap();
    buf
}

/// A kept-alive client connection to the proxy, speaking through hyper's client.
pub async fn client(proxy: &EgressProxy) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// Sends `GET url` (absolute-form) with an optional Host header; status and body.
pub async fn get(
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
