//! The run lifecycle: one actor task per live run, and the handle the gRPC services use.
//!
//! `Coordinator` is cheap to clone. Operator calls and worker sessions reach a run's actor
//! by message (`actor::Command`); reads go straight to the store, which every change is
//! committed to before anyone hears of it.

mod actor;
mod calls;
mod change;
mod clock;
mod decided;
mod feed;
mod finish;
mod grants;
mod lifecycle;
mod messages;
mod outbox;
mod reach;
mod relay;
mod restore;
mod sandbox;
mod versions;
mod watch;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::TimeDelta;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::auth::{token, Secret};
use crate::domain::event::Created;
use crate::domain::query::{RunPage, RunQuery};
use crate::domain::{Decision, Remember, Run, StallTracker, StartRequest, ToolCallResponse};
use crate::domain::{Event, EventKind};
use crate::policy::{CompiledProfile, LiveProfiles, DEFAULT_PROFILE};
use crate::store::{Peers, RunStore};

/// What a store failure is, as the coordinator reports it (`CoordinatorError::Store`).
pub use crate::store::StoreError;
pub use actor::Inbound;
use actor::{Command, Phase, RunActor, Session};
use clock::Clock;
pub use feed::{LiveFeed, LocalFeed};
pub use messages::{
    CloseReason, CoordinatorError, DeliveryOutcome, GateOutcome, PendingAsk, Push, RunCompletion,
    SessionError, WorkerInput,
};
pub use outbox::Outbound;
use outbox::Outbox;
pub use outbox::{outbound_channel, MAX_UNREAD};

/// The name recorded as `by` for what the server does by itself (limits, timeouts, a lost
/// worker, asks denied because their run ended).
pub const RUNPLANE: &str = "runplane";

/// Commands a run's actor may have queued before senders wait.
const ACTOR_QUEUE: usize = 256;
/// Committed events buffered for watchers; a watcher that falls further behind re-reads
/// the store.
const EVENT_FEED: usize = 4096;

/// Settings of the coordinator.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// How long a dropped worker may take to re-attach before the run fails.
    pub reattach_grace: Duration,
    /// Whether each new run gets a worker token (authentication on).
    pub issue_worker_tokens: bool,
    /// Where decisions are counted.
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// What a worker sends to attach.
#[derive(Debug, Clone, Default)]
pub struct AttachRequest {
    /// The run to work on.
    pub run_id: String,
    /// The worker's id, for the log.
    pub worker_id: String,
    /// The workspace root; empty: every absolute path is outside.
    pub workspace_root: String,
}

/// The coordinator: creates runs, owns their actors, answers operators.
#[derive(Clone)]
pub struct Coordinator {
    shared: Arc<Shared>,
}

/// State shared by the coordinator handle and every actor.
pub(crate) struct Shared {
    /// Where everything is committed.
    store: Arc<dyn RunStore>,
    /// The other processes sharing the store (`None`: this process owns every run).
    peers: Option<Arc<dyn Peers>>,
    /// The profiles new runs may name; a reload replaces them, never a run's own.
    profiles: Arc<LiveProfiles>,
    /// Hashes of the policy versions this process has stored or found stored: a run
    /// starting under one of them writes no version.
    stored_versions: Mutex<HashSet<String>>,
    /// Wall-clock time that follows tokio's clock.
    clock: Clock,
    /// Settings.
    config: CoordinatorConfig,
    /// The runs this process owns, each with its actor's mailbox: a process owns a live
    /// run from restoring or creating its actor until the actor stops (the run ended, the
    /// server stopped, or the store fenced it off because another process took it over).
    /// Only the owner decides a run's calls and writes its log.
    actors: Mutex<HashMap<String, ActorEntry>>,
    /// Source of actor generations.
    next_generation: AtomicU64,
    /// Committed events, for watchers.
    events: Arc<dyn LiveFeed>,
    /// Set once shutdown began: no new attaches.
    closing: AtomicBool,
    /// Flips to true when shutdown begins, so watchers end instead of holding the server.
    stopping: tokio::sync::watch::Sender<bool>,
}

