//! Processes sharing one store (replicas on PostgreSQL) serve each other's runs:
//! - an operator's cancel or answer for a run another process owns is relayed to that
//!   process through the store (`store::Peers`) and runs there, as if asked there;
//! - a run taken over by another process stops its actor here at once;
//! - live runs whose owner is gone (lease lapsed) are claimed by whichever process finds
//!   them first, which then runs their timers (re-attach grace, ask deadlines, limits).
//!
//! With a store only one process opens there are no peers and none of this runs.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tracing::{info, warn};

use super::actor::Command;
use super::{Coordinator, CoordinatorError, Shared};
use crate::domain::{Decision, Remember, Run, ToolCallResponse};
use crate::store::{PeerCommand, PeerNews, StoreError};

/// How long the owner of a run has to take a relayed command before it is withdrawn and
/// the operator is told to retry: a live owner takes it within milliseconds.
const TAKE_WAIT: Duration = Duration::from_secs(2);

/// A command for a run, as it travels to the run's owner.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub(super) enum Relayed {
    /// `CancelRun`.
    Cancel {
        /// Why.
        reason: String,
        /// Who cancelled (the principal's name, authenticated where it was asked).
        by: String,
    },
    /// `ResolveAsk`.
    Resolve {
        /// The asked call.
        call_id: String,
        /// Allow or deny.
        decision: Decision,
        /// Why.
        reason: String,
        /// Who answered (the principal's name, authenticated where it was asked).
        by: String,
        /// The client's own note on who answered.
        note: String,
        /// What to remember for the rest of the run; absent (from a process older than
        /// grants, too): this call only.
        #[serde(default)]
        remember: Option<Remember>,
    },
    /// `RevokeGrant`.
    Revoke {
        /// The grant.
        grant_id: String,
        /// Why.
        reason: String,
        /// Who revoked it (the principal's name, authenticated where it was asked).
        by: String,
    },
}

/// The owner's answer to a relayed command.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub(super) enum Answer {
    /// The run as cancelled.
    Cancelled {
        /// The run after the cancel.
        run: Box<Run>,
    },
    /// The final response the worker received.
    Resolved {
        /// The response.
        response: ToolCallResponse,
    },
    /// The grant's revocation is in the log.
    Revoked,
    /// The owner refused or failed the command.
    Refused {
        /// What kind of failure, to give the operator the same status code.
        code: Refusal,
        /// The owner's message.
        message: String,
    },
}

/// The kinds of `CoordinatorError` an answer carries.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Refusal {
    NotFound,
    InvalidArgument,
    FailedPrecondition,
    Unavailable,
    Internal,
}

impl Answer {
    fn refused(error: &CoordinatorError) -> Answer {
        let code = match error {
            CoordinatorError::NotFound(_) => Refusal::NotFound,
            CoordinatorError::InvalidArgument(_) => Refusal::InvalidArgument,
            CoordinatorError::FailedPrecondition(_) => Refusal::FailedPrecondition,
            CoordinatorError::Unavailable => Refusal::Unavailable,
            CoordinatorError::Store(e) if e.is_retryable() || owned_elsewhere(e) => {
                Refusal::Unavailable
            }
            CoordinatorError::Internal(_) | CoordinatorError::Store(_) => Refusal::Internal,
        };
        Answer::Refused {
            code,
            message: error.to_string(),
        }
    }

    /// The cancelled run, or the owner's refusal as this process's error.
    pub(super) fn into_run(self) -> Result<Run, CoordinatorError> {
        match self {
            Answer::Cancelled { run } => Ok(*run),
            other => Err(other.into_error()),
        }
    }

    /// The final response, or the owner's refusal as this process's error.
    pub(super) fn into_response(self) -> Result<ToolCallResponse, CoordinatorError> {
        match self {
            Answer::Resolved { response } => Ok(response),
            other => Err(other.into_error()),
        }
    }

    /// Nothing, or the owner's refusal as this process's error.
    pub(super) fn into_revoked(self) -> Result<(), CoordinatorError> {
        match self {
            Answer::Revoked => Ok(()),
            other => Err(other.into_error()),
        }
    }

    fn into_error(self) -> CoordinatorError {
        match self {
            Answer::Refused { code, message } => match code {
                Refusal::NotFound => CoordinatorError::NotFound(message),
                Refusal::InvalidArgument => CoordinatorError::InvalidArgument(message),
                Refusal::FailedPrecondition => CoordinatorError::FailedPrecondition(message),
                Refusal::Unavailable => CoordinatorError::Store(StoreError::Unavailable(message)),
                Refusal::Internal => CoordinatorError::Internal(message),
            },
            other => CoordinatorError::Internal(format!(
                "the run's owner answered a different command: {other:?}"
            )),
        }
    }
}

/// Whether a failure means that another process owns the run.
fn owned_elsewhere(error: &StoreError) -> bool {
    matches!(error, StoreError::Fenced { .. })
}

impl CoordinatorError {
    /// Whether the run is owned by another process sharing the store.
    pub(super) fn is_owned_elsewhere(&self) -> bool {
        matches!(self, CoordinatorError::Store(e) if owned_elsewhere(e))
    }
}

