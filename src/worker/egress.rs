//! The egress proxy `runplane work` runs outside the agent's sandbox. The kernel lets the
//! sandboxed agent connect only to this proxy's port, and `HTTPS_PROXY`/`HTTP_PROXY` point
//! at it; it admits exactly the run's endpoints (the model's and the profile's) and
//! refuses everything else, reporting each refusal so the worker logs it next to the tool
//! call that was running.
//!
//! Two forms, as HTTP clients use a proxy: `CONNECT host:port` (a tunnel, for HTTPS), and
//! a plain-HTTP request in absolute form (`GET http://host:port/path`), forwarded with
//! `Connection: close` so that the client connection ends with the one upstream it was
//! admitted to: every byte of a connection goes to the endpoint its first request named.
//! Names are resolved here (the sandbox has no DNS).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;

use crate::policy::EgressEndpoint;

/// The largest request head read before it is refused.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// How many connections are served at once; more wait for a free slot.
const MAX_CONNECTIONS: usize = 256;

/// One refused request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The host asked for (empty when the request named none).
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// `CONNECT` or the HTTP method.
    pub method: String,
    /// Why it was refused.
    pub reason: String,
}

/// The proxy, serving until dropped.
pub struct EgressProxy {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EgressProxy {
    /// Listens on 127.0.0.1:0; `allowed` is the allow list; each refusal is sent on
    /// `refused`.
    pub async fn start(
        allowed: Vec<EgressEndpoint>,
        refused: mpsc::UnboundedSender<Refusal>,
    ) -> std::io::Result<EgressProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let allow = Arc::new(Allow::new(allowed));
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let task = tokio::spawn(async move {
            loop {
                let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                    return;
                };
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let allow = Arc::clone(&allow);
                let refused = refused.clone();
                tokio::spawn(async move {
                    serve(stream, &allow, &refused).await;
                    drop(permit);
                });
            }
        });
        Ok(EgressProxy { addr, task })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The allow list, compiled.
struct Allow(Vec<(Option<globset::GlobMatcher>, String, u16)>);

impl Allow {
    fn new(endpoints: Vec<EgressEndpoint>) -> Allow {
        Allow(
            endpoints
                .into_iter()
                .map(|e| {
                    let host = e.host.trim_end_matches('.').to_ascii_lowercase();
                    let glob = globset::GlobBuilder::new(&host)
                        .case_insensitive(true)
                        .build()
                        .ok()
                        .map(|g| g.compile_matcher());
                    (glob, host, e.port)
                })
                .collect(),
        )
    }

