//! Operator tokens and roles: proto ↔ domain.

use super::{timestamp, ConvertError};
use crate::domain::{Credential, CredentialKind, Role};
use crate::grpc::pb;

/// A role from the wire; UNSPECIFIED and unknown numbers are refused.
pub fn role_from_proto(field: &'static str, value: i32) -> Result<Role, ConvertError> {
    match pb::Role::try_from(value) {
        Ok(pb::Role::Viewer) => Ok(Role::Viewer),
        Ok(pb::Role::Operator) => Ok(Role::Operator),
        Ok(pb::Role::Admin) => Ok(Role::Admin),
        Ok(pb::Role::Unspecified) | Err(_) => Err(ConvertError::InvalidEnum { field, value }),
    }
}

impl From<Role> for pb::Role {
    fn from(role: Role) -> pb::Role {
        match role {
            Role::Viewer => pb::Role::Viewer,
            Role::Operator => pb::Role::Operator,
            Role::Admin => pb::Role::Admin,
        }
    }
}

impl From<&Credential> for pb::Token {
    /// An operator credential without its hash; a worker credential (never listed) has
    /// no role and no scope.
    fn from(credential: &Credential) -> pb::Token {
        let (role, teams, projects) = match &credential.kind {
            CredentialKind::Operator { role, scope } => (
                pb::Role::from(*role),
                scope.teams.clone(),
                scope.projects.clone(),
            ),
            CredentialKind::Worker { .. } => (pb::Role::Unspecified, Vec::new(), Vec::new()),
        };
        pb::Token {
            name: credential.name.clone(),
            role: role as i32,
            teams,
            projects,
            created_at: Some(timestamp(credential.created_at)),
            revoked_at: credential.revoked_at.map(timestamp),
        }
    }
}
