//! What a webhook receiver gets: one JSON object per ask opened, resolved or expired, with
//! a Slack-compatible one-line `text`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::coordinator::RUNPLANE;
use crate::domain::event::{Decided, Resolved};
use crate::domain::{Decision, Run};

/// Characters of an agent's command, path or URL kept in `text`; the JSON fields keep all.
const SUBJECT_CHARS: usize = 200;

/// The JSON body of one notice (docs/OPERATIONS.md lists the fields).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Payload {
    /// `ask.opened`, `ask.resolved` or `ask.expired`.
    pub event: &'static str,
    pub run_id: String,
    pub agent_id: String,
    pub task_id: String,
    pub project_id: String,
    pub call_id: String,
    pub tool: String,
    pub command: String,
    pub path: String,
    pub url: String,
    /// The index of the profile rule that asked; `None`: the mode's default.
    pub rule: Option<usize>,
    /// The part of a command line that asked.
    pub part: String,
    /// Why: the policy's reason for an opened ask, the answer's for a closed one.
    pub reason: String,
    /// When the ask becomes a deny (RFC 3339); `None`: it waits forever.
    pub deadline: Option<String>,
    /// The final decision (`allow` or `deny`); `None` for an opened ask.
    pub decision: Option<&'static str>,
    /// Who answered; `None` for an opened ask.
    pub by: Option<String>,
    /// The ask in the operator console.
    pub link: String,
    /// A one-line summary for Slack-like receivers, agent text escaped.
    pub text: String,
}

/// The run an ask belongs to, as far as it could be read (empty fields otherwise).
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    pub agent_id: String,
    pub task_id: String,
    pub project_id: String,
}

impl From<&Run> for RunInfo {
    fn from(run: &Run) -> RunInfo {
        RunInfo {
            agent_id: run.agent_id.clone(),
            task_id: run.task_id.clone(),
            project_id: run.project_id.clone(),
        }
    }
}

/// The notice of a new ask.
pub fn opened(run_id: &str, run: &RunInfo, asked: &Decided, public_url: &str) -> Payload {
    let mut payload = base(
        "ask.opened",
        run_id,
        run,
        &asked.call_id,
        Some(asked),
        public_url,
    );
    payload.reason = asked.reason.clone();
    payload.text = format!(
        "runplane: {} asks for {} (run {}{}): {} <{}|answer>",
        slack_escape(&run.agent_id),
        subject(asked),
        slack_escape(run_id),
        rule_note(asked.rule_index),
        slack_escape(&asked.reason),
        link_for_slack(&payload.link),
    );
    payload
}

/// The notice of an ask's end: answered by an operator, denied by its run's end, or timed
/// out (`ask.expired`: runplane denied it at or after its deadline). `asked` is the ask's
/// own decision when it could still be found.
pub fn closed(
    run_id: &str,
    run: &RunInfo,
    asked: Option<&Decided>,
    resolved: &Resolved,
    at: DateTime<Utc>,
    public_url: &str,
) -> Payload {
    let expired = resolved.by == RUNPLANE
        && asked
            .and_then(|asked| asked.deadline)
            .is_some_and(|deadline| at >= deadline);
    let event = if expired {
        "ask.expired"
    } else {
        "ask.resolved"
    };
    let mut payload = base(event, run_id, run, &resolved.call_id, asked, public_url);
    payload.reason = resolved.reason.clone();
    payload.decision = Some(resolved.decision.as_str());
    payload.by = Some(resolved.by.clone());
    let verdict = match (expired, resolved.decision) {
        (true, _) => "expired and was denied".to_string(),
        (false, Decision::Allow) => format!("was allowed by {}", slack_escape(&resolved.by)),
        (false, _) => format!("was denied by {}", slack_escape(&resolved.by)),
    };
    payload.text = format!(
        "runplane: the ask of {} for {} (run {}) {verdict}: {}",
        slack_escape(&run.agent_id),
        asked.map_or_else(|| "a call".to_string(), subject),
        slack_escape(run_id),
        slack_escape(&resolved.reason),
    );
    payload
}

/// The fields every notice has; the call's own from its ask, when known.
fn base(
    event: &'static str,
    run_id: &str,
    run: &RunInfo,
    call_id: &str,
    asked: Option<&Decided>,
    public_url: &str,
) -> Payload {
    let field = |get: fn(&Decided) -> &String| asked.map(get).cloned().unwrap_or_default();
    Payload {
        event,
        run_id: run_id.to_string(),
        agent_id: run.agent_id.clone(),
        task_id: run.task_id.clone(),
        project_id: run.project_id.clone(),
        call_id: call_id.to_string(),
        tool: field(|a| &a.tool),
        command: field(|a| &a.command),
        path: field(|a| &a.path),
        url: field(|a| &a.url),
        rule: asked.and_then(|a| a.rule_index),
        part: field(|a| &a.part),
        reason: String::new(),
        deadline: asked
            .and_then(|a| a.deadline)
            .map(|at| at.to_rfc3339_opts(SecondsFormat::Millis, true)),
        decision: None,
        by: None,
        link: link(public_url, run_id, call_id),
        text: String::new(),
    }
}

