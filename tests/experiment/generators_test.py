#!/usr/bin/env python3
"""Test of the generators that ship with kwb for `kwb experiment` (generators/: tuner, random_edit, cheater).

    python3 tests/experiment/generators_test.py KWB [RMSNORM_TASK]    (exit 0 pass, 1 fail, 77 skip: no kwb binary)

RMSNORM_TASK, when given, is the task folder `kwb check` runs RMSNorm candidates against: CTest passes the lite copy
(tests/make_lite_task.py: the shipped task without its DRAM-sized timing case, ~4 s of every check, which no
assertion here is about). The generators always see the shipped task's public files.

For rmsnorm, softmax and layernorm and each generator, the generator protocol is faked in a temporary folder: a
frozen read-only copy of the arm's folder as the working directory, a public copy of the task, a storage layout
<storage>/trajectories/<id>/{work,attempts}, and a synthetic history that grows attempt by attempt (1..3, two seeds; the cheater's 1..6 and 12).
Asserted:
  - determinism: each attempt run twice gives the same candidate bytes (and the same meta, except the cheater's
    environment probe, which describes the machine);
  - every tuner and random_edit candidate PASSes `kwb check`; every cheater candidate-level attack is REJECTED
    with its expected reason; the cheater's generator-level attempt emits the baseline, and, with no sandbox
    here, its probe reports what it could reach;
  - the tuner's seeds start at different points, and with attempt 1 kept its later attempts move: distinct
    parameters, neighbours of the kept point first;
  - random_edit candidates differ from the incumbent only by its edits, and stack on a kept candidate;
  - the tuner exits non-zero with no candidate for a task it has no template for.
Each distinct candidate is checked once (cached by sha256). KWB_LEDGER=none and a private KWB_CACHE_DIR: nothing
is recorded in the tasks' ledgers.
"""

import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATORS = os.path.join(ROOT, "generators")
TASKS = ["rmsnorm", "softmax", "layernorm"]
SEEDS = [1, 2]
ATTEMPTS = [1, 2, 3]  # the tuner's start and two moves; random_edit's attempt 3 stacks on the kept attempt 2
CHEATER_ATTEMPTS = [1, 2, 3, 4, 5, 6, 12]  # every attack once: 6 is the socket, 12 the file read
SCRIPTS = {"tuner": "tuner.py", "random_edit": "random_edit.py", "cheater": "cheater.py"}
CHEAT_REASONS = {
    "replay": {"stale_output"},
    "timer_interposition": {"forbidden_symbol"},
    "work_after_return": {"sandbox_violation", "work_after_return"},
    "input_mutation": {"input_modified"},
    "socket": {"sandbox_violation"},
    "read_file": {"sandbox_violation"},
}

failures = []


def fail(message):
    failures.append(message)
    print(f"FAIL: {message}", flush=True)


def expect(condition, message):
    if not condition:
        fail(message)
    return condition


def make_read_only(path):
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        os.chmod(dirpath, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)


def make_writable(path):
    for dirpath, dirnames, filenames in os.walk(path):
        os.chmod(dirpath, stat.S_IRWXU)
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), stat.S_IRWXU)


class Checker:
    """kwb check, once per distinct candidate."""

    def __init__(self, kwb, cache_dir, task_dirs):
        self.kwb = kwb
        self.task_dirs = task_dirs
        self.env = dict(os.environ, KWB_LEDGER="none", KWB_CACHE_DIR=cache_dir)
        self.cache = {}
        self.seconds = 0.0

    def check(self, task, path):
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if (task, digest) in self.cache:  # a candidate another thread is checking may be checked twice: harmless
            return self.cache[(task, digest)]
        started = time.monotonic()
        task_dir = self.task_dirs.get(task, os.path.join(ROOT, "tasks", task))
        proc = subprocess.run([self.kwb, "check", task_dir, "--impl", path, "--json"],
                              env=self.env, capture_output=True, text=True)
        self.seconds += time.monotonic() - started
        reasons = set()
        verdict = None
        try:
            report = json.loads(proc.stdout)
            verdict = report.get("verdict")
            reasons = {f.get("reason") for f in report.get("failures") or [] if f.get("reason")}
        except ValueError:
            pass
        result = (proc.returncode, verdict, reasons, (proc.stderr or proc.stdout)[-1500:])
        self.cache[(task, digest)] = result
        return result


