#!/usr/bin/env python3
"""A campaign's report.html, opened in a real headless browser.

Usage: report_in_browser.py KWB_BINARY TASK_DIR

Runs a small campaign (two candidates refused at their check, nothing timed; its own ledger and key folder), writes
its report, and loads report.html in headless Chromium with every network name unresolvable. Checks the DOM the
browser built: the page parsed into the tables kwb wrote (a ranking row per candidate, the rejected-evidence table),
every link is relative and names a file that exists, and the page asked for nothing outside itself (the browser's
network log holds no request at all). Exit 77 when no headless Chromium is installed (Debian:
chromium-headless-shell or chromium).
"""
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
    with tempfile.TemporaryDirectory(prefix="kwb-report-browser-") as tmp:
        tmp = Path(tmp)
        os.chmod(tmp, 0o755)  # kwb run as root runs its workers as users of their own
        env = dict(os.environ, KWB_LEDGER=str(tmp / "ledger.sqlite"), KWB_KEY_DIR=str(tmp / "keys"))
        controls = task / "cpu" / "controls"
        (tmp / "campaign.toml").write_text(
            f'name = "browser <check>"\nstorage = "out"\n[validate]\nworkloads = ["decode"]\nlayouts = 2\n'
            f'no_profile = true\n[[tasks]]\ndir = "{task}"\n'
            f'candidates = ["{controls / "no_eps.cpp"}", "{controls / "zeros.cpp"}"]\n')
        run = subprocess.run([kwb, "campaign", "run", str(tmp / "campaign.toml")], env=env, capture_output=True,
                             text=True, timeout=900)
        if run.returncode != 0:
            print(f"report_in_browser: kwb campaign run exited {run.returncode}:\n{run.stderr[-3000:]}", file=sys.stderr)
            return 1
        page = tmp / "out" / "report.html"
        text, outside, error = load_page(chrome, page, tmp)
        if text is None:
            print(f"report_in_browser: {error}", file=sys.stderr)
            return 1
        dom = Dom()
        dom.feed(text)
        problems = []
        # rank, candidate, decision, improvement, workloads, node, machine, signed by, bundle
        ranked = [r for r in dom.rows if len(r) == 9 and r[0].isdigit()]
        if sorted(r[1] for r in ranked) != ["no_eps.cpp", "zeros.cpp"]:
            problems.append(f"the ranking rows the browser built are {ranked}, expected no_eps.cpp and zeros.cpp")
        if any(r[2] != "KEEP_BASELINE" for r in ranked):
            problems.append(f"decisions {[r[2] for r in ranked]}, expected KEEP_BASELINE")
        if any(r[7] != "this machine" or not r[6] or r[6] == "-" for r in ranked):
            problems.append(f"machines and signers {[(r[6], r[7]) for r in ranked]}, expected this machine's")
        if "browser <check>" not in text.replace("&lt;", "<").replace("&gt;", ">"):
            problems.append("the campaign's name did not come through as text")
        if not dom.links:
            problems.append("no links to bundles")
        for href in dom.links:
            if "://" in href or href.startswith("/") or not (page.parent / href).exists():
                problems.append(f"link {href!r} is not a relative link to a file that exists")
        if error:
            problems.append(error)
        if outside:
            problems.append(f"the page requested {outside}")
        for p in problems:
            print("report_in_browser: PROBLEM", p, file=sys.stderr)
        print(f"report_in_browser: {len(ranked)} ranked candidates, {len(dom.links)} links, {len(outside)} URL(s) "
              f"requested, in {Path(chrome).name}")
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
