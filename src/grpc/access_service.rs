//! `AccessService`: operator tokens, for admins whose token reaches every run.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::auth::Authenticator;
use crate::domain::{Principal, Scope};
use crate::grpc::access::{auth_status, principal};
use crate::grpc::convert::role_from_proto;
use crate::grpc::pb;

/// Serves token management.
pub struct AccessApi {
    /// Where tokens are made, listed and revoked.
    pub auth: Arc<Authenticator>,
}

/// The access layer already required the admin role; a scoped admin still may not make
/// tokens, since a token it made could reach beyond its own scope.
fn unscoped_admin<T>(request: &Request<T>) -> Result<Principal, Status> {
    let principal = principal(request)?;
    if principal
        .scope()
        .is_some_and(|scope| scope.is_unrestricted())
    {
        Ok(principal)
    } else {
        Err(Status::permission_denied(
            "managing tokens needs an admin token that is not scoped to teams or projects",
        ))
    }
}

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

#[tonic::async_trait]
impl pb::access_service_server::AccessService for AccessApi {
    async fn create_token(
        &self,
        request: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        let by = unscoped_admin(&request)?;
        let request = request.into_inner();
        let role = role_from_proto("role", request.role)?;
        let scope = Scope {
            teams: request.teams,
            projects: request.projects,
        };
        let (secret, credential) = self
            .auth
            .create_token(&request.name, role, scope, now())
            .await
            .map_err(auth_status)?;
        tracing::info!(name = %credential.name, %role, by = %by.name(), "token created");
        Ok(Response::new(pb::CreateTokenResponse {
            token: Some(pb::Token::from(&credential)),
            secret: secret.expose().to_string(),
        }))
    }

    async fn list_tokens(
        &self,
        request: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        unscoped_admin(&request)?;
        let tokens = self.auth.list_tokens().await.map_err(auth_status)?;
        Ok(Response::new(pb::ListTokensResponse {
            tokens: tokens.iter().map(pb::Token::from).collect(),
        }))
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::Token>, Status> {
        let by = unscoped_admin(&request)?;
        let name = request.into_inner().name;
        if name.is_empty() {
            return Err(Status::invalid_argument("name: required"));
        }
        let revoked = self
            .auth
            .revoke_token(&name, now())
            .await
            .map_err(auth_status)?
            .ok_or_else(|| Status::not_found(format!("no live token named {name:?}")))?;
        tracing::info!(name = %revoked.name, by = %by.name(), "token revoked");
        Ok(Response::new(pb::Token::from(&revoked)))
    }
}