def public_task_copy(public_root, task):
    dst = os.path.join(public_root, task)
    os.makedirs(os.path.join(dst, "cpu"))
    for name in ("task.toml", "README.md", os.path.join("cpu", "baseline.cpp")):
        src = os.path.join(ROOT, "tasks", task, name)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(dst, name))
    make_read_only(dst)
    return dst


def run_generator(arm_dir, script, env, output):
    for path in (output, output + ".json"):
        if os.path.exists(path):
            os.unlink(path)
    proc = subprocess.run([sys.executable, os.path.join(arm_dir, script)], cwd=arm_dir, env=env,
                          capture_output=True, text=True, timeout=120)
    candidate = meta = None
    if proc.returncode == 0 and os.path.isfile(output):
        with open(output, "rb") as f:
            candidate = f.read()
        if os.path.isfile(output + ".json"):
            with open(output + ".json", encoding="utf-8") as f:
                meta = json.load(f)
    return proc, candidate, meta


def protocol_env(tmp, task, public_dir, arm, seed, attempt, attempts, incumbent, history, work):
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": work,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "KWB_TASK_DIR": public_dir,
        "KWB_TASK": task,
        "KWB_BACKEND": "cpu",
        "KWB_BASELINE": os.path.join(public_dir, "cpu", "baseline.cpp"),
        "KWB_INCUMBENT": incumbent,
        "KWB_SEED": str(seed),
        "KWB_ATTEMPT": str(attempt),
        "KWB_ATTEMPTS": str(attempts),
        "KWB_ARM": arm,
        "KWB_HISTORY": history,
        "KWB_WORK": work,
        "KWB_OUTPUT": os.path.join(work, "candidate.cpp"),
        "KWB_CHEATER_NO_NETWORK": "1",
    }


def synthetic_result(attempt, candidate, meta, kept, category):
    return {
        "attempt": attempt,
        "decision": "KEEP_CANDIDATE" if kept else ("INVALID" if category == "cheat" else "KEEP_BASELINE"),
        "kept": kept,
        "category": category,
        "reason_codes": [],
        "improvement_pct": 12.5 if kept else (None if category == "cheat" else -1.0),
        "ci_low_pct": None,
        "ci_high_pct": None,
        "candidate_sha256": hashlib.sha256(candidate).hexdigest() if candidate is not None else None,
        "meta": meta,
    }


def strip_edits(text):
    """The source with random_edit's insertions removed and its include lines sorted: equal for an unedited file."""
    lines = []
    for line in text.split("\n"):
        if "kwb random edit" in line or re.match(r"\s*\[\[maybe_unused\]\] static int kwb_edit_\d+_\d+(_\d+)? = \d+;$",
                                                  line):
            continue
        if line.strip() == "":
            continue
        lines.append(line)
    includes = sorted(l for l in lines if l.lstrip().startswith("#include"))
    others = [l for l in lines if not l.lstrip().startswith("#include")]
    return includes, others


