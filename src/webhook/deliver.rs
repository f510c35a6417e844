//! One receiver's deliveries: a queue, a plain HTTP/1.1 POST per notice, retries.
//!
//! Each receiver has its own queue and task, so it gets its notices in order and a receiver
//! that is down or slow holds up only its own. Nothing here is awaited by a decision.

use std::sync::Arc;
use std::time::Duration;

use http::{header, Request, StatusCode};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::{debug, warn};
use url::{Host, Position, Url};

use super::WebhookError;
use crate::metrics::{Metrics, WebhookOutcome};

/// Tries per notice: the first and four retries.
const TRIES: u32 = 5;
/// The pause before the first retry; it doubles before each further one (1, 2, 4, 8 s).
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// How long one attempt may take, connecting included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Notices one receiver may have waiting; past it new ones are dropped and counted.
pub const RECEIVER_QUEUE: usize = 256;

/// A receiver's URL, taken apart once at start.
#[derive(Debug, Clone)]
pub struct Target {
    /// Scheme, host and port only: the path of a webhook URL is often its secret (Slack's
    /// are), so logs show this instead.
    pub shown: String,
    host: String,
    port: u16,
    /// The `Host` header.
    authority: String,
    /// Path and query.
    path: String,
}

impl Target {
    /// Checks that `url` is one runplane can post to: `http://` with a host.
    pub fn new(url: &Url) -> Result<Target, WebhookError> {
        match url.scheme() {
            "http" => {}
            "https" => return Err(WebhookError::Https(shown(url))),
            _ => return Err(WebhookError::Scheme(shown(url))),
        }
        let host = match url.host() {
            Some(Host::Domain(domain)) => domain.to_string(),
            Some(Host::Ipv4(addr)) => addr.to_string(),
            Some(Host::Ipv6(addr)) => addr.to_string(),
            None => return Err(WebhookError::Scheme(shown(url))),
        };
        let path = &url[Position::BeforePath..Position::AfterQuery];
        Ok(Target {
            shown: shown(url),
            host,
            port: url.port_or_known_default().unwrap_or(80),
            authority: url[Position::BeforeHost..Position::AfterPort].to_string(),
            path: if path.is_empty() { "/" } else { path }.to_string(),
        })
    }
}

/// `scheme://host:port` of a URL.
fn shown(url: &Url) -> String {
    url[..Position::AfterPort].to_string()
}

/// Why one attempt failed.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("request: {0}")]
    Request(#[from] http::Error),
    #[error("no answer within {} s", REQUEST_TIMEOUT.as_secs())]
    Timeout,
}

/// Starts a receiver's task; returns its queue.
pub fn spawn_receiver(target: Target, metrics: Arc<Metrics>) -> mpsc::Sender<Bytes> {
    let (queue, mut notices) = mpsc::channel::<Bytes>(RECEIVER_QUEUE);
    tokio::spawn(async move {
        while let Some(body) = notices.recv().await {
            let outcome = deliver(&target, body, &metrics).await;
            metrics.webhook(outcome);
        }
    });
    queue
}

/// Posts one notice until it is taken, refused for good, or out of tries.
async fn deliver(target: &Target, body: Bytes, metrics: &Metrics) -> WebhookOutcome {
    let mut backoff = FIRST_BACKOFF;
    for attempt in 1..=TRIES {
        let failure = match tokio::time::timeout(REQUEST_TIMEOUT, post(target, body.clone())).await
        {
            Ok(Ok(status)) if status.is_success() => {
                debug!(receiver = %target.shown, attempt, "ask webhook delivered");
                return WebhookOutcome::Delivered;
            }
            // A refusal that another try will not change (a wrong URL, a rejected body).
            Ok(Ok(status))
                if status.is_client_error()
                    && status != StatusCode::REQUEST_TIMEOUT
                    && status != StatusCode::TOO_MANY_REQUESTS =>
            {
                warn!(receiver = %target.shown, %status, "ask webhook refused; not retried");
                return WebhookOutcome::Failed;
            }
            Ok(Ok(status)) => format!("answered {status}"),
            Ok(Err(error)) => error.to_string(),
            Err(_) => AttemptError::Timeout.to_string(),
        };
        if attempt == TRIES {
            warn!(receiver = %target.shown, attempt, %failure, "ask webhook failed; giving up");
            break;
        }
        warn!(receiver = %target.shown, attempt, %failure, retry_in = ?backoff, "ask webhook failed");
        metrics.webhook(WebhookOutcome::Retry);
        tokio::time::sleep(backoff).await;
        backoff *= 2;
    }
    WebhookOutcome::Failed
}

/// One POST on a fresh connection; the answer's status.
async fn post(target: &Target, body: Bytes) -> Result<StatusCode, AttemptError> {
    let stream = TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(AttemptError::Connect)?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    // The connection runs beside the request; it is stopped with the attempt, also when
    // the timeout drops this future.
    let _driver = AbortOnDrop(tokio::spawn(connection));
    let request = Request::post(target.path.as_str())
        .header(header::HOST, target.authority.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header(
            header::USER_AGENT,
            concat!("runplane/", env!("CARGO_PKG_VERSION")),
        )
        .body(Full::new(body))?;
    let response = sender.send_request(request).await?;
    Ok(response.status())
}

/// Aborts a task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
