#!/usr/bin/env python3
"""A scripted model for the real-Codex tests: a tiny OpenAI Responses API
(`POST /v1/responses`, answered as SSE) whose turns come from a script.

Usage: mock_model.py SCRIPT.json LOG.jsonl PORT_FILE

SCRIPT.json is a list of turns; each turn is a list of output items sent
back for one request, in order: `{"call": NAME, "args": {...}}` (a function
call, `arguments` JSON-encoded), `{"custom": NAME, "input": "..."}` (a
freeform tool call, as Codex's apply_patch may be), or `{"say": "text"}`
(an assistant message). Each request body is appended to LOG.jsonl (with its arrival time), so the
test asserts on what the model received (the tools' outputs). The port the
server listens on is written to PORT_FILE. A request past the script's end
gets a final message "script over". An argument whose value is the
string "$session_id" is replaced by the number of the last "session ID N"
the request's tool outputs mention (for `write_stdin`).
"""

import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPT_PATH, LOG_PATH, PORT_FILE = sys.argv[1:4]
with open(SCRIPT_PATH) as f:
    SCRIPT = json.load(f)
LOCK = threading.Lock()
STATE = {"turn": 0}


def last_session_id(request):
    found = None
    for item in request.get("input", []) if isinstance(request, dict) else []:
        output = item.get("output") if isinstance(item, dict) else None
        if isinstance(output, str):
            for match in re.finditer(r"session ID (\d+)", output):
                found = int(match.group(1))
    return found


def item_of(spec, turn, index, request):
    call_id = f"call{turn}_{index}"
    if "call" in spec:
        args = {
            k: (last_session_id(request) if v == "$session_id" else v)
            for k, v in spec["args"].items()
        }
        return {
            "type": "function_call",
            "id": f"fc_{turn}_{index}",
            "name": spec["call"],
            "arguments": json.dumps(args),
            "call_id": call_id,
        }
    if "custom" in spec:
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{turn}_{index}",
            "name": spec["custom"],
            "input": spec["input"],
            "call_id": call_id,
        }
    return {
        "type": "message",
        "role": "assistant",
        "id": f"msg_{turn}_{index}",
        "content": [{"type": "output_text", "text": spec["say"]}],
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [], "models": []}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            request = json.loads(raw)
        except ValueError:
            request = {"unparsed": raw.decode("utf-8", "replace")}
        with LOCK:
            turn = STATE["turn"]
            STATE["turn"] += 1
            with open(LOG_PATH, "a") as log:
                log.write(json.dumps({"path": self.path, "turn": turn, "at": time.time(), "body": request}) + "\n")
        if not self.path.rstrip("/").endswith("/responses"):
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        specs = SCRIPT[turn] if turn < len(SCRIPT) else [{"say": "script over"}]
        response_id = f"resp_{turn}"
        events = [("response.created", {"type": "response.created", "response": {"id": response_id}})]
        for index, spec in enumerate(specs):
            events.append(
                (
                    "response.output_item.done",
                    {"type": "response.output_item.done", "item": item_of(spec, turn, index, request)},
                )
            )
        events.append(
            (
                "response.completed",
                {
                    "type": "response.completed",
                    "response": {
                        "id": response_id,
                        "usage": {
                            "input_tokens": 10,
                            "input_tokens_details": None,
                            "output_tokens": 10,
                            "output_tokens_details": None,
                            "total_tokens": 20,
                        },
                    },
                },
            )
        )
        body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