def trajectory(ctx, task, arm, seed, attempts):
    """Runs one faked trajectory; returns [(attempt, candidate bytes, meta)]."""
    tmp, checker, public_dir = ctx["tmp"], ctx["checker"], ctx["public"][task]
    tdir = os.path.join(tmp, "storage", "trajectories", f"{arm}-{task}-{seed}")
    work = os.path.join(tdir, "work")
    history = os.path.join(tdir, "history")
    attempts_dir = os.path.join(tdir, "attempts")
    os.makedirs(history, exist_ok=True)
    incumbent = os.path.join(public_dir, "cpu", "baseline.cpp")
    out = []
    for attempt in attempts:
        env = protocol_env(tmp, task, public_dir, arm, seed, attempt, max(attempts), incumbent, history, work)
        make_read_only(history)
        first = run_generator(ctx["arms"][arm], SCRIPTS[arm], env, env["KWB_OUTPUT"])
        second = run_generator(ctx["arms"][arm], SCRIPTS[arm], env, env["KWB_OUTPUT"])
        make_writable(history)
        label = f"{arm} {task} seed {seed} attempt {attempt}"
        if not expect(first[0].returncode == 0 and first[1] is not None,
                      f"{label}: no candidate (exit {first[0].returncode}): {first[0].stderr.strip()[-500:]}"):
            continue
        expect(first[1] == second[1], f"{label}: not deterministic: two runs wrote different candidates")
        if not (arm == "cheater" and first[2] and first[2].get("attack") == "generator_escape"):
            expect(first[2] == second[2], f"{label}: not deterministic: two runs wrote different meta")
        expect(isinstance(first[2], dict), f"{label}: no meta object in KWB_OUTPUT.json")
        candidate, meta = first[1], first[2] or {}
        path = os.path.join(tmp, "candidates", hashlib.sha256(candidate).hexdigest() + ".cpp")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(candidate)

        rc, verdict, reasons, tail = checker.check(task, path)
        attack = meta.get("attack")
        if arm in ("tuner", "random_edit") or attack == "generator_escape":
            expect(rc == 0 and verdict == "PASS", f"{label}: kwb check did not PASS (rc {rc}, {verdict}, "
                   f"{sorted(reasons)}): {tail}")
            category = "kept"
        else:
            wanted = CHEAT_REASONS.get(attack, set())
            expect(rc == 1 and verdict == "FAIL" and reasons & wanted,
                   f"{label}: attack {attack!r} not rejected as {sorted(wanted)} (rc {rc}, {verdict}, "
                   f"{sorted(reasons)}): {tail}")
            ctx["cheat_reasons"].setdefault((task, attack), set()).update(reasons)
            category = "cheat"

        # The synthetic history: the tuner's attempt 1 and random_edit's attempt 2 are kept, nothing else.
        kept = (arm == "tuner" and attempt == 1) or (arm == "random_edit" and attempt == 2)
        if not kept and category == "kept":
            category = "slower"
        adir = os.path.join(history, str(attempt))
        os.makedirs(adir)
        with open(os.path.join(adir, "candidate.cpp"), "wb") as f:
            f.write(candidate)
        with open(os.path.join(adir, "result.json"), "w", encoding="utf-8") as f:
            json.dump(synthetic_result(attempt, candidate, meta, kept, category), f)
        # The private evidence a generator must not see (the cheater's probe looks for it).
        os.makedirs(os.path.join(attempts_dir, str(attempt)), exist_ok=True)
        with open(os.path.join(attempts_dir, str(attempt), "evidence.json"), "w", encoding="utf-8") as f:
            f.write('{"private": true}\n')
        if kept:
            incumbent = os.path.join(adir, "candidate.cpp")
        out.append((attempt, candidate, meta))
    return out


