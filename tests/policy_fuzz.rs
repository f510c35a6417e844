//! Fuzzing the shell judge with proptest: any text, and text built from bash's own
//! syntax, is judged without a panic and in bounded time; nothing it cannot parse is
//! allowed; and hostile lines up to the size cap are refused within the budget.

use proptest::prelude::*;
use runplane::domain::Decision;
use runplane::policy::{CompiledProfile, ProfileRegistry, ToolCall};
use std::sync::{mpsc, Arc};
use std::time::Duration;

fn permissive() -> Arc<CompiledProfile> {
    ProfileRegistry::builtin()
        .get("headless-permissive-sandbox")
        .expect("preset")
}

/// Judges on another thread, failing the test if it does not answer in `limit` (a guard
/// against hangs, far above the real cost, not a performance measurement).
fn judge_within(command: String, limit: Duration) -> Decision {
    let profile = permissive();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let verdict = profile.evaluate(&ToolCall {
            tool: "Bash",
            command: &command,
            workspace_root: Some("/w"),
            ..ToolCall::default()
        });
        let _ = tx.send(verdict.decision);
    });
    rx.recv_timeout(limit).expect("the judge answered")
}

const PIECES: &[&str] = &[
    "git status",
    "curl x",
    " ",
    " ",
    ";",
    "&&",
    "|",
    "&",
    "\n",
    "$(",
    ")",
    "`",
    "\\`",
    "'",
    "\"",
    "${",
    "}",
    "${x:-",
    "${a[",
    "]",
    "$((",
    "))",
    "<(",
    ">(",
    "<<E\n",
    "<<-E\n",
    "\nE\n",
    "<<'E'\n",
    "<<<",
    ">",
    ">>",
    "2>&1",
    "\\\n",
    "\\",
    "$'\\x72m'",
    "$'\\0'",
    "{",
    "}",
    "(",
    "if x; then",
    "fi",
    "for i in a; do",
    "done",
    "case x in a)",
    ";;",
    "esac",
    "f() {",
    "eval",
    "bash -c",
    "env -C /",
    "xargs",
    "find . -exec",
    "\\;",
    "trap",
    "#",
    "~",
    "*",
    "x=1",
    "$x",
    "!",
    "[[",
    "]]",
    "-eq",
    "coproc",
    "time",
    "declare -x",
    "sed -i",
    "tee",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn any_text_is_judged(line in "\\PC{0,300}") {
        judge_within(line, Duration::from_secs(20));
    }

    #[test]
    fn bash_syntax_soup_is_judged(pieces in prop::collection::vec(prop::sample::select(PIECES), 0..60)) {
        judge_within(pieces.concat(), Duration::from_secs(20));
    }
}

/// Lines near the 100,000-byte cap built to be expensive for a parser or a walker: each
/// is answered, and none is allowed (each is malformed, assigns, or ends in a denied
/// command).
#[test]
fn hostile_lines_at_the_size_cap_are_refused() {
    let cap = 99_000;
    let fill = |unit: &str| unit.repeat(cap / unit.len());
    let lines = [
        fill("cat <<E "),
        fill("a|"),
        format!("{}curl x", fill("a;")),
        fill("$("),
        fill("`"),
        fill("("),
        fill("${x:-"),
        fill("\"$(\""),
        fill("a<(b "),
        fill("x=$(y) "),
        fill("{ "),
        format!("curl x;{}", fill("a&&")),
        format!("{}\ncurl x", fill("\\\n")),
    ];
    for line in lines {
        let head: String = line.chars().take(16).collect();
        let decision = judge_within(line, Duration::from_secs(120));
        assert_ne!(decision, Decision::Allow, "{head:?}…");
    }
}

/// tree-sitter-bash's scanner hands characters past U+00FF to `isdigit` after a `{` and
/// reads out of bounds: this line crashed the process before the judge read every
/// non-ASCII byte as a plain word character (found by `any_text_is_judged`).
#[test]
fn a_line_that_crashed_the_parser_is_judged() {
    for line in [
        "{\u{e0136}",
        "git status; echo {\u{e0136}",
        "{\u{e0136}; curl x",
    ] {
        judge_within(line.to_string(), Duration::from_secs(20));
    }
    assert_eq!(
        judge_within("{\u{e0136}; curl x".to_string(), Duration::from_secs(20)),
        Decision::Deny
    );
}
