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
import json
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

BROWSERS = ["chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"]


class Dom(HTMLParser):
    """What the checks need of the DOM Chromium dumped: the table rows, each row's cells, and the links."""

    def __init__(self):
        super().__init__()
        self.rows, self.links, self.row, self.cell = [], [], None, None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.cell = ""
        elif tag == "a":
            self.links.append(dict(attrs).get("href", ""))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.row is not None:
            self.row.append(self.cell or "")
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.rows.append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def browser():
    for name in BROWSERS:
        if shutil.which(name):
            return shutil.which(name)
    for path in ("/usr/lib/chromium/headless_shell", "/usr/lib/chromium/chromium"):
        if os.access(path, os.X_OK):
            return path
    return None


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
        log = tmp / "chrome.log"
        dump = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               f"--user-data-dir={tmp / 'profile'}", "--host-resolver-rules=MAP * ~NOTFOUND",
                               f"--log-net-log={log}", "--dump-dom", page.as_uri()],
                              capture_output=True, text=True, timeout=120)
        if dump.returncode != 0 or "<html" not in dump.stdout:
            print(f"report_in_browser: {chrome} exited {dump.returncode}:\n{dump.stderr[-3000:]}", file=sys.stderr)
            return 1
        dom = Dom()
        dom.feed(dump.stdout)
        problems = []
        ranked = [r for r in dom.rows if len(r) == 6 and r[0].isdigit()]
        if sorted(r[1] for r in ranked) != ["no_eps.cpp", "zeros.cpp"]:
            problems.append(f"the ranking rows the browser built are {ranked}, expected no_eps.cpp and zeros.cpp")
        if any(r[2] != "KEEP_BASELINE" for r in ranked):
            problems.append(f"decisions {[r[2] for r in ranked]}, expected KEEP_BASELINE")
        if "browser <check>" not in dump.stdout.replace("&lt;", "<").replace("&gt;", ">"):
            problems.append("the campaign's name did not come through as text")
        if not dom.links:
            problems.append("no links to bundles")
        for href in dom.links:
            if "://" in href or href.startswith("/") or not (page.parent / href).exists():
                problems.append(f"link {href!r} is not a relative link to a file that exists")
        # The network log lists every URL the browser requested over the network (a file:// page itself is not a
        # network request); with names unresolvable, any such request is a resource outside the page.
        urls = set()
        try:
            for event in json.loads(log.read_text())["events"]:
                url = event.get("params", {}).get("url")
                if url:
                    urls.add(url)
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"the browser's network log {log} is not readable ({e}): nothing shows what it requested")
        outside = sorted(u for u in urls if u.startswith(("http:", "https:", "ws:", "wss:", "ftp:"))
                         or (u.startswith("file:") and u != page.as_uri()))
        if outside:
            problems.append(f"the page requested {outside}")
        for p in problems:
            print("report_in_browser: PROBLEM", p, file=sys.stderr)
        print(f"report_in_browser: {len(ranked)} ranked candidates, {len(dom.links)} links, {len(urls)} URL(s) "
              f"requested, in {Path(chrome).name}")
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