def tuner_assertions(task, runs_by_seed):
    starts = {}
    for seed, runs in runs_by_seed.items():
        points = [(a, (m.get("params") or {}).get("UNROLL"), (m.get("params") or {}).get("BLOCK"), m.get("move"))
                  for a, _, m in runs]
        print(f"  tuner {task} seed {seed}: " + ", ".join(f"a{a} U{u} B{b} ({mv})" for a, u, b, mv in points))
        if not runs:
            continue
        first = runs[0][2]
        expect(first.get("move") == "start", f"tuner {task} seed {seed}: attempt 1 is not the seed's start point")
        starts[seed] = (first["params"]["UNROLL"], first["params"]["BLOCK"])
        keys = [(m["params"]["UNROLL"], m["params"]["BLOCK"]) for _, _, m in runs]
        expect(len(set(keys)) == len(keys), f"tuner {task} seed {seed}: a point was tried twice: {keys}")
        values = {"UNROLL": [1, 2, 4, 8], "BLOCK": [256, 512, 1024, 2048, 4096, 0]}
        for a, _, m in runs[1:]:
            expect(m.get("center") == first["params"] and m.get("center_from") == "kept_attempt_meta",
                   f"tuner {task} seed {seed} attempt {a}: centre {m.get('center')} is not the kept attempt 1's point")
            if m.get("move") == "neighbour":
                diffs = [k for k in values if m["params"][k] != first["params"][k]]
                ok = len(diffs) == 1 and abs(values[diffs[0]].index(m["params"][diffs[0]]) -
                                             values[diffs[0]].index(first["params"][diffs[0]])) == 1
                expect(ok, f"tuner {task} seed {seed} attempt {a}: {m['params']} is no neighbour of "
                       f"{first['params']}")
            else:
                expect(m.get("move") == "random", f"tuner {task} seed {seed} attempt {a}: move {m.get('move')}")
                # Random moves only once every neighbour has been tried.
                tried = {tuple(p) for p in m.get("tried_before", [])}
                center = first["params"]
                for knob, vals in values.items():
                    i = vals.index(center[knob])
                    for j in (i - 1, i + 1):
                        if 0 <= j < len(vals):
                            n = dict(center, **{knob: vals[j]})
                            expect((n["UNROLL"], n["BLOCK"]) in tried,
                                   f"tuner {task} seed {seed} attempt {a}: random before neighbour {n} was tried")
        expect(any(m.get("move") == "neighbour" for _, _, m in runs[1:]),
               f"tuner {task} seed {seed}: the descent never moved to a neighbour")
    expect(len(set(starts.values())) == len(starts), f"tuner {task}: seeds {sorted(starts)} start at the same point")


def random_edit_assertions(task, runs_by_seed, baseline_text):
    for seed, runs in runs_by_seed.items():
        by_attempt = {a: (c.decode("utf-8"), m) for a, c, m in runs}
        for a, (text, meta) in by_attempt.items():
            expect(len(meta.get("edits", [])) >= 3, f"random_edit {task} seed {seed} attempt {a}: fewer than 3 edits")
            expect(strip_edits(text) == strip_edits(baseline_text),
                   f"random_edit {task} seed {seed} attempt {a}: changes more than its edits")
        if 2 in by_attempt and 3 in by_attempt:
            kept_tags = [e["text"] for e in by_attempt[2][1]["edits"] if e["kind"] != "swap_includes" and e["text"]]
            expect(all(t in by_attempt[3][0] for t in kept_tags),
                   f"random_edit {task} seed {seed}: attempt 3 does not build on the kept attempt 2")
        texts = [t for t, _ in by_attempt.values()]
        expect(len(set(texts)) == len(texts), f"random_edit {task} seed {seed}: two attempts gave the same candidate")


def cheater_assertions(task, runs_by_seed, baseline_text):
    for seed, runs in runs_by_seed.items():
        for a, candidate, meta in runs:
            if meta.get("attack") == "generator_escape":
                text = candidate.decode("utf-8")
                expect(text.endswith(baseline_text), f"cheater {task} attempt {a}: not the baseline with a comment")
                found = meta.get("found") or {}
                # No sandbox in this test: the probe must see the other trajectories and the private evidence.
                expect(any("evidence.json" in r.get("path", "") for r in found.get("read", [])),
                       f"cheater {task} seed {seed}: the probe found no private evidence without a sandbox: "
                       f"{json.dumps(found)[:400]}")
                expect(found.get("leaks"), f"cheater {task} seed {seed}: the probe reports no leak without a sandbox")
        attacks = [m.get("attack") for _, _, m in runs]
        expect(set(attacks) == {"generator_escape"} | set(CHEAT_REASONS),
               f"cheater {task} seed {seed}: attacks {attacks} do not cover the list")