    /// Whether `host:port` is admitted: an IP literal only by the same literal, a name by
    /// a name or glob of the list.
    fn admits(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let literal = host.parse::<IpAddr>().is_ok();
        self.0.iter().any(|(glob, listed, listed_port)| {
            *listed_port == port
                && (*listed == host
                    || (!literal && glob.as_ref().is_some_and(|g| g.is_match(&host))))
        })
    }
}

/// A request's head: its method, where it goes, and the rest of the head.
struct Head {
    method: String,
    host: String,
    port: u16,
    /// For a forwarded request: the head rewritten to origin form.
    forward: Option<Vec<u8>>,
}

async fn serve(mut client: TcpStream, allow: &Allow, refused: &mpsc::UnboundedSender<Refusal>) {
    let Ok((head, rest)) = read_head(&mut client).await else {
        return;
    };
    let refuse = |status: &str, refusal: Refusal| {
        let body = format!(
            "runplane: {}:{} is not in the run's egress allow list ({})\n",
            refusal.host, refusal.port, refusal.reason
        );
        let _ = refused.send(refusal);
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let head = match parse(&head) {
        Ok(head) => head,
        Err((method, reason)) => {
            let answer = refuse(
                "400 Bad Request",
                Refusal {
                    host: String::new(),
                    port: 0,
                    method,
                    reason,
                },
            );
            let _ = client.write_all(answer.as_bytes()).await;
            return;
        }
    };
    if !allow.admits(&head.host, head.port) {
        let answer = refuse(
            "403 Forbidden",
            Refusal {
                host: head.host.clone(),
                port: head.port,
                method: head.method.clone(),
                reason: "not admitted".into(),
            },
        );
        let _ = client.write_all(answer.as_bytes()).await;
        return;
    }
    let Ok(mut upstream) = TcpStream::connect((head.host.as_str(), head.port)).await else {
        let _ = client
            .write_all(
                b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await;
        return;
    };
    let opened = match &head.forward {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
        }
        Some(forward) => upstream.write_all(forward).await,
    };
    if opened.is_err() || upstream.write_all(&rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Reads up to the end of the head; the bytes after it are returned apart.
async fn read_head(client: &mut TcpStream) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buffer.split_off(end + 4);
            return Ok((buffer, rest));
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Err(std::io::Error::other("request head too large"));
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed before the end of the head"));
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// The request line and, for a forwarded request, the head in origin form with its
/// `Host` set to the URL's authority and hop-by-hop headers replaced by
/// `Connection: close`.
fn parse(head: &[u8]) -> Result<Head, (String, String)> {
    let text = std::str::from_utf8(head).map_err(|_| (String::new(), "not text".to_string()))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut words = line.split(' ');
    let (method, target, version) = match (words.next(), words.next(), words.next()) {
        (Some(m), Some(t), Some(v)) if words.next().is_none() => (m, t, v),
        _ => return Err((String::new(), format!("malformed request line {line:?}"))),
    };
    let bad = |why: String| (method.to_string(), why);
    if method == "CONNECT" {
        let (host, port) =
            authority(target).ok_or_else(|| bad(format!("CONNECT {target:?} needs host:port")))?;
        return Ok(Head {
            method: method.into(),
            host,
            port,
            forward: None,
        });
    }
    let url = url::Url::parse(target)
        .ok()
        .filter(|u| u.scheme() == "http")
        .ok_or_else(|| bad(format!("{target:?} is not an absolute http:// URL")))?;
    let host = url.host_str().ok_or_else(|| bad("no host".into()))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = url.port_or_known_default().unwrap_or(80);
    let path = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_string(),
    };
    let mut forward = format!("{method} {path} {version}\r\n");
    for header in lines.filter(|l| !l.is_empty()) {
        let name = header
            .split(':')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if !matches!(
            name.as_str(),
            "host" | "connection" | "proxy-connection" | "proxy-authorization" | "keep-alive"
        ) {
            forward.push_str(header);
            forward.push_str("\r\n");
        }
    }
    let authority = match url.port() {
        Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_string(),
    };
    forward.push_str(&format!("host: {authority}\r\nconnection: close\r\n\r\n"));
    Ok(Head {
        method: method.into(),
        host,
        port,
        forward: Some(forward.into_bytes()),
    })
}

/// `host:port` or `[v6]:port`.
fn authority(target: &str) -> Option<(String, u16)> {
    let (host, port) = target.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_admitted_by_name_glob_or_exact_literal() {
        let endpoint = |host: &str, port| EgressEndpoint {
            host: host.into(),
            port,
        };
        let allow = Allow::new(vec![
            endpoint("*.example.com", 443),
            endpoint("api.anthropic.com", 443),
            endpoint("127.0.0.1", 8080),
        ]);
        for (host, port, admitted) in [
            ("a.example.com", 443, true),
            ("A.B.Example.COM.", 443, true),
            ("example.com", 443, false),
            ("example.com.evil.net", 443, false),
            ("a.example.com", 80, false),
            ("api.anthropic.com", 443, true),
            ("127.0.0.1", 8080, true),
            ("127.0.0.2", 8080, false),
            ("localhost", 8080, false),
        ] {
            assert_eq!(allow.admits(host, port), admitted, "{host}:{port}");
        }
    }

    #[test]
    fn a_forwarded_request_goes_in_origin_form_to_the_url_host() {
        let head = b"GET http://a.example.com:8080/x?q=1 HTTP/1.1\r\nHost: evil.net\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        let parsed = parse(head).unwrap_or_else(|(_, why)| panic!("{why}"));
        assert_eq!((parsed.host.as_str(), parsed.port), ("a.example.com", 8080));
        let forward = String::from_utf8(parsed.forward.unwrap_or_default()).unwrap_or_default();
        assert_eq!(
            forward,
            "GET /x?q=1 HTTP/1.1\r\nAccept: */*\r\nhost: a.example.com:8080\r\nconnection: close\r\n\r\n"
        );
        for bad in [
            &b"GET /x HTTP/1.1\r\n\r\n"[..],
            b"CONNECT a.example.com HTTP/1.1\r\n\r\n",
        ] {
            assert!(parse(bad).is_err());
        }
    }
}
