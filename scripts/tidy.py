#!/usr/bin/env python3
"""clang-tidy 14 over kwb's own sources (src/), with the checks of .clang-tidy, every finding an error.

Usage: scripts/tidy.py [BUILD_DIR=build/ci] [--jobs N] [--no-cache] [--skip-unity]

Reads BUILD_DIR/compile_commands.json (CMake writes it at configure time) and checks each of its files under src/,
as that build compiles it. A file found clean is remembered in a cache (KWB_TIDY_CACHE, default
~/.cache/kwb/tidy), keyed on SHA-256 of: clang-tidy's version, .clang-tidy, the compile command with the repository's
root written as "." (so that the key carries over to another clone), and the path and content of every file the
compile reads (the source and every header, system headers included, from ninja's dependency log, so the build must
have run; a file the log does not know is always checked). A change to any of them checks the file again; a file with
findings is never remembered. Cold, the whole of src/ takes a few minutes on 2 vCPUs; warm, a second.

Exit 0: no finding. 1: findings (printed, each with file, line, check name). 2: cannot run (no clang-tidy-14, no
compile_commands.json, a unity build: the message says what to do). With --skip-unity, a unity build (whose database
lists its unity sources, not src/'s files) exits 77 instead: CTest's "skipped".
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIDY = "clang-tidy-14"


def fail(message: str) -> None:
    print(f"scripts/tidy.py: {message}", file=sys.stderr)
    sys.exit(2)


def ninja_deps(build: Path) -> dict:
    """Object file (as ninja names it, relative to build) -> the files its compile read, from .ninja_deps."""
    out = subprocess.run(["ninja", "-C", str(build), "-t", "deps"], capture_output=True, text=True).stdout
    deps, current = {}, None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            target, _, state = line.partition(": #deps")
            current = target if "(VALID)" in state else None
            if current:
                deps[current] = []
        elif current and line.strip():
            deps[current].append(line.strip())
    return deps


class Hasher:
    def __init__(self):
        self.memo = {}

    def file(self, path: Path) -> str:
        key = str(path)
        if key not in self.memo:
            try:
                self.memo[key] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                self.memo[key] = "missing"
        return self.memo[key]


def relative(text: str) -> str:
    return text.replace(str(ROOT), ".")


def object_file(entry: dict):
    """The object file an entry compiles to, as ninja names it: the database's "output" (CMake 3.26 and later), else
    the argument after -o."""
    if entry.get("output"):
        return entry["output"]
    args = entry.get("arguments") or shlex.split(entry["command"])
    return next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "-o"), None)


def cache_key(entry: dict, build: Path, reads: list, base: str, hasher: Hasher) -> str:
    h = hashlib.sha256(base.encode())
    command = entry.get("command") or shlex.join(entry["arguments"])
    h.update(relative(command).encode())
    for dep in sorted(reads):
        path = (build / dep).resolve() if not os.path.isabs(dep) else Path(dep)
        h.update(f"\0{relative(str(path))}\0{hasher.file(path)}".encode())
    return h.hexdigest()


def run_tidy(build: Path, source: str) -> tuple:
    # The build is GCC's: clang need not know its -W flags, and its own warnings are not findings (.clang-tidy).
    proc = subprocess.run([TIDY, "-p", str(build), "--quiet", "--extra-arg=-Wno-unknown-warning-option",
                           "--extra-arg=-Wno-error", source], capture_output=True, text=True)
    lines = [l for l in (proc.stdout + proc.stderr).splitlines() if not l.endswith("warnings generated.")
             and not l.startswith("Suppressed ") and not l.startswith("Use -header-filter")
             and "treated as errors" not in l]
    return proc.returncode, "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", nargs="?", default=str(ROOT / "build" / "ci"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--skip-unity", action="store_true")
    args = parser.parse_args()
    build = Path(args.build).resolve()
    try:
        version = subprocess.run([TIDY, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        fail(f"{TIDY} is not installed; scripts/setup.sh installs it (apt install clang-tidy-14)")
    database = build / "compile_commands.json"
    if not database.is_file():
        fail(f"{database} does not exist: configure and build first (scripts/build.sh ci)")
    config = ROOT / ".clang-tidy"
    base = version + config.read_text()
    cache = Path(os.environ.get("KWB_TIDY_CACHE") or Path.home() / ".cache" / "kwb" / "tidy")
    cache.mkdir(parents=True, exist_ok=True)
    src = ROOT / "src"
    entries = [e for e in json.loads(database.read_text())
               if Path(e["file"]).resolve().is_relative_to(src) and Path(e["file"]).suffix == ".cpp"]
    if not entries and args.skip_unity:
        print(f"scripts/tidy.py: {database} lists no file under src/ (a unity build): nothing to check")
        return 77
    if not entries:
        fail(f"{database} lists no file under src/ (a unity build lists its unity sources only: tidy a non-unity "
             f"build such as build/ci)")
    seen, unique = set(), []
    for e in entries:  # a file compiled into two targets (the workers' objects) is checked once per command
        key = (e["file"], e.get("command") or shlex.join(e["arguments"]))
        if key not in seen:
            seen.add(key)
            unique.append(e)
    deps, hasher = ninja_deps(build), Hasher()
    todo, cached = [], 0
    for e in unique:
        output = object_file(e)
        reads = deps.get(output) if output else None
        key = cache_key(e, build, reads, base, hasher) if reads else None
        if key and not args.no_cache and (cache / key).exists():
            cached += 1
        else:
            todo.append((e["file"], key))
    findings = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for (source, key), (rc, text) in zip(todo, pool.map(lambda t: run_tidy(build, t[0]), todo)):
            if rc == 0 and not text.strip():
                if key:
                    (cache / key).touch()
            else:
                findings.append(f"{os.path.relpath(source, ROOT)}:\n{text}")
    for f in findings:
        print(f)
    print(f"scripts/tidy.py: {len(unique)} files of src/ ({cached} unchanged since found clean, {len(todo)} checked): "
          f"{len(findings)} with findings (.clang-tidy; {TIDY})", file=sys.stderr if findings else sys.stdout)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
