//! A run's grants (remembered answers, `domain::grant`): made by an operator's run-scoped
//! answer to an ask, consulted for each later call the profile asks about, revoked by an
//! operator. The actor holds the run's grants in memory; the log is where they are kept,
//! and a restored actor rebuilds them from it.

use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::{info, warn};

use super::actor::{Command, RunActor};
use super::messages::CoordinatorError;
use super::Coordinator;
use crate::domain::event::Decided;
use crate::domain::{Decision, EventKind, Grant, GrantRecord, GrantRevoked, Remember, RunGrants};
use crate::policy::{apply_grants_off_runtime, grant_match, ToolCall, Verdict};

/// A run's grants as its actor holds them.
#[derive(Debug, Default)]
pub(super) struct Grants {
    /// Every grant of the run, made and revoked: for ids and revocation.
    all: RunGrants,
    /// The grants that hold, shared with a judge on the blocking pool.
    active: Arc<[Grant]>,
}

impl Grants {
    /// The grants a log showed.
    pub(super) fn from_log(all: RunGrants) -> Grants {
        let active = all.active().into();
        Grants { all, active }
    }

    fn changed(&mut self) {
        self.active = self.all.active().into();
    }
}

/// An operator's revocation of a grant.
pub struct Revocation {
    /// The grant.
    pub grant_id: String,
    /// Why.
    pub reason: String,
    /// Who revokes it: the authenticated principal's name.
    pub by: String,
    /// Ok once the revocation is committed.
    pub reply: oneshot::Sender<Result<(), CoordinatorError>>,
}

/// Events read per page when a run's grants are read from its log.
const GRANT_SCAN_PAGE: usize = 1_000;

impl RunActor {
    /// The verdict for a call: the profile's, or the grants' when the profile asked and
    /// the run's grants cover the call; with the ids of the grants that decided (empty
    /// when none did). `&mut self` only so that the future is `Send` (the actor's state
    /// is not `Sync`).
    pub(super) async fn with_grants(
        &mut self,
        call: &ToolCall<'_>,
        verdict: Verdict,
    ) -> (Verdict, String) {
        if verdict.decision != Decision::Ask || self.grants.active.is_empty() {
            return (verdict, String::new());
        }
        match apply_grants_off_runtime(&self.profile, call, &verdict, &self.grants.active).await {
            Ok(Some(granted)) => granted,
            Ok(None) => (verdict, String::new()),
            Err(failed) => {
                warn!(tool = %call.tool, "{failed} matching the run's grants; the ask stands");
                (verdict, String::new())
            }
        }
    }

    /// The grant an answer for the rest of the run makes, checked against the asked call
    /// as the log holds it (the actor keeps only a fingerprint of a call). A failed read
    /// is INTERNAL, not a store failure of the actor's: nothing changed, so the actor goes
    /// on and the operator may retry.
    pub(super) async fn new_grant(
        &mut self,
        call_id: &str,
        remember: &Remember,
        decision: Decision,
        by: &str,
        note: &str,
    ) -> Result<Grant, CoordinatorError> {
        let asked: Decided = self
            .shared
            .store
            .pending_asks(Some(&self.run.id))
            .await
            .map_err(|err| CoordinatorError::Internal(format!("reading the ask: {err}")))?
            .into_iter()
            .find_map(|event| match event.kind {
                EventKind::Decided(decided) if decided.call_id == call_id => Some(decided),
                _ => None,
            })
            .ok_or_else(|| {
                CoordinatorError::Internal(format!("the ask of call {call_id} is not in the log"))
            })?;
        // The files are placed as the grant will place later calls': with the attached
        // worker's root, or, while none is attached, the root the last one had.
        let workspace_root = match &self.session {
            Some(session) => session.workspace_root.clone(),
            None => self.last_workspace_root().await?,
        };
        let call = ToolCall {
            tool: &asked.tool,
            command: &asked.command,
            path: &asked.path,
            resolved_path: &asked.resolved_path,
            paths: &asked.paths,
            url: &asked.url,
            input: &asked.input,
            workspace_root: workspace_root.as_deref(),
        };
        let matcher = grant_match(remember, &call)
            .map_err(|err| CoordinatorError::InvalidArgument(err.to_string()))?;
        Ok(Grant {
            id: self.grants.all.next_id(),
            call_id: call_id.to_string(),
            tool: asked.tool.clone(),
            matcher,
            decision,
            by: by.to_string(),
            note: note.to_string(),
        })
    }

