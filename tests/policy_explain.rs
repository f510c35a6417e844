//! Every verdict says which rule decided (or that the mode did), which part of a compound
//! command decided, and, for a part the judge cannot know or may not allow, why.

use runplane::domain::Decision;
use runplane::policy::{parse_profile, CompiledProfile, ProfileFormat, ToolCall};

const PROFILE: &str = r#"
name = "explain"
mode = "default"

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
command_allow = ["rm"]

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git status", "echo"]
"#;

/// Decision, reason, rule index and part of a Bash line.
fn explain(command: &str) -> (Decision, String, Option<usize>, Option<String>) {
    let profile =
        CompiledProfile::compile(parse_profile(PROFILE, ProfileFormat::Toml, "explain").unwrap())
            .unwrap();
    let verdict = profile.evaluate(&ToolCall {
        tool: "Bash",
        command,
        ..ToolCall::default()
    });
    (
        verdict.decision,
        verdict.reason,
        verdict.rule_index,
        verdict.part,
    )
}

#[test]
fn a_rule_that_decides_is_named_with_the_part_it_decided() {
    assert_eq!(
        explain("git status && rm -rf /"),
        (
            Decision::Deny,
            "rules[0] (Bash deny) matches \"rm -rf /\"".to_string(),
            Some(0),
            Some("rm -rf /".to_string()),
        )
    );
}

#[test]
fn a_part_the_judge_cannot_know_says_why() {
    assert_eq!(
        explain("git status && $x foo"),
        (
            Decision::Ask,
            "no rule matches \"$x foo\"; it is indeterminate (the command name is not known \
             before it runs); mode default gives ask"
                .to_string(),
            None,
            Some("$x foo".to_string()),
        )
    );
    assert_eq!(
        explain("echo hi > $f").1,
        "no rule matches the write \"> $f\" (judged as Write); its target is not known before \
         it runs; mode default gives ask"
    );
    assert_eq!(
        explain("x=1; echo $x").1,
        "no rule matches \"x=1\"; it sets shell variables; mode default gives ask"
    );
}
