//! What the egress proxy adds to a request: `cargo bench --bench egress`.
//!
//! One HTTP/1.1 request and its response to a local hyper server on loopback, straight
//! and through the proxy (absolute-form, as a client with `HTTP_PROXY` sends it), both on
//! kept-alive connections; and a 64-byte round trip to a TCP echo listener, straight and
//! through a `CONNECT` tunnel (what HTTPS traffic pays). The difference of each pair is the
//! proxy's cost per request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use runplane::policy::EgressEndpoint;
use runplane::worker::egress::EgressProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

/// The allocator the `runplane` binary ships with (`src/main.rs`), which the worker's
/// proxy runs under.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A hyper server answering every request with a short body.
async fn server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    addr
}

/// A TCP echo listener.
async fn echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    addr
}

/// A kept-alive hyper client connection to `addr`.
async fn client(addr: SocketAddr) -> SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// `iters` requests for `uri` on `sender`, timed.
async fn requests(sender: &mut SendRequest<Empty<Bytes>>, uri: &str, iters: u64) -> Duration {
    let started = Instant::now();
    for _ in 0..iters {
        sender.ready().await.unwrap();
        let request = Request::get(uri).body(Empty::new()).unwrap();
        let response = sender.send_request(request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok");
    }
    started.elapsed()
}

/// `iters` 64-byte round trips on `stream`, timed.
async fn round_trips(stream: &mut TcpStream, iters: u64) -> Duration {
    let payload = [7u8; 64];
    let mut back = [0u8; 64];
    let started = Instant::now();
    for _ in 0..iters {
        stream.write_all(&payload).await.unwrap();
        stream.read_exact(&mut back).await.unwrap();
    }
    started.elapsed()
}

fn proxy_cost(c: &mut Criterion) {
    let runtime: Runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (server, echo, proxy) = runtime.block_on(async {
        let server = server().await;
        let echo = echo().await;
        let allowed = vec![
            EgressEndpoint {
                host: "127.0.0.1".into(),
                port: server.port(),
            },
            EgressEndpoint {
                host: "127.0.0.1".into(),
                port: echo.port(),
            },
        ];
        let (refused, _) = tokio::sync::mpsc::unbounded_channel();
        (
            server,
            echo,
            EgressProxy::start(allowed, refused).await.unwrap(),
        )
    });
    let mut direct = runtime.block_on(client(server));
    let mut via_proxy = runtime.block_on(client(proxy.addr()));
    let absolute = format!("http://{server}/");
    let mut echo_direct = runtime.block_on(async {
        let stream = TcpStream::connect(echo).await.unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    });
    let mut echo_tunnel = runtime.block_on(async {
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let connect = format!("CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\n");
        stream.write_all(connect.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(stream.read_u8().await.unwrap());
        }
        assert!(head.starts_with(b"HTTP/1.1 200 "));
        stream
    });

    let mut group = c.benchmark_group("egress");
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_millis(500));
    group.sample_size(30);
    group.bench_function("http_request_direct", |b| {
        b.iter_custom(|iters| runtime.block_on(requests(&mut direct, "/", iters)))
    });
    group.bench_function("http_request_via_proxy", |b| {
        b.iter_custom(|iters| runtime.block_on(requests(&mut via_proxy, &absolute, iters)))
    });
    group.bench_function("tcp_round_trip_direct", |b| {
        b.iter_custom(|iters| runtime.block_on(round_trips(&mut echo_direct, iters)))
    });
    group.bench_function("tcp_round_trip_via_tunnel", |b| {
        b.iter_custom(|iters| runtime.block_on(round_trips(&mut echo_tunnel, iters)))
    });
    group.finish();
    drop(proxy);
}

criterion_group!(benches, proxy_cost);
criterion_main!(benches);
