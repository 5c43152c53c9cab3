#!/usr/bin/env python3
"""A skill against no skill: generators/llm_agent through kwb's model proxy, against a scripted model whose answer is
better when the skill is in the prompt, so the true effect is known (issue 43).

Usage: llm_agent_test.py KWB_BINARY TASK_DIR LLM_AGENT_DIR [--with-replay]

The model (tests/experiment/fake_model.py on the loopback, outside every sandbox) answers a prompt that holds the
skill with the task's fused reference, and one without it with a draft that does not build; told kwb check's errors,
it answers with the baseline's own source. So arm "skill" keeps the fused kernel in its one attempt, after one check,
and arm "no-skill" checks a broken draft, fixes it, and hands in the baseline (KEEP_BASELINE, identical). Three seeds.

Checks: the verdict (B better) and the fused kernel's speedup inside B/A's interval; each arm's requests, checks,
tokens and dollars in the analysis; every request reached the model with the proxy's key and none holds it in the
storage; the report in headless Chromium (when one is installed: report_in_browser below), each attempt's exchanges
linked, no table wider than a 1280 px window. The no-skill arm reaches the proxy over TCP (LLM_TRANSPORT=tcp: the
sandbox's loopback bridge), the skill arm over the Unix socket. With --with-replay, then the same experiment with --replay, the model stopped and no key: the same
candidates, categories, checks and verdict (as long again; the test suite runs without it, and
experiment_test.an_arm_calls_a_model_... replays an untimed experiment).
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from headless_browser import Dom, browser, load_page, page_width  # noqa: E402

KEY_ENV = "KWB_TEST_LLM_KEY"
KEY = "sk-llm-agent-test-5c1e0f2a9d"


def files_holding(root, text):
    hits = []
    for p in Path(root).rglob("*"):
        if p.is_file() and not p.is_symlink() and text.encode() in p.read_bytes():
            hits.append(str(p))
    return hits


def start_model(tmp, rules):
    (tmp / "rules.json").write_text(json.dumps(rules))
    port = tmp / "port"
    server = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "fake_model.py"),
                               str(tmp / "rules.json"), str(tmp / "model.log"), str(port)])
    for _ in range(400):
        if port.exists():
            return server, f"http://127.0.0.1:{port.read_text()}"
        time.sleep(0.025)
    server.kill()
    raise RuntimeError("the fake model did not start")


def attempts(storage):
    out = {}
    for t in sorted((storage / "trajectories").iterdir()):
        record = json.loads((t / "trajectory.json").read_text())
        out[t.name] = record["attempts"]
    return out


def report_in_browser(storage, an, tmp):
    """The experiment's report.html as headless Chromium builds it (skipped, with a note, where none is installed):
    the verdict element, the arms' and the model calls' tables, a row per seed in the task's side-by-side table, the
    experiment's name as text, links that are relative and name files that exist (the skill arm's three final
    bundles, every attempt's candidate and exchanges), no request outside the page, and no table wider than a
    1280 px window."""
    chrome = browser()
    if chrome is None:
        print("llm_agent_test: no headless Chromium here (apt-get install chromium-headless-shell): the report is "
              "not opened", file=sys.stderr)
        return []
    problems = []
    page = storage / "report.html"
    text, outside, error = load_page(chrome, page, tmp)
    if text is None:
        return [error]
    dom = Dom()
    dom.feed(text)
    if f'data-verdict="{an["verdict"]}"' not in text:
        problems.append(f"no verdict element for {an['verdict']}")
    arms = [r for r in dom.rows if len(r) == 10 and r[0] in ("A no-skill", "B skill")]
    if len(arms) != 2:
        problems.append(f"the arms' table rows are {arms}, expected A no-skill and B skill")
    model_rows = [r for r in dom.rows if len(r) == 9 and r[0] in ("A no-skill", "B skill") and r[1].isdigit()]
    if [r[1] for r in model_rows] != ["6", "3"]:
        problems.append(f"the model calls table's rows are {model_rows}")
    seeds = [r for r in dom.rows if len(r) == 8 and r[0] in ("1", "2", "3")]
    if len(seeds) != 3:
        problems.append(f"the task's side-by-side rows are {seeds}, expected one per seed")
    for r in seeds:
        if not r[1].startswith("nothing kept, not measured") or r[2] != "0" or r[5] != "1":
            problems.append(f"seed row {r}: expected no-skill with nothing kept (not measured) and skill with one keep")
    if "skill <check>" not in text.replace("&lt;", "<").replace("&gt;", ">"):
        problems.append("the experiment's name did not come through as text")
    kinds = {"report.html": 3, "candidate.cpp": 6, "exchanges.jsonl": 6}
    for suffix, want in kinds.items():
        got = [h for h in dom.links if h.endswith(suffix)]
        if len(got) != want:
            problems.append(f"links to {suffix}: {got}, expected {want}")
    for href in dom.links:
        if "://" in href or href.startswith("/") or not (page.parent / href).exists():
            problems.append(f"link {href!r} is not a relative link to a file that exists")
    if error or outside:
        problems.append(f"the page: {error or ''} requested {outside}")
    probe, error = page_width(chrome, page, tmp)
    if error:
        problems.append(error)
    elif probe["over"] or probe["page"] > probe["viewport"]:
        problems.append(f"at 1280 px: {probe}: a table runs off the page")
    return problems


def main():
    if len(sys.argv) not in (4, 5) or (len(sys.argv) == 5 and sys.argv[4] != "--with-replay"):
        print(__doc__, file=sys.stderr)
        return 64
    with_replay = len(sys.argv) == 5
    kwb, task, agent = str(Path(sys.argv[1]).resolve()), Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve()
    problems = []
    with tempfile.TemporaryDirectory(prefix="kwb-llm-agent-") as tmp:
        tmp = Path(tmp)
        os.chmod(tmp, 0o755)  # kwb run as root runs its workers and generators as users of their own
        baseline = (task / "cpu" / "baseline.cpp").read_text()
        fused = (task / "cpu" / "fused.cpp").read_text()
        (tmp / "baseline.cpp").write_text(baseline)
        (tmp / "fused.cpp").write_text(fused)
        (tmp / "broken.cpp").write_text("#error a first draft that does not build\n" + baseline)
        (tmp / "skill.md").write_text("Fuse the reduction and the scaling into one pass over each row.\n")
        (tmp / "llm_agent.py").write_text((agent / "llm_agent.py").read_text())
        server, url = start_model(tmp, [
            {"when": "kwb check says", "reply_file": str(tmp / "baseline.cpp")},
            {"when": "SKILL:", "reply_file": str(tmp / "fused.cpp")},
            {"when": "", "reply_file": str(tmp / "broken.cpp")},
        ])
        # The no-skill arm speaks TCP to the sandbox's loopback bridge, as an agent that takes only a base URL does.
        arm = ('command = ["python3", "llm_agent.py"]\nenv = {{ LLM_MODEL = "fake-1"{env} }}\nfiles = [{files}]\n'
               f'[[arms.endpoints]]\nname = "fake"\nurl = "{url}"\nkey_env = "{KEY_ENV}"\n')
        (tmp / "x.toml").write_text(
            f'name = "skill <check>"\nstorage = "out"\nseeds = [1, 2, 3]\nattempts = 1\nfinal_max_minutes = 0.15\n'
            f'[validate]\nworkloads = ["decode"]\nlayouts = 2\nno_profile = true\nmax_minutes = 0.05\n'
            f'[[tasks]]\ndir = "{task}"\n'
            f'[[prices]]\nmodel = "fake-*"\ninput_usd_per_mtok = 3.0\noutput_usd_per_mtok = 15.0\n'
            '[[arms]]\nname = "no-skill"\n' + arm.format(files='"llm_agent.py"', env=', LLM_TRANSPORT = "tcp"') +
            '[[arms]]\nname = "skill"\n' + arm.format(files='"llm_agent.py", "skill.md"', env=""))
        env = dict(os.environ, KWB_KEY_DIR=str(tmp / "keys"))
        env[KEY_ENV] = KEY
        started = time.monotonic()
        run = subprocess.run([kwb, "experiment", "run", str(tmp / "x.toml")], env=env, capture_output=True, text=True,
                             timeout=1800)
        seconds = time.monotonic() - started
        server.kill()
        server.wait()
        print(run.stdout, end="")
        if run.returncode != 0:
            print(f"llm_agent_test: kwb experiment run exited {run.returncode}:\n{run.stderr[-3000:]}",
                  file=sys.stderr)
            return 1
        storage = tmp / "out"
        an = json.loads((storage / "analysis.json").read_text())
        if an["verdict"] != "B_BETTER":
            problems.append(f"verdict {an['verdict']}, expected B_BETTER (the skill's fused kernel)")
        d = an["difference"]
        # The true effect is the fused kernel's gain over the baseline (about 2x on this task here; the no-skill arm's
        # outcome is the baseline itself): the interval (three pairs, so wide) must hold it above 1, and the estimate
        # must be well above.
        if not (d["ratio_low"] > 1.0 and d["ratio"] > 1.3):
            problems.append(f"B/A {d['ratio']:.3f}x [{d['ratio_low']:.3f}, {d['ratio_high']:.3f}]: the fused kernel's "
                            "gain was not recovered")
        recorded = attempts(storage)
        for tid, atts in recorded.items():
            a = atts[0]
            skill = tid.startswith("skill--")
            want = ("kept", 1, 1, ["PASS"]) if skill else ("slower", 2, 2, ["FAIL", "PASS"])
            got = (a["category"], a["model"]["requests"], a["model"]["checks"], (a.get("meta") or {}).get("checks"))
            if got != want:
                problems.append(f"{tid}: (category, requests, checks, meta.checks) {got}, expected {want}")
            wanted_sha = hashlib.sha256((fused if skill else baseline).encode()).hexdigest()
            if a["candidate_sha256"] != wanted_sha:
                problems.append(f"{tid}: the candidate is not the {'fused' if skill else 'baseline'} source")
        cost = [arm["cost"] for arm in an["arms"]]
        if [c["model_requests"] for c in cost] != [6, 3] or not all(c["model_usd"] > 0 for c in cost):
            problems.append(f"model costs {cost}: expected 6 requests for no-skill, 3 for skill, both priced")
        seen = [json.loads(line) for line in (tmp / "model.log").read_text().splitlines()]
        if len(seen) != 9 or any(s["authorization"] != f"Bearer {KEY}" for s in seen):
            problems.append(f"the model saw {len(seen)} requests, each must carry the proxy's key: "
                            f"{[s['authorization'] for s in seen]}")
        if [s["rule"] for s in seen].count(1) != 3 or "SKILL:" in json.dumps([s for s in seen if s["rule"] == 2]):
            problems.append(f"the rules that answered: {[s['rule'] for s in seen]}")
        holding = files_holding(storage, KEY)
        if holding:
            problems.append(f"the key is in {holding}")

        problems += report_in_browser(storage, an, tmp)

        # The replay: no model, no key; the same generations and decisions.
        del env[KEY_ENV]
        again = None if not with_replay else subprocess.run([kwb, "experiment", "run", str(tmp / "x.toml"), "--storage", str(tmp / "replayed"),
                                "--replay", str(storage)], env=env, capture_output=True, text=True, timeout=1800)
        if again is None:
            pass
        elif again.returncode != 0:
            problems.append(f"the replay exited {again.returncode}: {again.stderr[-2000:]}")
        else:
            replayed = attempts(tmp / "replayed")
            for tid, atts in recorded.items():
                a, b = atts[0], replayed[tid][0]
                for k in ("candidate_sha256", "category", "meta"):
                    if a[k] != b[k]:
                        problems.append(f"replay {tid}: {k} {b[k]!r}, recorded {a[k]!r}")
                if (a["model"]["requests"], a["model"]["checks"]) != (b["model"]["requests"], b["model"]["checks"]):
                    problems.append(f"replay {tid}: model {b['model']}, recorded {a['model']}")
            an2 = json.loads((tmp / "replayed" / "analysis.json").read_text())
            if an2["verdict"] != an["verdict"]:
                problems.append(f"the replay's verdict {an2['verdict']}, recorded {an['verdict']}")
        for p in problems:
            print("llm_agent_test: PROBLEM", p, file=sys.stderr)
        print(f"llm_agent_test: verdict {an['verdict']}, B/A {d['ratio']:.3f}x [{d['ratio_low']:.3f}x, "
              f"{d['ratio_high']:.3f}x], model requests {[c['model_requests'] for c in cost]}, "
              f"USD {[round(c['model_usd'], 6) for c in cost]}, run {seconds:.0f} s"
              + (f"; replayed: same candidates, categories, checks and verdict" if again is not None and not problems
                 else ""))
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
