"""Shared by the bench/*.sh summaries: read one run_kwb result and format a table (stdlib only)."""
import json
import os


def load(out, name):
    """(workload dict, whole report, wall seconds) of the one-workload run `name` in folder `out`."""
    with open(os.path.join(out, name + ".json")) as f:
        report = json.load(f)
    with open(os.path.join(out, name + ".wall")) as f:
        wall = float(f.read())
    if report.get("refused"):
        raise SystemExit(f"{name}: timing refused: {report['refused']}")
    return report["workloads"][0], report, wall


def pct(v):
    return "-" if v is None else f"{v:+.2f}%"


def interval(w):
    if w.get("ci_low_pct") is None:
        return "-"
    return f"[{w['ci_low_pct']:+.2f}%, {w['ci_high_pct']:+.2f}%]"


def half_width(w):
    if w.get("ci_low_pct") is None:
        return None
    return (w["ci_high_pct"] - w["ci_low_pct"]) / 2


def table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).ljust(n) for x, n in zip(r, widths)).rstrip()
    print(line(header))
    print("  ".join("-" * n for n in widths))
    for r in rows:
        print(line(r))
