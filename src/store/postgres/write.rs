//! The writer task: group commit.
//!
//! The writer takes the first queued commit, then whatever else is already queued (up to
//! `max_batch`) without waiting, and writes them in one transaction on its own connection:
//! `BEGIN`, one `runplane_commit(…)` call per commit, `COMMIT`. The calls are sent
//! pipelined — all of them before the first answer is read — so a group costs about two
//! round trips and one WAL flush however many commits it holds. Under load the queue
//! refills while a group is in flight, so groups grow with the load.
//!
//! One bad commit fails alone: the function checks the version, the version bump and the
//! log's continuity before it writes, and its `EXCEPTION` block (a savepoint) undoes and
//! reports anything that fails after that. Only an error that aborts the transaction itself
//! (a lost connection, a statement timeout, a failed `COMMIT`) fails the whole group.
//! Nothing is answered before `COMMIT` has returned; then each commit is answered in queue
//! order (a `commit_then` callback runs on this task).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use futures_util::future::join_all;
use tokio::sync::mpsc;
use tokio_postgres::Row;

use super::lease::Leases;
use super::{pg_error, pool_error};
use crate::store::reply::Reply;
use crate::store::{Commit, StoreError};

/// The call each commit makes; its parameters are `EncodedCommit::params`'s.
const COMMIT_SQL: &str = "SELECT outcome, stored_version, last, detail FROM runplane_commit(
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)";

/// A queued commit.
pub(super) struct Job {
    /// Boxed: the queue moves jobs around.
    pub commit: Box<EncodedCommit>,
    pub reply: Reply,
}

/// A commit as the function's parameters, encoded on the committing task's thread. It
/// holds no reference to the committed run, which the committer changes in place next.
pub(super) struct EncodedCommit {
    run_id: String,
    expected: Option<i64>,
    version: i64,
    task_id: String,
    agent_id: String,
    project_id: String,
    team_id: String,
    status: &'static str,
    created_at: DateTime<Utc>,
    run_json: String,
    stall_json: Option<String>,
    /// The events' seqs, kinds, times and attributes (JSON objects), in order.
    seqs: Vec<i64>,
    kinds: Vec<&'static str>,
    ats: Vec<DateTime<Utc>>,
    attributes: Vec<String>,
    /// This process's owner id, and the epoch of its lease on the run (`None`: it holds
    /// none, and a run another process holds refuses the commit).
    owner: String,
    epoch: Option<i64>,
}

impl EncodedCommit {
    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 17] {
        [
            &self.run_id,
            &self.expected,
            &self.version,
            &self.task_id,
            &self.agent_id,
            &self.project_id,
            &self.team_id,
            &self.status,
            &self.created_at,
            &self.run_json,
            &self.stall_json,
            &self.seqs,
            &self.kinds,
            &self.ats,
            &self.attributes,
            &self.owner,
            &self.epoch,
        ]
    }

    /// The events' seqs refused as SQLite's writer words it, given the log's last seq.
    fn gap(&self, last: i64) -> StoreError {
        for (next, &seq) in (last + 1..).zip(&self.seqs) {
            if seq != next {
                return StoreError::invalid(
                    &self.run_id,
                    format!("event seq {seq} does not continue the log (next is {next})"),
                );
            }
        }
        StoreError::invalid(&self.run_id, "events do not continue the log")
    }

    /// The function's answer as this commit's outcome.
    fn outcome(&self, row: &Row) -> Result<(), StoreError> {
        let outcome: &str = row.get(0);
        let found: Option<i64> = row.get(1);
        let last: Option<i64> = row.get(2);
        let detail: Option<&str> = row.get(3);
        match outcome {
            "ok" => Ok(()),
            "conflict" => Err(StoreError::Conflict {
                run_id: self.run_id.clone(),
                expected: self.expected,
                found,
            }),
            "not_found" => Err(StoreError::NotFound {
                run_id: self.run_id.clone(),
            }),
            "fenced" => Err(StoreError::Fenced {
                run_id: self.run_id.clone(),
            }),
            "no_raise" => Err(StoreError::invalid(
                &self.run_id,
                format!(
                    "a change must raise the version past {}, got {}",
                    self.expected.unwrap_or_default(),
                    self.version
                ),
            )),
            "gap" => Err(self.gap(last.unwrap_or_default())),
            _ => {
                let detail = detail.unwrap_or("no detail");
                let message = format!("run {}: write: {detail}", self.run_id);
                let code = detail.split(' ').next().unwrap_or_default();
                Err(if super::is_transient(code) {
                    StoreError::Unavailable(message)
                } else {
                    StoreError::Database(message)
                })
            }
        }
    }
}

