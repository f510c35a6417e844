#!/usr/bin/env python3
"""Scripted stand-in for the Anthropic Messages API (stdlib only).

Usage: fake_anthropic.py PORT SCRIPT.json [LOGDIR]

SCRIPT.json is either
  [ {"name": "Bash", "input": {...}}, ... ]                       (main agent only)
or
  {"main": [ ... ], "sub": {"KEY": [ ... ]}, "final": "text"}
A request whose first user message contains "SUBAGENT:KEY" is answered from
script["sub"]["KEY"] (used for Task/Agent subagents, which have their own
message history).

The step is chosen by counting tool_use blocks already present in the
request's messages.  When the script is exhausted a text answer with
stop_reason end_turn is returned.  Requests without a `tools` array (title
generation, quota probes, ...) get a short text answer.

Every request is logged (path, headers subset, body) as one JSON line to
LOGDIR/requests.jsonl; the last tool_result blocks seen are logged too so we
can see what the model was told.
"""
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 8765
SCRIPT_PATH = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FAKE_SCRIPT", "script.json")
LOGDIR = sys.argv[3] if len(sys.argv) > 3 else "."
LOCK = threading.Lock()


def load_script():
    with open(SCRIPT_PATH) as f:
        s = json.load(f)
    if isinstance(s, list):
        s = {"main": s}
    s.setdefault("sub", {})
    s.setdefault("final", "All done.")
    return s


def log(obj):
    with LOCK:
        with open(os.path.join(LOGDIR, "requests.jsonl"), "a") as f:
            f.write(json.dumps(obj) + "\n")


def text_of(content):
    if isinstance(content, str):
        return content
    out = []
    for b in content or []:
        if isinstance(b, dict) and b.get("type") == "text":
            out.append(b.get("text", ""))
    return "\n".join(out)


def count_tool_uses(messages):
    n = 0
    for m in messages:
        if m.get("role") == "assistant" and isinstance(m.get("content"), list):
            n += sum(1 for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use")
    return n


def last_tool_results(messages):
    res = []
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    res.append(b)
    return res


def pick(body):
    script = load_script()
    messages = body.get("messages", [])
    first_user = ""
    for m in messages:
        if m.get("role") == "user":
            first_user = text_of(m.get("content"))
            break
    steps = script["main"]
    which = "main"
    for key, sub in script["sub"].items():
        if ("SUBAGENT:" + key) in first_user:
            steps, which = sub, "sub:" + key
            break
    n = count_tool_uses(messages)
    if n < len(steps):
        return which, n, steps[n]
    return which, n, None


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _read(self):
        ln = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(ln) if ln else b""
        try:
            return json.loads(raw) if raw else {}
        except Exception:
            return {"_raw": raw.decode("utf-8", "replace")}

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log({"t": time.time(), "method": "GET", "path": self.path})
        if self.path.startswith("/v1/models"):
            return self._json(200, {"data": [{"id": "claude-sonnet-4-5", "type": "model", "display_name": "fake"}], "has_more": False})
        self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "fake: not found"}})

    def do_HEAD(self):
        log({"t": time.time(), "method": "HEAD", "path": self.path})
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        body = self._read()
        path = self.path.split("?")[0]
        entry = {"t": time.time(), "method": "POST", "path": self.path,
                 "model": body.get("model"), "stream": body.get("stream"),
                 "has_tools": bool(body.get("tools")),
                 "tool_names": [t.get("name") for t in body.get("tools", []) if isinstance(t, dict)],
                 "n_messages": len(body.get("messages", [])),
                 "max_tokens": body.get("max_tokens")}
        if path.endswith("/count_tokens"):
            log(entry)
            return self._json(200, {"input_tokens": 100})
        if not path.endswith("/v1/messages"):
            entry["body"] = body
            log(entry)
            return self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "fake"}})
        msgs = body.get("messages", [])
        entry["tool_results"] = last_tool_results(msgs)
        entry["first_user"] = (text_of(msgs[0].get("content")) if msgs else "")[:300]
        if body.get("tools"):
            which, n, step = pick(body)
        else:
            which, n, step = "notools", 0, None
        entry.update({"which": which, "step": n, "answer": step})
        with open(os.path.join(LOGDIR, "last_body.json"), "w") as f:
            json.dump(body, f, indent=1)
        log(entry)
        model = body.get("model") or "claude-sonnet-4-5"
        if step is None:
            text = load_script()["final"] if which != "notools" else "ok"
            content = [{"type": "text", "text": text}]
            stop = "end_turn"
        else:
            content = [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20],
                        "name": step["name"], "input": step.get("input", {})}]
            stop = "tool_use"
        if body.get("stream"):
            return self._stream(model, content, stop)
        return self._json(200, {"id": "msg_" + uuid.uuid4().hex[:20], "type": "message", "role": "assistant",
                                "model": model, "content": content, "stop_reason": stop, "stop_sequence": None,
                                "usage": {"input_tokens": 10, "output_tokens": 5}})

    def _stream(self, model, content, stop):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

        def ev(name, data):
            self.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(data))).encode())
            self.wfile.flush()

        mid = "msg_" + uuid.uuid4().hex[:20]
        ev("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
        for i, b in enumerate(content):
            if b["type"] == "text":
                ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
                ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}})
            else:
                ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                    "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                js = json.dumps(b["input"])
                half = len(js) // 2
                for part in (js[:half], js[half:]):
                    ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": part}})
            ev("content_block_stop", {"type": "content_block_stop", "index": i})
        ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}})
        ev("message_stop", {"type": "message_stop"})


if __name__ == "__main__":
    os.makedirs(LOGDIR, exist_ok=True)
    srv = ThreadingHTTPServer(("127.0.0.1", PORT), H)
    print("fake_anthropic listening on", PORT, flush=True)
    srv.serve_forever()
