//! Processes sharing the database reach each other through it: commands travel in the
//! `run_commands` table, and `LISTEN`/`NOTIFY` says when to look.
//!
//! One connection per process listens on four channels:
//! - `runplane_command` (`ID RUN`): a command for a run; the process holding the run's
//!   lease takes it (`taken_by`, so exactly one process runs it) and hands it to the
//!   coordinator, then stores the answer and notifies `runplane_answer` (`ID`);
//! - `runplane_answer` (`ID`): wakes the sender waiting for that command;
//! - `runplane_appended` (`RUN RUN …`): the writer of each group names the runs it
//!   committed events of, so watchers elsewhere read them (`write.rs`);
//! - `runplane_moved` (`RUN OWNER`): a process took a run over; the one that held it stops
//!   its actor at once instead of at its next write.
//!
//! A notification is sent only when its transaction commits, so whoever hears one reads
//! what it announces. Notifications sent while the listening connection is down are lost:
//! on reconnecting, the listener takes the commands still waiting and tells watchers to
//! read the store again (`PeerNews::Unknown`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use deadpool_postgres::Pool;
use futures_util::StreamExt;
use tokio::sync::{broadcast, mpsc, oneshot, Notify};
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, Notification};

use super::lease::Leases;
use super::{pg_error, pool_error, schema::LIVE_CLAUSE};
use crate::store::peers::{PeerCommand, PeerNews, Peers};
use crate::store::{StoreError, StoreFuture};

/// How long an owner that took a command may take to answer it, beyond the sender's
/// wait for it to be taken: a command runs one change of one run.
const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// How often a waiting sender looks at its command's row even without a notification.
const POLL: Duration = Duration::from_millis(200);
/// Commands queued for the coordinator before the listener waits.
const INBOX: usize = 256;
/// News kept for a watcher that is behind; one that falls further behind reads the store.
const NEWS: usize = 1024;
/// Commands older than this are deleted: their sender gave up long ago.
const STALE_COMMAND: &str = "10 minutes";
/// A live run that never got a lease is an orphan once it is this old (its creator died
/// between creating and claiming it).
const UNCLAIMED_GRACE: &str = "1 minute";

/// Where the database is, for the listening connection (the pools' config).
pub(super) type ConnectConfig = tokio_postgres::Config;

/// This process's side of the conversation between processes.
pub(super) struct PgPeers {
    /// Sending, taking and answering commands; finding orphans.
    pool: Pool,
    /// The runs this process holds: it takes commands only for those.
    leases: Arc<Leases>,
    /// Filled by the listener with the commands it took.
    inbox_tx: mpsc::Sender<PeerCommand>,
    /// Until the coordinator takes it, no command is taken.
    inbox_rx: Mutex<Option<mpsc::Receiver<PeerCommand>>>,
    /// Runs grown and moved elsewhere.
    news: broadcast::Sender<PeerNews>,
    /// Senders waiting for an answer, by command id.
    waiting: Mutex<HashMap<i64, Arc<Notify>>>,
}

impl PgPeers {
    /// Starts the listener on its own connection; it reconnects until the pool closes.
    pub(super) fn start(pool: Pool, config: ConnectConfig, leases: Arc<Leases>) -> Arc<PgPeers> {
        let (inbox_tx, inbox_rx) = mpsc::channel(INBOX);
        let peers = Arc::new(PgPeers {
            pool,
            leases,
            inbox_tx,
            inbox_rx: Mutex::new(Some(inbox_rx)),
            news: broadcast::channel(NEWS).0,
            waiting: Mutex::new(HashMap::new()),
        });
        tokio::spawn(listen(Arc::downgrade(&peers), config));
        peers
    }

