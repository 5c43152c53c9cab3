#!/usr/bin/env python3
"""A scripted model endpoint for tests: OpenAI chat completions and Anthropic messages on 127.0.0.1.

Usage: fake_model.py RULES.json LOG.jsonl PORT_FILE

RULES.json is a list of {"when": TEXT, "reply_file": PATH, "fence": true}: the first rule whose `when` occurs in the
request's last user message (the empty text always does) gives the answer, the file's text in a ```cpp fence unless
fence is false. Every answer carries a usage block (input tokens: the request's bytes / 4; output: the answer's
bytes / 4) and the model named in the request. Each request is logged as one JSON line (path, the Authorization and
x-api-key headers, the rule that answered, the body), so a test sees what reached the model. The port it listens on
is written to PORT_FILE once it listens.
"""
import http.server
import json
import os
import sys

rules_path, log_path, port_file = sys.argv[1:4]
rules = json.load(open(rules_path))


def last_user_text(body):
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user":
            c = m.get("content")
            return c if isinstance(c, str) else "".join(b.get("text", "") for b in c if isinstance(b, dict))
    return ""


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.loads(raw or b"{}")
        text = last_user_text(body)
        rule = next((i for i, r in enumerate(rules) if r["when"] in text), None)
        reply = ""
        if rule is not None:
            reply = open(rules[rule]["reply_file"]).read()
            if rules[rule].get("fence", True):
                reply = "Here is the kernel.\n```cpp\n" + reply + "```\n"
        with open(log_path, "a") as log:
            log.write(json.dumps({"path": self.path, "authorization": self.headers.get("Authorization"),
                                  "x_api_key": self.headers.get("x-api-key"), "rule": rule,
                                  "body": raw.decode(errors="replace")}) + "\n")
        usage_in, usage_out = len(raw) // 4, len(reply) // 4
        model = body.get("model", "fake-1")
        if self.path.endswith("/messages"):
            out = {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                   "content": [{"type": "text", "text": reply}], "stop_reason": "end_turn",
                   "usage": {"input_tokens": usage_in, "output_tokens": usage_out}}
        else:
            out = {"id": "chatcmpl-fake", "object": "chat.completion", "model": model,
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": usage_in, "completion_tokens": usage_out,
                             "total_tokens": usage_in + usage_out}}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
