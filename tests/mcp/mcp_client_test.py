#!/usr/bin/env python3
"""`kwb mcp` driven by a real MCP client: the Python `mcp` SDK (a test-only dependency from PyPI, installed by
scripts/test.sh into build/<preset>/mcp-venv, with jsonschema), as an agent's loop would drive it.

    mcp_client_test.py KWB_BINARY SOURCE_DIR [TASK_DIR]

TASK_DIR is the RMSNorm task to call the tools on (default tasks/rmsnorm under SOURCE_DIR, the server's folder;
CTest passes the copy without the DRAM case).

It initializes, lists the tools (each with an output schema) and the tasks, sends a call with a missing argument (a
JSON-RPC error naming the field), checks a control (rejected, with reasons and no metric), checks a source that
does not compile (the compiler's lines reach the result), validates it (decided at once: candidate_not_built, with
the compiler's lines), compares against a control (refused, never timed), validates the fused RMSNorm
(KEEP_CANDIDATE, the bundle's path, progress notifications on the way), keeps it, reads the history, cancels a
running validate (its kwb process ends, the server goes on, history shows the run as INTERRUPTED), and validates
against the incumbent after its source file was overwritten (the bundle's copy of it is the baseline), branches a
loop on reason codes alone, and runs a campaign of three candidates through the campaign tools and reads its
report. Every
structured result, failed calls' included, must validate against the output schema its tool declares. Exits 0 when
every step held, 1 with the step that failed.
"""
import asyncio
import os
import shutil
import sys
import tempfile
import time

try:
    import hashlib
    import json
    import re

    import jsonschema
    from referencing import Registry
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.shared.exceptions import MCPError
except ImportError as e:  # a missing client is a failure of the test setup, never a pass
    print(f"FAIL: the Python mcp SDK or jsonschema is not importable ({e}); scripts/test.sh installs them into "
          "build/<preset>/mcp-venv (tests/mcp/requirements.txt)")
    sys.exit(1)


def require(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}")


def processes_with(marker):
    """Processes whose command line contains `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Agent:
    """The client's session, with every tool result checked against the output schema its tool declared."""

    def __init__(self, session):
        self.s = session
        self.validators = {}
        self.validated = {}

    async def list_tools(self):
        tools = {t.name: t for t in (await self.s.list_tools()).tools}
        for name, t in tools.items():
            require(t.output_schema is not None, f"{name} declares an output schema")
            cls = jsonschema.validators.validator_for(t.output_schema)
            cls.check_schema(t.output_schema)
            # As the SDK does: an empty registry, so every $ref must resolve inside the declared schema itself.
            self.validators[name] = cls(t.output_schema, registry=Registry())
        return tools

    async def call(self, name, arguments, **kw):
        r = await self.s.call_tool(name, arguments, **kw)
        sc = r.structured_content
        require(isinstance(sc, dict), f"{name}: the result has structured content (isError {r.is_error})")
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
                  for e in self.validators[name].iter_errors(sc)]
        if errors:
            raise AssertionError(f"{name}: the structured result does not fit the tool's output schema: {errors[:5]}")
        self.validated[name] = self.validated.get(name, 0) + 1
        # MCP: the structured content is also given as text, for clients that read only text.
        require(any(c.type == "text" and c.text.startswith("{") and json.loads(c.text) == sc for c in r.content),
                f"{name}: the structured result is valid against its output schema, and also given as text")
        return r


