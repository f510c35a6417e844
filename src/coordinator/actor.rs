//! One task per live run: it owns the run's state, decides its tool calls in order, and is
//! the only writer of its log. Operators reach it as a `Command`; the attached worker's
//! messages it reads from the worker's stream itself. No lock is held across a store
//! write and one run never waits for another.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::{Stream, StreamExt};
use tracing::{debug, info, Instrument};

use super::change::Change;
use super::decided::DecidedCalls;
use super::grants::{Grants, Revocation};
use super::messages::{CloseReason, CoordinatorError, Push, WorkerInput};
use super::outbox::{Attention, Outbox};
use super::{Shared, RUNPLANE};
use crate::domain::EventKind;
use crate::domain::{Decision, Remember, Run, StallTracker, Status, ToolCallResponse};
use crate::policy::CompiledProfile;
use crate::store::StoreError;

/// Inbound side of a worker's stream, as the transport delivers it: the actor polls it
/// itself, so a message reaches the run's state without a task in between (a forwarding
/// task and a mailbox hop cost every round trip a wake-up and a queue). Ends when the
/// worker's stream does.
pub type Inbound = Pin<Box<dyn Stream<Item = WorkerInput> + Send>>;

/// A request to a run's actor.
///
/// Large payloads are boxed: a run's mailbox allocates its slots 32 at a time at the size
/// of the largest variant, and every idle run pays for that block (144-byte slots were
/// 4.5 KiB per run; now 32 bytes).
pub enum Command {
    /// A worker attaches (or takes over).
    Attach {
        /// The new session.
        session: Box<Session>,
        /// Ok once `Attached` has been pushed.
        reply: oneshot::Sender<Result<(), CoordinatorError>>,
    },
    /// An operator cancels the run.
    Cancel {
        /// Why.
        reason: String,
        /// Who cancelled (the principal's name).
        by: String,
        /// The cancelled run.
        reply: oneshot::Sender<Result<Run, CoordinatorError>>,
    },
    /// An operator answers a pending ask.
    Resolve(Box<Resolution>),
    /// An operator revokes one of the run's grants.
    RevokeGrant(Box<Revocation>),
    /// The server is stopping: record that the worker is detached, tell it, and stop; the
    /// run stays in its status for a re-attach after the restart.
    Shutdown,
    /// Another process took the run over: tell the worker attached here, if any, to
    /// re-attach, and stop without writing (the store would refuse it).
    Moved,
}

/// An operator's answer to a pending ask.
pub struct Resolution {
    /// The asked call.
    pub call_id: String,
    /// Allow or deny.
    pub decision: Decision,
    /// Why.
    pub reason: String,
    /// Who answered: the authenticated principal's name.
    pub by: String,
    /// The client's own note on who answered (`ResolveAskRequest.resolver`); may be empty.
    pub note: String,
    /// What to remember for the rest of the run; `None`: this call only.
    pub remember: Option<Remember>,
    /// The final response, as the worker receives it.
    pub reply: oneshot::Sender<Result<ToolCallResponse, CoordinatorError>>,
}

/// A worker's attached stream.
pub struct Session {
    /// The worker's self-chosen id, for the log.
    pub worker_id: String,
    /// Paths are held to this root; `None`: every absolute path is outside.
    pub workspace_root: Option<String>,
    /// Where pushes go, in order and each after its commit.
    pub outbox: Arc<Outbox>,
    /// The worker's messages. Taken out while the actor waits on it, and dropped with the
    /// session, so a replaced or closed session's late messages are never read.
    pub inbound: Option<Inbound>,
}

/// Where a running run is in its ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Tool calls are being decided.
    Working,
    /// Waiting for the quality gate result.
    Gate,
    /// Waiting for the delivery result.
    Delivering,
}

/// The state a run's actor owns.
pub(super) struct RunActor {
    /// Coordinator-wide pieces: store, clock, asks registry, event feed.
    pub shared: Arc<Shared>,
    /// Tells this actor's mailbox entry from a later actor's for the same run.
    pub generation: u64,
    /// The run as last committed plus the change being built. Shared with the store while
    /// a commit is in flight (so a commit does not copy it); changed through `run_mut`.
    pub run: Arc<Run>,
    /// The version the store holds, for optimistic concurrency.
    pub stored_version: i64,
    /// The compiled profile deciding this run.
    pub profile: Arc<CompiledProfile>,
    /// Feeds on every result; ends the run when stall detection is on.
    pub stall: StallTracker,
    /// The next event sequence number (gapless).
    pub next_seq: u64,
    /// The run's decided calls: the recent ones in memory, the older ones in the store.
    pub calls: DecidedCalls,
    /// The run's remembered answers, consulted for each call the profile asks about.
    pub grants: Grants,
    /// The calls that may be waiting for an operator: every call that was asked, until
    /// `next_deadline` finds it answered. The actor looks for the next ask deadline before
    /// every command, and scanning all of `calls` there made each message cost O(calls
    /// so far) — a run's thousandth call paid for the 999 before it.
    pub asking: HashSet<String>,
    /// The attached worker, if any.
    pub session: Option<Session>,
    /// Gate and delivery progress.
    pub phase: Phase,
    /// A note carried into the completed run's error (a failed gate without rollback).
    pub completion_note: String,
    /// When the detached run fails with "worker lost".
    pub grace_deadline: Option<DateTime<Utc>>,
    /// What the current step writes, committed as one (`change.rs`).
    pub change: Change,
    /// Set from the store's thread when a commit issued without waiting failed or the
    /// worker was cut off while its answers were released; the loop wakes on it.
    pub attention: Arc<Attention>,
}