/// A live run's actor, as the coordinator reaches it.
struct ActorEntry {
    /// Which actor this is; a stopping actor removes its entry only if still its own.
    generation: u64,
    /// Its mailbox.
    mailbox: mpsc::Sender<Command>,
}

/// Locks a mutex even if a panicking thread poisoned it: the maps stay consistent because
/// every critical section is a single insert or remove.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// When a run detached now fails with "worker lost"; `None` when the configured grace
    /// is too long for a timestamp (it then waits for its worker indefinitely).
    fn grace_deadline(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        TimeDelta::from_std(self.config.reattach_grace)
            .ok()
            .and_then(|grace| self.clock.now().checked_add_signed(grace))
    }

    /// Feeds committed events to watchers. Without a watcher this costs nothing: the
    /// channel refuses at once and the events are dropped with the actor's last reference.
    fn publish(&self, events: Vec<Arc<Event>>) {
        for event in events {
            self.events.publish(event);
        }
    }

    /// An actor ended: forget its mailbox (unless a newer actor already replaced it).
    fn actor_stopped(&self, run_id: &str, generation: u64) {
        let mut actors = lock(&self.actors);
        if actors
            .get(run_id)
            .is_some_and(|e| e.generation == generation)
        {
            actors.remove(run_id);
            drop(actors);
            // Another process may take the run at once instead of waiting for the lease
            // to lapse. Off the actor: it is stopping, and nothing waits for this.
            let release = self.store.release(run_id);
            let run_id = run_id.to_string();
            tokio::spawn(async move {
                if let Err(error) = release.await {
                    warn!(%run_id, %error, "releasing the run failed; its lease will lapse");
                }
            });
        }
    }

    /// The mailbox of a run's running actor. A closed one (the actor stopped or panicked)
    /// counts as none, so the run is restored from the store instead of refused forever.
    fn actor(&self, run_id: &str) -> Option<mpsc::Sender<Command>> {
        lock(&self.actors)
            .get(run_id)
            .filter(|e| !e.mailbox.is_closed())
            .map(|e| e.mailbox.clone())
    }
}

impl Coordinator {
    /// Starts the coordinator and restores every live run from the store; restored runs
    /// wait for their workers to re-attach.
    pub async fn start(
        store: Arc<dyn RunStore>,
        profiles: Arc<LiveProfiles>,
        config: CoordinatorConfig,
    ) -> Result<Coordinator, StoreError> {
        let feed = Arc::new(LocalFeed::new(EVENT_FEED));
        Coordinator::start_with_feed(store, feed, profiles, config).await
    }

    /// As [`start`](Coordinator::start), with the live feed watchers follow.
    pub async fn start_with_feed(
        store: Arc<dyn RunStore>,
        events: Arc<dyn LiveFeed>,
        profiles: Arc<LiveProfiles>,
        config: CoordinatorConfig,
    ) -> Result<Coordinator, StoreError> {
        let coordinator = Coordinator {
            shared: Arc::new(Shared {
                peers: store.peers(),
                store,
                profiles,
                stored_versions: Mutex::new(HashSet::new()),
                clock: Clock::new(),
                config,
                actors: Mutex::new(HashMap::new()),
                next_generation: AtomicU64::new(1),
                events,
                closing: AtomicBool::new(false),
                stopping: tokio::sync::watch::Sender::new(false),
            }),
        };
        let live = coordinator.shared.store.live_runs().await?;
        let mut count = 0;
        for stored in live {
            // A run another process owns (sharing a network store) stays with it.
            match coordinator.shared.store.claim(&stored.run.id, false).await {
                Ok(()) => {}
                Err(StoreError::Fenced { run_id }) => {
                    info!(%run_id, "live run owned by another process; not restored");
                    continue;
                }
                Err(error) => return Err(error),
            }
            coordinator.restore(stored).await?;
            count += 1;
        }
        info!(runs = count, "restored live runs");
        coordinator.serve_peers();
        Ok(coordinator)
    }