    /// The workspace root of the run's last attached worker, from the log; `None` when it
    /// named none (or none ever attached).
    async fn last_workspace_root(&mut self) -> Result<Option<String>, CoordinatorError> {
        let mut root = None;
        let mut from_seq = 1;
        loop {
            let page = self
                .shared
                .store
                .list_events(&self.run.id, from_seq, GRANT_SCAN_PAGE)
                .await
                .map_err(|err| CoordinatorError::Internal(format!("reading the log: {err}")))?;
            for event in &page {
                if let EventKind::WorkerAttached { workspace_root, .. } = &event.kind {
                    root = (!workspace_root.is_empty()).then(|| workspace_root.clone());
                }
            }
            match page.last() {
                Some(last) if page.len() == GRANT_SCAN_PAGE => from_seq = last.seq + 1,
                _ => return Ok(root),
            }
        }
    }

    /// Records a grant in the change being built; it holds from the next call on.
    pub(super) fn add_grant(&mut self, grant: Grant) {
        info!(grant_id = %grant.id, decision = %grant.decision, by = %grant.by, "grant made");
        self.record(EventKind::GrantAdded(grant.clone()));
        self.grants.all.add(grant, self.shared.clock.now());
        self.grants.changed();
    }

    /// Withdraws a grant: from the next call on, what it covered is asked again.
    pub(super) async fn revoke_grant(
        &mut self,
        grant_id: &str,
        reason: String,
        by: &str,
    ) -> Result<(), CoordinatorError> {
        if self.run.status.is_terminal() {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "run {} is {}",
                self.run.id, self.run.status
            )));
        }
        match self.grants.all.get(grant_id) {
            None => {
                return Err(CoordinatorError::NotFound(format!(
                    "run {} has no grant {grant_id}",
                    self.run.id
                )))
            }
            Some(record) if !record.is_active() => {
                return Err(CoordinatorError::FailedPrecondition(format!(
                    "grant {grant_id} of run {} is already revoked",
                    self.run.id
                )))
            }
            Some(_) => {}
        }
        let revoked = GrantRevoked {
            grant_id: grant_id.to_string(),
            reason: if reason.is_empty() {
                format!("revoked by {by}")
            } else {
                reason
            },
            by: by.to_string(),
        };
        self.record(EventKind::GrantRevoked(revoked.clone()));
        self.commit().await?;
        info!(grant_id, by, "grant revoked");
        self.grants.all.revoke(revoked, self.shared.clock.now());
        self.grants.changed();
        Ok(())
    }
}

impl Coordinator {
    /// A run's grants, made and revoked, oldest first, as its log in the store tells them
    /// (so every process sharing the store answers the same, for a finished run too).
    pub async fn list_grants(&self, run_id: &str) -> Result<Vec<GrantRecord>, CoordinatorError> {
        self.get_run(run_id).await?;
        let mut grants = RunGrants::default();
        let mut from_seq = 1;
        loop {
            let page = self
                .shared
                .store
                .list_events(run_id, from_seq, GRANT_SCAN_PAGE)
                .await?;
            for event in &page {
                grants.apply(event);
            }
            match page.last() {
                Some(last) if page.len() == GRANT_SCAN_PAGE => from_seq = last.seq + 1,
                _ => return Ok(grants.records().to_vec()),
            }
        }
    }

    /// Revokes a grant of a live run as the principal named `by`, at the process that owns
    /// the run, wherever that is. Returns the grant as `list_grants` then reads it: with
    /// the times the log holds.
    pub async fn revoke_grant(
        &self,
        run_id: &str,
        grant_id: &str,
        reason: String,
        by: &str,
    ) -> Result<GrantRecord, CoordinatorError> {
        let relayed = super::relay::Relayed::Revoke {
            grant_id: grant_id.to_string(),
            reason: reason.clone(),
            by: by.to_string(),
        };
        match self.revoke_here(run_id, grant_id, reason, by).await {
            Err(error) if error.is_owned_elsewhere() => {
                self.relay(run_id, relayed).await?.into_revoked()?;
            }
            done => done?,
        }
        self.list_grants(run_id)
            .await?
            .into_iter()
            .find(|record| record.grant.id == grant_id)
            .ok_or_else(|| {
                CoordinatorError::Internal(format!("grant {grant_id} is not in the log"))
            })
    }

    /// The revocation, recorded by this process's actor of the run.
    pub(super) async fn revoke_here(
        &self,
        run_id: &str,
        grant_id: &str,
        reason: String,
        by: &str,
    ) -> Result<(), CoordinatorError> {
        self.ask_run(run_id, |reply| {
            Command::RevokeGrant(Box::new(Revocation {
                grant_id: grant_id.to_string(),
                reason,
                by: by.to_string(),
                reply,
            }))
        })
        .await
    }
}
