//! Conversions for grants: the scope of an answer to an ask, and a run's grants.

use super::{bounded, decision_from_proto, from_timestamp, required, timestamp, ConvertError};
use crate::domain::{Grant, GrantMatch, GrantRecord, GrantRevoked, Remember};
use crate::grpc::pb;

/// What a `ResolveAskRequest` asks to remember: `None` for scope ONCE (or unspecified).
/// A prefix or glob given without scope RUN is refused rather than ignored: the operator
/// meant something the server would not do.
pub fn remember_from_proto(
    scope: i32,
    command_prefix: String,
    path_glob: String,
) -> Result<Option<Remember>, ConvertError> {
    let scope = pb::AnswerScope::try_from(scope).map_err(|_| ConvertError::InvalidEnum {
        field: "scope",
        value: scope,
    })?;
    let command_prefix = bounded("command_prefix", command_prefix)?;
    let path_glob = bounded("path_glob", path_glob)?;
    match scope {
        pb::AnswerScope::Unspecified | pb::AnswerScope::Once => {
            let field = match (command_prefix.is_empty(), path_glob.is_empty()) {
                (true, true) => return Ok(None),
                (false, _) => "command_prefix",
                (true, false) => "path_glob",
            };
            Err(ConvertError::OutOfRange {
                field,
                problem: "only with scope ANSWER_SCOPE_RUN".into(),
            })
        }
        pb::AnswerScope::Run => match (command_prefix.is_empty(), path_glob.is_empty()) {
            (true, true) => Ok(Some(Remember::Command)),
            (false, true) => Ok(Some(Remember::Prefix(command_prefix))),
            (true, false) => Ok(Some(Remember::PathGlob(path_glob))),
            (false, false) => Err(ConvertError::OutOfRange {
                field: "path_glob",
                problem: "give a command_prefix or a path_glob, not both".into(),
            }),
        },
    }
}

/// A grant of run `run_id`, as `ListGrants` and `RevokeGrant` return it.
pub fn grant_to_proto(run_id: &str, record: &GrantRecord) -> pb::Grant {
    let grant = &record.grant;
    let mut out = pb::Grant {
        run_id: run_id.to_string(),
        grant_id: grant.id.clone(),
        call_id: grant.call_id.clone(),
        tool: grant.tool.clone(),
        decision: pb::Decision::from(grant.decision).into(),
        granted_by: grant.by.clone(),
        note: grant.note.clone(),
        granted_at: Some(timestamp(record.granted_at)),
        ..Default::default()
    };
    match &grant.matcher {
        GrantMatch::Command(command) => out.command = command.clone(),
        GrantMatch::Prefix(prefix) => out.command_prefix = prefix.clone(),
        GrantMatch::PathGlob(glob) => out.path_glob = glob.clone(),
    }
    if let Some((revoked, at)) = &record.revoked {
        out.revoked_by = revoked.by.clone();
        out.revoked_at = Some(timestamp(*at));
        out.revoke_reason = revoked.reason.clone();
    }
    out
}

/// A grant from the wire (for clients): its run and its record. Exactly one of command,
/// command_prefix and path_glob must be set.
pub fn grant_from_proto(grant: pb::Grant) -> Result<(String, GrantRecord), ConvertError> {
    let matcher = match (
        grant.command.is_empty(),
        grant.command_prefix.is_empty(),
        grant.path_glob.is_empty(),
    ) {
        (false, true, true) => GrantMatch::Command(grant.command),
        (true, false, true) => GrantMatch::Prefix(grant.command_prefix),
        (true, true, false) => GrantMatch::PathGlob(grant.path_glob),
        _ => {
            return Err(ConvertError::OutOfRange {
                field: "command",
                problem: "exactly one of command, command_prefix and path_glob must be set".into(),
            })
        }
    };
    let granted_at = grant
        .granted_at
        .ok_or(ConvertError::Required {
            field: "granted_at",
        })
        .and_then(|at| from_timestamp("granted_at", at))?;
    let revoked = match grant.revoked_at {
        Some(at) => Some((
            GrantRevoked {
                grant_id: grant.grant_id.clone(),
                reason: grant.revoke_reason,
                by: grant.revoked_by,
            },
            from_timestamp("revoked_at", at)?,
        )),
        None => None,
    };
    let record = GrantRecord {
        grant: Grant {
            id: required("grant_id", grant.grant_id)?,
            call_id: grant.call_id,
            tool: grant.tool,
            matcher,
            decision: decision_from_proto("decision", grant.decision)?,
            by: grant.granted_by,
            note: grant.note,
        },
        granted_at,
        revoked,
    };
    Ok((grant.run_id, record))
}
