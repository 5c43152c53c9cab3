#!/usr/bin/env python3
"""An agent arm for kwb experiment: it asks a model for a kernel through kwb's proxy, checks the answer through the
feedback channel, and retries with kwb check's errors (docs/arms.md, "Calling a model"; generators/README.md).

One attempt:
  1. builds a prompt from the task (task.toml, README.md), the candidate ABI (kwb/kernel.h), the incumbent's source,
     the trajectory's history (each earlier attempt's category, speedup and failure kinds) and, when the arm's folder
     holds one, a skill file (LLM_SKILL, default skill.md);
  2. calls the model (LLM_API: "openai", chat completions, or "anthropic", messages) on the endpoint LLM_ENDPOINT (the
     first of KWB_MODEL_ENDPOINTS by default) with LLM_MODEL, over kwb's Unix socket (LLM_TRANSPORT=tcp: over TCP to
     KWB_MODEL_URL, the loopback bridge);
  3. takes the last fenced code block of the answer as the candidate and checks it (POST /kwb/check);
  4. on a failed check, sends kwb check's failures back and asks for the whole corrected source, up to LLM_TURNS
     model calls in all (default 3);
  5. writes the last candidate to KWB_OUTPUT (kwb judges it, passed or not) and KWB_OUTPUT.json: the turns, each
     check's verdict, the model, whether a skill was read.

Standard library only (python3 on Debian 12). Exit 0 with a candidate; 3 when the model gave no code; 4 when the
proxy refused a call (a budget: the attempt ends as `budget` anyway).
"""
import http.client
import json
import os
import re
import socket
import sys


class UnixConnection(http.client.HTTPConnection):
    """HTTP over kwb's Unix socket: the sandbox's only way out."""

    def __init__(self, path, timeout):
        super().__init__("kwb", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def connection():
    """kwb's Unix socket, or with LLM_TRANSPORT=tcp the same proxy over TCP (KWB_MODEL_URL, the sandbox's loopback
    bridge), as an agent that takes only a base URL reaches it."""
    if os.environ.get("LLM_TRANSPORT", "unix") == "tcp":
        host, _, port = os.environ["KWB_MODEL_URL"].removeprefix("http://").rstrip("/").partition(":")
        return http.client.HTTPConnection(host, int(port or 80), timeout=900)
    return UnixConnection(os.environ["KWB_MODEL_SOCKET"], timeout=900)


def post(path, body, content_type="application/json", headers=None):
    c = connection()
    c.request("POST", path, body=body, headers={"Content-Type": content_type, **(headers or {})})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def read(path, limit=200_000):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return ""


def history_text():
    lines = []
    root = os.environ.get("KWB_HISTORY", "")
    for n in sorted((d for d in os.listdir(root) if d.isdigit()), key=int) if os.path.isdir(root) else []:
        try:
            r = json.loads(read(os.path.join(root, n, "result.json")))
        except ValueError:
            continue
        pct = r.get("improvement_pct")
        speed = f"{pct:+.1f}% [{r.get('ci_low_pct'):+.1f}, {r.get('ci_high_pct'):+.1f}]" if pct is not None else "-"
        lines.append(f"attempt {n}: {r.get('category')} ({r.get('decision')}), {speed}, "
                     f"failures {', '.join(r.get('failure_kinds') or []) or 'none'}")
    return "\n".join(lines) or "no earlier attempts"


def first_prompt(skill):
    task_dir = os.environ["KWB_TASK_DIR"]
    parts = [
        f"Optimize the {os.environ['KWB_TASK']} kernel for the {os.environ['KWB_BACKEND']} backend. Reply with the "
        "whole new source file in one fenced code block (```cpp ... ```). It must keep the ABI and pass kwb's "
        "checks against an independent oracle; it is judged on speed against the incumbent.",
        "task.toml:\n" + read(os.path.join(task_dir, "task.toml")),
        "README.md:\n" + read(os.path.join(task_dir, "README.md")),
        "The ABI (kwb/kernel.h):\n" + read(os.path.join(os.environ["KWB_INCLUDE_DIR"], "kwb", "kernel.h")),
        "The incumbent:\n```cpp\n" + read(os.environ["KWB_INCUMBENT"]) + "\n```",
        "Earlier attempts:\n" + history_text(),
    ]
    if skill:
        parts.append("SKILL:\n" + skill)
    return "\n\n".join(parts)


def call_model(messages):
    api = os.environ.get("LLM_API", "openai")
    endpoint = os.environ.get("LLM_ENDPOINT") or os.environ.get("KWB_MODEL_ENDPOINTS", "").split(",")[0]
    model = os.environ.get("LLM_MODEL", "")
    max_tokens = int(os.environ.get("LLM_MAX_TOKENS", "4096"))
    if api == "anthropic":
        path, body = f"/{endpoint}/v1/messages", {"model": model, "max_tokens": max_tokens, "messages": messages}
    else:
        path, body = f"/{endpoint}/v1/chat/completions", {"model": model, "max_tokens": max_tokens,
                                                           "messages": messages}
    extra = {"anthropic-version": "2023-06-01"} if api == "anthropic" else {}
    status, data = post(path, json.dumps(body).encode(), headers=extra)
    if status != 200:
        print(f"llm_agent: the model call was answered {status}: {data[:500]!r}", file=sys.stderr)
        sys.exit(4)
    answer = json.loads(data)
    if api == "anthropic":
        return "".join(b.get("text", "") for b in answer.get("content", []) if b.get("type") == "text")
    return answer["choices"][0]["message"]["content"] or ""


def extract_code(text):
    blocks = re.findall(r"```[a-zA-Z+]*\n(.*?)```", text, re.S)
    return blocks[-1] if blocks else None


def check(code):
    status, data = post("/kwb/check", code.encode(), "text/plain")
    try:
        result = json.loads(data)
    except ValueError:
        result = {}
    return status, result


def failures_text(result):
    lines = [f"kwb check says: {result.get('verdict', 'no verdict')}"]
    for f in result.get("failures", [])[:8]:
        where = f" in case {f['case']}" if f.get("case") else ""
        lines.append(f"- {f.get('reason')}{where}: {f.get('detail', '')[:1500]}")
    lines.append("Fix it and reply with the whole corrected source in one fenced code block.")
    return "\n".join(lines)


def main():
    skill_file = os.environ.get("LLM_SKILL", "skill.md")
    skill = read(skill_file) if os.path.isfile(skill_file) else ""
    messages = [{"role": "user", "content": first_prompt(skill)}]
    turns = int(os.environ.get("LLM_TURNS", "3"))
    code, verdicts = None, []
    for turn in range(1, turns + 1):
        answer = call_model(messages)
        messages.append({"role": "assistant", "content": answer})
        draft = extract_code(answer)
        if draft is None:
            messages.append({"role": "user", "content": "Reply with the whole source in one fenced code block."})
            continue
        code = draft
        status, result = check(code)
        verdicts.append(result.get("verdict", f"http {status}"))
        print(f"llm_agent: turn {turn}: check {verdicts[-1]}")
        if result.get("verdict") == "PASS" or status != 200:
            break
        messages.append({"role": "user", "content": failures_text(result)})
    if code is None:
        print("llm_agent: the model gave no code", file=sys.stderr)
        return 3
    with open(os.environ["KWB_OUTPUT"], "w") as f:
        f.write(code)
    with open(os.environ["KWB_OUTPUT"] + ".json", "w") as f:
        json.dump({"turns": len([m for m in messages if m["role"] == "assistant"]), "checks": verdicts,
                   "model": os.environ.get("LLM_MODEL", ""), "skill": bool(skill)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
