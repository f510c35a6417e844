//! Remembered approvals ("grants"): an operator's answer to an ask that holds for the rest
//! of its run. A grant is made by answering an ask with the run scope, undone by revoking
//! it, and both are events in the run's log, which is the only place grants are kept: a
//! restarted server rebuilds them from it (`grants_from_log`). Which calls a grant covers
//! is the policy's business (`policy::grants`); a profile's deny always stands.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::event::{Event, EventKind};
use super::Decision;

/// What an operator asks to remember when answering an ask for the rest of the run. The
/// server turns it into a `GrantMatch` from the asked call, and refuses one that does not
/// fit that call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Remember {
    /// The asked command, exactly as the agent sent it.
    Command,
    /// Commands starting with this text: a prefix of the asked command, on a word boundary.
    Prefix(String),
    /// Files matching this glob, which must match the asked call's files.
    PathGlob(String),
}

/// Which calls of the same tool a grant covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantMatch {
    /// A call whose command is this text, byte for byte.
    Command(String),
    /// A simple command whose first words are these (the text as the operator typed it).
    Prefix(String),
    /// A call without a command whose every file, placed in the workspace, matches this
    /// glob.
    PathGlob(String),
}

/// A remembered answer, as `run.grant.added` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// `g1`, `g2`, … in the order the run's grants were made.
    pub id: String,
    /// The asked call whose answer made it.
    pub call_id: String,
    /// The tool it covers (compared ignoring ASCII case, as everywhere in the policy).
    pub tool: String,
    /// The commands or files it covers.
    pub matcher: GrantMatch,
    /// Allow or deny.
    pub decision: Decision,
    /// Who made it: the authenticated principal's name.
    pub by: String,
    /// The client's own note on who answered, kept apart from `by`.
    pub note: String,
}

/// `run.grant.revoked`: a grant no longer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRevoked {
    /// The grant.
    pub grant_id: String,
    /// Why, as the operator gave it.
    pub reason: String,
    /// Who revoked it: the authenticated principal's name.
    pub by: String,
}

/// A grant with its history, as the log tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRecord {
    /// The grant.
    pub grant: Grant,
    /// When it was made.
    pub granted_at: DateTime<Utc>,
    /// Its revocation and when, once revoked.
    pub revoked: Option<(GrantRevoked, DateTime<Utc>)>,
}

impl GrantRecord {
    /// Whether it still covers calls.
    pub fn is_active(&self) -> bool {
        self.revoked.is_none()
    }
}

/// A run's grants, made and revoked, in the order they were made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunGrants {
    /// Every grant the log shows, oldest first.
    records: Vec<GrantRecord>,
}

impl RunGrants {
    /// What one event of the log changes; other events change nothing.
    pub fn apply(&mut self, event: &Event) {
        match &event.kind {
            EventKind::GrantAdded(grant) => self.add(grant.clone(), event.at),
            EventKind::GrantRevoked(revoked) => self.revoke(revoked.clone(), event.at),
            _ => {}
        }
    }

    /// A grant made at `at`.
    pub fn add(&mut self, grant: Grant, at: DateTime<Utc>) {
        self.records.push(GrantRecord {
            grant,
            granted_at: at,
            revoked: None,
        });
    }

    /// A grant revoked at `at`; revoking one that is unknown or already revoked changes
    /// nothing.
    pub fn revoke(&mut self, revoked: GrantRevoked, at: DateTime<Utc>) {
        if let Some(record) = self
            .records
            .iter_mut()
            .find(|r| r.grant.id == revoked.grant_id && r.is_active())
        {
            record.revoked = Some((revoked, at));
        }
    }

    /// Every grant, oldest first.
    pub fn records(&self) -> &[GrantRecord] {
        &self.records
    }

    /// The grants that still hold, oldest first.
    pub fn active(&self) -> Vec<Grant> {
        self.records
            .iter()
            .filter(|r| r.is_active())
            .map(|r| r.grant.clone())
            .collect()
    }

    /// The id the next grant gets: ids are never reused, so a revoked grant's id names
    /// only it in the log.
    pub fn next_id(&self) -> String {
        format!("g{}", self.records.len() + 1)
    }

    /// The grant with this id.
    pub fn get(&self, grant_id: &str) -> Option<&GrantRecord> {
        self.records.iter().find(|r| r.grant.id == grant_id)
    }
}

/// A run's grants as its log tells them.
pub fn grants_from_log<'a>(events: impl IntoIterator<Item = &'a Event>) -> RunGrants {
    let mut grants = RunGrants::default();
    for event in events {
        grants.apply(event);
    }
    grants
}
