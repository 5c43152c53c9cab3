#!/usr/bin/env python3
"""Copies a task folder without some of its [[cases]]: make_lite_task.py FROM TO CASE [CASE ...]

The integration tests run most of their checks on tasks/rmsnorm without its DRAM-sized timing case (see
tests/CMakeLists.txt). The copy is the same code, oracle and controls; only the named [[cases]] blocks leave
task.toml, each from its header to the next table header. A name that is not a case of FROM is an error, so a
renamed case cannot be kept by accident.
"""
import re
import shutil
import sys
from pathlib import Path


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 64
    src, dst, drop = Path(sys.argv[1]), Path(sys.argv[2]), set(sys.argv[3:])
    text = (src / "task.toml").read_text()
    # Table headers start a line: "[name]" or "[[name]]". A [[cases]] block runs to the next one (or the end).
    headers = [m.start() for m in re.finditer(r"^\[", text, re.M)] + [len(text)]
    kept, dropped = [text[:headers[0]]], set()
    for start, end in zip(headers, headers[1:]):
        block = text[start:end]
        name = re.search(r'^name\s*=\s*"([^"]*)"', block, re.M)
        if block.startswith("[[cases]]") and name and name.group(1) in drop:
            dropped.add(name.group(1))
            continue
        kept.append(block)
    if dropped != drop:
        print(f"make_lite_task.py: {src / 'task.toml'} has no case {sorted(drop - dropped)}", file=sys.stderr)
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
