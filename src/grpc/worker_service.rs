//! `WorkerService.Session`: one bidirectional stream per attached worker.
//!
//! The first message must be `attach`. After that the run's actor reads the worker's
//! messages itself (through `InboundMessages`, which converts them), and the actor's
//! pushes become the response stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::Authenticator;
use crate::coordinator::{
    outbound_channel, AttachRequest, CloseReason, Coordinator, Push, WorkerInput, MAX_UNREAD,
};
use crate::grpc::access::{auth_status, bearer};
use crate::grpc::convert::{coordinator_message, worker_input};
use crate::grpc::pb;
use crate::grpc::pb::worker_message::Message as In;
use crate::metrics::{DecisionTimer, LiveSession, Metrics};

/// Serves workers.
pub struct WorkerApi {
    /// The coordinator every session attaches through.
    pub coordinator: Coordinator,
    /// Checks the worker token of each attach.
    pub auth: Arc<Authenticator>,
    /// Whether a session needs a verified TLS client certificate (mTLS is configured).
    pub require_client_cert: bool,
    /// How long a session may take to send its `attach`.
    pub attach_timeout: std::time::Duration,
    /// Sessions, decision latency, in-stream errors and refused attaches are counted here.
    pub metrics: Arc<Metrics>,
}

impl WorkerApi {
    /// Checks that the session may attach to its run: a client certificate when mTLS is
    /// on, and the run's worker token, from `Attach.token` or else the metadata.
    async fn authorize(
        &self,
        request: &Request<Streaming<pb::WorkerMessage>>,
        attach: &pb::Attach,
    ) -> Result<(), Status> {
        if self.require_client_cert && request.peer_certs().is_none_or(|certs| certs.is_empty()) {
            return Err(Status::unauthenticated(
                "a worker session needs a TLS client certificate signed by the server's \
                 client CA",
            ));
        }
        let token = if attach.token.is_empty() {
            bearer(request.metadata().as_ref())?
        } else {
            Some(attach.token.as_str())
        };
        self.auth
            .authorize_session(token, &attach.run_id)
            .await
            .map(drop)
            .map_err(auth_status)
            .inspect_err(|status| self.metrics.auth_failed(status.code()))
    }
}

#[tonic::async_trait]
impl pb::worker_service_server::WorkerService for WorkerApi {
    type SessionStream = SessionStream;

    async fn session(
        &self,
        mut request: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<SessionStream>, Status> {
        let first = tokio::time::timeout(self.attach_timeout, request.get_mut().message())
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!(
                    "no attach within {} s of opening the session",
                    self.attach_timeout.as_secs_f64()
                ))
            })??
            .ok_or_else(|| Status::invalid_argument("stream closed before attach"))?;
        let attach = match first.message {
            Some(In::Attach(attach)) => attach,
            _ => {
                return Err(Status::invalid_argument(
                    "the first message of a session must be attach",
                ))
            }
        };
        if attach.run_id.is_empty() {
            return Err(Status::invalid_argument("attach.run_id: required"));
        }
        self.authorize(&request, &attach).await?;
        let attach = AttachRequest::try_from(attach)?;
        let inbound = request.into_inner();
        let (outbound, pushes) = outbound_channel();
        let (gone, response_dropped) = oneshot::channel();
        let (abort, aborted) = oneshot::channel();
        let timer = Arc::new(DecisionTimer::default());
        let inbound = InboundMessages {
            messages: inbound,
            response_dropped,
            abort: Some(abort),
            done: false,
            timer: Arc::clone(&timer),
        };
        // If the client gives up while the attach is under way, this handler is dropped
        // and with it `gone`; an actor that did attach then sees its inbound end and
        // detaches, so the run gets its re-attach grace instead of a session nobody reads.
        self.coordinator
            .attach(attach, outbound, Box::pin(inbound))
            .await?;
        Ok(Response::new(SessionStream {
            pushes,
            aborted: Some(aborted),
            done: false,
            _gone: gone,
            timer,
            metrics: Arc::clone(&self.metrics),
            _live: self.metrics.session_opened(),
        }))
    }
}

