#!/usr/bin/env python3
"""Scripted stand-in for the OpenAI Responses API as used by Codex (stdlib only).

Usage: fake_openai.py PORT SCRIPT.json [LOGDIR]

SCRIPT.json: {"main": [ {"name": "exec_command", "arguments": {...}}, ... ], "final": "text"}
 (a bare list is accepted as "main").  Each step becomes one `function_call`
 output item (arguments JSON-encoded).  A step may instead be
 {"raw_item": {...}} to emit an arbitrary output item.
The step index = number of function_call / custom_tool_call / local_shell_call
items already present in the request's `input`.  When exhausted, an assistant
message with script["final"] is returned.

Serves POST .../responses as SSE: response.created, response.in_progress,
response.output_item.added, response.output_item.done, response.completed.
Everything else is logged and answered with a small JSON body.
Requests are logged to LOGDIR/requests.jsonl; the last request body to
LOGDIR/last_body.json.
"""
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 8766
SCRIPT_PATH = sys.argv[2] if len(sys.argv) > 2 else "script.json"
LOGDIR = sys.argv[3] if len(sys.argv) > 3 else "."
LOCK = threading.Lock()
CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


def load_script():
    with open(SCRIPT_PATH) as f:
        s = json.load(f)
    if isinstance(s, list):
        s = {"main": s}
    s.setdefault("final", "All done.")
    return s


def log(obj):
    with LOCK:
        with open(os.path.join(LOGDIR, "requests.jsonl"), "a") as f:
            f.write(json.dumps(obj) + "\n")


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log({"t": time.time(), "method": "GET", "path": self.path, "headers": {k: v for k, v in self.headers.items() if k.lower() != "authorization"}})
        if "/models" in self.path:
            return self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "fake"}]})
        self._json(404, {"error": {"message": "fake: not found", "type": "not_found"}})

    def do_POST(self):
        ln = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(ln) if ln else b""
        if self.headers.get("content-encoding") == "zstd":
            body = {"_zstd": True}
        else:
            try:
                body = json.loads(raw) if raw else {}
            except Exception:
                body = {"_raw": raw[:2000].decode("utf-8", "replace")}
        path = self.path.split("?")[0]
        entry = {"t": time.time(), "method": "POST", "path": self.path, "model": body.get("model"),
                 "stream": body.get("stream"),
                 "tool_names": [t.get("name") or t.get("type") for t in body.get("tools", []) if isinstance(t, dict)]}
        if not path.endswith("/responses"):
            entry["body"] = body
            log(entry)
            return self._json(404, {"error": {"message": "fake: unsupported", "type": "not_found"}})
        with open(os.path.join(LOGDIR, "last_body.json"), "w") as f:
            json.dump(body, f, indent=1)
        items = body.get("input", []) if isinstance(body.get("input"), list) else []
        n = sum(1 for it in items if isinstance(it, dict) and it.get("type") in CALL_TYPES)
        entry["tool_outputs"] = [it for it in items if isinstance(it, dict) and it.get("type") in OUTPUT_TYPES]
        script = load_script()
        steps = script["main"]
        step = steps[n] if n < len(steps) else None
        entry.update({"step": n, "answer": step})
        log(entry)
        if step is None:
            item = {"type": "message", "role": "assistant", "id": "msg_" + uuid.uuid4().hex[:16], "status": "completed",
                    "content": [{"type": "output_text", "text": script["final"], "annotations": []}]}
        elif "raw_item" in step:
            item = dict(step["raw_item"])
            item.setdefault("id", "it_" + uuid.uuid4().hex[:16])
        else:
            args = step.get("arguments", {})
            item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:16], "status": "completed",
                    "call_id": "call_" + uuid.uuid4().hex[:16], "name": step["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args)}
        self._stream(body.get("model") or "fake-model", item)

    def _stream(self, model, item):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        rid = "resp_" + uuid.uuid4().hex[:16]
        seq = [0]

        def ev(name, data):
            data = dict(data)
            data["type"] = name
            data["sequence_number"] = seq[0]
            seq[0] += 1
            self.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(data))).encode())
            self.wfile.flush()

        resp = {"id": rid, "object": "response", "created_at": int(time.time()), "status": "in_progress",
                "model": model, "output": []}
        ev("response.created", {"response": resp})
        ev("response.in_progress", {"response": resp})
        ev("response.output_item.added", {"output_index": 0, "item": item})
        ev("response.output_item.done", {"output_index": 0, "item": item})
        done = dict(resp)
        done.update({"status": "completed", "output": [item],
                     "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                               "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}})
        ev("response.completed", {"response": done})


if __name__ == "__main__":
    os.makedirs(LOGDIR, exist_ok=True)
    srv = ThreadingHTTPServer(("127.0.0.1", PORT), H)
    print("fake_openai listening on", PORT, flush=True)
    srv.serve_forever()