async def run(kwb, src, tmp, task):
    env = {"KWB_LEDGER": os.path.join(tmp, "ledger.sqlite"), "KWB_TIMING_LOCK": os.path.join(tmp, "timing.lock")}
    if os.environ.get("KWB_CACHE_DIR"):
        env["KWB_CACHE_DIR"] = os.environ["KWB_CACHE_DIR"]
    server = StdioServerParameters(command=kwb, args=["mcp"], env=env, cwd=src)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as s:
            agent = Agent(s)
            init = await s.initialize()
            require(init.server_info.name == "kwb", "initialize: the server is kwb")

            tools = await agent.list_tools()
            expected = {"check", "compare", "validate", "revalidate", "profile", "verify", "history", "keep",
                        "list_tasks"}
            require(expected <= set(tools), f"tools/list offers {sorted(expected)}")
            props = tools["validate"].input_schema["properties"]
            require(props["backend"]["enum"] == ["cpu", "opencl", "cuda"] and props["gate"]["enum"] == ["ci", "point"],
                    "validate's input schema names the backends and gates")
            require(props["max_minutes"]["minimum"] > 0 and props["layouts"]["maximum"] == 64,
                    "and the command line's ranges")
            check_args = set(tools["check"].input_schema["properties"])
            require({"control", "exhaustive", "seed", "calls", "held_out"} <= check_args,
                    "check takes control, exhaustive, seed, calls, held_out")

            listed = await agent.call("list_tasks", {"root": "tasks"})
            names = [t.get("name") for t in listed.structured_content["result"]["tasks"]]
            require("rmsnorm" in names, "list_tasks finds rmsnorm")

            try:
                await s.call_tool("check", {"task": task})
                require(False, "a call without 'impl' is refused")
            except MCPError as e:
                require(e.error.code == -32602 and "'impl'" in e.error.message,
                        f"a call without 'impl' is a JSON-RPC invalid-params error naming it: {e.error.message}")
            try:
                await s.call_tool("check", {"task": task, "impl": 7})
                require(False, "a number for 'impl' is refused")
            except MCPError as e:
                require(e.error.code == -32602 and "'impl'" in e.error.message, "a wrongly typed argument is refused")

            control = await agent.call("check", {"task": task, "control": "no_weight",
                                                 "cases": ["normal_scale4", "uniform_offset"], "calls": 1})
            sc = control.structured_content["result"]
            require(not control.is_error and control.structured_content["exit_code"] == 1 and sc["verdict"] == "FAIL",
                    "the control, named as the task names it, is rejected (a result, not an error)")
            reasons = {f["reason"] for f in sc["failures"]}
            require("numeric_mismatch" in reasons, f"with its reason: {sorted(reasons)}")
            require("improvement_pct" not in str(sc) and "workloads" not in sc, "and no metric")
            require("no metric" in control.content[0].text, "the text says rejected code has no metric")

            # A source that does not compile: a verdict on the candidate, so a result (isError false) like any other
            # rejection, with check's exit code 65 and the compiler's error lines, in the text and in the structured
            # result.
            broken = os.path.join(tmp, "broken.cpp")
            with open(broken, "w") as f:
                f.write('#include <kwb/kernel.h>\nKWB_CANDIDATE_ABI\n'
                        'extern "C" KWB_EXPORT int kwb_run(const kwb_call* c) { return no_such_function(c); }\n')
            compiler_line = re.compile(r"broken\.cpp:3:\d+: error: .*no_such_function")
            failed = await agent.call("check", {"task": task, "impl": broken})
            text = failed.content[0].text
            require(not failed.is_error and failed.structured_content["exit_code"] == 65,
                    f"a build failure is a result (a FAIL), not a failed call, with check's exit code 65: {text}")
            require("build_failed" in text and compiler_line.search(text),
                    f"and its text carries the compiler's error line: {text[:300]}")
            fsc = failed.structured_content
            require(fsc["exit_code"] == 65 and fsc["result"]["failures"][0]["reason"] == "build_failed"
                    and compiler_line.search(fsc["result"]["failures"][0]["detail"]),
                    "and the check's JSON result comes with it, unchanged, with the compiler's lines")

            # validate of that source: decided at once, with the reason code and the compiler's lines.
            started = time.monotonic()
            nobuild = os.path.join(tmp, "nobuild")
            v = await agent.call("validate", {"task": task, "candidate": broken, "output_dir": nobuild,
                                              "workloads": ["decode"], "max_minutes": 0.1, "no_profile": True,
                                              "layouts": 2})
            seconds = time.monotonic() - started
            d = v.structured_content["result"]
            require(not v.is_error and d["decision"] == "KEEP_BASELINE"
                    and d["reason_codes"] == ["candidate_not_built"],
                    f"validate of a source that does not compile decides KEEP_BASELINE, candidate_not_built: "
                    f"{v.content[0].text[:300]}")
            require("build_failed" in d["reasons"][0] and compiler_line.search(v.content[0].text),
                    "its reason says build_failed and the text quotes the compiler")
            with open(os.path.join(nobuild, "stages.json")) as f:
                stages = {st["name"]: st["status"] for st in json.load(f)["stages"]}
            require(all(stages[n] == "skipped" for n in ("check_baseline", "controls", "aa", "ab")),
                    f"nothing is checked or timed first: {stages}")
            require(seconds < 30, f"and it is decided in seconds ({seconds:.1f} s)")

            # A call that fails before the verb decides anything (no such task): a result with no JSON, and kwb's
            # message in the text and in the structured result's stderr.
            missing = await agent.call("check", {"task": os.path.join(tmp, "no-such-task"), "impl": broken})
            msc = missing.structured_content
            require(missing.is_error and msc["result"] is None and msc["exit_code"] > 3
                    and "no-such-task" in msc["stderr"] and "no-such-task" in missing.content[0].text,
                    f"a call that fails outright carries kwb's message: {missing.content[0].text[:200]}")

            # compare of that source: REFUSED (exit 1) with build_failed, a result; nothing is timed.
            nb = await agent.call("compare", {"task": task, "candidate": broken, "workloads": ["decode"],
                                              "max_minutes": 0.05})
            nbr = nb.structured_content["result"]
            require(not nb.is_error and nb.structured_content["exit_code"] == 1 and nbr["verdict"] == "REFUSED"
                    and "build_failed" in " ".join(nbr["refused"]) and nbr["workloads"] == [],
                    f"compare of a source that does not compile is REFUSED with build_failed: {nb.content[0].text[:300]}")

            # compare against a control: both are checked first, and the rejected one is never timed.
            refused = await agent.call("compare", {"task": task, "candidate": f"{task}/cpu/controls/no_weight.cpp",
                                                   "workloads": ["decode"], "max_minutes": 0.05, "gate": "ci",
                                                   "seed": 7, "timeout_seconds": 30, "cold": False,
                                                   "output_dir": os.path.join(tmp, "refused-compare")})
            rsc = refused.structured_content["result"]
            require(rsc["verdict"] == "REFUSED" and rsc["refused"] and rsc["workloads"] == [],
                    f"a compare against a control is refused, never timed: {refused.content[0].text[:200]}")

            progress = []

            async def on_progress(p, total, message):
                progress.append(message)

            # The agent's candidate lives in its own file, which it will overwrite later (agents do).
            candidate = os.path.join(tmp, "candidate.cpp")
            shutil.copy(os.path.join(src, task, "cpu/fused.cpp"), candidate)
            bundle = os.path.join(tmp, "bundle")
            v = await agent.call("validate", {"task": task, "candidate": candidate,
                                              "output_dir": bundle, "workloads": ["decode"], "max_minutes": 0.15,
                                              "max_aa_difference_pct": 25, "against_incumbent": True,
                                              "no_profile": True, "layouts": 2},
                                 progress_callback=on_progress)
            require(not v.is_error, "validate ran")
            d_fast = v.structured_content["result"]
            require(d_fast["decision"] == "KEEP_CANDIDATE",
                    f"validate of the fused kernel decides KEEP_CANDIDATE: {v.content[0].text}")
            require(re.match(r"validate KEEP_CANDIDATE decode \+\d+\.\d\d% \[\+\d+\.\d\d, \+\d+\.\d\d\] "
                             r"\(\d\.\d\dx faster, PASS\)", v.content[0].text),
                    f"its first line carries the figure: {v.content[0].text[:200]}")
            require(bundle in v.content[0].text, "the result names the bundle")
            require(any("A/A" in m or "freeze" in m for m in progress if m),
                    f"progress notifications came during validate ({len(progress)})")

            verified = await agent.call("verify", {"bundle": bundle})
            require(verified.structured_content["result"]["ok"] is True, "the bundle verifies")
            kept = await agent.call("keep", {"bundle": bundle})
            require(kept.structured_content["result"]["kept"] is True, f"keep: {kept.content[0].text}")
            history = await agent.call("history", {"task": task})
            lineage = history.structured_content["result"]["lineage"]
            require(len(lineage) == 2 and lineage[1]["source"].endswith("candidate.cpp"),
                    "history shows the baseline and the kept fused kernel")

            # Cancellation: a long validate, cancelled once its plan is frozen, ends its kwb; the server goes on, and
            # the run is a row of the ledger: INTERRUPTED.
            cancelled = os.path.join(tmp, "cancel-me")
            frozen = asyncio.Event()

            async def on_validate_progress(p, total, message):
                if message and "plan digest" in message:
                    frozen.set()

            call = asyncio.create_task(agent.call(
                "validate", {"task": task, "candidate": f"{task}/cpu/fused.cpp", "output_dir": cancelled,
                             "workloads": ["decode"], "max_minutes": 5, "no_profile": True, "layouts": 2},
                progress_callback=on_validate_progress))
            await asyncio.wait_for(frozen.wait(), 120)
            require(processes_with(cancelled), "the validate is running as a kwb process")
            call.cancel()
            try:
                await call
            except asyncio.CancelledError:
                pass
            deadline = time.monotonic() + 20
            while processes_with(cancelled) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            require(not processes_with(cancelled), "cancelling the call ended its kwb process")
            await s.send_ping()
            require(True, "the server still answers after the cancellation")
            history = await agent.call("history", {"task": task})
            rows = [r for r in history.structured_content["result"]["runs"]
                    if r["kind"] == "validate" and os.path.realpath(r["bundle"]) == os.path.realpath(cancelled)]
            require(len(rows) == 1 and rows[0]["outcome"] == "INTERRUPTED",
                    f"history shows the cancelled validate as INTERRUPTED: {rows}")

            # The agent overwrites the file it kept (the incumbent's source): validate --against incumbent works
            # from the bundle's copy of it, which is what was kept.
            kept_sha = sha256(candidate)
            with open(candidate, "w") as f:
                f.write("// the agent's next attempt, not yet written\n")
            again = os.path.join(tmp, "again")
            v = await agent.call("validate", {"task": task, "candidate": f"{task}/cpu/fused.cpp", "output_dir": again,
                                              "workloads": ["decode"], "max_minutes": 0.05, "layouts": 2,
                                              "max_aa_difference_pct": 25, "against_incumbent": True,
                                              "no_profile": True})
            require(not v.is_error and v.structured_content["exit_code"] <= 3,
                    f"[needs the ledger's fallback to the bundle's copy] validate --against incumbent runs after the "
                    f"incumbent's file was overwritten: {v.content[0].text[:600]}")
            with open(os.path.join(again, "plan.json")) as f:
                plan = json.load(f)
            baseline = [i for i in plan["implementations"] if i["role"] == "baseline"]
            require(baseline and baseline[0]["identity"]["source_sha256"] == kept_sha,
                    "its baseline is the kept source, not the overwritten file")

            # An optimization loop that branches on reason codes alone (docs/agents.md, "What a loop does next"):
            # each outcome it meets maps to its own next step, read from decision.json's first reason code.
            next_step = {"candidate_not_built": "fix the build", "candidate_fails_check": "fix the kernel",
                         "identical_to_baseline": "discard the edit", "no_practical_difference": "discard the edit",
                         "ab_below_bar": "try another idea", "all_passed": "keep it"}
            same = os.path.join(tmp, "same.cpp")  # fused, plus an exported note: other code, the same speed
            with open(os.path.join(src, task, "cpu/fused.cpp")) as f:
                same_text = f.read() + '\nextern "C" KWB_EXPORT const char kwb_loop_note[] = "same kernel";\n'
            with open(same, "w") as f:
                f.write(same_text)
            loop = [("compile error", broken, {}, "candidate_not_built"),
                    ("wrong", f"{task}/cpu/controls/no_weight.cpp", {}, "candidate_fails_check"),
                    ("identical", f"{task}/cpu/fused.cpp", {}, "identical_to_baseline"),
                    ("same", same, {"same_margin_pct": 25}, "no_practical_difference"),
                    ("slower", f"{task}/cpu/baseline.cpp", {}, "ab_below_bar")]
            steps = {"faster": next_step[d_fast["reason_codes"][0]]}
            for label, cand, extra, want in loop:
                out = os.path.join(tmp, "loop-" + label.replace(" ", "-"))
                r = await agent.call("validate", dict({"task": task, "candidate": cand, "output_dir": out,
                                                       "workloads": ["decode"], "max_minutes": 0.1, "layouts": 2,
                                                       "max_aa_difference_pct": 25, "against_incumbent": True,
                                                       "no_profile": True}, **extra))
                codes = r.structured_content["result"]["reason_codes"] if r.structured_content["result"] else []
                require(not r.is_error and codes and codes[0] == want,
                        f"the loop's {label} candidate is a result with reason code {want}: {r.content[0].text[:400]}")
                require(r.content[0].text.startswith("validate KEEP_BASELINE") and want in r.content[0].text,
                        f"its first line names the decision and the code: {r.content[0].text[:200]}")
                steps[label] = next_step[codes[0]]
            require(steps == {"faster": "keep it", "compile error": "fix the build", "wrong": "fix the kernel",
                              "identical": "discard the edit", "same": "discard the edit",
                              "slower": "try another idea"},
                    f"reason codes alone tell the loop what to do next: {steps}")

            # A campaign of three candidates through the campaign tools, as an agent runs one and reads its report:
            # a source that does not compile, an error control, and the baseline's own bytes (all decided untimed).
            cdir = os.path.join(tmp, "campaign")
            os.makedirs(cdir)
            task_dir = os.path.join(src, task)
            for name, path in (("broken.cpp", broken), ("no_weight.cpp", os.path.join(task_dir, "cpu/controls/no_weight.cpp")),
                               ("baseline_copy.cpp", os.path.join(task_dir, "cpu/baseline.cpp"))):
                shutil.copy(path, os.path.join(cdir, name))
            with open(os.path.join(cdir, "campaign.toml"), "w") as f:
                f.write('name = "mcp-three"\nstorage = "out"\n[validate]\nworkloads = ["decode"]\nmax_minutes = 0.1\n'
                        'layouts = 2\nmax_aa_difference_pct = 25\nno_profile = true\n'
                        f'[[tasks]]\ndir = "{task_dir}"\n'
                        'candidates = ["broken.cpp", "no_weight.cpp", "baseline_copy.cpp"]\n')
            c = await agent.call("campaign_run", {"file": os.path.join(cdir, "campaign.toml")})
            jobs = {os.path.basename(j["candidate"]): j for j in c.structured_content["result"]["jobs"]}
            require(not c.is_error and c.structured_content["exit_code"] == 0 and len(jobs) == 3 and
                    all(j["outcome"] == "decided" and j["decision"] == "KEEP_BASELINE" for j in jobs.values()),
                    f"campaign_run decides the three candidates: {c.content[0].text[:600]}")
            require(jobs["broken.cpp"]["detail"].startswith("candidate_not_built") and
                    jobs["no_weight.cpp"]["detail"].startswith("candidate_fails_check") and
                    jobs["baseline_copy.cpp"]["detail"].startswith("identical_to_baseline"),
                    f"each job says its decision's reason: {[j['detail'][:60] for j in jobs.values()]}")
            st = await agent.call("campaign_status", {"campaign": os.path.join(cdir, "out")})
            require(st.structured_content["result"]["counts"]["decided"] == 3, "campaign_status counts three decided")
            rep = await agent.call("campaign_report", {"campaign": os.path.join(cdir, "out")})
            md = rep.structured_content["result"]["markdown"]
            require(not rep.is_error and "## Task" in md and all(n in md for n in jobs) and
                    os.path.isfile(rep.structured_content["result"]["report_html"]),
                    "campaign_report returns the report's Markdown, naming every candidate, and writes the page")

            for name in ("list_tasks", "check", "compare", "validate", "verify", "keep", "history", "campaign_run",
                         "campaign_status", "campaign_report"):
                require(agent.validated.get(name, 0) > 0, f"{name}'s results were checked against its output schema")


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 64
    kwb, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    task = os.path.abspath(sys.argv[3]) if len(sys.argv) == 4 else "tasks/rmsnorm"
    tmp = tempfile.mkdtemp(prefix="kwb-mcp-test-")
    try:
        asyncio.run(asyncio.wait_for(run(kwb, src, tmp, task), 600))
    except BaseException as e:  # noqa: BLE001 - any failure is the test's failure, with its step
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]  # the SDK's task groups wrap what went wrong
        print(f"FAIL: {type(e).__name__}: {e}")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
