//! Where a call is judged: on the caller's thread, or on tokio's blocking pool.
//!
//! Judging a short line costs microseconds, but a hostile line near the 64 KiB cap can
//! take seconds (deep nesting, thousands of pipes). On a runtime thread that would stall
//! every session and RPC sharing it, so a long line is judged on the blocking pool while
//! the caller awaits it. A short line stays inline: it is the hot path, and a thread hop
//! would cost more than the judging.
//!
//! A panic in the judge never allows and never takes the server down: both paths report
//! it as `JudgeFailed`, which callers turn into a deny (sessions) or INTERNAL (Evaluate).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::eval::{ToolCall, Verdict};
use super::memo;
use crate::domain::Grant;
use crate::policy::profile::compile::CompiledProfile;

/// Longest command judged inline. The same bound as the memo of split lines: a line up to
/// this long is remembered per thread, so judging it again elsewhere would lose the memo;
/// a longer one is parsed every time anyway, and its cost grows faster than its length.
pub const INLINE_COMMAND_BYTES: usize = memo::MAX_KEY_LEN;

/// The judge panicked (or its task was cancelled at shutdown): the call has no verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the policy judge failed on this call")]
pub struct JudgeFailed;

impl JudgeFailed {
    /// The verdict a session gives a call its judge failed on: deny, never allow.
    pub fn deny(self) -> Verdict {
        Verdict::deny(format!("{self}; denied"))
    }
}

/// Decides `call` with `profile`, off the async runtime's threads when its command is
/// longer than [`INLINE_COMMAND_BYTES`]. The caller awaits the verdict either way, so a
/// session's calls are still decided in order.
pub async fn evaluate_off_runtime(
    profile: &Arc<CompiledProfile>,
    call: &ToolCall<'_>,
) -> Result<Verdict, JudgeFailed> {
    if call.command.len() <= INLINE_COMMAND_BYTES {
        return guarded(|| profile.evaluate(call));
    }
    let profile = Arc::clone(profile);
    let owned = OwnedCall::from(call);
    on_blocking_pool(move || profile.evaluate(&owned.as_call())).await
}

/// `CompiledProfile::apply_grants`, where `evaluate_off_runtime` would judge the call: the
/// grants split the line again. A caller takes a failure to cover nothing, so that the
/// profile's ask stands.
pub async fn apply_grants_off_runtime(
    profile: &Arc<CompiledProfile>,
    call: &ToolCall<'_>,
    verdict: &Verdict,
    grants: &Arc<[Grant]>,
) -> Result<Option<(Verdict, String)>, JudgeFailed> {
    if call.command.len() <= INLINE_COMMAND_BYTES {
        return guarded(|| profile.apply_grants(call, verdict, grants));
    }
    let profile = Arc::clone(profile);
    let grants = Arc::clone(grants);
    let owned = OwnedCall::from(call);
    let verdict = verdict.clone();
    on_blocking_pool(move || profile.apply_grants(&owned.as_call(), &verdict, &grants)).await
}

/// Runs the judge here; a panic becomes `JudgeFailed`. Free unless it panics.
pub(crate) fn guarded<T>(judge: impl FnOnce() -> T) -> Result<T, JudgeFailed> {
    // The judge shares nothing mutable with the caller: its only state is the thread's
    // memo of split lines, which is only ever written whole (behind `try_borrow_mut`).
    catch_unwind(AssertUnwindSafe(judge)).map_err(|_| JudgeFailed)
}

/// Runs the judge on the blocking pool; a panic (a `JoinError`) becomes `JudgeFailed`.
async fn on_blocking_pool<T: Send + 'static>(
    judge: impl FnOnce() -> T + Send + 'static,
) -> Result<T, JudgeFailed> {
    tokio::task::spawn_blocking(judge)
        .await
        .map_err(|_| JudgeFailed)
}

/// A `ToolCall` that owns its text, to be judged on another thread.
struct OwnedCall {
    tool: String,
    command: String,
    path: String,
    resolved_path: String,
    paths: Vec<String>,
    url: String,
    input: String,
    workspace_root: Option<String>,
}

impl OwnedCall {
    fn from(call: &ToolCall<'_>) -> OwnedCall {
        OwnedCall {
            tool: call.tool.to_string(),
            command: call.command.to_string(),
            path: call.path.to_string(),
            resolved_path: call.resolved_path.to_string(),
            paths: call.paths.to_vec(),
            url: call.url.to_string(),
            input: call.input.to_string(),
            workspace_root: call.workspace_root.map(str::to_string),
        }
    }

    fn as_call(&self) -> ToolCall<'_> {
        ToolCall {
            tool: &self.tool,
            command: &self.command,
            path: &self.path,
            resolved_path: &self.resolved_path,
            paths: &self.paths,
            url: &self.url,
            input: &self.input,
            workspace_root: self.workspace_root.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Decision;
    use crate::policy::ProfileRegistry;

    #[test]
    fn a_panicking_judge_inline_fails_closed() {
        let result = guarded(|| panic!("judge bug"));
        assert_eq!(result, Err(JudgeFailed));
        let verdict = JudgeFailed.deny();
        assert_eq!(verdict.decision, Decision::Deny);
        assert!(
            verdict.reason.contains("judge failed"),
            "{}",
            verdict.reason
        );
    }

    #[tokio::test]
    async fn a_panicking_judge_on_the_blocking_pool_fails_closed() {
        let result = on_blocking_pool(|| panic!("judge bug")).await;
        assert_eq!(result, Err(JudgeFailed));
    }

    /// A long line goes to the pool and comes back with the verdict the inline judge
    /// gives, every field of the call carried over.
    #[tokio::test]
    async fn a_long_line_is_judged_like_a_short_one() {
        let registry = ProfileRegistry::builtin();
        let Some(profile) = registry.get("trusted-mount-autonomous") else {
            panic!("preset missing");
        };
        let long = format!("echo{}", " x".repeat(600));
        assert!(long.len() > INLINE_COMMAND_BYTES);
        for command in ["echo x", long.as_str()] {
            let call = ToolCall {
                tool: "Bash",
                command,
                path: "link/x",
                resolved_path: "/etc/x",
                workspace_root: Some("/work/repo"),
                ..ToolCall::default()
            };
            let off = evaluate_off_runtime(&profile, &call).await;
            assert_eq!(off, Ok(profile.evaluate(&call)), "{command}");
            // Allowed but for the resolved path, which lies outside.
            let decision = off.map(|v| v.decision);
            assert_eq!(decision, Ok(Decision::Ask), "{command}");
        }
    }
}