    /// Creates a pending run and its actor, started by the principal named `by`; returns it
    /// with its worker token when the coordinator issues them. The token's credential is
    /// stored before the run, so a run never exists without its token (a run that then
    /// fails to be stored leaves a credential for no run, which authenticates nobody).
    pub async fn start_run(
        &self,
        request: StartRequest,
        by: &str,
    ) -> Result<(Run, Option<Secret>), CoordinatorError> {
        request
            .validate()
            .map_err(|e| CoordinatorError::InvalidArgument(e.to_string()))?;
        let name = if request.policy_profile.is_empty() {
            DEFAULT_PROFILE.to_string()
        } else {
            request.policy_profile.clone()
        };
        let profile = self.shared.profiles.current().get(&name).ok_or_else(|| {
            CoordinatorError::InvalidArgument(format!("policy_profile: unknown profile {name:?}"))
        })?;
        let now = self.shared.clock.now();
        // Stored before the run, as its token is: a run never names a version the store
        // does not hold.
        self.store_version(&profile, now).await?;
        let run = Run::new(uuid::Uuid::now_v7().to_string(), request, name, now);
        let worker_token = if self.shared.config.issue_worker_tokens {
            let (secret, credential) = token::worker_token(&run.id, now)
                .map_err(|e| CoordinatorError::Internal(e.to_string()))?;
            self.shared.store.put_credential(credential).await?;
            Some(secret)
        } else {
            None
        };
        let stall = StallTracker::new(profile.profile().termination.stall_threshold);
        let created = EventKind::Created(Created {
            policy_profile: run.policy_profile.clone(),
            policy_hash: profile.hash().to_string(),
            task_id: run.task_id.clone(),
            agent_id: run.agent_id.clone(),
            project_id: run.project_id.clone(),
            by: by.to_string(),
        });
        let mut change = change::Change::of(&run.id, 1, now, created);
        change.stall_fed();
        let (commit, events, _) = change.into_commit(Arc::new(run.clone()), None, Some(&stall));
        self.shared.store.commit(commit).await?;
        // Taken over if another process restored it in between: its creator runs it.
        self.shared.store.claim(&run.id, true).await?;
        self.shared.publish(events);
        info!(run_id = %run.id, profile = %run.policy_profile, version = %profile.hash(), "run created");
        self.spawn_actor(ActorState {
            run: run.clone(),
            profile,
            stall,
            next_seq: 2,
            calls: decided::DecidedCalls::default(),
            grants: grants::Grants::default(),
            grace_deadline: None,
            phase: Phase::Working,
            unclosed_session: None,
        });
        Ok((run, worker_token))
    }

    /// Starts the actor of a run, unless one is already running (two callers restoring the
    /// same run at once): the check and the insert happen under one lock, so a run never
    /// has two actors.
    fn spawn_actor(&self, state: ActorState) -> mpsc::Sender<Command> {
        let mut actors = lock(&self.shared.actors);
        if let Some(entry) = actors.get(&state.run.id).filter(|e| !e.mailbox.is_closed()) {
            return entry.mailbox.clone();
        }
        let generation = self.shared.next_generation.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(ACTOR_QUEUE);
        actors.insert(
            state.run.id.clone(),
            ActorEntry {
                generation,
                mailbox: tx.clone(),
            },
        );
        drop(actors);
        let ActorState {
            run,
            profile,
            stall,
            next_seq,
            calls,
            grants,
            grace_deadline,
            phase,
            unclosed_session,
        } = state;
        let asking = calls
            .iter()
            .filter(|(_, call)| call.ask.is_some())
            .map(|(call_id, _)| call_id.clone())
            .collect();
        let mut actor = RunActor {
            shared: Arc::clone(&self.shared),
            generation,
            stored_version: run.version,
            run: Arc::new(run),
            profile,
            stall,
            next_seq,
            calls,
            grants,
            asking,
            session: None,
            phase,
            completion_note: String::new(),
            grace_deadline,
            change: change::Change::default(),
            attention: Arc::default(),
        };
        if let Some(worker_id) = unclosed_session {
            actor.record(EventKind::WorkerDetached {
                worker_id,
                reason: "session lost".into(),
            });
        }
        actor.spawn(rx);
        tx
    }

