//! The worker's end of the hook socket: each connection is one hook run, one request line
//! in, one answer line out. A request the handler cannot answer gets no answer at all, and
//! `runplane hook` then blocks the tool.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;
use tracing::warn;

use super::hook_wire::{HookAnswer, HookRequest, WIRE_VERSION};

/// Largest request line: a tool's whole input, with room.
const MAX_REQUEST_BYTES: u64 = 32 * 1024 * 1024;

/// What the worker does with one hook run; `Err` leaves it unanswered (the tool is
/// blocked). It may take as long as the answer takes: an ask is held here.
pub type Handler = Arc<
    dyn Fn(HookRequest) -> Pin<Box<dyn Future<Output = Result<HookAnswer, String>> + Send>>
        + Send
        + Sync,
>;

/// A listening hook socket; dropping it stops accepting and removes the socket file.
pub struct HookServer {
    path: PathBuf,
    accept: JoinHandle<()>,
}

impl HookServer {
    /// Listens on `path` (a socket file in a directory only this user can enter) and
    /// answers every connection with `handler`, each on its own task.
    pub fn bind(path: &Path, handler: Handler) -> std::io::Result<HookServer> {
        let listener = UnixListener::bind(path)?;
        let accept = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        tokio::spawn(serve(stream, Arc::clone(&handler)));
                    }
                    Err(err) => warn!(error = %err, "hook socket: accept failed"),
                }
            }
        });
        Ok(HookServer {
            path: path.to_path_buf(),
            accept,
        })
    }

    /// The socket file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for HookServer {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn serve(stream: UnixStream, handler: Handler) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let read = BufReader::new(read.take(MAX_REQUEST_BYTES))
        .read_line(&mut line)
        .await;
    let request = match read.map(|_| serde_json::from_str::<HookRequest>(&line)) {
        Ok(Ok(request)) if request.v == WIRE_VERSION => request,
        Ok(Ok(request)) => {
            return warn!(
                version = request.v,
                "hook socket: a request of another version; unanswered"
            )
        }
        Ok(Err(err)) => {
            return warn!(error = %err, "hook socket: an unreadable request; unanswered")
        }
        Err(err) => return warn!(error = %err, "hook socket: reading a request failed"),
    };
    let answer = match handler(request).await {
        Ok(answer) => answer,
        Err(why) => return warn!(%why, "hook socket: no answer; the hook blocks the tool"),
    };
    let Ok(mut text) = serde_json::to_string(&answer) else {
        return;
    };
    text.push('\n');
    // A hook that gave up (its deadline passed) is gone; nothing else to do.
    let _ = write.write_all(text.as_bytes()).await;
}
