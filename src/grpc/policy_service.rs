//! `PolicyService`: the loaded profiles and dry-run decisions.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::grpc::convert::{bounded_paths, MAX_TEXT_BYTES};
use crate::grpc::pb;
use crate::policy::{
    evaluate_off_runtime, CompiledProfile, ProfileRegistry, ToolCall, DEFAULT_PROFILE,
};

/// Serves the profile registry.
pub struct PolicyApi {
    /// The same registry the coordinator decides with.
    pub profiles: Arc<ProfileRegistry>,
}

impl PolicyApi {
    fn profile(&self, name: &str) -> Result<Arc<CompiledProfile>, Status> {
        let name = if name.is_empty() {
            DEFAULT_PROFILE
        } else {
            name
        };
        self.profiles
            .get(name)
            .ok_or_else(|| Status::not_found(format!("profile {name:?} not found")))
    }
}

#[tonic::async_trait]
impl pb::policy_service_server::PolicyService for PolicyApi {
    async fn list_profiles(
        &self,
        _request: Request<pb::ListProfilesRequest>,
    ) -> Result<Response<pb::ListProfilesResponse>, Status> {
        let profiles = self
            .profiles
            .names()
            .iter()
            .filter_map(|name| self.profiles.get(name))
            .map(|p| pb::PolicyProfile::from(p.profile()))
            .collect();
        Ok(Response::new(pb::ListProfilesResponse { profiles }))
    }

    async fn get_profile(
        &self,
        request: Request<pb::GetProfileRequest>,
    ) -> Result<Response<pb::PolicyProfile>, Status> {
        let name = request.into_inner().name;
        if name.is_empty() {
            return Err(Status::invalid_argument("name: required"));
        }
        let profile = self.profile(&name)?;
        Ok(Response::new(pb::PolicyProfile::from(profile.profile())))
    }

    async fn evaluate(
        &self,
        request: Request<pb::EvaluateRequest>,
    ) -> Result<Response<pb::EvaluateResponse>, Status> {
        let request = request.into_inner();
        if request.tool.is_empty() {
            return Err(Status::invalid_argument("tool: required"));
        }
        // The same caps as a session's requests: a dry run judges exactly what a live
        // call could carry, and no more.
        for (field, text) in [
            ("command", &request.command),
            ("path", &request.path),
            ("resolved_path", &request.resolved_path),
            ("url", &request.url),
            ("input", &request.input),
            ("workspace_root", &request.workspace_root),
        ] {
            if text.len() > MAX_TEXT_BYTES {
                return Err(Status::invalid_argument(format!(
                    "{field}: at most {MAX_TEXT_BYTES} bytes, got {}",
                    text.len()
                )));
            }
        }
        let profile = self.profile(&request.profile)?;
        let paths = bounded_paths(request.paths.clone())?;
        let call = ToolCall {
            tool: &request.tool,
            command: &request.command,
            path: &request.path,
            resolved_path: &request.resolved_path,
            paths: &paths,
            url: &request.url,
            input: &request.input,
            workspace_root: (!request.workspace_root.is_empty())
                .then_some(request.workspace_root.as_str()),
        };
        // A long line is judged on the blocking pool, not on the runtime thread this RPC
        // shares with live sessions. A failed judge has no decision to report: INTERNAL.
        let verdict = evaluate_off_runtime(&profile, &call)
            .await
            .map_err(|failed| Status::internal(failed.to_string()))?;
        Ok(Response::new(pb::EvaluateResponse::from(verdict)))
    }
}