/// Validates and encodes a commit, with the refusals and messages of SQLite's encoder;
/// drops the commit (and so its run and events) before returning.
pub(super) fn encode(commit: Commit, leases: &Leases) -> Result<EncodedCommit, StoreError> {
    let Commit {
        run,
        expected_version,
        events,
        stall,
    } = commit;
    let run_id = run.id.as_str();
    run.validate()
        .map_err(|e| StoreError::invalid(run_id, e.to_string()))?;
    let run_json = serde_json::to_string(&*run)
        .map_err(|e| StoreError::invalid(run_id, format!("encode: {e}")))?;
    let stall_json = stall
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::invalid(run_id, format!("encode stall tracker: {e}")))?;
    // PostgreSQL's text cannot hold NUL, and a parameter it refuses aborts the whole group
    // before the function's savepoint could catch it: refuse such a commit here, alone.
    // (The JSON columns are safe: JSON escapes NUL.)
    for (field, value) in [
        ("id", &run.id),
        ("task_id", &run.task_id),
        ("agent_id", &run.agent_id),
        ("project_id", &run.project_id),
        ("team_id", &run.team_id),
    ] {
        if value.contains('\0') {
            return Err(StoreError::invalid(
                run_id,
                format!("{field} contains a NUL character, which PostgreSQL cannot store"),
            ));
        }
    }
    let mut seqs = Vec::with_capacity(events.len());
    let mut kinds = Vec::with_capacity(events.len());
    let mut ats = Vec::with_capacity(events.len());
    let mut attributes = Vec::with_capacity(events.len());
    for event in &events {
        if event.run_id != run.id {
            return Err(StoreError::invalid(
                run_id,
                format!("event seq {} belongs to run {}", event.seq, event.run_id),
            ));
        }
        let seq = i64::try_from(event.seq).map_err(|_| {
            StoreError::invalid(run_id, format!("event seq {} too large", event.seq))
        })?;
        seqs.push(seq);
        kinds.push(event.kind.name());
        ats.push(event.at);
        attributes.push(
            serde_json::to_string(&event.kind.attributes()).map_err(|e| {
                StoreError::invalid(run_id, format!("encode event {}: {e}", event.seq))
            })?,
        );
    }
    Ok(EncodedCommit {
        run_id: run.id.clone(),
        expected: expected_version,
        version: run.version,
        task_id: run.task_id.clone(),
        agent_id: run.agent_id.clone(),
        project_id: run.project_id.clone(),
        team_id: run.team_id.clone(),
        status: run.status.as_str(),
        created_at: run.created_at,
        run_json,
        stall_json,
        seqs,
        kinds,
        ats,
        attributes,
        owner: leases.owner().to_string(),
        epoch: leases.epoch(&run.id),
    })
}

/// Runs until the queue is closed and empty.
pub(super) async fn run(pool: Pool, mut queue: mpsc::UnboundedReceiver<Job>, max_batch: usize) {
    let mut commits: Vec<Box<EncodedCommit>> = Vec::with_capacity(max_batch.min(4096));
    let mut replies: Vec<Reply> = Vec::with_capacity(max_batch.min(4096));
    while let Some(first) = queue.recv().await {
        let mut next = Some(first);
        while let Some(job) = next.take() {
            commits.push(job.commit);
            replies.push(job.reply);
            if commits.len() < max_batch {
                next = queue.try_recv().ok();
            }
        }
        let outcomes = write_group(&pool, &commits).await;
        // Nothing of a commit is kept once it is answered.
        commits.clear();
        for (reply, outcome) in replies.drain(..).zip(outcomes) {
            reply.send(outcome);
        }
    }
    pool.close();
}

/// Runs the calls pipelined on one connection and returns their answers in order.
///
/// tokio-postgres sends a query's request when its future is first polled, and the server
/// answers requests in the order they arrive. The calls are polled once each, in queue
/// order, before anything waits, so they go out back to back and in that order (commits of
/// one run must be applied in the order they were queued); then the ones still waiting
/// are awaited together.
async fn pipeline<F: Future>(calls: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut calls: Vec<Pin<Box<F>>> = calls.map(Box::pin).collect();
    let mut answers: Vec<Option<F::Output>> = Vec::with_capacity(calls.len());
    std::future::poll_fn(|cx| {
        for call in &mut calls {
            answers.push(match call.as_mut().poll(cx) {
                Poll::Ready(answer) => Some(answer),
                Poll::Pending => None,
            });
        }
        Poll::Ready(())
    })
    .await;
    let waiting = calls
        .into_iter()
        .zip(&answers)
        .filter(|(_, answer)| answer.is_none())
        .map(|(call, _)| call);
    let mut late = join_all(waiting).await.into_iter();
    answers
        .into_iter()
        .map(|answer| match answer {
            Some(answer) => answer,
            None => late.next().expect("one late answer per waiting call"),
        })
        .collect()
}

