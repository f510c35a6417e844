//! The worker's answers to the agent's hooks. A tool call is asked on the run's session
//! and its hook held until the final decision; a result is reported; a stop leaves the
//! agent's last message; a session start marks the agent's hooks live. Messages for
//! runplane go to the worker's main loop as `Note`s, which sends them on the session
//! (and repeats them after a re-attach).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tokio::sync::mpsc;

use super::hook_server::Handler;
use super::hook_wire::{event_of, HookAnswer, HookRequest};
use super::tools::tool_call;
use crate::grpc::pb;
use crate::grpc::pb::worker_message::Message as In;

/// Largest output of a tool reported as its result (the server caps stored text at this).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// What the hooks tell the worker's main loop.
#[derive(Debug)]
pub enum Note {
    /// A message for runplane.
    Send(In),
    /// A tool ran without runplane's decision (its PreToolUse hook never came): the
    /// hooks are not all live, and the agent must not go on.
    Unjudged(String),
}

/// The hooks' shared state.
pub struct Hooks {
    run_id: String,
    notes: mpsc::UnboundedSender<Note>,
    /// Where the decisions on each held call go, by call id. A channel, not a one-shot:
    /// an ask's final decision may follow its first answer at once, and must find the
    /// hook still listening.
    waiting: Mutex<HashMap<String, mpsc::UnboundedSender<pb::ToolCallResponse>>>,
    /// Every call id a PreToolUse hook asked about.
    asked: Mutex<HashSet<String>>,
    /// The agent sessions whose SessionStart hook ran.
    sessions: Mutex<HashSet<String>>,
    starts: mpsc::UnboundedSender<String>,
    /// The agent's last message, from its Stop hook.
    last_message: Mutex<String>,
    /// The call allowed last whose result has not come yet: what was running when the
    /// sandbox refused something.
    running: Mutex<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The last `MAX_OUTPUT_BYTES` of a text, cut at a character boundary.
pub fn tail(text: String) -> String {
    if text.len() <= MAX_OUTPUT_BYTES {
        return text;
    }
    let mut cut = text.len() - MAX_OUTPUT_BYTES;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_string()
}

fn answer(decision: Option<&str>, reason: String) -> HookAnswer {
    HookAnswer {
        decision: decision.map(str::to_string),
        reason,
    }
}

impl Hooks {
    /// The hooks of `run_id`, the notes they send the main loop, and the id of each agent
    /// session that starts.
    pub fn new(
        run_id: String,
    ) -> (
        Arc<Hooks>,
        mpsc::UnboundedReceiver<Note>,
        mpsc::UnboundedReceiver<String>,
    ) {
        let (notes, notes_rx) = mpsc::unbounded_channel();
        let (starts, starts_rx) = mpsc::unbounded_channel();
        let hooks = Hooks {
            run_id,
            notes,
            waiting: Mutex::default(),
            asked: Mutex::default(),
            sessions: Mutex::default(),
            starts,
            last_message: Mutex::default(),
            running: Mutex::default(),
        };
        (Arc::new(hooks), notes_rx, starts_rx)
    }

    /// The hook socket's handler.
    pub fn handler(self: &Arc<Self>) -> Handler {
        let hooks = Arc::clone(self);
        Arc::new(move |request: HookRequest| {
            let hooks = Arc::clone(&hooks);
            Box::pin(async move { hooks.answer(request.payload).await })
        })
    }

    /// Passes a decision to the hook holding its call.
    pub fn decided(&self, response: pb::ToolCallResponse) {
        if let Some(waiter) = lock(&self.waiting).get(&response.call_id) {
            let _ = waiter.send(response);
        }
    }

    /// Releases the hook holding `error.call_id` with a deny: runplane refused the request
    /// itself (a field over its limit, say), and a refused call must not wait out the hook.
    pub fn refused(&self, error: &pb::SessionError) {
        self.decided(pb::ToolCallResponse {
            run_id: self.run_id.clone(),
            call_id: error.call_id.clone(),
            decision: pb::Decision::Deny as i32,
            reason: format!("runplane refused the call: {}", error.message),
        });
    }