/// `{public_url}/#/asks/{run_id}/{call_id}`, the ids percent-encoded: a call id is the
/// agent's, and must not be able to leave its path segment.
pub fn link(public_url: &str, run_id: &str, call_id: &str) -> String {
    format!(
        "{}/#/asks/{}/{}",
        public_url.trim_end_matches('/'),
        percent_encode(run_id),
        percent_encode(call_id)
    )
}

/// Everything but RFC 3986's unreserved characters, percent-encoded.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The link inside Slack's `<url|label>`: escaped, and with no `|` to end the URL early.
fn link_for_slack(link: &str) -> String {
    slack_escape(link).replace('|', "%7C")
}

/// The tool and what it acts on, escaped and shortened for one line.
fn subject(asked: &Decided) -> String {
    let target = [&asked.command, &asked.path, &asked.url]
        .into_iter()
        .find(|text| !text.is_empty());
    let tool = slack_escape(&asked.tool);
    match target {
        Some(target) => {
            let mut shown: String = target.chars().take(SUBJECT_CHARS).collect();
            if shown.len() < target.len() {
                shown.push('…');
            }
            // Backticks would end the code span early; the JSON fields keep the original.
            format!("{tool} `{}`", slack_escape(&shown).replace('`', "'"))
        }
        None => tool,
    }
}

/// ` (rule N)` when a profile rule asked.
fn rule_note(rule: Option<usize>) -> String {
    rule.map_or_else(String::new, |index| format!(", rule {index}"))
}

/// Text safe inside a Slack message: `&`, `<` and `>` escaped as Slack requires (so agent
/// text cannot make a mention such as `<!channel>` or a link), and control characters —
/// line breaks included — made spaces, so the summary stays one line.
pub fn slack_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            c if c.is_control() => escaped.push(' '),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(command: &str) -> Decided {
        Decided {
            call_id: "c|1>".into(),
            tool: "Bash".into(),
            command: command.into(),
            path: String::new(),
            resolved_path: String::new(),
            paths: Vec::new(),
            url: String::new(),
            input: String::new(),
            decision: Decision::Ask,
            reason: "needs a person".into(),
            rule_index: Some(2),
            part: String::new(),
            step_count: 1,
            deadline: None,
            profile: String::new(),
            profile_hash: String::new(),
            grant: String::new(),
        }
    }

    #[test]
    fn agent_text_cannot_mention_link_or_break_the_line() {
        let run = RunInfo {
            agent_id: "<!channel>".into(),
            ..RunInfo::default()
        };
        let payload = opened(
            "r1",
            &run,
            &ask("echo <@U1> & <http://x|y>\nrm"),
            "http://h",
        );
        assert!(!payload.text.contains("<!"), "{}", payload.text);
        assert!(!payload.text.contains("<@"), "{}", payload.text);
        assert!(!payload.text.contains('\n'));
        assert!(payload.text.contains("&lt;!channel&gt;"));
        assert!(payload.text.contains("&amp;"));
        // The only link is ours, with the agent's call id encoded inside it.
        assert_eq!(payload.text.matches('<').count(), 1);
        assert!(payload
            .text
            .ends_with("<http://h/#/asks/r1/c%7C1%3E|answer>"));
        assert_eq!(payload.command, "echo <@U1> & <http://x|y>\nrm");
    }

    #[test]
    fn a_resolution_by_runplane_after_the_deadline_is_an_expiry() {
        let mut asked = ask("make");
        let deadline = Utc::now();
        asked.deadline = Some(deadline);
        let resolved = Resolved {
            call_id: asked.call_id.clone(),
            decision: Decision::Deny,
            reason: "ask timed out after 5 s".into(),
            by: RUNPLANE.into(),
            note: String::new(),
        };
        let info = RunInfo::default();
        let expired = closed("r", &info, Some(&asked), &resolved, deadline, "http://h");
        assert_eq!(expired.event, "ask.expired");
        assert_eq!(expired.decision, Some("deny"));
        let early = deadline - chrono::TimeDelta::seconds(1);
        let ended = closed("r", &info, Some(&asked), &resolved, early, "http://h");
        assert_eq!(ended.event, "ask.resolved");
    }
}
