//! `RunService`: what operators call. Thin: convert, call the coordinator, convert back.
//!
//! The access layer has checked the caller's role; each method here also holds the caller
//! to its token's scope: a run outside it is NOT_FOUND, exactly as a run that does not
//! exist, so a scoped token cannot even learn which runs others have.

use std::collections::HashMap;
use std::pin::Pin;

use chrono::DateTime;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::coordinator::{Coordinator, PendingAsk};
use crate::domain::query::{PageCursor, RunQuery};
use crate::domain::{Principal, Run, StartRequest};
use crate::grpc::access::principal;
use crate::grpc::convert::{
    self, bounded, decision_from_proto, grant_to_proto, remember_from_proto, status_from_proto,
};
use crate::grpc::pb;

/// Runs per page when the request leaves page_size at 0.
const DEFAULT_RUNS_PAGE: usize = 50;
/// Events per page when the request leaves page_size at 0.
const DEFAULT_EVENTS_PAGE: usize = 100;
/// The largest page either list returns.
const MAX_PAGE: usize = 1000;

/// Serves operators.
pub struct RunApi {
    /// The coordinator every call goes through.
    pub coordinator: Coordinator,
    /// The server's message limit: list pages are cut to fit in it.
    pub max_message_bytes: usize,
}

impl RunApi {
    /// The asks of runs `principal` sees: each distinct run is read once.
    async fn asks_in_scope(
        &self,
        principal: &Principal,
        asks: Vec<PendingAsk>,
    ) -> Result<Vec<PendingAsk>, Status> {
        let mut seen: HashMap<String, bool> = HashMap::new();
        let mut kept = Vec::with_capacity(asks.len());
        for ask in asks {
            let run_id = &ask.request.run_id;
            let visible = match seen.get(run_id) {
                Some(visible) => *visible,
                None => {
                    // A run that ended since the ask was listed is simply left out.
                    let visible = match self.coordinator.get_run(run_id).await {
                        Ok(run) => principal.sees(&run),
                        Err(_) => false,
                    };
                    seen.insert(run_id.clone(), visible);
                    visible
                }
            };
            if visible {
                kept.push(ask);
            }
        }
        Ok(kept)
    }

    /// How many of `items` fit in one response: at least one (each is far below the limit,
    /// see `convert::MAX_TEXT_BYTES`), then as many as stay within half the message limit.
    fn fitting<T: prost::Message>(&self, items: &[T]) -> usize {
        let budget = self.max_message_bytes / 2;
        let mut used = 0;
        for (count, item) in items.iter().enumerate() {
            used += item.encoded_len() + 8;
            if count > 0 && used > budget {
                return count;
            }
        }
        items.len()
    }
}

impl RunApi {
    /// The run, if `principal` may see it; NOT_FOUND otherwise, with the same message as
    /// for a run that does not exist.
    async fn visible_run(&self, principal: &Principal, run_id: &str) -> Result<Run, Status> {
        required("run_id", run_id)?;
        let run = self.coordinator.get_run(run_id).await?;
        if principal.sees(&run) {
            Ok(run)
        } else {
            Err(Status::not_found(format!("run {run_id} not found")))
        }
    }
}

fn required(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        Err(Status::invalid_argument(format!("{field}: required")))
    } else {
        Ok(())
    }
}

/// A page size from the wire: 0 means the default, negative is refused, large is capped.
fn page_size(value: i32, default: usize) -> Result<usize, Status> {
    match usize::try_from(value) {
        Ok(0) => Ok(default),
        Ok(n) => Ok(n.min(MAX_PAGE)),
        Err(_) => Err(Status::invalid_argument(format!(
            "page_size: must be >= 0, got {value}"
        ))),
    }
}

/// Page tokens are `<created_at unix micros>:<run id>` — opaque to clients, stable for us.
fn encode_token(cursor: &PageCursor) -> String {
    format!("{}:{}", cursor.created_at.timestamp_micros(), cursor.id)
}

