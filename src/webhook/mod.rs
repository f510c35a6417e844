//! Ask webhooks: every new ask, and its resolution or expiry, POSTed as JSON to each
//! configured receiver (`--ask-webhook`).
//!
//! The notifier sees committed events (the server hands it the live feed's), so a receiver
//! never hears of an ask the store does not hold. Handing a notice over is a `try_send`:
//! a full queue drops the notice and counts it, and no decision ever waits on a receiver.
//! A dispatcher task adds what the event does not carry (the run's agent, task and project;
//! for a resolution, the ask's own call), builds the JSON once, and queues it for each
//! receiver (`deliver.rs`).

mod deliver;
mod payload;

pub use payload::Payload;

use std::collections::HashMap;
use std::sync::Arc;

use hyper::body::Bytes;
use tokio::sync::mpsc;
use tracing::warn;
use url::Url;

use crate::domain::event::Decided;
use crate::domain::{Decision, Event, EventKind};
use crate::metrics::{Metrics, WebhookOutcome};
use crate::store::RunStore;
use deliver::{spawn_receiver, Target};
use payload::RunInfo;

/// Notices waiting for the dispatcher; past it new ones are dropped and counted.
const DISPATCH_QUEUE: usize = 1024;
/// Events read per page when a resolution's ask is looked up in its run's log.
const SEARCH_PAGE: usize = 512;

/// Why a webhook setting was refused at start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// TLS to receivers is not built in.
    #[error(
        "ask webhook {0}: https:// is not supported; post to an http:// receiver (a relay on \
         the same host or private network, which may forward over TLS)"
    )]
    Https(String),
    /// Not an `http://` URL with a host.
    #[error("ask webhook {0}: expected an http:// URL with a host")]
    Scheme(String),
}

/// Checks the receivers' URLs; the server refuses to start on a bad one.
pub fn check_urls(urls: &[Url]) -> Result<(), WebhookError> {
    urls.iter().try_for_each(|url| Target::new(url).map(drop))
}

/// Hands committed ask events to the webhook tasks. Cheap to call from any thread, the
/// store's writer thread included.
pub struct AskNotifier {
    queue: mpsc::Sender<Arc<Event>>,
    receivers: usize,
    metrics: Arc<Metrics>,
}

impl AskNotifier {
    /// Starts the dispatcher and one task per receiver; `public_url` is the console's
    /// address the notices link to. Needs a tokio runtime.
    pub fn start(
        urls: &[Url],
        public_url: String,
        store: Arc<dyn RunStore>,
        metrics: Arc<Metrics>,
    ) -> Result<AskNotifier, WebhookError> {
        let receivers = urls
            .iter()
            .map(|url| Ok(spawn_receiver(Target::new(url)?, Arc::clone(&metrics))))
            .collect::<Result<Vec<_>, WebhookError>>()?;
        let (queue, events) = mpsc::channel(DISPATCH_QUEUE);
        let dispatcher = Dispatcher {
            store,
            public_url,
            receivers,
            opened: HashMap::new(),
            metrics: Arc::clone(&metrics),
        };
        tokio::spawn(dispatcher.run(events));
        Ok(AskNotifier {
            queue,
            receivers: urls.len(),
            metrics,
        })
    }

    /// Takes a committed event: asks and resolutions are queued, anything else ignored.
    pub fn notify(&self, event: &Arc<Event>) {
        let relevant = match &event.kind {
            EventKind::Decided(decided) => decided.decision == Decision::Ask,
            EventKind::Resolved(_) => true,
            _ => false,
        };
        if relevant && self.queue.try_send(Arc::clone(event)).is_err() {
            warn!(run_id = %event.run_id, "ask webhooks are behind; a notice was dropped");
            for _ in 0..self.receivers {
                self.metrics.webhook(WebhookOutcome::Dropped);
            }
        }
    }
}

/// Turns events into payloads and hands them to the receivers.
struct Dispatcher {
    store: Arc<dyn RunStore>,
    public_url: String,
    receivers: Vec<mpsc::Sender<Bytes>>,
    /// The open asks' decisions, by run and call: a resolution carries only its answer.
    /// Bounded by the pending asks; an ask opened before a restart is read from its log.
    opened: HashMap<(String, String), Decided>,
    metrics: Arc<Metrics>,
}

impl Dispatcher {
    async fn run(mut self, mut events: mpsc::Receiver<Arc<Event>>) {
        while let Some(event) = events.recv().await {
            let Some(payload) = self.payload(&event).await else {
                continue;
            };
            let body = match serde_json::to_vec(&payload) {
                Ok(body) => Bytes::from(body),
                Err(error) => {
                    warn!(%error, "an ask webhook payload could not be encoded");
                    continue;
                }
            };
            for receiver in &self.receivers {
                if receiver.try_send(body.clone()).is_err() {
                    warn!(run_id = %event.run_id, "an ask webhook receiver is behind; dropped");
                    self.metrics.webhook(WebhookOutcome::Dropped);
                }
            }
        }
    }

    /// The notice of one event; `None` for an event that is not about an ask.
    async fn payload(&mut self, event: &Event) -> Option<Payload> {
        let run = self.run_info(&event.run_id).await;
        match &event.kind {
            EventKind::Decided(asked) => {
                let key = (event.run_id.clone(), asked.call_id.clone());
                self.opened.insert(key, asked.clone());
                Some(payload::opened(
                    &event.run_id,
                    &run,
                    asked,
                    &self.public_url,
                ))
            }
            EventKind::Resolved(resolved) => {
                let key = (event.run_id.clone(), resolved.call_id.clone());
                let asked = match self.opened.remove(&key) {
                    Some(asked) => Some(asked),
                    None => self.find_ask(&event.run_id, &resolved.call_id).await,
                };
                Some(payload::closed(
                    &event.run_id,
                    &run,
                    asked.as_ref(),
                    resolved,
                    event.at,
                    &self.public_url,
                ))
            }
            _ => None,
        }
    }

    /// The run's agent, task and project; empty when the run cannot be read now (the
    /// notice still goes out).
    async fn run_info(&self, run_id: &str) -> RunInfo {
        match self.store.get_run(run_id).await {
            Ok(Some(run)) => RunInfo::from(&run),
            Ok(None) => RunInfo::default(),
            Err(error) => {
                warn!(%run_id, %error, "ask webhook: the run could not be read");
                RunInfo::default()
            }
        }
    }

    /// The ask's decision, from its run's log (an ask opened before this process started).
    async fn find_ask(&self, run_id: &str, call_id: &str) -> Option<Decided> {
        let mut from_seq = 1;
        loop {
            let page = match self.store.list_events(run_id, from_seq, SEARCH_PAGE).await {
                Ok(page) => page,
                Err(error) => {
                    warn!(%run_id, %error, "ask webhook: the ask could not be read");
                    return None;
                }
            };
            let found = page.iter().find_map(|event| match &event.kind {
                EventKind::Decided(decided) if decided.call_id == call_id => Some(decided),
                _ => None,
            });
            if let Some(decided) = found {
                return Some(decided.clone());
            }
            match page.last() {
                Some(last) if page.len() == SEARCH_PAGE => from_seq = last.seq + 1,
                _ => return None,
            }
        }
    }
}
