//! How operator commands reach the server: the address, TLS, and the token each request
//! carries.
//!
//! The token comes from `--token`, else `RUNPLANE_TOKEN`, else the file `--token-file`
//! names (default `./runplane-data/operator.token`, where a fresh `serve` in the same
//! directory writes its admin token). No token found is not an error here: the server
//! answers UNAUTHENTICATED, and `report` adds where a token was looked for.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

use super::ClientArgs;

/// Where `serve` writes its admin token, relative to the working directory by default.
pub const DEFAULT_TOKEN_FILE: &str = "./runplane-data/operator.token";

/// How long an operator command waits for the TCP/HTTP2 connection before it gives up:
/// long enough for a loaded machine, short enough that a typo in `--server` is not a hang.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A channel whose every request carries the operator's token.
pub type AuthChannel = InterceptedService<Channel, Bearer>;

/// Adds `authorization: Bearer <token>` to each request (nothing when there is no token).
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    /// Bearer credentials for `token`; refused when it cannot be a header value.
    pub fn new(token: Option<&str>) -> anyhow::Result<Bearer> {
        let value = token
            .map(|token| {
                format!("Bearer {token}")
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| {
                        anyhow::anyhow!("the token holds characters a header cannot carry")
                    })
            })
            .transpose()?;
        Ok(Bearer(value))
    }
}

impl std::fmt::Debug for Bearer {
    /// Never shows the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(…)")
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// The token to send: `--token`/`RUNPLANE_TOKEN` (clap fills one from the other), else
/// the token file's first line; `None` when neither exists.
pub fn token(client: &ClientArgs) -> anyhow::Result<Option<String>> {
    resolve_token(client.token.as_deref(), &client.token_file)
}

/// A token given directly (`flag`, when not empty), else the first line of `file`;
/// `None` when neither exists. The one place the precedence lives, for the CLI and the
/// example worker.
pub fn resolve_token(flag: Option<&str>, file: &Path) -> anyhow::Result<Option<String>> {
    if let Some(token) = flag.map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(Some(token.to_string()));
    }
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(text
            .lines()
            .next()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("--token-file {}", file.display())),
    }
}

/// Connects to the server eagerly, so an unreachable server is reported as such (naming
/// the address) rather than as an opaque UNAVAILABLE from the first call.
pub async fn connect(client: &ClientArgs) -> anyhow::Result<AuthChannel> {
    let bearer = Bearer::new(token(client)?.as_deref())?;
    let channel = channel(&client.server, client.ca_cert.as_ref()).await?;
    Ok(InterceptedService::new(channel, bearer))
}

/// A connection to `server`, over TLS trusting `ca_cert` when one is given.
pub async fn channel(server: &str, ca_cert: Option<&PathBuf>) -> anyhow::Result<Channel> {
    let mut endpoint = Endpoint::from_shared(server.to_string())
        .with_context(|| format!("--server: invalid URL {server:?}"))?
        .connect_timeout(CONNECT_TIMEOUT);
    if let Some(ca) = ca_cert {
        endpoint = endpoint
            .tls_config(tls_config(ca)?)
            .context("--ca-cert: cannot set up TLS")?;
    } else if server.starts_with("https://") {
        anyhow::bail!("--server {server} is https: pass --ca-cert with the CA that signed it");
    }
    endpoint.connect().await.map_err(|err| {
        // The transport's chain repeats itself ("tcp connect error: tcp connect error");
        // its last link is the one that says what happened.
        let mut cause: &dyn std::error::Error = &err;
        while let Some(source) = cause.source() {
            cause = source;
        }
        anyhow::anyhow!(
            "cannot connect to the runplane server at {server}: {cause} \
             (is `runplane serve` running there? set --server or RUNPLANE_SERVER)"
        )
    })
}

fn tls_config(ca: &PathBuf) -> anyhow::Result<ClientTlsConfig> {
    let pem = std::fs::read(ca).with_context(|| format!("--ca-cert {}", ca.display()))?;
    Ok(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
}