fn decode_token(token: &str) -> Result<Option<PageCursor>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let malformed = || Status::invalid_argument("page_token: malformed; pass a next_page_token");
    let (micros, id) = token.split_once(':').ok_or_else(malformed)?;
    let micros: i64 = micros.parse().map_err(|_| malformed())?;
    let created_at = DateTime::from_timestamp_micros(micros).ok_or_else(malformed)?;
    if id.is_empty() {
        return Err(malformed());
    }
    Ok(Some(PageCursor {
        created_at,
        id: id.to_string(),
    }))
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::run_service_server::RunService for RunApi {
    async fn start_run(
        &self,
        request: Request<pb::StartRequest>,
    ) -> Result<Response<pb::StartRunResponse>, Status> {
        let principal = principal(&request)?;
        let request = StartRequest::try_from(request.into_inner())?;
        if let Some(scope) = principal
            .scope()
            .filter(|s| !s.covers(&request.team_id, &request.project_id))
        {
            return Err(Status::permission_denied(format!(
                "this token reaches {scope}, not team {:?} project {:?}",
                request.team_id, request.project_id
            )));
        }
        let (run, token) = self
            .coordinator
            .start_run(request, principal.name())
            .await?;
        Ok(Response::new(pb::StartRunResponse {
            run: Some(pb::Run::from(&run)),
            worker_token: token.map(|t| t.expose().to_string()).unwrap_or_default(),
        }))
    }

    async fn get_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let principal = principal(&request)?;
        let run_id = request.into_inner().run_id;
        required("run_id", &run_id)?;
        let (run, stall) = self.coordinator.get_run_and_stall(&run_id).await?;
        if !principal.sees(&run) {
            return Err(Status::not_found(format!("run {run_id} not found")));
        }
        Ok(Response::new(convert::run_with_stall(&run, stall.as_ref())))
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let principal = principal(&request)?;
        let request = request.into_inner();
        let non_empty = |s: String| (!s.is_empty()).then_some(s);
        let query = RunQuery {
            status: status_from_proto("status", request.status)?,
            limit: page_size(request.page_size, DEFAULT_RUNS_PAGE)?,
            after: decode_token(&request.page_token)?,
            task_id: non_empty(request.task_id),
            project_id: non_empty(request.project_id),
            agent_id: non_empty(request.agent_id),
            scope: principal.scope().unwrap_or_default(),
        };
        let page = self.coordinator.list_runs(query).await?;
        let mut runs: Vec<pb::Run> = page.runs.iter().map(pb::Run::from).collect();
        let fit = self.fitting(&runs);
        let next = if fit < runs.len() {
            runs.truncate(fit);
            page.runs.get(fit.wrapping_sub(1)).map(|last| PageCursor {
                created_at: last.created_at,
                id: last.id.clone(),
            })
        } else {
            page.next
        };
        Ok(Response::new(pb::ListRunsResponse {
            runs,
            next_page_token: next.as_ref().map(encode_token).unwrap_or_default(),
        }))
    }

    async fn cancel_run(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let principal = principal(&request)?;
        let request = request.into_inner();
        self.visible_run(&principal, &request.run_id).await?;
        let reason = bounded("reason", request.reason)?;
        let run = self
            .coordinator
            .cancel_run(&request.run_id, reason, principal.name())
            .await?;
        Ok(Response::new(pb::Run::from(&run)))
    }

    type WatchRunStream = EventStream;

    async fn watch_run(
        &self,
        request: Request<pb::WatchRunRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let principal = principal(&request)?;
        let request = request.into_inner();
        // Refuse an unknown run with a status rather than an empty stream.
        self.visible_run(&principal, &request.run_id).await?;
        let events = self.coordinator.watch(request.run_id, request.from_seq);
        let stream = ReceiverStream::new(events).map(|item| match item {
            Ok(event) => Ok(pb::RunEvent::from(&event)),
            Err(err) => Err(Status::from(err)),
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_run_events(
        &self,
        request: Request<pb::ListRunEventsRequest>,
    ) -> Result<Response<pb::ListRunEventsResponse>, Status> {
        let principal = principal(&request)?;
        let request = request.into_inner();
        self.visible_run(&principal, &request.run_id).await?;
        let limit = page_size(request.page_size, DEFAULT_EVENTS_PAGE)?;
        let from_seq = request.from_seq.max(1);
        let events = self
            .coordinator
            .list_events(&request.run_id, from_seq, limit)
            .await?;
        let mut events: Vec<pb::RunEvent> = events.iter().map(pb::RunEvent::from).collect();
        events.truncate(self.fitting(&events));
        let next_seq = events.last().map_or(from_seq, |e| e.seq + 1);
        Ok(Response::new(pb::ListRunEventsResponse {
            events,
            next_seq,
        }))
    }

    async fn list_pending_asks(
        &self,
        request: Request<pb::ListPendingAsksRequest>,
    ) -> Result<Response<pb::ListPendingAsksResponse>, Status> {
        let principal = principal(&request)?;
        let run_id = request.into_inner().run_id;
        if !run_id.is_empty() {
            self.visible_run(&principal, &run_id).await?;
        }
        let mut asks = self
            .coordinator
            .pending_asks((!run_id.is_empty()).then_some(run_id.as_str()))
            .await?;
        if run_id.is_empty() && !principal.scope().is_some_and(|s| s.is_unrestricted()) {
            asks = self.asks_in_scope(&principal, asks).await?;
        }
        Ok(Response::new(pb::ListPendingAsksResponse {
            asks: asks.iter().map(pb::PendingAsk::from).collect(),
        }))
    }

    async fn resolve_ask(
        &self,
        request: Request<pb::ResolveAskRequest>,
    ) -> Result<Response<pb::ToolCallResponse>, Status> {
        let principal = principal(&request)?;
        let request = request.into_inner();
        self.visible_run(&principal, &request.run_id).await?;
        required("call_id", &request.call_id)?;
        let decision = decision_from_proto("decision", request.decision)?;
        let remember =
            remember_from_proto(request.scope, request.command_prefix, request.path_glob)?;
        let response = self
            .coordinator
            .resolve_ask(
                &request.run_id,
                &request.call_id,
                decision,
                bounded("reason", request.reason)?,
                principal.name(),
                bounded("resolver", request.resolver)?,
                remember,
            )
            .await?;
        Ok(Response::new(pb::ToolCallResponse::from(&response)))
    }

    async fn list_grants(
        &self,
        request: Request<pb::ListGrantsRequest>,
    ) -> Result<Response<pb::ListGrantsResponse>, Status> {
        let principal = principal(&request)?;
        let run_id = request.into_inner().run_id;
        self.visible_run(&principal, &run_id).await?;
        let grants = self.coordinator.list_grants(&run_id).await?;
        let mut grants: Vec<pb::Grant> =
            grants.iter().map(|g| grant_to_proto(&run_id, g)).collect();
        // A grant is at most a few KiB (its command is bounded like every stored text), so
        // only a run with thousands of grants would be cut; the newest are then left out.
        grants.truncate(self.fitting(&grants));
        Ok(Response::new(pb::ListGrantsResponse { grants }))
    }

    async fn revoke_grant(
        &self,
        request: Request<pb::RevokeGrantRequest>,
    ) -> Result<Response<pb::Grant>, Status> {
        let principal = principal(&request)?;
        let request = request.into_inner();
        self.visible_run(&principal, &request.run_id).await?;
        required("grant_id", &request.grant_id)?;
        let record = self
            .coordinator
            .revoke_grant(
                &request.run_id,
                &request.grant_id,
                bounded("reason", request.reason)?,
                principal.name(),
            )
            .await?;
        Ok(Response::new(grant_to_proto(&request.run_id, &record)))
    }
}
