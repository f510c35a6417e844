//! Every request's credential is checked here, before any service sees it.
//!
//! A tower layer in front of every service: it reads `authorization: Bearer <token>`,
//! resolves the principal, checks the method's rule and hands the principal to the service
//! in the request's extensions. A method missing from [`rule`] is refused, so a new RPC is
//! closed until someone decides who may call it. `WorkerService/Session` carries its token
//! in the first message (or the metadata), which only the service reads: the rule lets it
//! through, and the service authorises the attach itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::{Request, Status};

use crate::auth::{AuthError, Authenticator};
use crate::domain::{Principal, Role};
use crate::metrics::Metrics;

/// Who may call a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Anyone, without credentials: health checks from load balancers and probes.
    Open,
    /// A worker session: authorised by the service from the attach.
    Session,
    /// Operator tokens of at least this role.
    AtLeast(Role),
}

/// The rule of each method, by its gRPC path; `None`: no rule, refused.
pub fn rule(path: &str) -> Option<Rule> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    let rule = match (service, method) {
        ("grpc.health.v1.Health", "Check" | "Watch") => Rule::Open,
        ("runplane.v1.WorkerService", "Session") => Rule::Session,
        (
            "runplane.v1.RunService",
            "GetRun" | "ListRuns" | "WatchRun" | "ListRunEvents" | "ListPendingAsks" | "ListGrants",
        ) => Rule::AtLeast(Role::Viewer),
        ("runplane.v1.RunService", "StartRun" | "CancelRun" | "ResolveAsk" | "RevokeGrant") => {
            Rule::AtLeast(Role::Operator)
        }
        ("runplane.v1.PolicyService", "ListProfiles" | "GetProfile" | "Evaluate") => {
            Rule::AtLeast(Role::Viewer)
        }
        // A replay judges the whole history of every run in scope under a profile the
        // caller uploads: far more work than any viewer call, so it is for operators.
        ("runplane.v1.PolicyService", "Replay") => Rule::AtLeast(Role::Operator),
        ("runplane.v1.AccessService", "CreateToken" | "ListTokens" | "RevokeToken") => {
            Rule::AtLeast(Role::Admin)
        }
        // A reload changes the rules every new run of every team is judged by.
        ("runplane.v1.PolicyService", "Reload") => Rule::AtLeast(Role::Admin),
        // The schema is public (it is in the repository), but who may look is still
        // limited to holders of an operator token: an anonymous scan learns nothing.
        (
            "grpc.reflection.v1.ServerReflection" | "grpc.reflection.v1alpha.ServerReflection",
            "ServerReflectionInfo",
        ) => Rule::AtLeast(Role::Viewer),
        _ => return None,
    };
    Some(rule)
}

/// The bearer token of a request's metadata: `None` when there is no `authorization`
/// header; an error when there is one that is not a single `Bearer <token>`.
pub fn bearer(headers: &http::HeaderMap) -> Result<Option<&str>, Status> {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let malformed = || Status::unauthenticated("authorization: expected `Bearer <token>`");
    if values.next().is_some() {
        return Err(Status::unauthenticated(
            "authorization: more than one header; send one",
        ));
    }
    let text = value.to_str().map_err(|_| malformed())?;
    let (scheme, token) = text.split_once(' ').ok_or_else(malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(malformed());
    }
    Ok(Some(token.trim()))
}

/// The gRPC status of an authentication or authorisation failure. Store failures are
/// UNAVAILABLE: the client may retry, and nobody was let in.
pub fn auth_status(err: AuthError) -> Status {
    match err {
        AuthError::Unauthenticated(message) => Status::unauthenticated(message),
        AuthError::PermissionDenied(message) => Status::permission_denied(message),
        AuthError::InvalidArgument(message) => Status::invalid_argument(message),
        AuthError::Store(err) => {
            Status::unavailable(format!("credentials cannot be checked now: {err}"))
        }
        AuthError::Random(err) => Status::internal(err.to_string()),
    }
}

/// The principal the access layer admitted a request as. A request that reached a
/// service without one is refused: that is a wiring mistake, and it fails closed.
pub fn principal<T>(request: &Request<T>) -> Result<Principal, Status> {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("no credentials were checked for this call"))
}

/// Decides whether a request may proceed, and as whom.
async fn admit(
    auth: &Authenticator,
    path: &str,
    headers: &http::HeaderMap,
) -> Result<Option<Principal>, Status> {
    let rule = rule(path);
    if rule == Some(Rule::Open) || rule == Some(Rule::Session) {
        return Ok(None);
    }
    let principal = auth
        .authenticate(bearer(headers)?)
        .await
        .map_err(auth_status)?;
    let Some(Rule::AtLeast(needed)) = rule else {
        return Err(Status::permission_denied(format!(
            "{path}: no access rule for this method"
        )));
    };
    match principal.role() {
        Some(role) if role.includes(needed) => Ok(Some(principal)),
        Some(role) => Err(Status::permission_denied(format!(
            "{path} needs the {needed} role; this token is {role}"
        ))),
        None => Err(Status::permission_denied(format!(
            "{path}: a worker token opens its run's session and nothing else"
        ))),
    }
}

/// The layer that puts [`Access`] in front of every service.
#[derive(Clone)]
pub struct AccessLayer {
    auth: Arc<Authenticator>,
    metrics: Arc<Metrics>,
}

impl AccessLayer {
    /// Checks requests against `auth`, counting refusals in `metrics`.
    pub fn new(auth: Arc<Authenticator>, metrics: Arc<Metrics>) -> AccessLayer {
        AccessLayer { auth, metrics }
    }
}

impl<S> tower::Layer<S> for AccessLayer {
    type Service = Access<S>;

    fn layer(&self, inner: S) -> Access<S> {
        Access {
            inner,
            auth: Arc::clone(&self.auth),
            metrics: Arc::clone(&self.metrics),
        }
    }
}

/// A service that admits only requests whose credentials pass [`rule`].
#[derive(Clone)]
pub struct Access<S> {
    inner: S,
    auth: Arc<Authenticator>,
    metrics: Arc<Metrics>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for Access<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        // The clone that was polled ready serves this call; the fresh clone stays behind
        // for the next poll_ready (tower's usual pattern).
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let auth = Arc::clone(&self.auth);
        let metrics = Arc::clone(&self.metrics);
        Box::pin(async move {
            match admit(&auth, request.uri().path(), request.headers()).await {
                Ok(Some(principal)) => {
                    request.extensions_mut().insert(principal);
                }
                Ok(None) => {}
                Err(status) => {
                    metrics.auth_failed(status.code());
                    return Ok(status.into_http());
                }
            }
            inner.call(request).await
        })
    }
}
