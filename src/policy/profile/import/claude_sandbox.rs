//! Claude Code's `sandbox` settings as a profile's intent: `network.allowedDomains` as
//! its `network`, `filesystem.denyRead` as `secrets`, `filesystem.denyWrite` as a deny
//! of the write tools (and, for plain paths in the workspace, `protected`),
//! `filesystem.allowWrite` as `writable`. Like the rest of the import it never widens:
//! what has no exact equivalent is left out when it would open something, and reported.

use serde_json::{Map, Value};

use super::{strings, ImportError, ImportNote};
use crate::domain::Decision;
use crate::policy::profile::containment::{validate_places, EgressEndpoint, Network};
use crate::policy::profile::globs::path_glob;
use crate::policy::profile::schema::PermissionRule;

/// The write tools a `denyWrite` path is denied to (shell writes are judged as `Write`).
const WRITE_TOOLS: &str = "{Edit,Write,MultiEdit,NotebookEdit}";
/// The ports a domain of `allowedDomains` is admitted on: Claude Code's proxy carries
/// HTTP and HTTPS.
const WEB_PORTS: [u16; 2] = [443, 80];

/// What the `sandbox` settings say, in a profile's terms.
#[derive(Debug, Default)]
pub(super) struct SandboxIntent {
    pub network: Network,
    pub secrets: Vec<String>,
    /// The plain `denyWrite` paths inside the workspace, which the sandbox binds read-only.
    pub protected: Vec<String>,
    /// The plain `allowWrite` directories outside the workspace.
    pub writable: Vec<String>,
    /// A deny of the write tools for the `denyWrite` paths.
    pub write_deny: Option<PermissionRule>,
}

/// Reads `settings.sandbox`; nothing when it is absent or not enabled (Claude Code then
/// enforces none of it).
pub(super) fn import_sandbox(
    settings: &Map<String, Value>,
    notes: &mut Vec<ImportNote>,
) -> Result<SandboxIntent, ImportError> {
    let sandbox = match settings.get("sandbox") {
        None | Some(Value::Null) => return Ok(SandboxIntent::default()),
        Some(Value::Object(sandbox)) => sandbox,
        Some(_) => return Err(malformed("sandbox", "expected an object")),
    };
    if sandbox.get("enabled") != Some(&Value::Bool(true)) {
        notes.push(note(
            "sandbox.enabled is not true: Claude Code enforces none of its sandbox settings, \
             so none is imported",
        ));
        return Ok(SandboxIntent::default());
    }
    let mut intent = SandboxIntent {
        network: network(sandbox.get("network"), notes)?,
        ..SandboxIntent::default()
    };
    if let Some(filesystem) = object(sandbox.get("filesystem"), "sandbox.filesystem")? {
        filesystem_intent(filesystem, &mut intent, notes)?;
    }
    for key in sandbox.keys() {
        if !matches!(key.as_str(), "enabled" | "network" | "filesystem") {
            notes.push(note(&format!(
                "sandbox.{key} is not imported: runplane's sandbox runs every command the \
                 agent starts, and no setting of it opens more"
            )));
        }
    }
    Ok(intent)
}

/// `allowedDomains` on the web ports; none listed is `network = "none"`.
fn network(value: Option<&Value>, notes: &mut Vec<ImportNote>) -> Result<Network, ImportError> {
    let mut endpoints = Vec::new();
    if let Some(network) = object(value, "sandbox.network")? {
        for domain in strings(network, "sandbox.network", "allowedDomains", notes)? {
            let listed: Vec<String> = WEB_PORTS.iter().map(|p| format!("{domain}:{p}")).collect();
            match listed
                .iter()
                .try_for_each(|e| EgressEndpoint::parse(e).map(drop))
            {
                Ok(()) => endpoints.extend(listed),
                Err(why) => notes.push(note(&format!(
                    "sandbox.network.allowedDomains: {domain:?} skipped: {why}"
                ))),
            }
        }
        for key in network.keys().filter(|k| *k != "allowedDomains") {
            notes.push(note(&format!(
                "sandbox.network.{key} is not imported: the agent's sandbox admits only \
                 the profile's endpoints"
            )));
        }
    }
    if endpoints.is_empty() {
        notes.push(note(
            "no sandbox.network.allowedDomains: network = \"none\" (Claude Code would ask \
             for a domain it does not list; runplane admits none)",
        ));
        return Ok(Network::Nothing);
    }
    Ok(Network::Endpoints(endpoints))
}

fn filesystem_intent(
    filesystem: &Map<String, Value>,
    intent: &mut SandboxIntent,
    notes: &mut Vec<ImportNote>,
) -> Result<(), ImportError> {
    let at = "sandbox.filesystem";
    intent.secrets = globs(
        strings(filesystem, at, "denyRead", notes)?,
        "denyRead",
        notes,
    );
    let denied = globs(
        strings(filesystem, at, "denyWrite", notes)?,
        "denyWrite",
        notes,
    );
    intent.protected = denied
        .iter()
        .filter(|p| validate_places(std::slice::from_ref(p), &[]).is_ok())
        .cloned()
        .collect();
    for path in strings(filesystem, at, "allowWrite", notes)? {
        let place = path.strip_suffix('/').unwrap_or(&path).to_string();
        match validate_places(&[], std::slice::from_ref(&place)) {
            Ok(()) => intent.writable.push(place),
            Err(why) => notes.push(note(&format!(
                "sandbox.filesystem.allowWrite: {path:?} is not imported ({}): the agent \
                 writes to the workspace, the run's temp dir and the directories outside \
                 them written as plain absolute or ~/ paths",
                why.message
            ))),
        }
    }
    if !denied.is_empty() {
        intent.write_deny = Some(PermissionRule {
            path_allow: denied,
            ..PermissionRule::new(WRITE_TOOLS, Decision::Deny)
        });
    }
    for key in filesystem.keys() {
        if !matches!(key.as_str(), "denyRead" | "denyWrite" | "allowWrite") {
            notes.push(note(&format!("{at}.{key} is not imported")));
        }
    }
    Ok(())
}

/// Sandbox paths as runplane path globs: `~/` and absolute paths as written, `./x` as
/// the workspace's `x`; one that is no glob is reported and skipped.
fn globs(paths: Vec<String>, key: &str, notes: &mut Vec<ImportNote>) -> Vec<String> {
    paths
        .into_iter()
        .filter_map(|path| {
            let glob = path.strip_prefix("./").unwrap_or(&path).to_string();
            let bare = glob.strip_prefix("~/").unwrap_or(&glob);
            match path_glob(bare) {
                Ok(_) if !bare.is_empty() => Some(glob),
                _ => {
                    let why = format!("sandbox.filesystem.{key}: {path:?} is not a path glob");
                    notes.push(note(&format!("{why}; skipped")));
                    None
                }
            }
        })
        .collect()
}

fn object<'v>(
    value: Option<&'v Value>,
    field: &str,
) -> Result<Option<&'v Map<String, Value>>, ImportError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(malformed(field, "expected an object")),
    }
}

fn note(message: &str) -> ImportNote {
    ImportNote {
        rule: None,
        message: message.to_string(),
    }
}

fn malformed(field: &str, message: &str) -> ImportError {
    ImportError::Malformed {
        field: field.to_string(),
        message: message.to_string(),
    }
}