/// One statement of a group's transaction.
enum Call<'a> {
    /// A commit: one `runplane_commit` call.
    Commit(&'a EncodedCommit),
    /// Names runs of the group, for processes that follow them (`peers.rs`).
    Announce(&'a str),
}

/// Most bytes of one notification's payload: PostgreSQL refuses 8000 or more.
const PAYLOAD_LIMIT: usize = 7900;

/// The runs a group appends events to, space-separated, in payloads PostgreSQL accepts.
/// Sent in the group's transaction, they are delivered when (and only if) it commits; a run
/// whose commit is refused is named anyway, and its watchers then read nothing new.
fn appended_payloads(group: &[Box<EncodedCommit>]) -> Vec<String> {
    let mut named = std::collections::HashSet::new();
    let mut payloads = Vec::new();
    let mut payload = String::new();
    for commit in group.iter().filter(|c| !c.seqs.is_empty()) {
        if !named.insert(commit.run_id.as_str()) {
            continue;
        }
        if payload.len() + commit.run_id.len() + 1 > PAYLOAD_LIMIT {
            payloads.push(std::mem::take(&mut payload));
        }
        if !payload.is_empty() {
            payload.push(' ');
        }
        payload.push_str(&commit.run_id);
    }
    if !payload.is_empty() {
        payloads.push(payload);
    }
    payloads
}

/// Writes a group in one transaction and returns each commit's outcome, in order.
async fn write_group(pool: &Pool, group: &[Box<EncodedCommit>]) -> Vec<Result<(), StoreError>> {
    let fail_all = |error: StoreError| -> Vec<Result<(), StoreError>> {
        let message = error.to_string();
        let retryable = error.is_retryable();
        group
            .iter()
            .map(|_| {
                Err(if retryable {
                    StoreError::Unavailable(message.clone())
                } else {
                    StoreError::Database(message.clone())
                })
            })
            .collect()
    };
    let mut client = match pool.get().await {
        Ok(client) => client,
        Err(e) => {
            return match pool_error("connect")(e) {
                StoreError::Closed => group.iter().map(|_| Err(StoreError::Closed)).collect(),
                other => fail_all(other),
            }
        }
    };
    let statement = match client.prepare_cached(COMMIT_SQL).await {
        Ok(statement) => statement,
        Err(e) => return fail_all(pg_error("prepare commit")(e)),
    };
    let tx = match client.transaction().await {
        Ok(tx) => tx,
        Err(e) => return fail_all(pg_error("begin group transaction")(e)),
    };
    let (tx_ref, statement) = (&tx, &statement);
    let announcements = appended_payloads(group);
    let calls = group
        .iter()
        .map(|commit| Call::Commit(commit))
        .chain(announcements.iter().map(|payload| Call::Announce(payload)))
        .map(|call| async move {
            match call {
                Call::Commit(commit) => tx_ref.query_one(statement, &commit.params()).await,
                Call::Announce(payload) => {
                    tx_ref
                        .query_one("SELECT pg_notify('runplane_appended', $1)", &[&payload])
                        .await
                }
            }
        });
    let answers = pipeline(calls).await;
    let mut outcomes = Vec::with_capacity(group.len());
    for (index, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(row) => {
                if let Some(commit) = group.get(index) {
                    outcomes.push(commit.outcome(&row));
                }
            }
            // The transaction is aborted: nothing of the group can be kept. Dropping `tx`
            // rolls it back.
            Err(e) => return fail_all(pg_error("group transaction abandoned")(e)),
        }
    }
    if let Err(e) = tx.commit().await {
        let error = pg_error("commit group transaction")(e);
        let message = error.to_string();
        let retryable = error.is_retryable();
        return outcomes
            .into_iter()
            .map(|outcome| {
                outcome.and(Err(if retryable {
                    StoreError::Unavailable(message.clone())
                } else {
                    StoreError::Database(message.clone())
                }))
            })
            .collect();
    }
    outcomes
}