/// What the actor loop should do after a command.
pub(super) enum Flow {
    Continue,
    Stop,
}

impl RunActor {
    /// Runs the actor until the run is over and no worker is attached, or the server stops.
    pub fn spawn(self, commands: mpsc::Receiver<Command>) {
        let span = tracing::info_span!("run", run_id = %self.run.id);
        tokio::spawn(self.run_loop(commands).instrument(span));
    }

    async fn run_loop(mut self, mut commands: mpsc::Receiver<Command>) {
        loop {
            // A commit issued without waiting failed: nothing more is handled.
            if let Some(error) = self.attention.take_failure() {
                self.stop_after_store_failure(&error);
                break;
            }
            let wake = self
                .next_deadline()
                .map(|at| self.shared.clock.instant_at(at));
            let mut inbound = self.session.as_mut().and_then(|s| s.inbound.take());
            let attention = Arc::clone(&self.attention);
            let woke = tokio::select! {
                command = commands.recv() => Woke::Command(command),
                input = next_input(&mut inbound) => Woke::Worker(input),
                () = sleep_until(wake) => Woke::Timer,
                () = attention.notify.notified() => Woke::Attention,
            };
            if let (Some(session), false) = (&mut self.session, matches!(woke, Woke::Worker(None)))
            {
                session.inbound = inbound;
            }
            let flow = match woke {
                // A command acts on the stored run: the commits still in flight come first
                // (an attach whose client gave up meanwhile is then seen as such).
                Woke::Command(Some(command)) => {
                    self.attention.settled().await;
                    match self.attention.take_failure() {
                        Some(error) => Err(error),
                        None => self.handle(command).await,
                    }
                }
                Woke::Command(None) => Ok(Flow::Stop),
                Woke::Worker(Some(input)) => self.on_worker(input).await.map(|()| Flow::Continue),
                Woke::Worker(None) => self.detach().await.map(|()| Flow::Continue),
                Woke::Timer => self.on_timer().await,
                Woke::Attention => self.on_attention().map(|()| Flow::Continue),
            };
            // What a handler recorded after its last commit (a worker cut off while its
            // answer was pushed) is committed before the actor waits again.
            let flow = match flow {
                Ok(Flow::Continue) if !self.change.is_empty() => {
                    self.commit().await.map(|()| Flow::Continue)
                }
                other => other,
            };
            let flow = match flow {
                Ok(flow) => flow,
                Err(err) => {
                    self.stop_after_store_failure(&err);
                    Flow::Stop
                }
            };
            if matches!(flow, Flow::Stop)
                || (self.run.status.is_terminal() && self.session.is_none())
            {
                break;
            }
        }
        self.shared.actor_stopped(&self.run.id, self.generation);
        debug!("actor stopped");
    }

