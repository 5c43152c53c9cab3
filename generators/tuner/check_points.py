#!/usr/bin/env python3
"""Render every point of the tuner's search spaces and run `kwb check` on each: all must PASS.

    python3 generators/tuner/check_points.py KWB [TASK ...]    (default: every task with a template)

The task folders are taken from the repository this file sits in (tasks/<task>). Uses KWB_LEDGER=none and a
private KWB_CACHE_DIR, so nothing is recorded. Prints one line per point; exit 0 when every point passes, 1 when
one does not, 2 on a usage error.
"""

import os
import subprocess
import sys
import tempfile
import time

import tuner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv):
    if len(argv) < 2 or not os.access(argv[1], os.X_OK):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    kwb = os.path.abspath(argv[1])
    tasks = argv[2:] or tuner.known_tasks()
    failures = 0
    total = 0
    with tempfile.TemporaryDirectory(prefix="kwb-tuner-points-") as tmp:
        env = dict(os.environ, KWB_LEDGER="none", KWB_CACHE_DIR=os.path.join(tmp, "cache"))
        for task in tasks:
            space = tuner.load_space(task)
            task_dir = os.path.join(ROOT, "tasks", task)
            for point in tuner.all_points(space):
                total += 1
                name = f"{task}_u{point['UNROLL']}_b{point['BLOCK']}.cpp"
                path = os.path.join(tmp, name)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(tuner.render(space, point))
                started = time.monotonic()
                proc = subprocess.run([kwb, "check", task_dir, "--impl", path], env=env, capture_output=True,
                                      text=True)
                verdict = [line for line in proc.stdout.splitlines() if line.startswith("verdict:")]
                status = "PASS" if proc.returncode == 0 else "FAIL"
                print(f"{status} {task:10s} {tuner.params_text(point, space):22s} rc={proc.returncode} "
                      f"{verdict[-1] if verdict else ''} ({time.monotonic() - started:.1f} s)", flush=True)
                if proc.returncode != 0:
                    failures += 1
                    sys.stdout.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    print(f"{total - failures} of {total} points pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
