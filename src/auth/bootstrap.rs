//! The first admin token: made on the first start with authentication on, written to the
//! data directory for the CLI to find, so a fresh `serve` is secure and still needs no
//! setup.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use chrono::Utc;
use tracing::{info, warn};

use super::{AuthError, Authenticator};
use crate::domain::{Principal, Role, Scope};

/// The admin token's file inside the data directory.
pub const ADMIN_TOKEN_FILE: &str = "operator.token";
/// Name of the first admin token; `admin-2`, `admin-3`, … if that name is taken.
const ADMIN_NAME: &str = "admin";
/// How many names to try before giving up.
const MAX_ADMIN_NAMES: u32 = 100;

/// Why the admin token could not be made or checked.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The token file could not be written or read.
    #[error("admin token file {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The store refused the credential.
    #[error("admin token: {0}")]
    Auth(#[from] AuthError),
}

/// Makes sure `data_dir/operator.token` holds an admin token. An existing file is kept as
/// it is (a warning says when its token no longer works); a missing one is made: the
/// credential is stored first, then the file is written (mode 0600, never logged), so the
/// file never holds a token the store does not know.
pub async fn ensure_admin_token(
    authenticator: &Authenticator,
    data_dir: &Path,
) -> Result<PathBuf, BootstrapError> {
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    let file_error = |source| BootstrapError::File {
        path: path.clone(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            check_existing(authenticator, &path, text.trim()).await;
            return Ok(path);
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(file_error(err)),
    }
    let secret = create_admin(authenticator).await?;
    write_private(&path, secret.expose()).map_err(file_error)?;
    info!(path = %path.display(), "created an admin token; the CLI reads it from this file");
    Ok(path)
}

async fn check_existing(authenticator: &Authenticator, path: &Path, token: &str) {
    match authenticator.authenticate(Some(token)).await {
        Ok(Principal::Operator { name, .. }) => {
            info!(path = %path.display(), name = %name, "admin token file found");
        }
        Ok(_) | Err(_) => warn!(
            path = %path.display(),
            "the token in this file does not work (revoked, or the database was replaced); \
             delete the file and restart to have a new admin token made"
        ),
    }
}

async fn create_admin(authenticator: &Authenticator) -> Result<super::Secret, AuthError> {
    let mut last = None;
    for n in 1..=MAX_ADMIN_NAMES {
        let name = match n {
            1 => ADMIN_NAME.to_string(),
            _ => format!("{ADMIN_NAME}-{n}"),
        };
        match authenticator
            .create_token(&name, Role::Admin, Scope::default(), Utc::now())
            .await
        {
            Ok((secret, _)) => return Ok(secret),
            Err(AuthError::InvalidArgument(message)) => last = Some(message),
            Err(other) => return Err(other),
        }
    }
    Err(AuthError::InvalidArgument(last.unwrap_or_default()))
}

/// Writes `text` to a new file only its owner can read, then renames it into place, so a
/// crash leaves either no file or a whole one, and it is never readable by others.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let partial = path.with_extension("token.partial");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(&partial)?;
    // A stale partial file from a crash may have other permissions; make sure.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    writeln!(file, "{text}")?;
    file.sync_all()?;
    std::fs::rename(&partial, path)
}