    /// One run, as last committed.
    pub async fn get_run(&self, run_id: &str) -> Result<Run, CoordinatorError> {
        self.shared
            .store
            .get_run(run_id)
            .await?
            .ok_or_else(|| CoordinatorError::NotFound(format!("run {run_id} not found")))
    }

    /// Whether shutdown began.
    fn is_closing(&self) -> bool {
        self.shared.closing.load(Ordering::Acquire)
    }

    /// One run and its stall tracker, both as last committed (read together, so the
    /// tracker is the one of that version of the run); the tracker is `None` when the
    /// store holds none for the run.
    pub async fn get_run_and_stall(
        &self,
        run_id: &str,
    ) -> Result<(Run, Option<StallTracker>), CoordinatorError> {
        self.shared
            .store
            .get_run_and_stall(run_id)
            .await?
            .ok_or_else(|| CoordinatorError::NotFound(format!("run {run_id} not found")))
    }

    /// The live runs this process owns now, sorted.
    pub fn owned_runs(&self) -> Vec<String> {
        let mut owned: Vec<String> = lock(&self.shared.actors)
            .iter()
            .filter(|(_, entry)| !entry.mailbox.is_closed())
            .map(|(run_id, _)| run_id.clone())
            .collect();
        owned.sort();
        owned
    }

    /// Runs matching a query, newest first.
    pub async fn list_runs(&self, query: RunQuery) -> Result<RunPage, CoordinatorError> {
        Ok(self.shared.store.list_runs(query).await?)
    }