    fn inbox_taken(&self) -> bool {
        self.inbox_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Arc<Notify>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What one notification means here.
    fn heard(self: &Arc<Self>, note: &Notification) {
        let mut words = note.payload().split(' ');
        match note.channel() {
            "runplane_command" => {
                let (Some(id), Some(run_id)) = (words.next(), words.next()) else {
                    return;
                };
                if let Ok(id) = id.parse::<i64>() {
                    self.take_if_mine(id, run_id.to_string());
                }
            }
            "runplane_answer" => {
                let id = words.next().and_then(|id| id.parse::<i64>().ok());
                if let Some(waiter) = id.and_then(|id| self.waiting().get(&id).cloned()) {
                    waiter.notify_one();
                }
            }
            "runplane_appended" => {
                // This process's own runs reach its watchers directly.
                for run_id in words.filter(|run| self.leases.epoch(run).is_none()) {
                    let _ = self.news.send(PeerNews::Grew(run_id.into()));
                }
            }
            "runplane_moved" => {
                let (Some(run_id), Some(owner)) = (words.next(), words.next()) else {
                    return;
                };
                if owner != self.leases.owner() && self.leases.epoch(run_id).is_some() {
                    let _ = self.news.send(PeerNews::Moved(run_id.into()));
                }
            }
            _ => {}
        }
    }

    /// Takes a command for a run this process holds, off the listener.
    fn take_if_mine(self: &Arc<Self>, id: i64, run_id: String) {
        if !self.inbox_taken() || self.leases.epoch(&run_id).is_none() {
            return;
        }
        let peers = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(error) = peers.take(id, run_id).await {
                tracing::warn!(command = id, %error, "a command from another process failed");
            }
        });
    }

    /// Takes the command (unless another process or the sender's withdrawal was first),
    /// has the coordinator run it, and stores and announces its answer.
    async fn take(&self, id: i64, run_id: String) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(pool_error("connect"))?;
        let taken = client
            .query_opt(
                "UPDATE run_commands SET taken_by = $2
                 WHERE id = $1 AND taken_by IS NULL RETURNING body",
                &[&id, &self.leases.owner()],
            )
            .await
            .map_err(pg_error("take a command"))?;
        let Some(row) = taken else { return Ok(()) };
        drop(client);
        let (reply, answer) = oneshot::channel();
        let command = PeerCommand {
            run_id,
            body: row.get(0),
            reply,
        };
        if self.inbox_tx.send(command).await.is_err() {
            return Ok(());
        }
        let Ok(answer) = answer.await else {
            return Ok(());
        };
        let client = self.pool.get().await.map_err(pool_error("connect"))?;
        client
            .execute(
                "WITH answered AS (UPDATE run_commands SET answer = $2 WHERE id = $1 RETURNING id)
                 SELECT pg_notify('runplane_answer', id::text) FROM answered",
                &[&id, &answer],
            )
            .await
            .map_err(pg_error("answer a command"))?;
        Ok(())
    }

    /// The commands that wait untaken (their notification may have been missed while the
    /// listener was away).
    async fn take_waiting(self: &Arc<Self>) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(pool_error("connect"))?;
        let rows = client
            .query(
                "SELECT id, run_id FROM run_commands WHERE taken_by IS NULL ORDER BY id",
                &[],
            )
            .await
            .map_err(pg_error("read waiting commands"))?;
        for row in rows {
            self.take_if_mine(row.get(0), row.get(1));
        }
        Ok(())
    }

    /// Sends a command and waits for its answer (`Peers::send`).
    async fn send_and_wait(
        self: Arc<Self>,
        run_id: String,
        body: String,
        wait: Duration,
    ) -> Result<Option<String>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error("connect"))?;
        let id: i64 = client
            .query_one(
                "WITH sent AS (INSERT INTO run_commands (run_id, body) VALUES ($1, $2) RETURNING id)
                 SELECT id, pg_notify('runplane_command', id || ' ' || $1) FROM sent",
                &[&run_id, &body],
            )
            .await
            .map_err(pg_error(&format!("run {run_id}: send a command")))?
            .get(0);
        drop(client);
        let waiter = Arc::new(Notify::new());
        self.waiting().insert(id, Arc::clone(&waiter));
        let answer = self.wait_for_answer(id, &waiter, wait).await;
        self.waiting().remove(&id);
        answer
    }

    /// Looks at the command's row whenever its answer is announced (and every `POLL`), until
    /// it has an answer, or nobody took it within `wait` (it is then withdrawn), or its
    /// taker did not answer within `ANSWER_WAIT` more.
    async fn wait_for_answer(
        &self,
        id: i64,
        waiter: &Notify,
        wait: Duration,
    ) -> Result<Option<String>, StoreError> {
        let take_by = Instant::now() + wait;
        let answer_by = take_by + ANSWER_WAIT;
        loop {
            let client = self.pool.get().await.map_err(pool_error("connect"))?;
            let row = client
                .query_opt(
                    "SELECT taken_by IS NOT NULL, answer FROM run_commands WHERE id = $1",
                    &[&id],
                )
                .await
                .map_err(pg_error("read a command's answer"))?;
            let (taken, answer): (bool, Option<String>) = match &row {
                Some(row) => (row.get(0), row.get(1)),
                None => return Ok(None),
            };
            if let Some(answer) = answer {
                client
                    .execute("DELETE FROM run_commands WHERE id = $1", &[&id])
                    .await
                    .map_err(pg_error("delete an answered command"))?;
                return Ok(Some(answer));
            }
            let now = Instant::now();
            if !taken && now >= take_by {
                let withdrawn = client
                    .execute(
                        "DELETE FROM run_commands WHERE id = $1 AND taken_by IS NULL",
                        &[&id],
                    )
                    .await
                    .map_err(pg_error("withdraw a command"))?;
                if withdrawn == 1 {
                    return Ok(None);
                }
                continue;
            }
            if now >= answer_by {
                return Err(StoreError::Unavailable(format!(
                    "the run's owner took command {id} but did not answer within {ANSWER_WAIT:?}"
                )));
            }
            drop(client);
            let until = if taken { answer_by } else { take_by };
            let nap = POLL.min(until.saturating_duration_since(now));
            let _ = tokio::time::timeout(nap, waiter.notified()).await;
        }
    }

    /// Live runs whose lease lapsed (or that never got one, long enough ago); also
    /// deletes commands whose senders gave up long ago.
    async fn find_orphans(self: Arc<Self>) -> Result<Vec<String>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error("connect"))?;
        client
            .execute(
                &format!(
                    "DELETE FROM run_commands WHERE sent_at < now() - interval '{STALE_COMMAND}'"
                ),
                &[],
            )
            .await
            .map_err(pg_error("delete stale commands"))?;
        let rows = client
            .query(
                &format!(
                    "SELECT r.id FROM runs r LEFT JOIN run_leases l ON l.run_no = r.run_no
                     WHERE r.{LIVE_CLAUSE}
                       AND (l.expires_at < now()
                            OR (l.run_no IS NULL
                                AND r.created_at < now() - interval '{UNCLAIMED_GRACE}'))
                     ORDER BY r.run_no"
                ),
                &[],
            )
            .await
            .map_err(pg_error("find orphaned runs"))?;
        Ok(rows.into_iter().map(|row| row.get(0)).collect())
    }
}

