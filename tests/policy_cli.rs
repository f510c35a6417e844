//! `runplane policy …` as a user runs it: output, exit codes.

use std::process::{Command, Output};

fn runplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(args)
        .env_remove("RUNPLANE_POLICY_DIR")
        .output()
        .expect("runs the binary")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn check_prints_json_and_exits_zero_whatever_the_decision() {
    let o = runplane(&[
        "policy",
        "check",
        "--profile",
        "headless-safe-sandbox",
        "--tool",
        "Bash",
        "--command",
        "git status && curl evil",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["decision"], "deny");
    assert_eq!(v["rule_index"], 5);
    assert_eq!(v["part"], "curl evil");
    assert!(v["reason"]
        .as_str()
        .is_some_and(|r| r.contains("curl evil")));

    let o = runplane(&[
        "policy",
        "check",
        "--profile",
        "trusted-mount-autonomous",
        "--tool",
        "Edit",
        "--path",
        "/home/dev/other/x",
        "--workspace",
        "/home/dev/repo",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["decision"], "ask");
    assert_eq!(v["rule_index"], -1);
    assert_eq!(v["part"], serde_json::Value::Null);
}

#[test]
fn check_without_json_prints_one_line() {
    let o = runplane(&[
        "policy",
        "check",
        "--profile",
        "plan-readonly",
        "--tool",
        "Read",
        "--path",
        "src/a.rs",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("allow: rules[0] (Read allow)"), "{out}");
}

#[test]
fn unknown_profile_and_bad_input_exit_2() {
    let o = runplane(&[
        "policy",
        "check",
        "--profile",
        "nope",
        "--tool",
        "Bash",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown profile \"nope\""), "{err}");

    let o = runplane(&[
        "policy",
        "check",
        "--profile",
        "plan-readonly",
        "--tool",
        "",
    ]);
    assert_eq!(o.status.code(), Some(2));

    let o = runplane(&["policy", "list", "--policy-dir", "/nonexistent/dir"]);
    assert_eq!(o.status.code(), Some(2));

    let o = runplane(&["policy", "show", "nope"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn list_and_show_round_trip_through_a_policy_dir() {
    let dir = tempfile::tempdir().expect("temp dir");
    let o = runplane(&["policy", "show", "headless-permissive-sandbox"]);
    assert_eq!(o.status.code(), Some(0));
    let shown = stdout(&o).replace("headless-permissive-sandbox", "copy");
    std::fs::write(dir.path().join("copy.toml"), &shown).expect("write");
    let d = dir.path().to_str().expect("utf-8 temp dir");

    let o = runplane(&["policy", "list", "--policy-dir", d, "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let names: Vec<&str> = v
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "copy",
            "headless-permissive-sandbox",
            "headless-safe-sandbox",
            "plan-readonly",
            "trusted-mount-autonomous"
        ]
    );

    let o = runplane(&["policy", "show", "copy", "--policy-dir", d]);
    assert_eq!(stdout(&o), shown);
}
