//! The operator console's static files, served on the gRPC address.
//!
//! A tower layer in front of the gRPC routes: every `GET` and `HEAD` is the console's
//! (gRPC and gRPC-Web calls are always `POST`), everything else goes on to the API. The
//! files are compiled into the binary from `console/static/`, so a clone with only Rust
//! serves them; the page then calls the API through gRPC-Web on the same origin, with the
//! operator's token in the `authorization` header (docs/CONSOLE.md). The files are public:
//! they hold no data, and every call they make is checked by the access layer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use tonic::body::Body;

/// No script, style or connection but this origin's files, no inline code, no plugins, no
/// framing: an agent's string that reached the page as markup still could not run.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// A file of the console: its path, media type and contents.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// Every file the console has; anything else under `GET` is 404.
const ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("../../console/static/index.html"),
    },
    Asset {
        path: "/assets/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../console/static/app.js"),
    },
    Asset {
        path: "/assets/console.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../console/static/console.css"),
    },
];

/// The layer that puts [`Console`] in front of the API.
#[derive(Clone, Copy, Default)]
pub struct ConsoleLayer;

impl<S> tower::Layer<S> for ConsoleLayer {
    type Service = Console<S>;

    fn layer(&self, inner: S) -> Console<S> {
        Console { inner }
    }
}

/// Answers `GET`/`HEAD` with the console's files and passes every other request on.
#[derive(Clone)]
pub struct Console<S> {
    inner: S,
}

impl<S, B> tower::Service<Request<B>> for Console<S>
where
    S: tower::Service<Request<B>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method();
        if method == Method::GET || method == Method::HEAD {
            let head = method == Method::HEAD;
            let response = page(request.uri().path(), head);
            return Box::pin(std::future::ready(Ok(response)));
        }
        Box::pin(self.inner.call(request))
    }
}

/// The response to a `GET` (or, without its body, a `HEAD`) of `path`.
fn page(path: &str, head: bool) -> Response<Body> {
    let (status, content_type, text) = match ASSETS.iter().find(|a| a.path == path) {
        Some(asset) => (StatusCode::OK, asset.content_type, asset.body),
        None => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found\n",
        ),
    };
    let body = if head {
        Body::empty()
    } else {
        Body::new(String::from(text))
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        http::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The files change with the binary; revalidating each load keeps an upgraded server
    // from running yesterday's script against today's API.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
