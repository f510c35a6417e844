//! The worker's session with runplane, kept up: when the stream drops, the link
//! re-attaches with backoff (the agent keeps running and its hooks wait), then repeats
//! every tool call that has no final decision yet, every result that was not
//! acknowledged and a `complete` the run has not taken — the server answers repeats with
//! what it decided before and counts nothing twice.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};
use tracing::{info, warn};

use super::session::WorkError;
use crate::grpc::pb;
use crate::grpc::pb::coordinator_message::Message as Out;
use crate::grpc::pb::worker_message::Message as In;
use crate::grpc::pb::worker_service_client::WorkerServiceClient;

/// First wait before re-attaching; it doubles up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// An open stream.
struct Stream {
    tx: mpsc::UnboundedSender<pb::WorkerMessage>,
    inbound: Streaming<pb::CoordinatorMessage>,
}

/// The session with runplane, re-attached when it drops.
pub struct Link {
    client: WorkerServiceClient<Channel>,
    attach: pb::Attach,
    stream: Option<Stream>,
    /// How long the link keeps trying to re-attach before it gives up.
    reattach_for: Duration,
    /// When the stream dropped, while it is down (kept across cancelled attempts).
    down_since: Option<Instant>,
    /// Attempts since it dropped, for the backoff.
    attempts: u32,
    /// Tool calls sent with no final decision yet, by call id.
    unanswered: BTreeMap<String, pb::ToolCallRequest>,
    /// Results sent with no `result_ack` yet, by call id.
    unacked: BTreeMap<String, pb::ToolCallResult>,
    /// The `complete` sent, until the run is finished.
    complete: Option<pb::RunComplete>,
}

fn message(message: In) -> pb::WorkerMessage {
    pb::WorkerMessage {
        message: Some(message),
    }
}

/// Whether a stream that ended with `status` may be re-attached: refusals that a retry
/// would only repeat (a takeover, a token that is wrong or has expired with its run, a
/// run that is over, a broken message) end the work.
fn retryable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::Internal
            | Code::ResourceExhausted
            | Code::DeadlineExceeded
            | Code::Unknown
            | Code::Cancelled
    )
}

impl Link {
    /// Attaches (waiting with backoff while the server cannot be reached, up to
    /// `reattach_for`).
    pub async fn open(
        channel: Channel,
        attach: pb::Attach,
        reattach_for: Duration,
    ) -> Result<(Link, pb::Attached), WorkError> {
        let mut link = Link {
            client: WorkerServiceClient::new(channel),
            attach,
            stream: None,
            reattach_for,
            down_since: Some(Instant::now()),
            attempts: 0,
            unanswered: BTreeMap::new(),
            unacked: BTreeMap::new(),
            complete: None,
        };
        let attached = link.reattach().await?;
        Ok((link, attached))
    }

    /// Sends a message, remembering what must be repeated if the stream drops before it
    /// is answered. While the stream is down the message waits for the re-attach.
    pub fn send(&mut self, out: In) {
        match &out {
            In::ToolCallRequest(request) => {
                self.unanswered
                    .insert(request.call_id.clone(), request.clone());
            }
            In::ToolCallResult(result) => {
                self.unacked.insert(result.call_id.clone(), result.clone());
            }
            In::Complete(complete) => self.complete = Some(complete.clone()),
            _ => {}
        }
        if let Some(stream) = &self.stream {
            // A closed stream shows up on the inbound side, which re-attaches and repeats.
            let _ = stream.tx.send(message(out));
        }
    }

    /// The next message from runplane, re-attaching as often as it takes. Cancel-safe:
    /// an attempt dropped halfway starts again on the next call, within the same limit.
    pub async fn next(&mut self) -> Result<Out, WorkError> {
        loop {
            let received = match &mut self.stream {
                Some(stream) => stream.inbound.message().await,
                None => {
                    self.reattach().await?;
                    continue;
                }
            };
            match received {
                Ok(Some(pb::CoordinatorMessage { message: Some(out) })) => {
                    self.settle(&out);
                    return Ok(out);
                }
                Ok(Some(_)) => {}
                Ok(None) => self.dropped("the stream ended"),
                Err(status) if retryable(&status) => {
                    self.dropped(status.message());
                }
                Err(status) => return Err(status.into()),
            }
        }
    }

    fn dropped(&mut self, why: &str) {
        warn!(why, "session dropped; re-attaching");
        self.stream = None;
        self.down_since.get_or_insert_with(Instant::now);
    }

    /// Forgets what an answer settles.
    fn settle(&mut self, out: &Out) {
        match out {
            Out::ToolCallResponse(response) if response.decision != pb::Decision::Ask as i32 => {
                self.unanswered.remove(&response.call_id);
            }
            Out::ResultAck(ack) => {
                self.unacked.remove(&ack.call_id);
            }
            // A refused message would be refused again: it is not repeated.
            Out::Error(error) if !error.call_id.is_empty() => {
                self.unanswered.remove(&error.call_id);
                self.unacked.remove(&error.call_id);
            }
            _ => {}
        }
    }

    /// Opens a new stream, with backoff, and repeats what was not answered.
    async fn reattach(&mut self) -> Result<pb::Attached, WorkError> {
        let since = *self.down_since.get_or_insert_with(Instant::now);
        loop {
            match self.attach_once().await {
                Ok((stream, attached)) => {
                    for request in self.unanswered.values() {
                        let _ = stream
                            .tx
                            .send(message(In::ToolCallRequest(request.clone())));
                    }
                    for result in self.unacked.values() {
                        let _ = stream.tx.send(message(In::ToolCallResult(result.clone())));
                    }
                    let running = attached
                        .run
                        .as_ref()
                        .is_some_and(|run| run.status == pb::RunStatus::Running as i32);
                    if let (Some(complete), true) = (&self.complete, running) {
                        let _ = stream.tx.send(message(In::Complete(complete.clone())));
                    }
                    if self.attempts > 0 {
                        info!(attempts = self.attempts, "session re-attached");
                    }
                    self.stream = Some(stream);
                    self.down_since = None;
                    self.attempts = 0;
                    return Ok(attached);
                }
                Err(status) if retryable(&status) && since.elapsed() < self.reattach_for => {
                    let backoff = FIRST_BACKOFF
                        .saturating_mul(2u32.saturating_pow(self.attempts.min(8)))
                        .min(MAX_BACKOFF);
                    self.attempts += 1;
                    warn!(code = ?status.code(), error = status.message(), ?backoff, "attach failed; retrying");
                    tokio::time::sleep(backoff).await;
                }
                Err(status) => return Err(status.into()),
            }
        }
    }

    async fn attach_once(&mut self) -> Result<(Stream, pb::Attached), Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(message(In::Attach(self.attach.clone())));
        let mut inbound = self
            .client
            .session(UnboundedReceiverStream::new(rx))
            .await?
            .into_inner();
        match inbound.message().await? {
            Some(pb::CoordinatorMessage {
                message: Some(Out::Attached(attached)),
            }) => Ok((Stream { tx, inbound }, attached)),
            other => Err(Status::internal(format!(
                "expected attached, got {other:?}"
            ))),
        }
    }
}
