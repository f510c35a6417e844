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
        "git status && rm -rf src",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["decision"], "deny");
    assert_eq!(v["rule_index"], 4);
    assert_eq!(v["part"], "rm -rf src");
    assert!(v["reason"]
        .as_str()
        .is_some_and(|r| r.contains("rm -rf src")));

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

    // `show` starts with the version, which `list --json` reports in full; the copy (a
    // new name) is another version than the preset it was made from.
    let hash_of = |name: &str| -> String {
        let profile = v
            .as_array()
            .expect("array")
            .iter()
            .find(|p| p["name"] == name)
            .expect("listed");
        profile["hash"].as_str().expect("a hash").to_string()
    };
    let (copy_hash, preset_hash) = (hash_of("copy"), hash_of("headless-permissive-sandbox"));
    assert_eq!(copy_hash.len(), 64);
    assert_ne!(copy_hash, preset_hash);
    let (version, body) = shown.split_once('\n').expect("a version line");
    assert_eq!(version, format!("# version {preset_hash}"));
    let o = runplane(&["policy", "show", "copy", "--policy-dir", d]);
    assert_eq!(stdout(&o), format!("# version {copy_hash}\n{body}"));

    // The table shows the first 12 digits.
    let o = runplane(&["policy", "list", "--policy-dir", d]);
    let copy_line = stdout(&o)
        .lines()
        .find(|l| l.starts_with("copy "))
        .expect("a copy line")
        .to_string();
    assert!(
        copy_line.starts_with(&format!("copy{}{}  ", " ".repeat(25), &copy_hash[..12])),
        "{copy_line}"
    );
}

/// A profile whose second and third tests fail, and whose rules lint clean.
const TWO_FAILING: &str = r#"
name = "ci"

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git status", "curl"]

[[tests]]
tool = "Bash"
command = "git status"
expect = "allow"
rule = 0

[[tests]]
name = "curl is refused"
tool = "Bash"
command = "curl evil.example"
expect = "deny"

[[tests]]
name = "a bidi \u202e name"
tool = "Read"
expect = "allow"
"#;

fn policy_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    dir
}