    async fn handle(&mut self, command: Command) -> Result<Flow, StoreError> {
        match command {
            // A client that gave up while its attach waited here must not take the run
            // over from a healthy worker for a stream that is already gone.
            Command::Attach { reply, .. } if reply.is_closed() => {}
            Command::Attach { session, reply } => match self.attach(*session).await {
                Ok(()) => {
                    let _ = reply.send(Ok(()));
                }
                Err(AttachError::Refused(err)) => {
                    let _ = reply.send(Err(err));
                }
                Err(AttachError::Store(err)) => {
                    let _ = reply.send(Err(CoordinatorError::Store(err.clone())));
                    return Err(err);
                }
            },
            Command::Cancel { reason, by, reply } => {
                let result = self.cancel(reason, &by).await;
                answer(reply, result)?;
            }
            Command::Resolve(resolution) => {
                let Resolution {
                    call_id,
                    decision,
                    reason,
                    by,
                    note,
                    remember,
                    reply,
                } = *resolution;
                let result = self
                    .resolve(&call_id, decision, reason, &by, note, remember)
                    .await;
                answer(reply, result)?;
            }
            Command::RevokeGrant(revocation) => {
                let Revocation {
                    grant_id,
                    reason,
                    by,
                    reply,
                } = *revocation;
                let result = self.revoke_grant(&grant_id, reason, &by).await;
                answer(reply, result)?;
            }
            Command::Shutdown => {
                if let Some(session) = &self.session {
                    self.record(EventKind::WorkerDetached {
                        worker_id: session.worker_id.clone(),
                        reason: "server shutdown".into(),
                    });
                    // Committed before the worker hears of it; if the commit fails, the
                    // stream ends with INTERNAL instead.
                    self.commit().await?;
                    self.close_session(CloseReason::Shutdown);
                }
                return Ok(Flow::Stop);
            }
            Command::Moved => {
                self.close_session(CloseReason::Moved);
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }

    async fn on_worker(&mut self, input: WorkerInput) -> Result<(), StoreError> {
        match input {
            WorkerInput::ToolCall(request) => self.on_tool_call(request).await,
            WorkerInput::Result(result) => self.on_result(result).await,
            WorkerInput::Complete(completion) => self.on_complete(completion).await,
            WorkerInput::GateResult(outcome) => self.on_gate_result(outcome).await,
            WorkerInput::Delivery(outcome) => self.on_delivery(outcome).await,
            WorkerInput::Sandbox(report) => self.on_sandbox(report).await,
            WorkerInput::Heartbeat => {
                self.push(Push::Heartbeat(self.run.status));
                Ok(())
            }
            WorkerInput::Rejected(error) => {
                self.push(Push::Error(error));
                Ok(())
            }
        }
    }

    /// The earliest moment something happens without a message: the wall-clock limit, the
    /// re-attach grace, or a pending ask's timeout.
    fn next_deadline(&mut self) -> Option<DateTime<Utc>> {
        if self.run.status.is_terminal() {
            return None;
        }
        let calls = &self.calls;
        self.asking
            .retain(|call_id| calls.get(call_id).is_some_and(|c| c.ask.is_some()));
        let asks = self
            .asking
            .iter()
            .filter_map(|call_id| self.calls.get(call_id)?.ask.as_ref()?.deadline);
        [self.time_limit_deadline(), self.grace_deadline]
            .into_iter()
            .flatten()
            .chain(asks)
            .min()
    }

    /// When the run's wall-clock limit ends it (only once it runs: a queued run waits).
    pub(super) fn time_limit_deadline(&self) -> Option<DateTime<Utc>> {
        let seconds = self.profile.profile().termination.timeout_seconds;
        (seconds > 0 && self.run.status != Status::Pending)
            .then(|| {
                TimeDelta::try_seconds(seconds)
                    .and_then(|limit| self.run.started_at.checked_add_signed(limit))
            })
            .flatten()
    }

    async fn on_timer(&mut self) -> Result<Flow, StoreError> {
        let now = self.shared.clock.now();
        if self.time_limit_deadline().is_some_and(|at| at <= now) {
            let seconds = self.profile.profile().termination.timeout_seconds;
            self.end_by_limit(format!("time limit reached ({seconds} s)"))
                .await?;
            return Ok(Flow::Continue);
        }
        if self.grace_deadline.is_some_and(|at| at <= now) {
            self.grace_deadline = None;
            info!("worker did not re-attach in time");
            self.end_run(Status::Failed, "worker lost".into(), RUNPLANE)
                .await?;
            return Ok(Flow::Continue);
        }
        let expired: Vec<String> = self
            .asking
            .iter()
            .filter(|id| {
                let deadline = self.calls.get(id).and_then(|c| c.ask.as_ref()?.deadline);
                deadline.is_some_and(|at| at <= now)
            })
            .cloned()
            .collect();
        for call_id in expired {
            let seconds = self.profile.profile().termination.ask_timeout_seconds;
            let reason = format!("ask timed out after {seconds} s");
            self.resolve(
                &call_id,
                Decision::Deny,
                reason,
                RUNPLANE,
                String::new(),
                None,
            )
            .await
            .map_err(|e| match e {
                CoordinatorError::Store(err) => err,
                other => StoreError::Database(other.to_string()),
            })?;
        }
        Ok(Flow::Continue)
    }
}

/// Answers an operator. A store failure is also returned, so the actor stops: its state
/// was changed in memory for a commit that did not happen, and only a reload from the
/// store makes it true again.
fn answer<T>(
    reply: oneshot::Sender<Result<T, CoordinatorError>>,
    result: Result<T, CoordinatorError>,
) -> Result<(), StoreError> {
    match result {
        Err(CoordinatorError::Store(err)) => {
            let _ = reply.send(Err(CoordinatorError::Store(err.clone())));
            Err(err)
        }
        other => {
            let _ = reply.send(other);
            Ok(())
        }
    }
}

/// What woke the actor.
enum Woke {
    /// An operator's command; `None` when every sender is gone.
    Command(Option<Command>),
    /// The attached worker's next message; `None` when its stream ended.
    Worker(Option<WorkerInput>),
    /// A deadline passed.
    Timer,
    /// The store's thread set something in `attention`.
    Attention,
}

/// The worker's next message; never resolves while no worker is attached.
async fn next_input(inbound: &mut Option<Inbound>) -> Option<WorkerInput> {
    match inbound {
        Some(inbound) => inbound.next().await,
        None => std::future::pending().await,
    }
}

/// A timer that never fires when there is nothing to wait for.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Why an attach did not happen.
pub(super) enum AttachError {
    /// The run cannot be attached to (it is over).
    Refused(CoordinatorError),
    /// The attach could not be saved; the actor stops.
    Store(StoreError),
}

impl From<StoreError> for AttachError {
    fn from(err: StoreError) -> AttachError {
        AttachError::Store(err)
    }
}
