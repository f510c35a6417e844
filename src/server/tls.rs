//! The listener's TLS settings from PEM files (rustls through tonic; no OpenSSL).

use std::path::Path;

use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use super::{ServeError, TlsFiles};

/// How long a client may take for the TLS handshake before the connection is dropped: a
/// peer that opens connections and never finishes them holds nothing for long.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The server's TLS config. With a client CA, client certificates signed by it are
/// verified when presented, and a worker session requires one (`WorkerApi`); operators
/// authenticate with their tokens and may connect without one.
pub(super) fn server_config(files: &TlsFiles) -> Result<ServerTlsConfig, ServeError> {
    let identity = Identity::from_pem(read(&files.cert)?, read(&files.key)?);
    let mut config = ServerTlsConfig::new()
        .identity(identity)
        .timeout(HANDSHAKE_TIMEOUT);
    if let Some(ca) = &files.client_ca {
        config = config
            .client_ca_root(Certificate::from_pem(read(ca)?))
            .client_auth_optional(true);
    }
    Ok(config)
}

fn read(path: &Path) -> Result<Vec<u8>, ServeError> {
    std::fs::read(path).map_err(|err| ServeError::Tls(format!("{}: {err}", path.display())))
}
