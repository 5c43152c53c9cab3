#!/usr/bin/env python3
"""Lists the longest functions in src/ (Universal Ctags' end: field), and fails over a limit.

Usage: scripts/function_lengths.py [--limit N] [--top K] [--allowed FILE] [ROOT]

Prints the K longest functions (lines from the signature to the closing brace; lambdas are counted within their
function, not alone) and exits 1 if any is longer than N lines (default 80, the house limit: ARCHITECTURE.md).
With --allowed FILE ("LINES NAME PATH" per line: functions over the limit that a change may not yet split), a listed
function may stay as long as it is listed but not grow, and any other over the limit fails; src/ has none left, and
the function_lengths test runs it without a list. Needs `ctags` (Debian: universal-ctags, installed by
scripts/setup.sh).
"""
import argparse
import subprocess
import sys
from pathlib import Path


def functions(root: Path):
    files = sorted(str(p) for p in (root / "src").rglob("*") if p.suffix in (".cpp", ".h"))
    out = subprocess.run(["ctags", "--languages=C++", "--kinds-C++=f", "--fields=+ne", "-o", "-", *files],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        name, path, *rest = line.split("\t")
        if name.startswith("__anon"):  # a lambda: part of the function that holds it
            continue
        fields = dict(f.split(":", 1) for f in rest if ":" in f and not f.startswith("/^"))
        if "line" in fields and "end" in fields:
            scope = fields.get("class") or fields.get("struct") or fields.get("namespace") or ""
            scope = "" if "__anon" in scope else scope + "::" if scope else ""
            yield int(fields["end"]) - int(fields["line"]) + 1, f"{scope}{name}", Path(path).relative_to(root), int(fields["line"])


def read_allowed(path: Path):
    allowed = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            n, name, where = line.split()
            allowed[(name, where)] = int(n)
    return allowed


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--limit", type=int, default=80)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--allowed", type=Path)
    p.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    a = p.parse_args()
    found = sorted(functions(Path(a.root).resolve()), reverse=True)
    over = [f for f in found if f[0] > a.limit]
    for n, name, path, line in found[: a.top]:
        print(f"{n:5d}  {name}  {path}:{line}{'  OVER' if n > a.limit else ''}")
    print(f"function_lengths: {len(found)} functions, {len(over)} over {a.limit} lines")
    if a.allowed is None:
        return 1 if over else 0
    allowed = read_allowed(a.allowed)
    failed = False
    for n, name, path, line in over:
        cap = allowed.get((name, str(path)))
        if cap is None:
            print(f"function_lengths: {path}:{line} {name} is {n} lines, over {a.limit}, and not in {a.allowed}: "
                  "split it along its steps")
            failed = True
        elif n > cap:
            print(f"function_lengths: {path}:{line} {name} grew to {n} lines ({cap} allowed in {a.allowed}): "
                  "split it rather than grow it")
            failed = True
    stale = sorted(k for k in allowed if not any((name, str(path)) == k for _, name, path, _ in over))
    for name, where in stale:
        print(f"function_lengths: {name} ({where}) is within {a.limit} lines now: remove it from {a.allowed}")
    return 1 if failed or stale else 0


if __name__ == "__main__":
    sys.exit(main())
