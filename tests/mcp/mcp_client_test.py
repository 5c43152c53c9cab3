#!/usr/bin/env python3
"""`kwb mcp` driven by a real MCP client: the Python `mcp` SDK (a test-only dependency from PyPI, installed by
scripts/test.sh into build/<preset>/mcp-venv).

    mcp_client_test.py KWB_BINARY SOURCE_DIR [TASK_DIR]

TASK_DIR is the RMSNorm task to call the tools on (default tasks/rmsnorm under SOURCE_DIR, the server's folder;
CTest passes the copy without the DRAM case).

It initializes, lists the tools, lists the tasks, sends a call with a missing argument (a JSON-RPC error naming
the field), checks a control (rejected, with reasons and no metric), validates the fused RMSNorm (KEEP_CANDIDATE,
the bundle's path, progress notifications on the way), keeps it, reads the history, and cancels a long compare
(its kwb process ends, the server goes on). Exits 0 when every step held, 1 with the step that failed.
"""
import asyncio
import os
import shutil
import sys
import tempfile
import time

try:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.shared.exceptions import MCPError
except ImportError as e:  # a missing client is a failure of the test setup, never a pass
    print(f"FAIL: the Python mcp SDK is not importable ({e}); scripts/test.sh installs it into build/<preset>/mcp-venv")
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


async def run(kwb, src, tmp, task):
    env = {"KWB_LEDGER": os.path.join(tmp, "ledger.sqlite"), "KWB_TIMING_LOCK": os.path.join(tmp, "timing.lock")}
    server = StdioServerParameters(command=kwb, args=["mcp"], env=env, cwd=src)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as s:
            init = await s.initialize()
            require(init.server_info.name == "kwb", "initialize: the server is kwb")

            tools = {t.name: t for t in (await s.list_tools()).tools}
            expected = {"check", "compare", "validate", "profile", "verify", "history", "keep", "list_tasks"}
            require(expected <= set(tools), f"tools/list offers {sorted(expected)}")
            require("impl" in tools["check"].input_schema["required"], "check's input schema requires 'impl'")

            listed = await s.call_tool("list_tasks", {"root": "tasks"})
            names = [t.get("name") for t in listed.structured_content["tasks"]]
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

            control = await s.call_tool("check", {"task": task,
                                                  "impl": f"{task}/cpu/controls/no_weight.cpp",
                                                  "cases": ["normal_scale4", "uniform_offset"]})
            sc = control.structured_content
            require(not control.is_error and sc["verdict"] == "FAIL", "the control is rejected (a result, not an error)")
            reasons = {f["reason"] for f in sc["failures"]}
            require("numeric_mismatch" in reasons, f"with its reason: {sorted(reasons)}")
            require("improvement_pct" not in str(sc) and "workloads" not in sc, "and no metric")
            require("no metric" in control.content[0].text, "the text says rejected code has no metric")

            # A source that does not compile: the call fails (exit 65), and the agent still gets the compiler's
            # error lines, in the text and in the structured result.
            broken = os.path.join(tmp, "broken.cpp")
            with open(broken, "w") as f:
                f.write('#include <kwb/kernel.h>\nKWB_CANDIDATE_ABI\n'
                        'extern "C" KWB_EXPORT int kwb_run(const kwb_call* c) { return no_such_function(c); }\n')
            failed = await s.call_tool("check", {"task": task, "impl": broken})
            text = failed.content[0].text
            require(failed.is_error and "exit 65" in text, f"a build failure is a failed call with its exit code: {text}")
            require("build_failed" in text and "no_such_function" in text and "error" in text,
                    f"and its text carries the compiler's error: {text[:300]}")
            fsc = failed.structured_content or {}
            require(fsc.get("exit_code") == 65 and fsc.get("failures", [{}])[0].get("reason") == "build_failed",
                    "and the check's JSON result comes with it")

            progress = []

            async def on_progress(p, total, message):
                progress.append(message)

            bundle = os.path.join(tmp, "bundle")
            v = await s.call_tool("validate", {"task": task, "candidate": f"{task}/cpu/fused.cpp",
                                               "output_dir": bundle, "workloads": ["decode"], "max_minutes": 0.15,
                                               "max_aa_difference_pct": 25, "against_incumbent": True},
                                  progress_callback=on_progress)
            require(not v.is_error, "validate ran")
            require(v.structured_content["decision"] == "KEEP_CANDIDATE",
                    f"validate of the fused kernel decides KEEP_CANDIDATE: {v.content[0].text}")
            require(bundle in v.content[0].text, "the result names the bundle")
            require(any("A/A" in m or "freeze" in m for m in progress if m),
                    f"progress notifications came during validate ({len(progress)})")

            verified = await s.call_tool("verify", {"bundle": bundle})
            require(verified.structured_content["ok"] is True, "the bundle verifies")
            kept = await s.call_tool("keep", {"bundle": bundle})
            require(kept.structured_content["kept"] is True, f"keep: {kept.content[0].text}")
            history = await s.call_tool("history", {"task": task})
            lineage = history.structured_content["lineage"]
            require(len(lineage) == 2 and lineage[1]["source"].endswith("fused.cpp"),
                    "history shows the baseline and the kept fused kernel")

            # Cancellation: a long compare, cancelled once it is running, ends its kwb; the server goes on.
            marker_dir = os.path.join(tmp, "cancel-me")
            os.makedirs(marker_dir)
            baseline = os.path.join(marker_dir, "baseline.cpp")
            shutil.copy(os.path.join(src, task, "cpu/baseline.cpp"), baseline)
            started = asyncio.Event()

            async def on_compare_progress(p, total, message):
                started.set()

            call = asyncio.create_task(s.call_tool(
                "compare", {"task": task, "candidate": f"{task}/cpu/fused.cpp",
                            "baseline": baseline, "workloads": ["decode"], "max_minutes": 5},
                progress_callback=on_compare_progress))
            await asyncio.wait_for(started.wait(), 120)
            require(processes_with(marker_dir), "the compare is running as a kwb process")
            call.cancel()
            try:
                await call
            except asyncio.CancelledError:
                pass
            deadline = time.monotonic() + 20
            while processes_with(marker_dir) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            require(not processes_with(marker_dir), "cancelling the call ended its kwb process")
            await s.send_ping()
            require(True, "the server still answers after the cancellation")


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
