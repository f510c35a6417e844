//! The egress proxy: the one network door of the sandboxed agent.
//!
//! The kernel sandbox lets the agent TCP-connect only to this proxy's port, and
//! `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY` point at it. It runs in the worker process, outside
//! the sandbox, and admits exactly the run's allowed endpoints: HTTP/1.1 `CONNECT host:port`
//! is tunnelled, an absolute-form `http://` request is forwarded in origin-form; anything
//! else is refused and reported on the `refused` channel, so the worker can log it next to
//! the tool call that was running. Names are resolved here (the sandbox has no DNS): the
//! allow list judges the name the client asked for, not the address it resolves to, so DNS
//! rebinding of an allowed name is out of scope. See docs/EGRESS.md.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, info, warn};

use crate::policy::EgressEndpoint;

mod hosts;

use hosts::{target, Host};
pub use hosts::{AllowList, EgressError};

/// How many client connections (tunnels included) are served at once by default.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a client may take to send a request head (hyper closes the connection then).
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to an upstream may take before the client gets a 502.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many over-the-limit connections get a 503 at once; beyond that they are just closed,
/// so a flood cannot grow the task set without bound.
const BUSY_RESPONDERS: usize = 32;
/// How long an over-the-limit connection may take to send the request its 503 answers.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a kept-alive upstream connection may take to be ready for the next request
/// before a fresh one is opened instead.
const REUSE_WAIT: Duration = Duration::from_secs(1);
/// Headers that belong to one hop and are never forwarded (RFC 9110 §7.6.1), besides the
/// ones the `Connection` header lists.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];
/// What the reason of a refusal for an endpoint outside the allow list says.
const NOT_ALLOWED: &str = "not in the run's egress allow list";

/// One refused request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The host asked for, lower-cased, without brackets or a trailing dot when it parsed
    /// (as sent otherwise; empty when the request named none), so the event names it.
    pub host: String,
    /// The port asked for (0 when the request named none), with the host the endpoint.
    pub port: u16,
    /// The request's method (`CONNECT`, `GET`, …; empty for a request too malformed to
    /// have one), which tells a tunnel from a plain-HTTP request in the event.
    pub method: String,
    /// Why it was refused, in words for the operator.
    pub reason: String,
}

/// Internal limits, smaller in tests.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Client connections served at once, tunnels included; the next gets a 503.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// The running proxy; dropping it stops it and every connection and tunnel it serves.
pub struct EgressProxy {
    /// Where it listens (127.0.0.1, an ephemeral port), for the sandbox and the proxy
    /// environment variables.
    addr: SocketAddr,
    /// The accept loop, which owns every connection task: aborting it ends them all.
    task: JoinHandle<()>,
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EgressProxy {
    /// Listens on 127.0.0.1:0; `allowed` is the allow list; each refusal is sent on `refused`.
    pub async fn start(
        allowed: Vec<EgressEndpoint>,
        refused: UnboundedSender<Refusal>,
    ) -> std::io::Result<EgressProxy> {
        EgressProxy::start_with_limits(allowed, refused, Limits::default()).await
    }

    /// [`EgressProxy::start`] with other limits (tests use a small connection limit).
    #[doc(hidden)]
    pub async fn start_with_limits(
        allowed: Vec<EgressEndpoint>,
        refused: UnboundedSender<Refusal>,
        limits: Limits,
    ) -> std::io::Result<EgressProxy> {
        let allow = AllowList::new(&allowed)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { allow, refused });
        let task = tokio::spawn(serve(listener, shared, limits));
        Ok(EgressProxy { addr, task })
    }

