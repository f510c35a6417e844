//! Authentication: which principal a request acts as, from the token it carries; and the
//! operator tokens themselves (made, listed, revoked).
//!
//! Every check here fails closed: no token, a token of the wrong shape, an unknown or
//! revoked one, a worker token whose run has ended, or a store that cannot answer — none of
//! them yields a principal. What each principal may then do is `grpc::access`'s table.

mod bootstrap;
pub mod token;

use std::sync::Arc;

use chrono::{DateTime, Utc};

pub use bootstrap::{ensure_admin_token, BootstrapError, ADMIN_TOKEN_FILE};
pub use token::Secret;

use crate::domain::{Credential, CredentialKind, Principal, Role, Scope};
use crate::store::{RunStore, StoreError};

/// Whether requests must carry credentials.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuthMode {
    /// Every RPC but health needs a token (the default).
    #[default]
    On,
    /// Everyone is an anonymous admin and workers need no token: for throwaway local
    /// experiments only.
    Off,
}

/// Why a request has no principal, or may not do what it asked.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No usable credential: missing, malformed, unknown, revoked or expired.
    #[error("{0}")]
    Unauthenticated(String),
    /// A valid credential that may not do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// A token-management request that names something invalid.
    #[error("{0}")]
    InvalidArgument(String),
    /// The store could not answer; nobody is let in on a guess.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// No random bytes for a new token.
    #[error(transparent)]
    Random(#[from] token::RandomError),
}

/// Longest token name.
const MAX_NAME: usize = 64;

/// Resolves tokens to principals against the store, which holds their hashes.
pub struct Authenticator {
    store: Arc<dyn RunStore>,
    mode: AuthMode,
}

impl Authenticator {
    /// An authenticator over `store`'s credentials.
    pub fn new(store: Arc<dyn RunStore>, mode: AuthMode) -> Authenticator {
        Authenticator { store, mode }
    }

    /// Whether credentials are required.
    pub fn enabled(&self) -> bool {
        self.mode == AuthMode::On
    }

    /// The principal `token` stands for. With authentication off, everyone is
    /// [`Principal::Anonymous`].
    pub async fn authenticate(&self, token: Option<&str>) -> Result<Principal, AuthError> {
        if !self.enabled() {
            return Ok(Principal::Anonymous);
        }
        let token = token.ok_or_else(|| {
            AuthError::Unauthenticated(
                "no credentials: send the metadata `authorization: Bearer <token>`".into(),
            )
        })?;
        if !token::well_formed(token) {
            return Err(AuthError::Unauthenticated(
                "malformed token: expected rpo_ or rpw_ followed by 64 hex digits".into(),
            ));
        }
        let hash = token::hash(token);
        let unknown = || AuthError::Unauthenticated("unknown or revoked token".into());
        let credential = self.store.credential(&hash).await?.ok_or_else(unknown)?;
        if !token::same_hash(&credential.hash, &hash) || credential.revoked_at.is_some() {
            return Err(unknown());
        }
        let worker = matches!(credential.kind, CredentialKind::Worker { .. });
        if worker != token::is_worker_token(token) {
            return Err(unknown());
        }
        if let CredentialKind::Worker { run_id } = &credential.kind {
            let live = self
                .store
                .get_run(run_id)
                .await?
                .is_some_and(|run| !run.status.is_terminal());
            if !live {
                return Err(AuthError::Unauthenticated(format!(
                    "worker token expired: run {run_id} has ended"
                )));
            }
        }
        Ok(credential.principal())
    }

    /// Checks that `token` may open a session for `run_id`: only that run's worker token
    /// may (or anyone, with authentication off).
    pub async fn authorize_session(
        &self,
        token: Option<&str>,
        run_id: &str,
    ) -> Result<Principal, AuthError> {
        let principal = self.authenticate(token).await?;
        match &principal {
            Principal::Anonymous => Ok(principal),
            Principal::Worker { run_id: own } if own == run_id => Ok(principal),
            Principal::Worker { .. } => Err(AuthError::PermissionDenied(format!(
                "this worker token is for another run, not {run_id}"
            ))),
            Principal::Operator { .. } => Err(AuthError::PermissionDenied(
                "a session needs its run's worker token (StartRun's worker_token), \
                 not an operator token"
                    .into(),
            )),
        }
    }

    /// Makes an operator token; the secret is returned once and never stored.
    pub async fn create_token(
        &self,
        name: &str,
        role: Role,
        scope: Scope,
        now: DateTime<Utc>,
    ) -> Result<(Secret, Credential), AuthError> {
        check_name(name)?;
        for (field, values) in [("teams", &scope.teams), ("projects", &scope.projects)] {
            if values.iter().any(|v| v.is_empty()) {
                return Err(AuthError::InvalidArgument(format!(
                    "{field}: an empty name reaches nothing; leave the list empty for all"
                )));
            }
        }
        let (secret, credential) = token::operator_token(name, role, scope, now)?;
        self.store
            .put_credential(credential.clone())
            .await
            .map_err(|err| match err {
                StoreError::NameTaken(name) => AuthError::InvalidArgument(format!(
                    "name: a token named {name:?} exists; revoke it first or pick another name"
                )),
                other => AuthError::Store(other),
            })?;
        Ok((secret, credential))
    }

    /// Every operator token, revoked ones included.
    pub async fn list_tokens(&self) -> Result<Vec<Credential>, AuthError> {
        Ok(self.store.operator_credentials().await?)
    }

    /// Revokes the operator token named `name`; `None` when no live token has that name.
    pub async fn revoke_token(
        &self,
        name: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Credential>, AuthError> {
        Ok(self.store.revoke_credential(name, now).await?)
    }
}

/// Token names are short and plain, so they read well as `by` in the log and never carry
/// anything a terminal would interpret.
fn check_name(name: &str) -> Result<(), AuthError> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@');
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(plain) {
        return Err(AuthError::InvalidArgument(format!(
            "name: {name:?} must be 1–{MAX_NAME} characters of A–Z, a–z, 0–9, '-', '_', '.', '@'"
        )));
    }
    Ok(())
}
