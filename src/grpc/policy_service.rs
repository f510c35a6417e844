//! `PolicyService`: the loaded profiles, dry-run decisions, and replays of recorded calls
//! under a candidate profile.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{stream, Stream};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use crate::coordinator::CoordinatorError;
use crate::grpc::access::principal;
use crate::grpc::convert::{bounded_paths, replay_request, MAX_TEXT_BYTES};
use crate::grpc::pb;
use crate::policy::{
    compile_version, evaluate_off_runtime, CompiledProfile, LiveProfiles, ToolCall, DEFAULT_PROFILE,
};
use crate::replay::{compile_candidate, replay, Candidate, ReplayError, CHANGES_BUFFER};
use crate::store::RunStore;

/// Serves the profile registry.
pub struct PolicyApi {
    /// The same profiles the coordinator starts runs with; `Reload` replaces them.
    pub profiles: Arc<LiveProfiles>,
    /// The server's store, whose logs a replay reads.
    pub store: Arc<dyn RunStore>,
}

/// The messages of a `Replay` stream.
pub type ReplayStream = Pin<Box<dyn Stream<Item = Result<pb::ReplayResponse, Status>> + Send>>;

impl PolicyApi {
    fn profile(&self, name: &str) -> Result<Arc<CompiledProfile>, Status> {
        let name = if name.is_empty() {
            DEFAULT_PROFILE
        } else {
            name
        };
        self.profiles
            .current()
            .get(name)
            .ok_or_else(|| Status::not_found(format!("profile {name:?} not found")))
    }

    /// The version with this hash: a loaded profile, else the one the store keeps for the
    /// runs pinned to it, compiled on the blocking pool.
    async fn version(&self, hash: &str) -> Result<Option<Arc<CompiledProfile>>, Status> {
        if let Some(loaded) = self.profiles.current().by_hash(hash) {
            return Ok(Some(loaded));
        }
        let stored = self
            .store
            .policy_version(hash)
            .await
            .map_err(|e| Status::from(CoordinatorError::Store(e)))?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        tokio::task::spawn_blocking(move || compile_version(&stored.hash, &stored.source))
            .await
            .map_err(|e| Status::internal(format!("compiling the version failed: {e}")))?
            .map(|compiled| Some(Arc::new(compiled)))
            // The store holds a version that is not what its hash says.
            .map_err(|e| Status::internal(e.to_string()))
    }

    /// The compiled candidate of a replay: a loaded profile, or a text compiled on the
    /// blocking pool (a large profile's globs take a while to build).
    async fn candidate(&self, candidate: Candidate) -> Result<Arc<CompiledProfile>, Status> {
        match candidate {
            Candidate::Name(name) => self.profile(&name),
            Candidate::Toml(text) => tokio::task::spawn_blocking(move || compile_candidate(&text))
                .await
                .map_err(|e| Status::internal(format!("compiling the profile failed: {e}")))?
                .map(Arc::new)
                .map_err(|e| Status::invalid_argument(format!("profile_toml: {e}"))),
        }
    }
}

/// The status a replay that stopped early ends its stream with.
fn replay_status(err: ReplayError) -> Status {
    match err {
        ReplayError::Store(err) if err.is_retryable() => Status::unavailable(err.to_string()),
        ReplayError::Store(err) => Status::internal(err.to_string()),
        ReplayError::Abandoned => Status::cancelled(err.to_string()),
        ReplayError::Task(_) => Status::internal(err.to_string()),
    }
}

#[tonic::async_trait]
impl pb::policy_service_server::PolicyService for PolicyApi {
    type ReplayStream = ReplayStream;

    async fn list_profiles(
        &self,
        _request: Request<pb::ListProfilesRequest>,
    ) -> Result<Response<pb::ListProfilesResponse>, Status> {
        // One registry for the whole answer, even if a reload lands meanwhile.
        let registry = self.profiles.current();
        let profiles = registry
            .names()
            .iter()
            .filter_map(|name| registry.get(name))
            .map(|p| pb::PolicyProfile::from(p.as_ref()))
            .collect();
        Ok(Response::new(pb::ListProfilesResponse { profiles }))
    }

    async fn get_profile(
        &self,
        request: Request<pb::GetProfileRequest>,
    ) -> Result<Response<pb::PolicyProfile>, Status> {
        let pb::GetProfileRequest { name, hash } = request.into_inner();
        let profile = match (name.is_empty(), hash.is_empty()) {
            (true, true) => return Err(Status::invalid_argument("name: required")),
            (_, true) => self.profile(&name)?,
            (_, false) => self
                .version(&hash)
                .await?
                .filter(|version| name.is_empty() || version.profile().name == name)
                .ok_or_else(|| Status::not_found(format!("version {hash:?} not found")))?,
        };
        Ok(Response::new(pb::PolicyProfile::from(profile.as_ref())))
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

    async fn replay(
        &self,
        request: Request<pb::ReplayRequest>,
    ) -> Result<Response<ReplayStream>, Status> {
        let principal = principal(&request)?;
        // The access layer lets only operators through; a principal without a scope
        // (a worker) would be refused there already, and is refused here too.
        let scope = principal
            .scope()
            .ok_or_else(|| Status::permission_denied("replay needs an operator token"))?;
        let (candidate, filter) = replay_request(request.into_inner(), scope)?;
        let profile = self.candidate(candidate).await?;
        let store = Arc::clone(&self.store);
        let (changes, found) = tokio::sync::mpsc::channel(CHANGES_BUFFER);
        // The replay runs on its own task and hands over each change as it is found; the
        // summary follows once it has finished, so it is always the last message.
        let done = tokio::spawn(async move { replay(&*store, profile, &filter, &changes).await });
        let changed = ReceiverStream::new(found).map(|change| {
            Ok(pb::ReplayResponse {
                item: Some(pb::replay_response::Item::Change((&change).into())),
            })
        });
        let summary = stream::once(async move {
            let tally = done
                .await
                .map_err(|e| Status::internal(format!("the replay failed: {e}")))?
                .map_err(replay_status)?;
            Ok(pb::ReplayResponse {
                item: Some(pb::replay_response::Item::Summary((&tally).into())),
            })
        });
        Ok(Response::new(Box::pin(changed.chain(summary))))
    }

    async fn reload(
        &self,
        _request: Request<pb::ReloadRequest>,
    ) -> Result<Response<pb::ReloadResponse>, Status> {
        let profiles = Arc::clone(&self.profiles);
        // Files are read and every profile compiled and tested: off the runtime threads
        // live sessions share.
        let changes = tokio::task::spawn_blocking(move || profiles.reload())
            .await
            .map_err(|e| Status::internal(format!("the reload failed: {e}")))?
            // Every load error names the file and what is wrong in it.
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        tracing::info!(
            changed = changes.len(),
            "policy directory reloaded by Reload"
        );
        Ok(Response::new(pb::ReloadResponse {
            changes: changes
                .into_iter()
                .map(pb::ProfileVersionChange::from)
                .collect(),
        }))
    }
}
