#!/usr/bin/env python3
"""Lists the longest functions in src/ (Universal Ctags' end: field), and fails over a limit.

Usage: scripts/function_lengths.py [--limit N] [--top K] [ROOT]

Prints the K longest functions (lines from the signature to the closing brace; lambdas are counted within their
function, not alone) and exits 1 if any is longer than N lines (default 80, the house limit: ARCHITECTURE.md).
Needs `ctags` (Debian: universal-ctags, installed by scripts/setup.sh).
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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--limit", type=int, default=80)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    a = p.parse_args()
    found = sorted(functions(Path(a.root).resolve()), reverse=True)
    over = [f for f in found if f[0] > a.limit]
    for n, name, path, line in found[: a.top]:
        print(f"{n:5d}  {name}  {path}:{line}{'  OVER' if n > a.limit else ''}")
    print(f"function_lengths: {len(found)} functions, {len(over)} over {a.limit} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