impl Coordinator {
    /// Runs `command` at the process that owns `run_id` and returns its answer.
    pub(super) async fn relay(
        &self,
        run_id: &str,
        command: Relayed,
    ) -> Result<Answer, CoordinatorError> {
        let Some(peers) = &self.shared.peers else {
            return Err(CoordinatorError::Store(StoreError::Fenced {
                run_id: run_id.to_string(),
            }));
        };
        let body = serde_json::to_string(&command)
            .map_err(|e| CoordinatorError::Internal(format!("encode a relayed command: {e}")))?;
        let Some(answer) = peers.send(run_id, body, TAKE_WAIT).await? else {
            return Err(CoordinatorError::Store(StoreError::Unavailable(format!(
                "run {run_id} is owned by another server that did not take the command \
                 within {TAKE_WAIT:?}; retry (a run whose server died is taken over within \
                 its lease time)"
            ))));
        };
        serde_json::from_str(&answer).map_err(|e| {
            CoordinatorError::Internal(format!("the run's owner sent an unreadable answer: {e}"))
        })
    }

    /// Runs a command another process relayed, here, and returns the answer to send back.
    async fn run_relayed(&self, command: PeerCommand) {
        let answer = match serde_json::from_str::<Relayed>(&command.body) {
            Ok(Relayed::Cancel { reason, by }) => {
                match self.cancel_here(&command.run_id, reason, &by).await {
                    Ok(run) => Answer::Cancelled { run: Box::new(run) },
                    Err(error) => Answer::refused(&error),
                }
            }
            Ok(Relayed::Resolve {
                call_id,
                decision,
                reason,
                by,
                note,
                remember,
            }) => match self
                .resolve_here(
                    &command.run_id,
                    &call_id,
                    decision,
                    reason,
                    &by,
                    note,
                    remember,
                )
                .await
            {
                Ok(response) => Answer::Resolved { response },
                Err(error) => Answer::refused(&error),
            },
            Ok(Relayed::Revoke {
                grant_id,
                reason,
                by,
            }) => match self
                .revoke_here(&command.run_id, &grant_id, reason, &by)
                .await
            {
                Ok(()) => Answer::Revoked,
                Err(error) => Answer::refused(&error),
            },
            Err(error) => Answer::refused(&CoordinatorError::Internal(format!(
                "cannot read a relayed command (another runplane version?): {error}"
            ))),
        };
        match serde_json::to_string(&answer) {
            Ok(answer) => {
                let _ = command.reply.send(answer);
            }
            Err(error) => warn!(%error, "encoding a relayed command's answer failed"),
        }
    }

    /// Starts serving the other processes sharing the store, if there are any: their
    /// commands, their news, and the runs their deaths orphaned. The tasks hold the
    /// coordinator weakly and end with it.
    pub(super) fn serve_peers(&self) {
        let Some(peers) = &self.shared.peers else {
            return;
        };
        let shared = Arc::downgrade(&self.shared);
        if let Some(mut inbox) = peers.take_inbox() {
            let shared = shared.clone();
            tokio::spawn(async move {
                while let Some(command) = inbox.recv().await {
                    let Some(coordinator) = upgrade(&shared) else {
                        return;
                    };
                    tokio::spawn(async move { coordinator.run_relayed(command).await });
                }
            });
        }
        tokio::spawn(stop_moved_runs(shared.clone(), peers.news()));
        tokio::spawn(adopt_orphans(shared, peers.orphan_scan_interval()));
    }
}

fn upgrade(shared: &Weak<Shared>) -> Option<Coordinator> {
    shared.upgrade().map(|shared| Coordinator { shared })
}

/// Stops the actor of each run another process took over.
async fn stop_moved_runs(shared: Weak<Shared>, mut news: broadcast::Receiver<PeerNews>) {
    loop {
        let run_id = match news.recv().await {
            Ok(PeerNews::Moved(run_id)) => run_id,
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(coordinator) = upgrade(&shared) else {
            return;
        };
        if let Some(actor) = coordinator.shared.actor(&run_id) {
            info!(%run_id, "another server took the run over; its actor here stops");
            let _ = actor.send(Command::Moved).await;
        }
    }
}

/// Claims and restores, every `interval`, the live runs no process owns any more.
async fn adopt_orphans(shared: Weak<Shared>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(coordinator) = upgrade(&shared) else {
            return;
        };
        if coordinator.is_closing() {
            return;
        }
        let Some(peers) = coordinator.shared.peers.clone() else {
            return;
        };
        let orphans = match peers.orphans().await {
            Ok(orphans) => orphans,
            Err(error) => {
                warn!(%error, "looking for orphaned runs failed; trying again later");
                continue;
            }
        };
        for run_id in orphans {
            match coordinator.live_actor(&run_id, false).await {
                Ok(_) => info!(%run_id, "adopted a run whose server is gone"),
                // Another process was first, or the run ended meanwhile.
                Err(error) if error.is_owned_elsewhere() => {}
                Err(CoordinatorError::FailedPrecondition(_)) => {}
                Err(error) => warn!(%run_id, %error, "adopting an orphaned run failed"),
            }
        }
    }
}