impl Peers for Arc<PgPeers> {
    fn send(&self, run_id: &str, body: String, wait: Duration) -> StoreFuture<Option<String>> {
        Box::pin(Arc::clone(self).send_and_wait(run_id.to_string(), body, wait))
    }

    fn take_inbox(&self) -> Option<mpsc::Receiver<PeerCommand>> {
        let inbox = self
            .inbox_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if inbox.is_some() {
            // Commands sent before the coordinator was ready wait untaken.
            let peers = Arc::clone(self);
            tokio::spawn(async move {
                if let Err(error) = peers.take_waiting().await {
                    tracing::warn!(%error, "reading waiting commands failed");
                }
            });
        }
        inbox
    }

    fn news(&self) -> broadcast::Receiver<PeerNews> {
        self.news.subscribe()
    }

    fn orphans(&self) -> StoreFuture<Vec<String>> {
        Box::pin(Arc::clone(self).find_orphans())
    }

    fn orphan_scan_interval(&self) -> Duration {
        self.leases.ttl() / 3
    }
}

/// First wait before reconnecting the listener; doubled up to `MAX_BACKOFF`.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Listens until the store is dropped or closed, reconnecting after a lost connection.
async fn listen(peers: std::sync::Weak<PgPeers>, config: ConnectConfig) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let Some(alive) = peers.upgrade() else { return };
        if alive.pool.is_closed() {
            return;
        }
        drop(alive);
        match listen_once(&peers, &config).await {
            Ok(()) => return,
            Err(error) => tracing::warn!(%error, "the listening connection failed; reconnecting"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One listening connection, until it fails (`Err`) or the store goes away (`Ok`).
async fn listen_once(
    peers: &std::sync::Weak<PgPeers>,
    config: &ConnectConfig,
) -> Result<(), StoreError> {
    let (client, mut connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(pg_error("connect the listener"))?;
    // The connection yields notifications as it is polled, and is polled only here.
    let (notes_tx, mut notes) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(note)) => {
                    if notes_tx.send(note).is_err() {
                        return Ok(());
                    }
                }
                Ok(_) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    });
    client
        .batch_execute(
            "LISTEN runplane_command; LISTEN runplane_answer;
             LISTEN runplane_appended; LISTEN runplane_moved",
        )
        .await
        .map_err(pg_error("listen"))?;
    if let Some(alive) = peers.upgrade() {
        // What was announced while no connection listened.
        let _ = alive.news.send(PeerNews::Unknown);
        if alive.inbox_taken() {
            alive.take_waiting().await?;
        }
    }
    let mut closed_check = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            note = notes.recv() => match note {
                Some(note) => match peers.upgrade() {
                    Some(alive) => alive.heard(&note),
                    None => return Ok(()),
                },
                None => break,
            },
            _ = closed_check.tick() => match peers.upgrade() {
                Some(alive) if !alive.pool.is_closed() => {}
                _ => return Ok(()),
            },
        }
    }
    drop(client);
    match driver.await {
        Ok(Err(error)) => Err(pg_error("listen")(error)),
        _ => Err(StoreError::Unavailable(
            "the listening connection closed".into(),
        )),
    }
}
