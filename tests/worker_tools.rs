//! Hook payloads captured from the real Claude Code 2.1.328 and Codex 0.169.0
//! (`tests/fixtures/hooks/`), read into the `ToolCallRequest` runplane judges.

use runplane::worker::tools::{tool_call, PayloadError};

fn fixture(name: &str) -> serde_json::Value {
    let path = format!(
        "{}/tests/fixtures/hooks/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn each_tool_is_read_into_the_fields_rules_judge() {
    let bash = tool_call(&fixture("claude_PreToolUse_Bash")).unwrap();
    assert_eq!(
        (
            bash.tool.as_str(),
            bash.call_id.as_str(),
            bash.command.as_str()
        ),
        (
            "Bash",
            "toolu_fc27c9977c4c4bbfbcbf",
            "touch /tmp/probe_bash && echo made"
        )
    );
    assert_eq!(
        bash.input,
        r#"{"command":"touch /tmp/probe_bash && echo made","description":"probe"}"#
    );
    let edit = tool_call(&fixture("claude_PreToolUse_Edit")).unwrap();
    assert_eq!(edit.path, "/work/agents-lab/runs/tools/work/a.txt");
    assert!(edit.input.contains(r#""new_string":"bye""#));
    for name in ["claude_PreToolUse_Read", "claude_PreToolUse_Write"] {
        assert_eq!(
            tool_call(&fixture(name)).unwrap().path,
            "/work/agents-lab/runs/tools/work/a.txt"
        );
    }
    assert_eq!(
        tool_call(&fixture("claude_PreToolUse_WebFetch"))
            .unwrap()
            .url,
        "http://127.0.0.1:9/x"
    );
    // A subagent's own call comes through the same hook, and is judged the same way.
    let sub = tool_call(&fixture("claude_PreToolUse_Bash_sub")).unwrap();
    assert_eq!(sub.command, "touch /tmp/probe_sub && echo sub");
    // The subagent tool itself: judged by name, its prompt in the input.
    let agent = tool_call(&fixture("claude_PreToolUse_Agent")).unwrap();
    assert_eq!(
        (
            agent.tool.as_str(),
            agent.command.as_str(),
            agent.path.as_str()
        ),
        ("Agent", "", "")
    );
    assert!(agent.input.contains("SUBAGENT:s1 please do it"));
    // Codex reports its shell tool as Bash and apply_patch with the patch as `command`.
    assert_eq!(
        tool_call(&fixture("codex_PreToolUse_Bash"))
            .unwrap()
            .command,
        "touch /tmp/cprobe_shell && echo made"
    );
    let patch = tool_call(&fixture("codex_PreToolUse_apply_patch")).unwrap();
    assert_eq!(
        (patch.paths, patch.command),
        (vec!["a.txt".to_string()], String::new())
    );
}

#[test]
fn a_payload_without_a_tool_or_call_id_is_refused() {
    assert_eq!(
        tool_call(&fixture("claude_Stop")),
        Err(PayloadError::Missing("tool_name"))
    );
    assert_eq!(
        tool_call(&serde_json::json!([1])),
        Err(PayloadError::NotAnObject)
    );
    let no_id = serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "ls"}});
    assert_eq!(tool_call(&no_id), Err(PayloadError::Missing("tool_use_id")));
    // A patch whose files cannot be read is never judged without them.
    let blind = serde_json::json!({"tool_name": "apply_patch", "tool_use_id": "c",
        "tool_input": {"command": "*** Begin Patch\n*** Frobnicate: x\n*** End Patch"}});
    assert_eq!(
        tool_call(&blind),
        Err(PayloadError::Unreadable(
            "apply_patch",
            "the patch names no file"
        ))
    );
}

#[test]
fn an_input_over_the_servers_cap_is_cut_to_fit_and_stays_valid_json() {
    use runplane::worker::tools::{fit, MAX_INPUT_BYTES};
    let big = serde_json::json!({
        "file_path": "/work/src/big.txt",
        "content": "é".repeat(40_000),
        "dangerouslyDisableSandbox": true,
        "note": "\"".repeat(5_000),
    });
    let text = fit(big.clone());
    assert!(text.len() <= MAX_INPUT_BYTES, "{}", text.len());
    let back: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back["file_path"], big["file_path"]);
    assert_eq!(back["dangerouslyDisableSandbox"], true);
    let content = back["content"].as_str().unwrap();
    assert!(
        content.starts_with("éé") && content.contains("…[runplane cut "),
        "{}",
        &content[content.len() - 40..]
    );
    // Small inputs are untouched; one that is all small fields becomes a note of its size.
    let small = serde_json::json!({"command": "git status"});
    assert_eq!(fit(small.clone()), small.to_string());
    let fields: serde_json::Map<String, serde_json::Value> = (0..20_000)
        .map(|i| (format!("k{i}"), serde_json::json!(i)))
        .collect();
    let note = fit(serde_json::Value::Object(fields));
    assert!(note.starts_with(r#"{"runplane":"input of "#), "{note}");
}
