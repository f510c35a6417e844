#!/usr/bin/env python3
"""A stand-in for `claude -p` that keeps Claude Code 2.1.328's hook contract
(docs/AGENT_HOOKS.md) without a model: it reads the hooks from `--settings JSON`, runs
SessionStart hooks first (as Claude Code does before its first model request), then the
script in $FAKE_AGENT_SCRIPT (a JSON list of {"name": tool, "input": {...}}) one tool
call at a time through the PreToolUse hooks, runs the tools they allow, reports each
through PostToolUse, ends with Stop and exits 0. It prints one JSON line per call:
{"tool_use_id", "ran": bool, "why"}.

As in Claude Code: a PreToolUse hook that exits 2 blocks the tool; exit 0 with
permissionDecision allow runs it; deny blocks it; any other outcome of a hook with
"onFailure": "block" blocks it; a hook without a verdict leaves the call to `-p` mode,
which denies anything that would prompt (every tool here). With `--tools ""` (no tools:
runplane's hooks-live probe) it waits for a model that never answers, as Claude Code does.
With $FAKE_AGENT_SKIP_SESSION_START set it runs no SessionStart hook; with
$FAKE_AGENT_SKIP_PRE_TOOL_USE set it runs its tools without asking the PreToolUse hooks
(and still reports them through PostToolUse).
"""
import json
import os
import subprocess
import sys
import time


def settings():
    args = sys.argv[1:]
    value = args[args.index("--settings") + 1]
    return json.loads(value)


def hooks_for(config, event):
    for group in config.get("hooks", {}).get(event, []):
        for handler in group.get("hooks", []):
            yield handler


def run_hook(handler, payload):
    try:
        done = subprocess.run(
            ["sh", "-c", handler["command"]],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=handler.get("timeout", 600),
        )
    except subprocess.TimeoutExpired:
        return None, "timed out"
    return done, None


def pre_tool_use(config, payload):
    for handler in hooks_for(config, "PreToolUse"):
        done, failure = run_hook(handler, payload)
        if failure is None and done.returncode == 2:
            return False, "exit 2: " + done.stderr.strip()
        verdict = None
        if failure is None and done.returncode == 0 and done.stdout.strip():
            try:
                verdict = json.loads(done.stdout)["hookSpecificOutput"]["permissionDecision"]
            except (ValueError, KeyError, TypeError):
                verdict = None
        if verdict == "deny":
            return False, "deny"
        if verdict == "allow":
            continue
        if handler.get("onFailure") == "block":
            return False, "hook failed: " + (failure or done.stderr.strip())
        return False, "no verdict: -p mode denies it"
    return True, "allowed"


def run_tool(name, tool_input):
    if name == "Bash":
        done = subprocess.run(["sh", "-c", tool_input["command"]], capture_output=True, text=True)
        return {"stdout": done.stdout, "stderr": done.stderr, "interrupted": False}
    if name == "Write":
        with open(tool_input["file_path"], "w") as f:
            f.write(tool_input["content"])
        return {"type": "create", "filePath": tool_input["file_path"]}
    return {}


def main():
    config = settings()
    script = json.load(open(os.environ["FAKE_AGENT_SCRIPT"]))
    base = {"session_id": "fake-session", "transcript_path": "/dev/null", "cwd": os.getcwd()}
    if not os.environ.get("FAKE_AGENT_SKIP_SESSION_START"):
        for handler in hooks_for(config, "SessionStart"):
            run_hook(handler, dict(base, hook_event_name="SessionStart", source="startup"))
    args = sys.argv[1:]
    if "--tools" in args and args[args.index("--tools") + 1] == "":
        time.sleep(3600)
    for number, step in enumerate(script):
        call_id = "toolu_%04d" % number
        payload = dict(base, hook_event_name="PreToolUse", tool_name=step["name"],
                       tool_input=step["input"], tool_use_id=call_id)
        if os.environ.get("FAKE_AGENT_SKIP_PRE_TOOL_USE"):
            ran, why = True, "no PreToolUse hook"
        else:
            ran, why = pre_tool_use(config, payload)
        if ran:
            response = run_tool(step["name"], step["input"])
            post = dict(payload, hook_event_name="PostToolUse", tool_response=response,
                        duration_ms=5)
            for handler in hooks_for(config, "PostToolUse"):
                run_hook(handler, post)
        print(json.dumps({"tool_use_id": call_id, "ran": ran, "why": why}), flush=True)
    stop = dict(base, hook_event_name="Stop", stop_hook_active=False,
                last_assistant_message="All done.")
    for handler in hooks_for(config, "Stop"):
        run_hook(handler, stop)


main()
