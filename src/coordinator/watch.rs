//! `WatchRun`: replay a run's log from the store, then follow committed events live.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};

use super::{Coordinator, CoordinatorError};
use crate::domain::Event;

/// Events read from the store per round trip while replaying.
const REPLAY_PAGE: usize = 500;
/// Events buffered for a slow watcher before the feed waits for it.
const WATCH_BUFFER: usize = 256;

/// Why a watch loop stopped.
enum Stop {
    /// The run ended or the watcher went away.
    Done,
    /// The live feed skipped events: replay from the store.
    Replay,
    /// The server is shutting down.
    Shutdown,
}

impl Coordinator {
    /// Streams a run's events from `from_seq` (0 and 1: from the start), gapless and in
    /// order, until the run ends or the receiver is dropped.
    pub fn watch(
        &self,
        run_id: String,
        from_seq: u64,
    ) -> mpsc::Receiver<Result<Event, CoordinatorError>> {
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        // Subscribe before the first store read so that nothing committed in between is
        // missed; duplicates are dropped by sequence number.
        let feed = self.shared.events.subscribe();
        let stopping = self.shared.stopping.subscribe();
        let coordinator = self.clone();
        tokio::spawn(async move {
            if let Err(err) = coordinator
                .follow(&run_id, from_seq.max(1), feed, stopping, &tx)
                .await
            {
                let _ = tx.send(Err(err)).await;
            }
        });
        rx
    }

    async fn follow(
        &self,
        run_id: &str,
        mut next: u64,
        mut feed: broadcast::Receiver<Arc<Event>>,
        mut stopping: tokio::sync::watch::Receiver<bool>,
        tx: &mpsc::Sender<Result<Event, CoordinatorError>>,
    ) -> Result<(), CoordinatorError> {
        loop {
            // Read the status before the log: the terminal status and the terminal event
            // are committed together, so a run seen as over here has its whole log below.
            let over = self.get_run(run_id).await?.status.is_terminal();
            loop {
                let page = self
                    .shared
                    .store
                    .list_events(run_id, next, REPLAY_PAGE)
                    .await?;
                let full = page.len() == REPLAY_PAGE;
                for event in page {
                    next = event.seq + 1;
                    let terminal = event.kind.is_terminal();
                    if tx.send(Ok(event)).await.is_err() || terminal {
                        return Ok(());
                    }
                }
                if !full {
                    break;
                }
            }
            if over {
                return Ok(());
            }
            match follow_live(run_id, &mut next, &mut feed, &mut stopping, tx).await {
                Stop::Done => return Ok(()),
                Stop::Replay => continue,
                Stop::Shutdown => return Err(CoordinatorError::Unavailable),
            }
        }
    }
}

async fn follow_live(
    run_id: &str,
    next: &mut u64,
    feed: &mut broadcast::Receiver<Arc<Event>>,
    stopping: &mut tokio::sync::watch::Receiver<bool>,
    tx: &mpsc::Sender<Result<Event, CoordinatorError>>,
) -> Stop {
    if *stopping.borrow_and_update() {
        return Stop::Shutdown;
    }
    loop {
        let received = tokio::select! {
            received = feed.recv() => received,
            () = tx.closed() => return Stop::Done,
            _ = stopping.changed() => return Stop::Shutdown,
        };
        let event = match received {
            Ok(event) => event,
            Err(broadcast::error::RecvError::Lagged(_)) => return Stop::Replay,
            Err(broadcast::error::RecvError::Closed) => return Stop::Done,
        };
        if event.run_id != run_id {
            continue;
        }
        if event.seq < *next {
            // Started past the end of the log: the run's end still ends the watch.
            if event.kind.is_terminal() {
                return Stop::Done;
            }
            continue;
        }
        if event.seq > *next {
            return Stop::Replay;
        }
        *next += 1;
        let terminal = event.kind.is_terminal();
        if tx.send(Ok((*event).clone())).await.is_err() || terminal {
            return Stop::Done;
        }
    }
}
