//! `WatchRun`: replay a run's log from the store, then follow committed events live.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};

use super::{Coordinator, CoordinatorError};
use crate::domain::{Event, EventKind};
use crate::store::PeerNews;

/// Events read from the store per round trip while replaying.
const REPLAY_PAGE: usize = 500;
/// Events buffered for a slow watcher before the feed waits for it.
const WATCH_BUFFER: usize = 256;

/// Where a run's log ends: at its terminal event, or — when a worker was still attached
/// then (after a cancel or a limit the stream stays open until the worker leaves) — at
/// that worker's detach, which follows the terminal event.
#[derive(Debug, Default)]
struct LogEnd {
    /// A worker's session is open.
    open: bool,
    /// The terminal event has been seen.
    ended: bool,
}

impl LogEnd {
    /// Takes in the next event; true when it is the log's last.
    fn see(&mut self, kind: &EventKind) -> bool {
        match kind {
            EventKind::WorkerAttached { .. } => self.open = true,
            EventKind::WorkerDetached { .. } => self.open = false,
            _ => {}
        }
        self.ended |= kind.is_terminal();
        self.ended && !self.open
    }
}

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
        let feed = Feeds {
            local: self.shared.events.subscribe(),
            peers: self.shared.peers.as_ref().map(|peers| peers.news()),
        };
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
        mut feed: Feeds,
        mut stopping: tokio::sync::watch::Receiver<bool>,
        tx: &mpsc::Sender<Result<Event, CoordinatorError>>,
    ) -> Result<(), CoordinatorError> {
        let mut end = self.log_end_before(run_id, next).await?;
        if end.ended && !end.open {
            return Ok(());
        }
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
                    let last = end.see(&event.kind);
                    if tx.send(Ok(event)).await.is_err() || last {
                        return Ok(());
                    }
                }
                if !full {
                    break;
                }
            }
            // Over, and no worker left to detach: nothing more will be recorded.
            if over && !end.open {
                return Ok(());
            }
            match follow_live(run_id, &mut next, &mut end, &mut feed, &mut stopping, tx).await {
                Stop::Done => return Ok(()),
                Stop::Replay => continue,
                Stop::Shutdown => return Err(CoordinatorError::Unavailable),
            }
        }
    }

    /// The state of the log's end from the events before `from_seq` (a watch that starts
    /// later must still know whether a worker is attached, or the run already over).
    async fn log_end_before(
        &self,
        run_id: &str,
        from_seq: u64,
    ) -> Result<LogEnd, CoordinatorError> {
        let mut end = LogEnd::default();
        let mut next = 1;
        while next < from_seq {
            let page = self
                .shared
                .store
                .list_events(run_id, next, REPLAY_PAGE)
                .await?;
            let full = page.len() == REPLAY_PAGE;
            for event in page.iter().take_while(|e| e.seq < from_seq) {
                next = event.seq + 1;
                end.see(&event.kind);
            }
            if !full || next >= from_seq {
                break;
            }
        }
        Ok(end)
    }
}

/// What a watcher listens to: the events this process commits, and news of runs other
/// processes sharing the store commit (only that a run grew: the events are read from the
/// store).
struct Feeds {
    local: broadcast::Receiver<Arc<Event>>,
    peers: Option<broadcast::Receiver<PeerNews>>,
}

/// Resolves when the store may hold events of `run_id` that the local feed will not
/// bring: another process committed some, or news was missed. Never, without peers.
async fn grown_elsewhere(peers: &mut Option<broadcast::Receiver<PeerNews>>, run_id: &str) {
    let Some(news) = peers else {
        return std::future::pending().await;
    };
    loop {
        match news.recv().await {
            Ok(PeerNews::Grew(run)) if &*run == run_id => return,
            Ok(PeerNews::Unknown) | Err(broadcast::error::RecvError::Lagged(_)) => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Closed) => return std::future::pending().await,
        }
    }
}

async fn follow_live(
    run_id: &str,
    next: &mut u64,
    end: &mut LogEnd,
    feed: &mut Feeds,
    stopping: &mut tokio::sync::watch::Receiver<bool>,
    tx: &mpsc::Sender<Result<Event, CoordinatorError>>,
) -> Stop {
    if *stopping.borrow_and_update() {
        return Stop::Shutdown;
    }
    loop {
        let received = tokio::select! {
            received = feed.local.recv() => received,
            () = grown_elsewhere(&mut feed.peers, run_id) => return Stop::Replay,
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
            // Started past the end of the log: the log's end still ends the watch.
            if end.see(&event.kind) {
                return Stop::Done;
            }
            continue;
        }
        if event.seq > *next {
            return Stop::Replay;
        }
        *next += 1;
        let last = end.see(&event.kind);
        if tx.send(Ok((*event).clone())).await.is_err() || last {
            return Stop::Done;
        }
    }
}
