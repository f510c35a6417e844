//! Conversions for `PolicyService.Replay`: the request into a candidate and a filter, the
//! changed calls and the summary both ways (the server sends them, the CLI reads them back
//! into the same types an offline replay prints).

use super::{
    at_most, bounded, decision_from_proto, from_timestamp, status_from_proto, ConvertError,
    MAX_ID_BYTES,
};
use crate::domain::Scope;
use crate::grpc::pb;
use crate::policy::replay::{Change, Judged, Tally};
use crate::replay::{Candidate, ReplayFilter};

/// A replay request: the profile to replay under and the runs to replay, held to `scope`.
pub fn replay_request(
    request: pb::ReplayRequest,
    scope: Scope,
) -> Result<(Candidate, ReplayFilter), ConvertError> {
    let candidate = match request.candidate {
        Some(pb::replay_request::Candidate::ProfileName(name)) if !name.is_empty() => {
            Candidate::Name(at_most("profile_name", name, MAX_ID_BYTES)?)
        }
        // Its size is checked where it is compiled, against the profile's own limit.
        Some(pb::replay_request::Candidate::ProfileToml(text)) if !text.is_empty() => {
            Candidate::Toml(text)
        }
        _ => return Err(ConvertError::Required { field: "candidate" }),
    };
    let non_empty = |field, s: String| -> Result<Option<String>, ConvertError> {
        (!s.is_empty())
            .then(|| at_most(field, s, MAX_ID_BYTES))
            .transpose()
    };
    let filter = ReplayFilter {
        project_id: non_empty("project_id", request.project_id)?,
        agent_id: non_empty("agent_id", request.agent_id)?,
        status: status_from_proto("status", request.status)?,
        since: request
            .since
            .map(|ts| from_timestamp("since", ts))
            .transpose()?,
        scope,
    };
    Ok((candidate, filter))
}

fn rule_index_to_proto(index: Option<usize>) -> i32 {
    index.and_then(|i| i32::try_from(i).ok()).unwrap_or(-1)
}

impl From<&Judged> for pb::ReplayVerdict {
    fn from(judged: &Judged) -> pb::ReplayVerdict {
        pb::ReplayVerdict {
            decision: pb::Decision::from(judged.decision).into(),
            rule_index: rule_index_to_proto(judged.rule_index),
            reason: judged.reason.clone(),
            part: judged.part.clone(),
        }
    }
}

impl From<&Change> for pb::ReplayChange {
    fn from(change: &Change) -> pb::ReplayChange {
        pb::ReplayChange {
            run_id: change.run_id.clone(),
            seq: change.seq,
            call_id: change.call_id.clone(),
            tool: change.tool.clone(),
            command: change.command.clone(),
            path: change.path.clone(),
            workspace_root: change.workspace_root.clone(),
            recorded: Some((&change.recorded).into()),
            replayed: Some((&change.replayed).into()),
        }
    }
}

impl From<&Tally> for pb::ReplaySummary {
    fn from(tally: &Tally) -> pb::ReplaySummary {
        pb::ReplaySummary {
            runs: tally.runs,
            calls: tally.calls,
            unjudged: tally.unjudged,
            changed: tally
                .changed
                .iter()
                .map(|(&(recorded, replayed), &calls)| pb::ReplayTransition {
                    recorded: pb::Decision::from(recorded).into(),
                    replayed: pb::Decision::from(replayed).into(),
                    calls,
                })
                .collect(),
        }
    }
}

/// A verdict as the server sent it.
fn judged_from_proto(
    field: &'static str,
    verdict: Option<pb::ReplayVerdict>,
) -> Result<Judged, ConvertError> {
    let verdict = verdict.ok_or(ConvertError::Required { field })?;
    Ok(Judged {
        decision: decision_from_proto(field, verdict.decision)?,
        // -1 (or any negative) is the mode's default.
        rule_index: usize::try_from(verdict.rule_index).ok(),
        reason: verdict.reason,
        part: verdict.part,
    })
}

impl TryFrom<pb::ReplayChange> for Change {
    type Error = ConvertError;

    fn try_from(change: pb::ReplayChange) -> Result<Change, ConvertError> {
        Ok(Change {
            run_id: change.run_id,
            seq: change.seq,
            call_id: change.call_id,
            tool: change.tool,
            command: bounded("command", change.command)?,
            path: bounded("path", change.path)?,
            workspace_root: change.workspace_root,
            recorded: judged_from_proto("recorded", change.recorded)?,
            replayed: judged_from_proto("replayed", change.replayed)?,
        })
    }
}

impl TryFrom<pb::ReplaySummary> for Tally {
    type Error = ConvertError;

    fn try_from(summary: pb::ReplaySummary) -> Result<Tally, ConvertError> {
        let mut changed = std::collections::BTreeMap::new();
        for transition in summary.changed {
            let key = (
                decision_from_proto("changed.recorded", transition.recorded)?,
                decision_from_proto("changed.replayed", transition.replayed)?,
            );
            *changed.entry(key).or_default() += transition.calls;
        }
        Ok(Tally {
            runs: summary.runs,
            calls: summary.calls,
            unjudged: summary.unjudged,
            changed,
        })
    }
}