    /// The call running now (allowed, no result yet); empty when none is.
    pub fn running_call(&self) -> String {
        lock(&self.running).clone()
    }

    /// The agent's last message, as its Stop hook reported it.
    pub fn last_message(&self) -> String {
        lock(&self.last_message).clone()
    }

    fn note(&self, note: Note) -> Result<(), String> {
        self.notes
            .send(note)
            .map_err(|_| "the worker is stopping".to_string())
    }

    async fn answer(&self, payload: Value) -> Result<HookAnswer, String> {
        let session = payload
            .get("session_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        match event_of(&payload) {
            "SessionStart" => {
                lock(&self.sessions).insert(session.clone());
                let _ = self.starts.send(session);
            }
            "PreToolUse" => {
                if !lock(&self.sessions).contains(&session) {
                    return Ok(answer(
                        Some("deny"),
                        "runplane did not see this agent session start (its SessionStart hook \
                         did not run), so its hooks cannot be trusted"
                            .into(),
                    ));
                }
                return self.decide(&payload).await;
            }
            event @ ("PostToolUse" | "PostToolUseFailure") => self.report(event, &payload)?,
            "Stop" => {
                if let Some(text) = payload
                    .get("last_assistant_message")
                    .and_then(Value::as_str)
                {
                    *lock(&self.last_message) = text.to_string();
                }
            }
            _ => {}
        }
        Ok(answer(None, String::new()))
    }

    /// Asks runplane about a tool call and waits for the final decision (an ask is held).
    async fn decide(&self, payload: &Value) -> Result<HookAnswer, String> {
        let call = tool_call(payload).map_err(|e| e.to_string())?;
        let request = pb::ToolCallRequest::from(&crate::domain::ToolCallRequest {
            run_id: self.run_id.clone(),
            ..call
        });
        let call_id = request.call_id.clone();
        let (answers, mut decisions) = mpsc::unbounded_channel();
        lock(&self.waiting).insert(call_id.clone(), answers);
        lock(&self.asked).insert(call_id.clone());
        let mut response = None;
        if self.note(Note::Send(In::ToolCallRequest(request))).is_ok() {
            // An ask is followed by the final decision once an operator answers (or it
            // times out); after a re-attach the repeat may be answered `ask` again.
            while let Some(next) = decisions.recv().await {
                let asked = next.decision == pb::Decision::Ask as i32;
                response = Some(next);
                if !asked {
                    break;
                }
            }
        }
        lock(&self.waiting).remove(&call_id);
        let response =
            response.ok_or_else(|| "the session ended before the decision".to_string())?;
        // Anything but a final allow is a deny: an unknown value, or an ask with no final
        // answer.
        let verdict = if response.decision == pb::Decision::Allow as i32 {
            *lock(&self.running) = call_id;
            "allow"
        } else {
            "deny"
        };
        Ok(answer(Some(verdict), response.reason))
    }

    /// Reports a tool's result; a result for a call runplane never decided stops the run.
    fn report(&self, event: &str, payload: &Value) -> Result<(), String> {
        let call = tool_call(payload).map_err(|e| e.to_string())?;
        {
            let mut running = lock(&self.running);
            if *running == call.call_id {
                running.clear();
            }
        }
        if !lock(&self.asked).contains(&call.call_id) {
            return self.note(Note::Unjudged(format!(
                "the agent ran {} (call {}) without runplane's decision: its PreToolUse hook \
                 did not run",
                call.tool, call.call_id
            )));
        }
        let output = match payload
            .get("tool_response")
            .or_else(|| payload.get("error"))
        {
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let duration = payload
            .get("duration_ms")
            .and_then(Value::as_u64)
            .map(|ms| prost_types::Duration {
                seconds: (ms / 1000) as i64,
                nanos: ((ms % 1000) * 1_000_000) as i32,
            });
        self.note(Note::Send(In::ToolCallResult(pb::ToolCallResult {
            run_id: self.run_id.clone(),
            call_id: call.call_id,
            success: event == "PostToolUse",
            output: tail(output),
            error: String::new(),
            cost_usd: 0.0,
            duration,
        })))
    }
}
