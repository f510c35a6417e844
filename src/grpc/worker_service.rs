//! `WorkerService.Session`: one bidirectional stream per attached worker.
//!
//! The first message must be `attach`. After that a forwarding task hands each message to
//! the run's actor, and the actor's pushes become the response stream.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::coordinator::{
    AttachRequest, CloseReason, Coordinator, Push, SessionHandle, WorkerInput,
};
use crate::grpc::convert::{coordinator_message, worker_input};
use crate::grpc::pb;
use crate::grpc::pb::worker_message::Message as In;

/// Pushes buffered for one worker; a worker that lets more pile up is detached.
const OUTBOUND_BUFFER: usize = 1024;

/// Serves workers.
pub struct WorkerApi {
    /// The coordinator every session attaches through.
    pub coordinator: Coordinator,
}

#[tonic::async_trait]
impl pb::worker_service_server::WorkerService for WorkerApi {
    type SessionStream = SessionStream;

    async fn session(
        &self,
        request: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<SessionStream>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("stream closed before attach"))?;
        let attach = match first.message {
            Some(In::Attach(attach)) => AttachRequest::try_from(attach)?,
            _ => {
                return Err(Status::invalid_argument(
                    "the first message of a session must be attach",
                ))
            }
        };
        let (outbound, pushes) = mpsc::channel(OUTBOUND_BUFFER);
        let (gone, stream_dropped) = oneshot::channel();
        let (abort, aborted) = oneshot::channel();
        let (ready, attached) = oneshot::channel();
        // The attach runs in its own task: if the client gives up while it is under way,
        // this handler is dropped, but the task still sees the attach through and detaches
        // again, so the run gets its re-attach grace instead of a session nobody reads.
        let coordinator = self.coordinator.clone();
        tokio::spawn(async move {
            match coordinator.attach(attach, outbound).await {
                Err(err) => {
                    let _ = ready.send(Err(Status::from(err)));
                }
                Ok(session) => {
                    if ready.send(Ok(())).is_err() {
                        session.detach().await;
                    } else {
                        forward(inbound, session, stream_dropped, abort).await;
                    }
                }
            }
        });
        attached
            .await
            .map_err(|_| Status::internal("attach was abandoned"))??;
        Ok(Response::new(SessionStream {
            pushes,
            aborted: Some(aborted),
            done: false,
            _gone: gone,
        }))
    }
}

/// Hands the worker's messages to the actor until the stream ends either way. A message
/// the transport refuses (over the size limit, say) ends the stream with that status.
async fn forward(
    mut inbound: Streaming<pb::WorkerMessage>,
    session: SessionHandle,
    mut stream_dropped: oneshot::Receiver<()>,
    abort: oneshot::Sender<Status>,
) {
    loop {
        let next = tokio::select! {
            next = inbound.message() => next,
            _ = &mut stream_dropped => break,
        };
        match next {
            Ok(Some(message)) => {
                let input = worker_input(message).unwrap_or_else(WorkerInput::Rejected);
                if !session.send(input).await {
                    break;
                }
            }
            Ok(None) => break,
            Err(status) => {
                let _ = abort.send(status);
                break;
            }
        }
    }
    session.detach().await;
}

/// The response stream: the actor's pushes, ended by `Close` or a transport error.
pub struct SessionStream {
    /// Pushes from the run's actor.
    pushes: mpsc::Receiver<Push>,
    /// A status the forwarding task ends the stream with; `None` once it has answered.
    aborted: Option<oneshot::Receiver<Status>>,
    /// Set after the last item.
    done: bool,
    /// Dropped with the stream, which tells the forwarding task to stop.
    _gone: oneshot::Sender<()>,
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
            if let Push::Close(reason) = &push {
                self.done = true;
                return Poll::Ready(close_status(reason).map(Err));
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
            "the worker left {OUTBOUND_BUFFER} messages unread; read the stream, then re-attach"
        ))),
        CloseReason::Internal(message) => Some(Status::internal(format!(
            "run state could not be saved ({message}); re-attach to retry"
        ))),
    }
}
