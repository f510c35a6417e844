//! Which runs to list, and one page of them: what an operator asks `ListRuns` for, in
//! the terms every store answers it in.

use chrono::{DateTime, Utc};

use super::{Run, Scope, Status};

/// Which runs `list_runs` returns. Empty filters match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs of this task.
    pub task_id: Option<String>,
    /// Only runs of this project.
    pub project_id: Option<String>,
    /// Only runs of this agent.
    pub agent_id: Option<String>,
    /// Only runs in this status.
    pub status: Option<Status>,
    /// Most runs to return (at least 1).
    pub limit: usize,
    /// Start after this position (from the previous page).
    pub after: Option<PageCursor>,
    /// Only runs within this scope (the caller's token's): a scoped operator pages
    /// through its own runs, never past others.
    pub scope: Scope,
}

/// A position in the newest-first order of runs: `(created_at, id)` descending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageCursor {
    /// The last returned run's creation time.
    pub created_at: DateTime<Utc>,
    /// The last returned run's id (ties on created_at are broken by id).
    pub id: String,
}

/// One page of runs.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPage {
    /// The runs, newest first.
    pub runs: Vec<Run>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<PageCursor>,
}
