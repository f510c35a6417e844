//! Reaching a live run's actor: the one running here, or one restored from the store
//! after claiming the run, and sending it a command.

use tokio::sync::{mpsc, oneshot};

use super::actor::Command;
use super::{Coordinator, CoordinatorError};
use std::sync::atomic::Ordering;

impl Coordinator {
    /// The actor of a live run, restoring it from the store if it has none here (its actor
    /// stopped after a store failure, or another process owned it). Restoring claims the
    /// run first (`takeover`: from another process too, for a worker that attached here),
    /// so what is read back includes the previous owner's last write. Unknown → NOT_FOUND;
    /// over → FAILED_PRECONDITION; owned elsewhere without `takeover` → UNAVAILABLE.
    pub(super) async fn live_actor(
        &self,
        run_id: &str,
        takeover: bool,
    ) -> Result<mpsc::Sender<Command>, CoordinatorError> {
        if self.shared.closing.load(Ordering::Acquire) {
            return Err(CoordinatorError::Unavailable);
        }
        if let Some(tx) = self.shared.actor(run_id) {
            return Ok(tx);
        }
        if let Err(refused) = self.shared.store.claim(run_id, takeover).await {
            // An unknown or finished run says so rather than who owns it.
            let run = self.get_run(run_id).await?;
            if run.status.is_terminal() {
                return Err(CoordinatorError::FailedPrecondition(format!(
                    "run {run_id} is {}",
                    run.status
                )));
            }
            return Err(refused.into());
        }
        let Some(stored) = self.shared.store.live_run(run_id).await? else {
            let run = self.get_run(run_id).await?;
            return Err(CoordinatorError::FailedPrecondition(format!(
                "run {run_id} is {}",
                run.status
            )));
        };
        self.restore(stored).await?.ok_or_else(|| {
            CoordinatorError::FailedPrecondition(format!("run {run_id} cannot be resumed"))
        })
    }

    /// Sends a command to a run's actor and waits for its answer. An actor that stopped
    /// between the lookup and the send (its run just ended, or a store write failed) is
    /// looked up once more, which restores the run from the store if it is still live.
    pub(super) async fn ask_run<T>(
        &self,
        run_id: &str,
        command: impl FnOnce(oneshot::Sender<Result<T, CoordinatorError>>) -> Command,
    ) -> Result<T, CoordinatorError> {
        let (reply, answer) = oneshot::channel();
        let mut command = command(reply);
        // A worker attaching here takes its run over from whichever process held it.
        let takeover = matches!(command, Command::Attach { .. });
        let mut retried = false;
        loop {
            let actor = self.live_actor(run_id, takeover).await?;
            match actor.send(command).await {
                Ok(()) => break,
                // The refused command comes back whole (with our reply channel and, for
                // an attach, the worker's stream), ready for the restored actor.
                Err(mpsc::error::SendError(refused)) if !retried => {
                    retried = true;
                    command = refused;
                }
                Err(_) => return Err(CoordinatorError::Unavailable),
            }
        }
        answer.await.map_err(|_| {
            CoordinatorError::Internal(format!(
                "run {run_id}: its actor stopped before answering; retry"
            ))
        })?
    }
}
