//! `GET /metrics` on a listener of its own (`--metrics-listen`).
//!
//! Not on the gRPC port: that port authenticates every path, may require TLS client
//! certificates, and speaks HTTP/2 only; opening HTTP/1.1 there for a scraper would open
//! it for every gRPC path too. A listener of its own can be bound to a private interface,
//! needs no token, and a slow or broken scraper cannot touch the workers' port.
//!
//! Prometheus asks for OpenMetrics (its `Accept` header names it) and gets what
//! `prometheus-client` writes. Anything else — curl, `promtool check metrics` — gets the
//! older Prometheus text format (0.0.4), which differs for counters only: OpenMetrics
//! names a counter's family `x` and its sample `x_total`, and the older format's readers
//! (promtool among them) then find a sample without HELP or TYPE. See
//! `prometheus_text`.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tracing::{debug, warn};

use super::Metrics;

/// The media type of OpenMetrics text, which `prometheus-client` writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The media type of the Prometheus text format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// How long a scraper may take to send its request's headers: a connection that sends
/// nothing holds nothing for long.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed accept (out of file descriptors, say), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `/metrics` on `listener` until `stop` resolves.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    warn!(%error, "metrics listener: accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut stop => return,
        };
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let response = respond(&metrics, &request);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                debug!(%error, "metrics connection ended with an error");
            }
        });
    }
}

/// The answer to one request: the metrics for `GET /metrics`, 404 or 405 otherwise.
fn respond<B>(metrics: &Metrics, request: &Request<B>) -> Response<Full<Bytes>> {
    if request.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "not found; metrics are at /metrics\n",
        );
    }
    if request.method() != Method::GET {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    let openmetrics = request
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("application/openmetrics-text"));
    let encoded = metrics.encode().map(|text| match openmetrics {
        true => (OPENMETRICS, text),
        false => (PROMETHEUS_TEXT, prometheus_text(&text)),
    });
    match encoded {
        Ok((media_type, text)) => Response::builder()
            .header(header::CONTENT_TYPE, media_type)
            .body(Full::new(Bytes::from(text)))
            .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "")),
        Err(_) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics could not be encoded\n",
        ),
    }
}

/// A short plain-text response.
fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    response
}

/// OpenMetrics text as the Prometheus text format (0.0.4): a counter's HELP and TYPE name
/// its `_total` sample, and the `# UNIT` and `# EOF` lines, which that format does not
/// have, are left out. Everything else is the same in both formats.
fn prometheus_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut text = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].into_iter().find_map(|kind| {
            let rest = line.strip_prefix(kind)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{kind}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => text.push_str(&line),
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::prometheus_text;

    #[test]
    fn counters_are_described_by_their_sample_name() {
        let openmetrics = "# HELP a_things Things.\n# TYPE a_things counter\na_things_total 3\n\
                           # HELP a_wait Wait.\n# TYPE a_wait histogram\n# UNIT a_wait seconds\n\
                           a_wait_count 1\n# EOF\n";
        assert_eq!(
            prometheus_text(openmetrics),
            "# HELP a_things_total Things.\n# TYPE a_things_total counter\na_things_total 3\n\
             # HELP a_wait Wait.\n# TYPE a_wait histogram\na_wait_count 1\n"
        );
    }
}
