//! How processes that share one store reach each other: a command for a run goes to the
//! process that owns it, news that a run's log grew reaches every process, and live runs
//! whose owner is gone are found. Only a store several processes share has peers
//! (PostgreSQL); the embedded store has none, and its one process owns every run.
//!
//! Bodies are opaque text here: what a command says, and what its answer says, is the
//! coordinator's business (`coordinator/relay.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot};

use super::StoreFuture;

/// A command another process sent to a run this process owns.
#[derive(Debug)]
pub struct PeerCommand {
    /// The run it is for.
    pub run_id: String,
    /// What to do, as the sender encoded it.
    pub body: String,
    /// Where the answer goes; the sender waits for it. Dropping it unanswered leaves the
    /// sender waiting until its timeout.
    pub reply: oneshot::Sender<String>,
}

/// News from the other processes sharing the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerNews {
    /// Another process committed events of this run: its watchers here read them.
    Grew(Arc<str>),
    /// Another process took over this run, which this process owned: its actor here
    /// stops, and its worker (if still attached here) is told to re-attach.
    Moved(Arc<str>),
    /// News may have been missed (the connection that hears it was lost and is back):
    /// whoever follows a run should read the store again.
    Unknown,
}

/// The processes sharing a store, as one of them sees the others.
pub trait Peers: Send + Sync + 'static {
    /// Hands `body` to the process that owns `run_id` and waits for its answer.
    /// `Ok(None)` when no process took the command within `wait` (the run has no live
    /// owner, or its owner is stuck): the command is then withdrawn and never runs. An
    /// owner that took it but did not answer within its own bound fails `Unavailable`,
    /// and then whether it ran is unknown.
    fn send(&self, run_id: &str, body: String, wait: Duration) -> StoreFuture<Option<String>>;

    /// The commands other processes send to the runs this process owns. The first call
    /// gets the receiver; later ones get `None`. Until it is taken, commands are left for
    /// their senders to withdraw.
    fn take_inbox(&self) -> Option<mpsc::Receiver<PeerCommand>>;

    /// News of runs that grew in, or moved to, other processes.
    fn news(&self) -> broadcast::Receiver<PeerNews>;

    /// Live runs whose ownership lapsed (their process died or lost the database): a
    /// surviving process should claim them and run their timers.
    fn orphans(&self) -> StoreFuture<Vec<String>>;

    /// How often to look for orphans.
    fn orphan_scan_interval(&self) -> Duration;
}
