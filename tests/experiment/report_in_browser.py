#!/usr/bin/env python3
"""An experiment's report.html, end to end and opened in a real headless browser.

Usage: report_in_browser.py KWB_BINARY TASK_DIR

Runs a small experiment on the RMSNorm task (one workload, short budgets; its own ledger and key folder): arm
"idle" writes no candidate, arm "fused" proposes the task's fused reference; two seeds, one attempt each. So the
fused arm's trajectories keep their candidate and measure it against the baseline at the end, and the idle arm's
stay at the baseline. Then loads report.html in headless Chromium with every network name unresolvable, and checks
the DOM the browser built: the verdict element, the arms' table with both arms, a row per seed in the task's
side-by-side table, links that are relative and name files that exist (the final bundles' reports, the attempts'
candidates), and no request
outside the page. Exit 77 when no headless Chromium is installed (Debian: chromium-headless-shell or chromium).
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from headless_browser import Dom, browser, load_page  # noqa: E402

def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 64
    kwb, task = str(Path(sys.argv[1]).resolve()), Path(sys.argv[2]).resolve()
    chrome = browser()
    if chrome is None:
        print("report_in_browser: SKIPPED: no headless Chromium here (apt-get install chromium-headless-shell)",
              file=sys.stderr)
        return 77
    with tempfile.TemporaryDirectory(prefix="kwb-experiment-browser-") as tmp:
        tmp = Path(tmp)
        os.chmod(tmp, 0o755)  # kwb run as root runs its workers and generators as users of their own
        env = dict(os.environ, KWB_KEY_DIR=str(tmp / "keys"))
        (tmp / "fused.cpp").write_text((task / "cpu" / "fused.cpp").read_text())
        (tmp / "x.toml").write_text(
            f'name = "browser <check>"\nstorage = "out"\nseeds = [1, 2]\nattempts = 1\n'
            f'[validate]\nworkloads = ["decode"]\nlayouts = 2\nno_profile = true\nmax_minutes = 0.1\n'
            f'[[tasks]]\ndir = "{task}"\n'
            f'[[arms]]\nname = "idle"\ncommand = ["sh", "-c", "exit 3"]\n'
            f'[[arms]]\nname = "fused"\ncommand = ["sh", "-c", "cp fused.cpp \\"$KWB_OUTPUT\\""]\n'
            f'files = ["fused.cpp"]\n')
        run = subprocess.run([kwb, "experiment", "run", str(tmp / "x.toml")], env=env, capture_output=True,
                             text=True, timeout=1800)
        if run.returncode not in (0, 2):
            print(f"report_in_browser: kwb experiment run exited {run.returncode}:\n{run.stderr[-3000:]}",
                  file=sys.stderr)
            return 1
        print(run.stdout, end="")
        page = tmp / "out" / "report.html"
        text, outside, error = load_page(chrome, page, tmp)
        if text is None:
            print(f"report_in_browser: {error}", file=sys.stderr)
            return 1
        dom = Dom()
        dom.feed(text)
        problems = []
        analysis = json.loads((tmp / "out" / "analysis.json").read_text())
        if f'data-verdict="{analysis["verdict"]}"' not in text:
            problems.append(f"no verdict element for {analysis['verdict']}")
        arms = [r for r in dom.rows if len(r) == 10 and r[0] in ("A idle", "B fused")]
        if len(arms) != 2:
            problems.append(f"the arms' table rows are {arms}, expected A idle and B fused")
        # fast_p per generated kernel: idle wrote none (an incorrect generation), fused's one kernel is kept.
        fast = {(r[0], r[1]): r[3] for r in dom.rows if len(r) == 9 and r[0] in ("A idle", "B fused")}
        if fast.get(("A idle", "kernels")) != "0%" or fast.get(("B fused", "kernels")) != "100%":
            problems.append(f"fast_0 rows {fast}: expected idle's kernels at 0% and fused's at 100%")
        seeds = [r for r in dom.rows if len(r) == 8 and r[0] in ("1", "2")]
        if len(seeds) != 2:
            problems.append(f"the task's side-by-side rows are {seeds}, expected one per seed")
        for r in seeds:
            if not r[1].startswith("nothing kept, not measured") or r[2] != "0" or r[5] != "1":
                problems.append(f"seed row {r}: expected idle with nothing kept (not measured) and fused with one keep")
        if "browser <check>" not in text.replace("&lt;", "<").replace("&gt;", ">"):
            problems.append("the experiment's name did not come through as text")
        bundles = [h for h in dom.links if h.endswith("report.html")]
        candidates = [h for h in dom.links if h.endswith("candidate.cpp")]
        if len(bundles) != 2 or len(candidates) != 2 or len(dom.links) != 4:
            problems.append(f"links {dom.links}: expected the two fused trajectories' final bundles and their two "
                            "attempts' candidates (idle wrote none)")
        for href in dom.links:
            if "://" in href or href.startswith("/") or not (page.parent / href).exists():
                problems.append(f"link {href!r} is not a relative link to a file that exists")
        if error:
            problems.append(error)
        if outside:
            problems.append(f"the page requested {outside}")
        for p in problems:
            print("report_in_browser: PROBLEM", p, file=sys.stderr)
        print(f"report_in_browser: verdict {analysis['verdict']}, {len(seeds)} seed rows, {len(dom.links)} links, "
              f"{len(outside)} URL(s) requested outside it, in {Path(chrome).name}")
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