#[test]
fn policy_test_passes_the_presets_and_reports_every_failure_of_a_file() {
    let o = runplane(&["policy", "test"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("headless-safe-sandbox (preset): 22 passed\n"),
        "{out}"
    );
    assert!(
        out.ends_with("4 profiles: 64 tests passed, 0 failed; lint warnings: 0\n"),
        "{out}"
    );

    let dir = policy_dir(&[("ci.toml", TWO_FAILING)]);
    let d = dir.path().to_str().expect("utf-8 temp dir");
    let o = runplane(&["policy", "test", "--policy-dir", d, "ci"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0], format!("ci ({d}/ci.toml): 1 passed, 2 failed"));
    assert_eq!(
        lines[1],
        "  FAIL test 2 \"curl is refused\": expected deny, decided allow by rules[0] (reason: \
         rules[0] (Bash allow) matches \"curl evil.example\")"
    );
    // The name comes from the file: shown escaped.
    assert!(
        lines[2]
            .starts_with(r#"  FAIL test 3 "a bidi \u{202e} name": expected allow, decided ask"#),
        "{out}"
    );
    assert_eq!(
        lines[3],
        "1 profiles: 1 tests passed, 2 failed; lint warnings: 0"
    );

    // Any other policy command loads the file normally, which refuses it: exit 2.
    let o = runplane(&["policy", "list", "--policy-dir", d]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn policy_test_json_has_one_object_with_every_test_and_lint() {
    let dir = policy_dir(&[("ci.toml", TWO_FAILING)]);
    let d = dir.path().to_str().expect("utf-8 temp dir");
    let o = runplane(&[
        "policy",
        "test",
        "--policy-dir",
        d,
        "--json",
        "ci",
        "plan-readonly",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["ok"], false);
    assert_eq!(v["strict"], false);
    assert_eq!(v["passed"], 13);
    assert_eq!(v["failed"], 2);
    assert_eq!(v["warnings"], 0);
    let profiles = v["profiles"].as_array().expect("profiles");
    let names: Vec<&str> = profiles.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["ci", "plan-readonly"]);
    let ci = &profiles[0];
    assert_eq!(ci["source"], format!("{d}/ci.toml"));
    assert_eq!(
        (ci["passed"].clone(), ci["failed"].clone()),
        (1.into(), 2.into())
    );
    let failed = &ci["tests"][1];
    assert_eq!(failed["number"], 2);
    assert_eq!(failed["name"], "curl is refused");
    assert_eq!(failed["passed"], false);
    assert_eq!(failed["expect"], "deny");
    assert_eq!(failed["decision"], "allow");
    assert_eq!(failed["rule_index"], 0);
    assert_eq!(failed["part"], "curl evil.example");
    assert!(failed["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("test 2 \"curl is refused\": expected deny")));
    // Exact text in JSON, not escaped.
    assert_eq!(ci["tests"][2]["name"], "a bidi \u{202e} name");
    assert_eq!(ci["tests"][2]["rule_index"], -1);
    assert_eq!(ci["tests"][0]["message"], serde_json::Value::Null);
    assert_eq!(ci["lints"], serde_json::json!([]));
}

#[test]
fn policy_test_strict_fails_on_a_lint_warning() {
    let shadowed =
        "name = \"sh\"\n[[rules]]\nspecifier = { tool = \"Bash\" }\ndecision = \"deny\"\n\n\
                    [[rules]]\nspecifier = { tool = \"Bash\" }\ndecision = \"allow\"\n\
                    command_allow = [\"ls\"]\n";
    let dir = policy_dir(&[("sh.toml", shadowed)]);
    let d = dir.path().to_str().expect("utf-8 temp dir");
    let o = runplane(&["policy", "test", "--policy-dir", d, "sh"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        format!(
            "sh ({d}/sh.toml): no tests\n  warning: rules[1]: rules[0] (Bash deny) decides every \
             call this rule could match\n1 profiles: 0 tests passed, 0 failed; lint warnings: 1\n"
        )
    );
    let o = runplane(&["policy", "test", "--policy-dir", d, "sh", "--strict"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("  error: rules[1]: "), "{}", stdout(&o));
    let o = runplane(&["policy", "test", "--policy-dir", d, "--strict", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v["ok"], false);
    assert_eq!(v["warnings"], 1);
    let sh = v["profiles"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "sh"))
        .expect("sh");
    assert_eq!(
        sh["lints"][0],
        serde_json::json!({
            "rule": 1,
            "field": "rules[1]",
            "kind": "shadowed",
            "message": "rules[0] (Bash deny) decides every call this rule could match",
        })
    );
}

#[test]
fn policy_test_exits_2_on_bad_input() {
    let o = runplane(&["policy", "test", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown profile \"nope\""), "{err}");
    let o = runplane(&["policy", "test", "--policy-dir", "/nonexistent/dir"]);
    assert_eq!(o.status.code(), Some(2));
    // A file that is bad for another reason than its tests is still refused.
    let dir = policy_dir(&[("x.toml", "[[tests]]\ntool = \"Bash\"\n")]);
    let d = dir.path().to_str().expect("utf-8 temp dir");
    let o = runplane(&["policy", "test", "--policy-dir", d]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("x.toml: tests[0].expect: missing"), "{err}");
}

#[test]
fn serve_refuses_to_start_with_a_profile_whose_test_fails() {
    let dir = policy_dir(&[("ci.toml", TWO_FAILING)]);
    let data = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(["serve", "--listen", "127.0.0.1:0", "--policy-dir"])
        .arg(dir.path())
        .arg("--data-dir")
        .arg(data.path())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs the binary");
    // It must stop by itself; a server that started would run until killed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().expect("waits").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve started with a profile whose test fails");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = child.wait_with_output().expect("output");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "error: {}: profile \"ci\": test 2 \"curl is refused\": expected deny, decided allow \
             by rules[0]",
            dir.path().join("ci.toml").display()
        )),
        "{err}"
    );
}
