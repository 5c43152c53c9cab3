#!/usr/bin/env python3
"""Copies a task folder without some of its [[cases]]: make_lite_task.py FROM TO [CASE | CASE:DIMS] ...

The integration tests run most of their checks on tasks/rmsnorm without its DRAM-sized timing case, and the
adversarial gemm tests on tasks/gemm with a smaller "square" (see tests/CMakeLists.txt). The copy is the same code,
oracle and controls. A plain CASE leaves task.toml, its block from its header to the next table header. CASE:DIMS
keeps the case and replaces its `dims = ...` line's value with DIMS (a TOML inline table: "square:{ m = 160, k = 160,
n = 160 }"). A name that is not a case of FROM is an error, so a renamed case cannot be kept by accident.
"""
import re
import shutil
import sys
from pathlib import Path


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 64
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    drop = {a for a in sys.argv[3:] if ":" not in a}
    redim = dict(a.split(":", 1) for a in sys.argv[3:] if ":" in a)
    text = (src / "task.toml").read_text()
    # Table headers start a line: "[name]" or "[[name]]". A [[cases]] block runs to the next one (or the end).
    headers = [m.start() for m in re.finditer(r"^\[", text, re.M)] + [len(text)]
    kept, dropped, redimmed = [text[:headers[0]]], set(), set()
    for start, end in zip(headers, headers[1:]):
        block = text[start:end]
        name = re.search(r'^name\s*=\s*"([^"]*)"', block, re.M)
        case = name.group(1) if block.startswith("[[cases]]") and name else None
        if case in drop:
            dropped.add(case)
            continue
        if case in redim:
            block, n = re.subn(r"^dims\s*=.*$", lambda _: f"dims = {redim[case]}", block, count=1, flags=re.M)
            if n == 1:
                redimmed.add(case)
        kept.append(block)
    missing = (drop - dropped) | (set(redim) - redimmed)
    if missing:
        print(f"make_lite_task.py: {src / 'task.toml'} has no case {sorted(missing)} (or no dims line in it)",
              file=sys.stderr)
        return 65
    staging = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(src, staging)
    (staging / "task.toml").write_text("".join(kept))
    shutil.rmtree(dst, ignore_errors=True)
    staging.rename(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
