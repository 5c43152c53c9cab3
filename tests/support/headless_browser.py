"""What the report-in-a-browser tests share: finding headless Chromium, loading a page with every network name
unresolvable, the DOM it built (table rows and links), and the URLs it requested outside the page.

Used by tests/campaign/report_in_browser.py and tests/experiment/llm_agent_test.py.
"""
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

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



def load_page(chrome, page, tmp):
    """Loads `page` (a Path) in headless Chromium with no name resolvable. Returns (dom_text, urls, error): the DOM
    the browser dumped, the URLs its network log shows it requested outside the page, and an error (or None)."""
    log = tmp / "chrome.log"
    dump = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp / 'profile'}", "--host-resolver-rules=MAP * ~NOTFOUND",
                           f"--log-net-log={log}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    if dump.returncode != 0 or "<html" not in dump.stdout:
        return None, [], f"{chrome} exited {dump.returncode}:\n{dump.stderr[-3000:]}"
    # The network log lists every URL the browser requested over the network (a file:// page itself is not a
    # network request); with names unresolvable, any such request is a resource outside the page.
    urls = set()
    try:
        for event in json.loads(log.read_text())["events"]:
            url = event.get("params", {}).get("url")
            if url:
                urls.add(url)
    except (OSError, ValueError, KeyError) as e:
        return dump.stdout, [], f"the browser's network log {log} is not readable ({e}): nothing shows what it requested"
    outside = sorted(u for u in urls if u.startswith(("http:", "https:", "ws:", "wss:", "ftp:"))
                     or (u.startswith("file:") and u != page.as_uri()))
    return dump.stdout, outside, None


WIDTH_PROBE = """<script>
(function () {
  var over = [];
  document.querySelectorAll("table").forEach(function (t, i) {
    var right = t.getBoundingClientRect().right;
    if (right > window.innerWidth + 0.5) over.push((t.id || ("table " + i)) + " ends at " + Math.round(right) + " px");
  });
  document.body.setAttribute("data-width-probe", JSON.stringify(
      {viewport: window.innerWidth, page: document.documentElement.scrollWidth, over: over}));
})();
</script>"""


def page_width(chrome, page, tmp, width=1280):
    """Lays `page` out in a window `width` px wide. Returns (probe, error): probe holds the viewport, the page's
    scroll width and the tables whose right edge lies past the viewport (what a reader has to scroll sideways
    for). The probe script runs in a copy beside the page, so that its relative links still resolve."""
    probe_page = page.with_name(".width-probe-" + page.name)
    probe_page.write_text(page.read_text().replace("</body>", WIDTH_PROBE + "</body>"))
    try:
        dump = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               f"--user-data-dir={tmp / 'profile-width'}", "--host-resolver-rules=MAP * ~NOTFOUND",
                               f"--window-size={width},900", "--hide-scrollbars", "--dump-dom", probe_page.as_uri()],
                              capture_output=True, text=True, timeout=120)
    finally:
        probe_page.unlink()
    start = dump.stdout.find('data-width-probe="')
    if dump.returncode != 0 or start < 0:
        return None, f"{chrome} exited {dump.returncode} without the probe's figures:\n{dump.stderr[-2000:]}"
    value = dump.stdout[start + len('data-width-probe="'):]
    value = value[:value.find('"')].replace("&quot;", '"').replace("&amp;", "&")
    return json.loads(value), None