    /// A page of a run's log.
    pub async fn list_events(
        &self,
        run_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<Event>, CoordinatorError> {
        self.get_run(run_id).await?;
        Ok(self
            .shared
            .store
            .list_events(run_id, from_seq.max(1), limit)
            .await?)
    }

    /// Ends a run as cancelled by the principal named `by` and tells its worker; at the
    /// process that owns the run, wherever that is.
    pub async fn cancel_run(
        &self,
        run_id: &str,
        reason: String,
        by: &str,
    ) -> Result<Run, CoordinatorError> {
        let relayed = relay::Relayed::Cancel {
            reason: reason.clone(),
            by: by.to_string(),
        };
        match self.cancel_here(run_id, reason, by).await {
            Err(error) if error.is_owned_elsewhere() => {
                self.relay(run_id, relayed).await?.into_run()
            }
            done => done,
        }
    }

    /// `cancel_run` in this process.
    async fn cancel_here(
        &self,
        run_id: &str,
        reason: String,
        by: &str,
    ) -> Result<Run, CoordinatorError> {
        let by = by.to_string();
        self.ask_run(run_id, |reply| Command::Cancel { reason, by, reply })
            .await
    }

    /// Pending asks, oldest first; of one run, or of all. Read from the store, so every
    /// process sharing it answers the same.
    pub async fn pending_asks(
        &self,
        run_id: Option<&str>,
    ) -> Result<Vec<PendingAsk>, CoordinatorError> {
        let asked = self.shared.store.pending_asks(run_id).await?;
        let mut asks = asked
            .iter()
            .map(|event| {
                PendingAsk::from_event(event).ok_or_else(|| {
                    CoordinatorError::Internal(format!(
                        "run {}: event {} is not an ask",
                        event.run_id, event.seq
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.add_rules(&mut asks).await?;
        Ok(asks)
    }

    /// Answers a pending ask as the principal named `by`; `note` is the client's own text
    /// about who answered, kept beside the identity, never as it; `remember`, when given,
    /// makes the answer hold for the later calls of the run it covers (a grant). The
    /// worker receives the final decision, from the process that owns the run, wherever
    /// that is.
    #[allow(clippy::too_many_arguments)]
    pub async fn resolve_ask(
        &self,
        run_id: &str,
        call_id: &str,
        decision: Decision,
        reason: String,
        by: &str,
        note: String,
        remember: Option<Remember>,
    ) -> Result<ToolCallResponse, CoordinatorError> {
        let relayed = relay::Relayed::Resolve {
            call_id: call_id.to_string(),
            decision,
            reason: reason.clone(),
            by: by.to_string(),
            note: note.clone(),
            remember: remember.clone(),
        };
        match self
            .resolve_here(run_id, call_id, decision, reason, by, note, remember)
            .await
        {
            Err(error) if error.is_owned_elsewhere() => {
                self.relay(run_id, relayed).await?.into_response()
            }
            done => done,
        }
    }

    /// `resolve_ask` in this process.
    #[allow(clippy::too_many_arguments)]
    async fn resolve_here(
        &self,
        run_id: &str,
        call_id: &str,
        decision: Decision,
        reason: String,
        by: &str,
        note: String,
        remember: Option<Remember>,
    ) -> Result<ToolCallResponse, CoordinatorError> {
        self.ask_run(run_id, |reply| {
            Command::Resolve(Box::new(actor::Resolution {
                call_id: call_id.to_string(),
                decision,
                reason,
                by: by.to_string(),
                note,
                remember,
                reply,
            }))
        })
        .await
    }

    /// Attaches a worker's stream to its run. `Attached` is already pushed when this
    /// returns; from then on the run's actor reads `inbound` itself and detaches when it
    /// ends.
    pub async fn attach(
        &self,
        request: AttachRequest,
        outbound: Outbound,
        inbound: Inbound,
    ) -> Result<(), CoordinatorError> {
        let workspace_root = (!request.workspace_root.is_empty()).then_some(request.workspace_root);
        self.ask_run(&request.run_id, |reply| Command::Attach {
            session: Box::new(Session {
                worker_id: request.worker_id,
                workspace_root,
                outbox: Arc::new(Outbox::new(outbound)),
                inbound: Some(inbound),
            }),
            reply,
        })
        .await
    }

    /// Stops every actor (telling attached workers to re-attach later) and waits for
    /// them, at most `timeout`. Runs stay as committed; the next server restores them.
    pub async fn shutdown(&self, timeout: Duration) {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.stopping.send_replace(true);
        let actors: Vec<mpsc::Sender<Command>> = lock(&self.shared.actors)
            .values()
            .map(|e| e.mailbox.clone())
            .collect();
        let wait = async {
            // A full mailbox is waited for: every attached run records its detach.
            for actor in &actors {
                let _ = actor.send(Command::Shutdown).await;
            }
            for actor in actors {
                actor.closed().await;
            }
        };
        if tokio::time::timeout(timeout, wait).await.is_err() {
            warn!("some runs did not stop within the shutdown timeout");
        }
    }
}

/// What a run's actor starts from: a new run, or one restored from the store.
struct ActorState {
    run: Run,
    profile: Arc<CompiledProfile>,
    stall: StallTracker,
    /// The next event sequence number.
    next_seq: u64,
    /// The decided calls (from the log when restored).
    calls: decided::DecidedCalls,
    /// The run's grants (from the log when restored).
    grants: grants::Grants,
    /// When the run fails unless a worker attaches (restored running runs).
    grace_deadline: Option<chrono::DateTime<chrono::Utc>>,
    /// Gate or delivery progress (from the status and the log when restored).
    phase: Phase,
    /// The worker of a session the log shows attached and never detached; its detach is
    /// recorded with the actor's first change, so every attach in a log has its detach.
    unclosed_session: Option<String>,
}
