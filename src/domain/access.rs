//! Who may do what: roles, scopes, the principals a request acts as, and the credentials
//! that stand for them. Pure rules; tokens, hashing and lookups live in `auth`.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};

use super::{Run, UnknownValue};

/// What an operator token may do. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads runs, their logs and asks, and the policy profiles.
    Viewer,
    /// Also starts and cancels runs and answers asks.
    Operator,
    /// Also creates, lists and revokes tokens.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    /// The name used on the wire, in the store and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// Whether this role includes `needed`.
    pub fn includes(self, needed: Role) -> bool {
        self >= needed
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = UnknownValue;

    fn from_str(s: &str) -> Result<Role, UnknownValue> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| UnknownValue::new("role", s))
    }
}

/// The runs an operator token reaches. Each list that is not empty restricts its field:
/// a run is in scope when its team is one of `teams` (or `teams` is empty) and its project
/// one of `projects` (or `projects` is empty). Both empty: every run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Teams whose runs the token reaches; empty: any team.
    pub teams: Vec<String>,
    /// Projects whose runs the token reaches; empty: any project.
    pub projects: Vec<String>,
}

impl Scope {
    /// Whether the scope reaches every run.
    pub fn is_unrestricted(&self) -> bool {
        self.teams.is_empty() && self.projects.is_empty()
    }

    /// Whether a run of `team_id` and `project_id` is in scope.
    pub fn covers(&self, team_id: &str, project_id: &str) -> bool {
        let listed =
            |list: &[String], value: &str| list.is_empty() || list.iter().any(|v| v == value);
        listed(&self.teams, team_id) && listed(&self.projects, project_id)
    }

    /// Whether `run` is in scope.
    pub fn covers_run(&self, run: &Run) -> bool {
        self.covers(&run.team_id, &run.project_id)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unrestricted() {
            return f.write_str("all runs");
        }
        let mut parts = Vec::new();
        if !self.teams.is_empty() {
            parts.push(format!("teams {}", self.teams.join(",")));
        }
        if !self.projects.is_empty() {
            parts.push(format!("projects {}", self.projects.join(",")));
        }
        f.write_str(&parts.join(" and "))
    }
}

/// Whom a request acts as, once its credential is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A person or program holding an operator token.
    Operator {
        /// The token's name: recorded as `by` in the events it causes.
        name: String,
        /// What it may do.
        role: Role,
        /// Which runs it reaches.
        scope: Scope,
    },
    /// The worker of one run, holding the token `StartRun` returned for it.
    Worker {
        /// The only run it may open a session for.
        run_id: String,
    },
    /// Anyone, while authentication is off (`--auth off`): acts as an unrestricted admin.
    Anonymous,
}

impl Principal {
    /// The name recorded in events (`by`).
    pub fn name(&self) -> &str {
        match self {
            Principal::Operator { name, .. } => name,
            Principal::Worker { .. } => "worker",
            Principal::Anonymous => "anonymous",
        }
    }

    /// The operator role, if this is an operator (anonymous counts as admin).
    pub fn role(&self) -> Option<Role> {
        match self {
            Principal::Operator { role, .. } => Some(*role),
            Principal::Anonymous => Some(Role::Admin),
            Principal::Worker { .. } => None,
        }
    }

    /// The runs this principal reaches as an operator; `None` for a worker.
    pub fn scope(&self) -> Option<Scope> {
        match self {
            Principal::Operator { scope, .. } => Some(scope.clone()),
            Principal::Anonymous => Some(Scope::default()),
            Principal::Worker { .. } => None,
        }
    }

    /// Whether this principal sees `run` as an operator.
    pub fn sees(&self, run: &Run) -> bool {
        match self {
            Principal::Operator { scope, .. } => scope.covers_run(run),
            Principal::Anonymous => true,
            Principal::Worker { .. } => false,
        }
    }
}

/// What a stored credential stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialKind {
    /// An operator token.
    Operator {
        /// Its role.
        role: Role,
        /// Its scope.
        scope: Scope,
    },
    /// The worker token of one run.
    Worker {
        /// The run.
        run_id: String,
    },
}

/// A token as the store keeps it: its hash, never the token itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The token's name: unique among operator tokens that are not revoked; worker tokens
    /// are named `worker:<run id>`.
    pub name: String,
    /// SHA-256 of the token, lowercase hex: what a presented token is looked up by.
    pub hash: String,
    /// What it stands for.
    pub kind: CredentialKind,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was revoked; a revoked token authenticates nobody.
    pub revoked_at: Option<DateTime<Utc>>,
}

impl Credential {
    /// The principal a request with this credential acts as.
    pub fn principal(&self) -> Principal {
        match &self.kind {
            CredentialKind::Operator { role, scope } => Principal::Operator {
                name: self.name.clone(),
                role: *role,
                scope: scope.clone(),
            },
            CredentialKind::Worker { run_id } => Principal::Worker {
                run_id: run_id.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_include_the_weaker_ones_only() {
        assert!(Role::Admin.includes(Role::Operator));
        assert!(Role::Operator.includes(Role::Viewer));
        assert!(!Role::Viewer.includes(Role::Operator));
        assert!(!Role::Operator.includes(Role::Admin));
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        assert!("root".parse::<Role>().is_err());
        assert!("Admin".parse::<Role>().is_err());
    }

    #[test]
    fn a_scope_restricts_each_listed_field() {
        let all = Scope::default();
        assert!(all.covers("", "p"));
        let team = Scope {
            teams: vec!["red".into()],
            projects: vec![],
        };
        assert!(team.covers("red", "any"));
        assert!(!team.covers("blue", "any"));
        assert!(
            !team.covers("", "any"),
            "a run without a team is outside a team scope"
        );
        let both = Scope {
            teams: vec!["red".into()],
            projects: vec!["web".into(), "api".into()],
        };
        assert!(both.covers("red", "api"));
        assert!(!both.covers("red", "db"));
        assert!(!both.covers("blue", "web"));
    }
}
