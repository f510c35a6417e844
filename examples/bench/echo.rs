//! The limit: `WorkerService` as a bare echo. Same proto, same message sizes, same tonic
//! server settings as runplane, but no policy, no actor, no store: each request is answered
//! with an allow, each result with an ack, straight from the inbound stream.

use std::net::SocketAddr;
use std::pin::Pin;

use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use runplane::grpc::pb::worker_message::Message as In;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

/// The echo service.
pub struct Echo;

type Replies = Pin<Box<dyn Stream<Item = Result<pb::CoordinatorMessage, Status>> + Send>>;

#[tonic::async_trait]
impl pb::worker_service_server::WorkerService for Echo {
    type SessionStream = Replies;

    async fn session(
        &self,
        request: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<Replies>, Status> {
        let replies = request.into_inner().filter_map(|message| {
            let message = match message {
                Ok(message) => message,
                Err(status) => return Some(Err(status)),
            };
            let reply = match message.message? {
                In::Attach(attach) => Out::Attached(pb::Attached {
                    run: Some(pb::Run {
                        id: attach.run_id,
                        ..Default::default()
                    }),
                    limits: None,
                    resumed: false,
                    sandbox: None,
                }),
                In::ToolCallRequest(request) => Out::ToolCallResponse(pb::ToolCallResponse {
                    run_id: request.run_id,
                    call_id: request.call_id,
                    decision: pb::Decision::Allow as i32,
                    // As long as runplane's reasons, so the replies weigh the same.
                    reason: "rules[1] (Read allow) matches Read of src/coordinator/actor.rs".into(),
                }),
                In::ToolCallResult(result) => Out::ResultAck(pb::ResultAck {
                    call_id: result.call_id,
                    step_count: 1,
                    cost_usd: result.cost_usd,
                }),
                _ => return None,
            };
            Some(Ok(pb::CoordinatorMessage {
                message: Some(reply),
            }))
        });
        Ok(Response::new(Box::pin(replies)))
    }
}

/// Serves the echo on a loopback port until the process ends; returns the address.
pub async fn serve() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        // The same transport settings as runplane's server (src/server/mod.rs).
        let result = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(std::time::Duration::from_secs(10)))
            .tcp_nodelay(true)
            .add_service(pb::worker_service_server::WorkerServiceServer::new(Echo))
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await;
        if let Err(e) = result {
            eprintln!("echo server: {e}");
        }
    });
    Ok(addr)
}