/// The worker's messages, converted for the run's actor, which polls this stream itself.
/// It ends when the worker's stream ends, when the transport refuses a message (over the
/// size limit, say: that status then ends the response stream), or when the response
/// stream is dropped.
struct InboundMessages {
    messages: Streaming<pb::WorkerMessage>,
    /// Resolves when the response stream is dropped.
    response_dropped: oneshot::Receiver<()>,
    /// Hands a transport error to the response stream; `None` once used.
    abort: Option<oneshot::Sender<Status>>,
    /// Set after the last item, so nothing is polled after it completed.
    done: bool,
    /// Stamps each tool call as it is read, for the decision latency.
    timer: Arc<DecisionTimer>,
}

impl Stream for InboundMessages {
    type Item = WorkerInput;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WorkerInput>> {
        if self.done {
            return Poll::Ready(None);
        }
        if Pin::new(&mut self.response_dropped).poll(cx).is_ready() {
            self.done = true;
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.messages).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(message))) => {
                let input = worker_input(message).unwrap_or_else(WorkerInput::Rejected);
                if let WorkerInput::ToolCall(request) = &input {
                    self.timer.received(&request.call_id);
                }
                Poll::Ready(Some(input))
            }
            Poll::Ready(Some(Err(status))) => {
                if let Some(abort) = self.abort.take() {
                    let _ = abort.send(status);
                }
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
        }
    }
}

/// The response stream: the actor's pushes, ended by `Close` or a transport error.
pub struct SessionStream {
    /// Pushes from the run's actor.
    pushes: mpsc::Receiver<Push>,
    /// A status the inbound side ends the stream with; `None` once it has answered.
    aborted: Option<oneshot::Receiver<Status>>,
    /// Set after the last item.
    done: bool,
    /// Dropped with the stream, which ends the inbound side.
    _gone: oneshot::Sender<()>,
    /// The inbound side's stamps, taken back as the answers go out.
    timer: Arc<DecisionTimer>,
    metrics: Arc<Metrics>,
    /// Counts this session as live until the stream is dropped.
    _live: LiveSession,
}

impl Stream for SessionStream {
    type Item = Result<pb::CoordinatorMessage, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(aborted) = self.aborted.as_mut() {
            if let Poll::Ready(result) = Pin::new(aborted).poll(cx) {
                self.aborted = None;
                if let Ok(status) = result {
                    self.done = true;
                    return Poll::Ready(Some(Err(status)));
                }
            }
        }
        loop {
            let push = match self.pushes.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.done = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(push)) => push,
            };
            match &push {
                Push::Close(reason) => {
                    self.done = true;
                    return Poll::Ready(close_status(reason).map(Err));
                }
                Push::Decision(response) => {
                    if let Some(took) = self.timer.answered(&response.call_id) {
                        self.metrics.decision_answered(took);
                    }
                }
                Push::Error(error) => {
                    self.timer.forget(&error.call_id);
                    self.metrics.session_error(error.code);
                }
                _ => {}
            }
            if let Some(message) = coordinator_message(push) {
                return Poll::Ready(Some(Ok(message)));
            }
        }
    }
}

/// How a closed session ends: normally, or with the status the worker should act on.
fn close_status(reason: &CloseReason) -> Option<Status> {
    match reason {
        CloseReason::Finished => None,
        CloseReason::TakenOver { by_worker } => Some(Status::aborted(format!(
            "another worker ({by_worker}) attached to this run"
        ))),
        CloseReason::Shutdown => Some(Status::unavailable(
            "server is shutting down; re-attach when it is back",
        )),
        CloseReason::TooSlow => Some(Status::resource_exhausted(format!(
            "the worker left {MAX_UNREAD} messages unread; read the stream, then re-attach"
        ))),
        CloseReason::Internal(message) => Some(Status::internal(format!(
            "run state could not be saved ({message}); re-attach to retry"
        ))),
        CloseReason::Moved => Some(Status::unavailable(
            "another server owns this run now; re-attach",
        )),
    }
}