    /// Where the proxy listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// What every connection of one proxy shares.
struct Shared {
    /// What is admitted.
    allow: AllowList,
    /// Where refusals go (a closed receiver only means nobody logs them).
    refused: UnboundedSender<Refusal>,
}

impl Shared {
    /// Logs and sends a refusal.
    fn report(&self, refusal: Refusal) {
        // Host, port and method only: a path or query may carry a secret.
        info!(host = %refusal.host, port = refusal.port, method = %refusal.method,
            reason = %refusal.reason, "egress refused");
        let _ = self.refused.send(refusal);
    }
}

/// Accepts connections until aborted; the task set owns every connection task, so
/// aborting this one drops (and so aborts) them all.
async fn serve(listener: TcpListener, shared: Arc<Shared>, limits: Limits) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let busy = Arc::new(Semaphore::new(BUSY_RESPONDERS));
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    if let Ok(permit) = permits.clone().try_acquire_owned() {
                        tasks.spawn(connection(stream, shared.clone(), permit));
                    } else if let Ok(permit) = busy.clone().try_acquire_owned() {
                        warn!(limit = limits.max_connections, "egress proxy at its connection limit");
                        tasks.spawn(too_busy(stream, permit, limits.max_connections));
                    }
                }
                Err(e) => {
                    // Out of descriptors, most likely: wait rather than spin.
                    debug!(error = %e, "egress proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

/// A tunnel a `CONNECT` was granted, started once the 200 is written.
struct Tunnel {
    /// The client's connection once hyper hands it over.
    upgrade: hyper::upgrade::OnUpgrade,
    /// The upstream, connected before the 200 so a failure can still be a 502.
    upstream: TcpStream,
}

/// One client connection's state.
struct Conn {
    /// The proxy's shared state.
    shared: Arc<Shared>,
    /// The tunnel a `CONNECT` on this connection was granted.
    tunnel: Mutex<Option<Tunnel>>,
    /// The upstream the last forwarded request went to, kept alive for the next request
    /// to the same endpoint (requests on one client connection come one at a time).
    upstream: Mutex<Option<Kept>>,
}

/// An upstream connection kept for the next request to the same endpoint.
struct Kept {
    /// The endpoint's host.
    host: Host,
    /// The endpoint's port.
    port: u16,
    /// The request half of the connection.
    sender: SendRequest<Incoming>,
}

/// A body the proxy answers with: its own text or an upstream's streamed body.
type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Locks a mutex no code panics under; a poisoned one still holds a valid value.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Serves one client connection, then its tunnel if a `CONNECT` was granted; `_permit`
/// counts it against the connection limit until it ends.
async fn connection(stream: TcpStream, shared: Arc<Shared>, _permit: OwnedSemaphorePermit) {
    let conn = Arc::new(Conn {
        shared,
        tunnel: Mutex::new(None),
        upstream: Mutex::new(None),
    });
    let service = {
        let conn = conn.clone();
        hyper::service::service_fn(move |req| {
            let conn = conn.clone();
            async move { Ok::<_, Infallible>(conn.handle(req).await) }
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        if e.is_parse() || e.is_parse_too_large() {
            // hyper has answered 400 (431 for a head too large); the request never reached
            // the service, so it is reported here.
            conn.shared.report(Refusal {
                host: String::new(),
                port: 0,
                method: String::new(),
                reason: format!("malformed request: {e}"),
            });
        } else {
            debug!(error = %e, "egress client connection ended");
        }
    }
    let tunnel = lock(&conn.tunnel).take();
    if let Some(Tunnel {
        upgrade,
        mut upstream,
    }) = tunnel
    {
        match upgrade.await {
            Ok(upgraded) => {
                let mut client = TokioIo::new(upgraded);
                if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                    debug!(error = %e, "egress tunnel ended");
                }
            }
            Err(e) => debug!(error = %e, "egress tunnel upgrade failed"),
        }
    }
}

/// Answers an over-the-limit connection's request with a 503.
async fn too_busy(stream: TcpStream, _permit: OwnedSemaphorePermit, limit: usize) {
    let service = hyper::service::service_fn(move |_req: Request<Incoming>| async move {
        let why = format!("too many connections (the limit is {limit}); retry later");
        Ok::<_, Infallible>(text(StatusCode::SERVICE_UNAVAILABLE, &why, true))
    });
    let serving = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(BUSY_TIMEOUT)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(BUSY_TIMEOUT, serving).await;
}

/// A plain-text answer of the proxy's own; `close` ends the client connection after it.
fn text(status: StatusCode, message: &str, close: bool) -> Response<ProxyBody> {
    let body = Full::new(Bytes::from(format!("runplane egress proxy: {message}\n")));
    let mut response = Response::new(body.map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if close {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Removes the hop-by-hop headers and the ones `Connection` lists.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Connects to an upstream, resolving a name here (the sandbox has no DNS).
async fn connect_upstream(host: &Host, port: u16) -> std::io::Result<TcpStream> {
    let connect = async {
        match host {
            Host::Ip(ip) => TcpStream::connect(SocketAddr::new(*ip, port)).await,
            Host::Name(name) => TcpStream::connect((name.as_str(), port)).await,
        }
    };
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

impl Conn {
    /// Judges and serves one request.
    async fn handle(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        if req.method() == Method::CONNECT {
            self.connect(req).await
        } else {
            self.forward(req).await
        }
    }

    /// Refuses a request that is not a proxy request the proxy serves: a 400, reported,
    /// and the connection closed (what follows on it cannot be trusted to be framed).
    fn bad(&self, method: &Method, host: String, port: u16, reason: String) -> Response<ProxyBody> {
        let response = text(StatusCode::BAD_REQUEST, &reason, true);
        let method = method.to_string();
        self.shared.report(Refusal {
            host,
            port,
            method,
            reason,
        });
        response
    }

    /// Refuses an endpoint outside the allow list: a 403 naming it, reported.
    fn forbid(&self, method: &Method, host: &Host, port: u16, close: bool) -> Response<ProxyBody> {
        let why = format!("{host}:{port} is {NOT_ALLOWED}");
        self.shared.report(Refusal {
            host: host.bare(),
            port,
            method: method.to_string(),
            reason: NOT_ALLOWED.into(),
        });
        text(StatusCode::FORBIDDEN, &why, close)
    }

    /// `CONNECT host:port`: a tunnel to an allowed endpoint.
    async fn connect(&self, mut req: Request<Incoming>) -> Response<ProxyBody> {
        let method = Method::CONNECT;
        let Some(authority) = req.uri().authority().map(|a| a.as_str().to_string()) else {
            let why = "CONNECT needs host:port as its target".to_string();
            return self.bad(&method, String::new(), 0, why);
        };
        let (host, port) = match target(&method, &authority, None) {
            Ok(target) => target,
            Err(no) => return self.bad(&method, no.host, no.port, no.reason),
        };
        if !self.shared.allow.admits_host(&host, port) {
            // Closed after: a client may already have sent its TLS hello behind the CONNECT.
            return self.forbid(&method, &host, port, true);
        }
        let upstream = match connect_upstream(&host, port).await {
            Ok(upstream) => upstream,
            Err(e) => {
                debug!(%host, port, error = %e, "egress upstream connect failed");
                let why = format!("cannot connect to {host}:{port}: {e}");
                return text(StatusCode::BAD_GATEWAY, &why, true);
            }
        };
        let upgrade = hyper::upgrade::on(&mut req);
        *lock(&self.tunnel) = Some(Tunnel { upgrade, upstream });
        debug!(%host, port, "egress tunnel");
        let mut response = Response::new(Full::new(Bytes::new()).map_err(|n| match n {}).boxed());
        response
            .extensions_mut()
            .insert(hyper::ext::ReasonPhrase::from_static(
                b"Connection Established",
            ));
        response
    }

    /// An absolute-form `http://` request: forwarded in origin-form to an allowed endpoint,
    /// bodies streamed both ways.
    async fn forward(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let method = req.method().clone();
        let uri = req.uri().clone();
        let Some(authority) = uri.authority().map(|a| a.as_str().to_string()) else {
            let host = req
                .headers()
                .get(HOST)
                .and_then(|h| h.to_str().ok())
                .map(|h| h.chars().take(255).collect())
                .unwrap_or_default();
            let why = "not a proxy request: the target must be an absolute http:// URL \
                       (or CONNECT host:port)";
            return self.bad(&method, host, 0, why.into());
        };
        let default_port = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => 0,
        };
        let (host, port) = match target(&method, &authority, Some(default_port)) {
            Ok(target) => target,
            Err(no) => return self.bad(&method, no.host, no.port, no.reason),
        };
        if uri.scheme_str() != Some("http") {
            let why = "only http:// URLs are forwarded; https:// goes through CONNECT".into();
            return self.bad(&method, host.bare(), port, why);
        }
        if !self.shared.allow.admits_host(&host, port) {
            return self.forbid(&method, &host, port, false);
        }
        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // The request goes where its URL says, and says so: a Host naming another endpoint
        // is replaced (RFC 9112 §3.2.2), never believed.
        parts.headers.remove(HOST);
        let host_header = match port {
            80 => host.to_string(),
            _ => format!("{host}:{port}"),
        };
        let Ok(host_value) = HeaderValue::from_str(&host_header) else {
            return self.bad(&method, host.bare(), port, "an invalid host".into());
        };
        parts.headers.insert(HOST, host_value);
        let origin = uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = match origin.parse::<Uri>() {
            Ok(origin) => origin,
            Err(e) => return self.bad(&method, host.bare(), port, format!("bad path: {e}")),
        };
        parts.version = Version::HTTP_11;
        let request = Request::from_parts(parts, body);
        let mut sender = match self.upstream_for(&host, port).await {
            Ok(sender) => sender,
            Err(e) => {
                debug!(%host, port, error = %e, "egress upstream connect failed");
                let why = format!("cannot connect to {host}:{port}: {e}");
                return text(StatusCode::BAD_GATEWAY, &why, false);
            }
        };
        let sent = sender.send_request(request).await;
        *lock(&self.upstream) = Some(Kept {
            host: host.clone(),
            port,
            sender,
        });
        match sent {
            Ok(response) if response.status() != StatusCode::SWITCHING_PROTOCOLS => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, body.boxed())
            }
            Ok(_) => text(
                StatusCode::BAD_GATEWAY,
                "the upstream switched protocols",
                true,
            ),
            Err(e) => {
                debug!(%host, port, error = %e, "egress upstream request failed");
                let why = format!("{host}:{port} did not answer: {e}");
                text(StatusCode::BAD_GATEWAY, &why, false)
            }
        }
    }

    /// The kept-alive upstream connection to `host:port` if it is ready, else a new one.
    async fn upstream_for(&self, host: &Host, port: u16) -> std::io::Result<SendRequest<Incoming>> {
        let kept = lock(&self.upstream).take();
        if let Some(Kept {
            host: kept_host,
            port: kept_port,
            mut sender,
        }) = kept
        {
            if kept_host == *host && kept_port == port && !sender.is_closed() {
                let ready = tokio::time::timeout(REUSE_WAIT, sender.ready()).await;
                if matches!(ready, Ok(Ok(()))) {
                    return Ok(sender);
                }
            }
        }
        let stream = connect_upstream(host, port).await?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        // Ends when the sender is dropped (with this client connection) and the last
        // response body is done, or when the upstream closes.
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                debug!(error = %e, "egress upstream connection ended");
            }
        });
        Ok(sender)
    }
}
