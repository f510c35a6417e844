//! Reloading the policy directory on SIGHUP, as `runplane policy reload` does through
//! `PolicyService.Reload`.

use std::sync::Arc;

use tracing::{error, info};

use crate::policy::{LiveProfiles, ProfileChange};

/// Reloads `profiles` on the blocking pool (files are read and every profile compiled and
/// tested) and logs the outcome: each changed profile, or the error that left the loaded
/// set as it was.
pub async fn reload_and_log(profiles: Arc<LiveProfiles>, trigger: &'static str) {
    match tokio::task::spawn_blocking(move || profiles.reload()).await {
        Ok(Ok(changes)) => {
            info!(
                trigger,
                changed = changes.len(),
                "policy directory reloaded"
            );
            for change in &changes {
                log_change(change);
            }
        }
        Ok(Err(err)) => {
            error!(trigger, error = %err, "policy reload refused; the loaded profiles stay");
        }
        Err(err) => error!(trigger, error = %err, "policy reload failed"),
    }
}

fn log_change(change: &ProfileChange) {
    let none = String::new();
    info!(
        profile = %change.name,
        previous = %change.previous.as_ref().unwrap_or(&none),
        current = %change.current.as_ref().unwrap_or(&none),
        "profile version changed"
    );
}

/// Starts listening for SIGHUP now (so one sent from here on is not the default action,
/// which ends the process) and reloads `profiles` once the returned task is given them.
#[cfg(unix)]
pub fn on_hangup() -> std::io::Result<HangupReloads> {
    use tokio::signal::unix::{signal, SignalKind};
    Ok(HangupReloads {
        signal: signal(SignalKind::hangup())?,
    })
}

/// SIGHUPs as they arrive, each a reload.
#[cfg(unix)]
pub struct HangupReloads {
    /// The installed handler.
    signal: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl HangupReloads {
    /// Reloads at every SIGHUP until the task is aborted.
    pub fn spawn(mut self, profiles: Arc<LiveProfiles>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            while self.signal.recv().await.is_some() {
                reload_and_log(Arc::clone(&profiles), "SIGHUP").await;
            }
        })
    }
}
