//! The live feed: committed events, handed to whoever follows runs as they happen
//! (`WatchRun`). Behind a trait so that replicas sharing one database can follow runs
//! owned elsewhere through the database's notifications; one process uses a broadcast
//! channel.

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::domain::Event;

/// Where committed events go, and where watchers follow them.
pub trait LiveFeed: Send + Sync + 'static {
    /// Hands on an event once it is committed; each run's events in sequence order.
    /// Without a follower it costs nothing and never fails.
    fn publish(&self, event: Arc<Event>);

    /// Every event published from now on. A follower that falls too far behind gets
    /// `Lagged` and re-reads the store, which has every event.
    fn subscribe(&self) -> broadcast::Receiver<Arc<Event>>;
}

/// The feed of a single process: a broadcast channel of the last `capacity` events.
pub struct LocalFeed {
    sender: broadcast::Sender<Arc<Event>>,
}

impl LocalFeed {
    /// A feed that keeps `capacity` events for followers that are behind.
    pub fn new(capacity: usize) -> LocalFeed {
        LocalFeed {
            sender: broadcast::channel(capacity).0,
        }
    }
}

impl LiveFeed for LocalFeed {
    fn publish(&self, event: Arc<Event>) {
        // No follower is not an error.
        let _ = self.sender.send(event);
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.sender.subscribe()
    }
}