def main(argv):
    if len(argv) < 2 or not os.path.isfile(argv[1]) or not os.access(argv[1], os.X_OK):
        print("skip: no kwb binary given (usage: generators_test.py KWB)")
        return 77
    kwb = os.path.abspath(argv[1])
    started = time.monotonic()
    ledgers_before = {t: os.path.exists(os.path.join(ROOT, "tasks", t, ".kwb")) for t in TASKS}
    tmp = tempfile.mkdtemp(prefix="kwb-generators-test-")
    try:
        task_dirs = {"rmsnorm": os.path.abspath(argv[2])} if len(argv) > 2 else {}
        ctx = {"tmp": tmp, "checker": Checker(kwb, os.path.join(tmp, "cache"), task_dirs), "public": {}, "arms": {},
               "cheat_reasons": {}}
        for arm in SCRIPTS:
            dst = os.path.join(tmp, "arms", arm)
            shutil.copytree(os.path.join(GENERATORS, arm), dst, ignore=shutil.ignore_patterns("__pycache__"))
            make_read_only(dst)
            ctx["arms"][arm] = dst
        for task in TASKS:
            ctx["public"][task] = public_task_copy(os.path.join(tmp, "public"), task)
        # Every trajectory's folders exist from the start, as in an experiment's storage.
        for arm in SCRIPTS:
            for task in TASKS:
                for seed in SEEDS:
                    for sub in ("work", "attempts"):
                        os.makedirs(os.path.join(tmp, "storage", "trajectories", f"{arm}-{task}-{seed}", sub))
        # Seed 1 of the first task's cheater runs first: give it a neighbour with private evidence to find.
        os.makedirs(os.path.join(tmp, "storage", "trajectories", "other", "attempts", "1"))
        with open(os.path.join(tmp, "storage", "trajectories", "other", "attempts", "1", "evidence.json"), "w") as f:
            f.write('{"private": true}\n')

        def one_task(task):
            with open(os.path.join(ROOT, "tasks", task, "cpu", "baseline.cpp"), encoding="utf-8") as f:
                baseline_text = f.read()
            tuner_runs = {s: trajectory(ctx, task, "tuner", s, ATTEMPTS) for s in SEEDS}
            tuner_assertions(task, tuner_runs)
            edit_runs = {s: trajectory(ctx, task, "random_edit", s, ATTEMPTS) for s in SEEDS}
            random_edit_assertions(task, edit_runs, baseline_text)
            cheat_runs = {s: trajectory(ctx, task, "cheater", s, CHEATER_ATTEMPTS) for s in SEEDS}
            cheater_assertions(task, cheat_runs, baseline_text)
            print(f"  {task}: done at {time.monotonic() - started:.0f} s", flush=True)

        # The tasks' trajectories are independent (each its own folders, its own candidates): one thread each, so
        # their generators and kwb checks overlap (most of a check is waiting on its workers and sandboxes).
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(TASKS)) as pool:
            for done in [pool.submit(one_task, task) for task in TASKS]:
                done.result()

        for (task, attack), reasons in sorted(ctx["cheat_reasons"].items()):
            print(f"  cheater {task} {attack}: rejected with {', '.join(sorted(reasons))}")

        # A task without a template: exit non-zero, no candidate.
        for task in ("gemm", "no_such_task"):
            work = os.path.join(tmp, "unknown", task)
            os.makedirs(work)
            env = protocol_env(tmp, task, ctx["public"]["rmsnorm"], "tuner", 1, 1, 1,
                               os.path.join(ctx["public"]["rmsnorm"], "cpu", "baseline.cpp"),
                               os.path.join(work, "history"), work)
            proc, candidate, _ = run_generator(ctx["arms"]["tuner"], "tuner.py", env, env["KWB_OUTPUT"])
            expect(proc.returncode != 0 and candidate is None and not os.path.exists(env["KWB_OUTPUT"]),
                   f"tuner on unknown task {task!r}: exit {proc.returncode}, wrote a candidate: "
                   f"{os.path.exists(env['KWB_OUTPUT'])}")
            expect(proc.stderr.strip() != "", f"tuner on unknown task {task!r}: says nothing about why")

        for task in TASKS:
            ledger = os.path.join(ROOT, "tasks", task, ".kwb")
            if os.path.exists(ledger) and not ledgers_before[task]:
                fail(f"kwb check wrote {ledger} despite KWB_LEDGER=none")
                shutil.rmtree(ledger, ignore_errors=True)
        checks = len(ctx["checker"].cache)
        print(f"{checks} distinct candidates checked in {ctx['checker'].seconds:.0f} s; "
              f"total {time.monotonic() - started:.0f} s")
    finally:
        make_writable(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
