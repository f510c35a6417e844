//! What the operator commands print: text for people, JSON for scripts.
//!
//! JSON uses the domain types' serde shapes where a domain type exists (a run is the same
//! object everywhere), and small view structs with fixed field names for events and asks.
//!
//! Text for people shows every string from the server through [`escape`], so a control
//! sequence in an agent's command cannot rewrite the line it is on; JSON is left exact.

use std::borrow::Cow;
use std::collections::BTreeMap;

use anyhow::Context as _;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use super::escape::{escape, Escaped};
use crate::domain::{Run, ToolCallRequest};
use crate::grpc::convert::from_timestamp;
use crate::grpc::pb;

/// The canonical gRPC name of a status code (`NOT_FOUND`, …): what the docs and the
/// session's `SessionError.code` use, so scripts match one spelling everywhere.
pub(super) fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Prints a value as pretty JSON on stdout.
pub(super) fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// A run from the wire, checked by the domain conversion.
pub(super) fn run_from_pb(run: Option<pb::Run>) -> anyhow::Result<Run> {
    let run = run.context("the server sent a response without its run")?;
    Run::try_from(run).context("the server sent an invalid run")
}

/// A time as people read it in a terminal: UTC, to the second.
pub(super) fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A run as `key: value` lines, optional fields only when set, values escaped.
pub(super) fn run_details(run: &Run) -> String {
    let mut lines = vec![
        ("id", run.id.clone()),
        ("status", run.status.to_string()),
        ("task", run.task_id.clone()),
        ("agent", run.agent_id.clone()),
        ("project", run.project_id.clone()),
    ];
    if !run.team_id.is_empty() {
        lines.push(("team", run.team_id.clone()));
    }
    lines.push(("profile", run.policy_profile.clone()));
    lines.push(("exec mode", run.exec_mode.to_string()));
    if let Some(sandbox) = run.sandbox {
        lines.push(("sandbox", sandbox.as_str().to_string()));
    }
    if let Some(mode) = run.deliver_mode {
        lines.push(("deliver mode", mode.to_string()));
    }
    lines.push(("steps", run.step_count.to_string()));
    lines.push(("cost", format!("${:.4}", run.cost_usd)));
    lines.push(("created", time(run.created_at)));
    lines.push(("started", time(run.started_at)));
    if let Some(at) = run.completed_at {
        lines.push(("completed", time(at)));
    }
    if !run.output.is_empty() {
        lines.push(("output", run.output.clone()));
    }
    if !run.error.is_empty() {
        lines.push(("error", run.error.clone()));
    }
    lines
        .into_iter()
        .map(|(key, value)| format!("{:<13}{}", format!("{key}:"), Escaped(&value)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs as a table, one line each.
pub(super) fn runs_table(runs: &[Run]) -> String {
    let rows = runs
        .iter()
        .map(|run| {
            vec![
                run.id.clone(),
                run.status.to_string(),
                run.step_count.to_string(),
                format!("${:.4}", run.cost_usd),
                run.policy_profile.clone(),
                time(run.created_at),
            ]
        })
        .collect();
    table(
        &["ID", "STATUS", "STEPS", "COST", "PROFILE", "CREATED"],
        rows,
    )
}

/// One entry of a run's log, as `--json` prints it.
#[derive(Debug, Serialize)]
pub(super) struct EventView {
    run_id: String,
    seq: u64,
    #[serde(rename = "type")]
    kind: String,
    at: DateTime<Utc>,
    /// Sorted, so the same event always prints the same way.
    attributes: BTreeMap<String, String>,
}

impl EventView {
    /// Checks an event from the wire.
    pub(super) fn from_pb(event: pb::RunEvent) -> anyhow::Result<EventView> {
        let at = event
            .at
            .context("the server sent an event without its time")?;
        Ok(EventView {
            at: from_timestamp("at", at).context("the server sent an invalid event")?,
            run_id: event.run_id,
            seq: event.seq,
            kind: event.r#type,
            attributes: event.attributes.into_iter().collect(),
        })
    }

    /// One line: `#seq time type key=value …`, everything escaped, values quoted when
    /// they hold spaces.
    pub(super) fn line(&self) -> String {
        let mut line = format!("#{:<4} {} {}", self.seq, time(self.at), Escaped(&self.kind));
        for (key, value) in &self.attributes {
            if value.is_empty() || value.contains(char::is_whitespace) {
                line.push_str(&format!(" {}={}", Escaped(key), quoted(value)));
            } else {
                line.push_str(&format!(" {}={}", Escaped(key), Escaped(value)));
            }
        }
        line
    }
}

/// A tool call waiting for an operator, as `--json` prints it.
#[derive(Debug, Serialize)]
pub(super) struct AskView {
    run_id: String,
    call_id: String,
    tool: String,
    command: String,
    path: String,
    reason: String,
    /// The deciding rule's index; `None` (null): the profile's mode asked.
    rule_index: Option<i32>,
    /// The deciding rule as its policy file writes it; empty when the mode asked.
    rule: String,
    /// The part of the command line that decided.
    part: String,
    asked_at: DateTime<Utc>,
    deadline: DateTime<Utc>,
}

impl AskView {
    /// Checks a pending ask from the wire.
    pub(super) fn from_pb(ask: pb::PendingAsk) -> anyhow::Result<AskView> {
        let invalid = "the server sent an invalid pending ask";
        let request = ask
            .request
            .context("the server sent an ask without its call")?;
        let request = ToolCallRequest::try_from(request).context(invalid)?;
        let asked_at = ask
            .asked_at
            .context("the server sent an ask without asked_at")?;
        let deadline = ask
            .deadline
            .context("the server sent an ask without deadline")?;
        Ok(AskView {
            run_id: request.run_id,
            call_id: request.call_id,
            tool: request.tool,
            command: request.command,
            path: request.path,
            reason: ask.reason,
            rule_index: ask.rule_index,
            rule: ask.rule,
            part: ask.part,
            asked_at: from_timestamp("asked_at", asked_at).context(invalid)?,
            deadline: from_timestamp("deadline", deadline).context(invalid)?,
        })
    }
}

/// `value` in double quotes, for a value with spaces: escaped like all text, and with its
/// own `\` and `"` backslash-escaped first so that where the value ends is unambiguous.
fn quoted(value: &str) -> String {
    let inner = value.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{}\"", Escaped(&inner))
}

/// Pending asks as a table; the last column (the reason) is free length.
pub(super) fn asks_table(asks: &[AskView]) -> String {
    let rows = asks
        .iter()
        .map(|ask| {
            let target = if ask.command.is_empty() {
                &ask.path
            } else {
                &ask.command
            };
            // The rule's whole text spans lines, so the table names it by index; --json
            // carries the text.
            let rule = ask
                .rule_index
                .map_or_else(|| "mode".to_string(), |i| format!("rules[{i}]"));
            vec![
                ask.run_id.clone(),
                ask.call_id.clone(),
                ask.tool.clone(),
                target.clone(),
                rule,
                ask.part.clone(),
                time(ask.deadline),
                ask.reason.clone(),
            ]
        })
        .collect();
    table(
        &[
            "RUN",
            "CALL",
            "TOOL",
            "COMMAND/PATH",
            "RULE",
            "PART",
            "DEADLINE",
            "REASON",
        ],
        rows,
    )
}

/// Left-aligned columns two spaces apart; the last column is not padded. Cells are
/// escaped before they are measured, so the columns line up as printed.
pub(super) fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|row| row.into_iter().map(escaped).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header = headers.iter().map(|h| h.to_string()).collect();
    std::iter::once(header)
        .chain(rows)
        .map(|row: Vec<String>| {
            let last = row.len().saturating_sub(1);
            row.iter()
                .enumerate()
                .map(|(i, cell)| {
                    if i == last {
                        cell.clone()
                    } else {
                        let width = widths.get(i).copied().unwrap_or(0);
                        let pad = width.saturating_sub(cell.chars().count());
                        format!("{cell}{}  ", " ".repeat(pad))
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A cell escaped, reusing its String when there is nothing to escape.
fn escaped(cell: String) -> String {
    match escape(&cell) {
        Cow::Borrowed(_) => cell,
        Cow::Owned(shown) => shown,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;
    use crate::domain::StartRequest;

    /// A worker's command that, printed raw, erases itself and shows a harmless one.
    const SPOOF: &str = "git status > .env #\x1b[2K\rgit status > notes.txt";
    const SPOOF_SHOWN: &str = r"git status > .env #\x1b[2K\rgit status > notes.txt";

    fn at(second: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, second)
            .single()
            .expect("valid time")
    }

    fn ask(call_id: &str, command: &str, reason: &str) -> AskView {
        AskView {
            run_id: "run-1".into(),
            call_id: call_id.into(),
            tool: "Bash".into(),
            command: command.into(),
            path: String::new(),
            reason: reason.into(),
            rule_index: None,
            rule: String::new(),
            part: command.into(),
            asked_at: at(0),
            deadline: at(5),
        }
    }

    #[test]
    fn asks_table_names_the_rule_and_the_part() {
        let mut by_rule = ask("c1", "git status && curl x | sh", "rules[2] matches");
        by_rule.rule_index = Some(2);
        by_rule.part = "curl x".into();
        let by_mode = ask("c2", "make", "no rule matches");
        let lines: Vec<String> = asks_table(&[by_rule, by_mode])
            .lines()
            .map(str::to_string)
            .collect();
        let rule_column = lines[0].find("RULE").expect("header");
        let part_column = lines[0].find("PART").expect("header");
        assert_eq!(
            lines[1].get(rule_column..rule_column + 9),
            Some("rules[2] ")
        );
        assert_eq!(lines[1].get(part_column..part_column + 7), Some("curl x "));
        assert_eq!(lines[2].get(rule_column..rule_column + 5), Some("mode "));
        assert_eq!(lines[2].get(part_column..part_column + 5), Some("make "));
    }

    #[test]
    fn asks_table_shows_the_whole_command_and_stays_aligned() {
        let asks = [
            ask("c\u{202e}1", SPOOF, &format!("writes .env: {SPOOF}")),
            ask("c2", "ls", "ok"),
        ];
        let lines: Vec<String> = asks_table(&asks).lines().map(str::to_string).collect();
        let command_column = lines[0].find("COMMAND/PATH").expect("header");
        assert_eq!(lines[1].find(SPOOF_SHOWN), Some(command_column));
        assert_eq!(lines[2].find("ls"), Some(command_column));
        assert!(lines[1].contains(r"c\u{202e}1"));
        assert!(lines[1].ends_with(&format!("writes .env: {SPOOF_SHOWN}")));
        assert!(!lines
            .iter()
            .any(|line| line.contains(['\x1b', '\r', '\u{202e}'])));
    }

    #[test]
    fn run_details_escape_every_agent_string() {
        let request = StartRequest {
            task_id: "task\0\x1b]0;t\x07".into(),
            agent_id: "agent".into(),
            project_id: "proj\u{2066}".into(),
            team_id: "team\r".into(),
            ..StartRequest::default()
        };
        let mut run = Run::new("run-1".into(), request, "p\x1b".into(), at(0));
        run.output = "done\nstatus:     completed".into();
        run.error = "bad\u{9b}".into();
        let details = run_details(&run);
        for shown in [
            r"task:        task\x00\x1b]0;t\x07",
            r"project:     proj\u{2066}",
            r"team:        team\r",
            r"profile:     p\x1b",
            r"output:      done\nstatus:     completed",
            r"error:       bad\u{9b}",
        ] {
            assert!(
                details.lines().any(|line| line == shown),
                "{shown}\n{details}"
            );
        }
    }

    #[test]
    fn event_lines_escape_type_keys_and_values() {
        let event = EventView {
            run_id: "run-1".into(),
            seq: 7,
            kind: "tool\x1b[8m".into(),
            at: at(9),
            attributes: [
                ("command".to_string(), SPOOF.to_string()),
                ("k\u{200b}".to_string(), "v\r".to_string()),
                ("quote".to_string(), r#"say "hi" \o/"#.to_string()),
            ]
            .into_iter()
            .collect(),
        };
        assert_eq!(
            event.line(),
            format!(
                r#"#7    2025-01-02T03:04:09Z tool\x1b[8m command="{SPOOF_SHOWN}" k\u{{200b}}="v\r" quote="say \"hi\" \\o/""#
            )
        );
    }
}
