#!/usr/bin/env python3
"""A fake Slurm for tests and benches: sbatch, squeue, sacct, scontrol and scancel in one script, chosen by the name
it is called under (`fake_slurm.py install DIR` makes DIR/bin with the five names as symlinks; put DIR/bin first on
PATH). It runs nothing: a job is a record that moves PENDING -> RUNNING -> COMPLETED on the wall clock, and when it
ends it writes the exit status a kwb campaign job writes (`exit_code` in the attempt's folder, found from the
job script as kwb writes it), so `kwb campaign run` judges it as a job that ended without a bundle.

Every call is one line of DIR/calls.log (the time, the command and its arguments), so a bench counts what kwb
asked of the scheduler. The state is DIR/state.json, under an flock.

Settings (environment, read at every call):
  FAKE_SLURM_DIR         the folder (required)
  FAKE_SLURM_NODES       how many nodes (default 8): fake1 .. fakeN; a job takes one whole node
  FAKE_SLURM_PENDING_S   seconds a job stays PENDING at least (default 0.5)
  FAKE_SLURM_RUN_S       seconds a job runs (default 2)
  FAKE_SLURM_EXIT        the exit status its exit_code file gets (default 1)
  FAKE_SLURM_MIN_AGE_S   seconds an ended job stays in squeue and scontrol (Slurm's MinJobAge; default 300)
  FAKE_SLURM_ACCOUNTING  0: sacct fails as on a cluster without accounting storage (default 1)
"""
import fcntl
import json
import os
import re
import sys
import time

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def env(name, default):
    return type(default)(os.environ.get(name, default))


class State:
    def __init__(self, folder):
        self.folder = folder
        self.lock = open(os.path.join(folder, "state.lock"), "a")
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        path = os.path.join(folder, "state.json")
        self.data = json.load(open(path)) if os.path.exists(path) else {"next_id": 100, "jobs": {}}

    def save(self):
        path = os.path.join(self.folder, "state.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.data, f)
        os.replace(path + ".tmp", path)

    def advance(self, now):
        """Moves every job along the wall clock: ends what ran its time, starts what waited and fits."""
        jobs = self.data["jobs"]
        nodes = [f"fake{i}" for i in range(1, env("FAKE_SLURM_NODES", 8) + 1)]
        busy = {j["node"] for j in jobs.values() if j["state"] == "RUNNING"}
        for j in jobs.values():
            if j["state"] == "RUNNING" and now >= j["start"] + env("FAKE_SLURM_RUN_S", 2.0):
                code = env("FAKE_SLURM_EXIT", 1)
                j["state"], j["end"] = "COMPLETED" if code == 0 else "FAILED", now
                j["reason"] = "None" if code == 0 else "NonZeroExitCode"
                busy.discard(j["node"])
                if j["dir"]:
                    with open(os.path.join(j["dir"], "exit_code"), "w") as f:
                        f.write(f"{env('FAKE_SLURM_EXIT', 1)}\n")
        running = {}
        for j in jobs.values():
            if j["state"] == "RUNNING":
                running[j["array"]] = running.get(j["array"], 0) + 1
        for key in sorted(jobs, key=lambda k: (jobs[k]["submit"], jobs[k]["index"])):
            j = jobs[key]
            if j["state"] != "PENDING" or now < j["submit"] + env("FAKE_SLURM_PENDING_S", 0.5):
                continue
            if j["limit"] and running.get(j["array"], 0) >= j["limit"]:
                j["reason"] = "JobArrayTaskLimit"
                continue
            free = [n for n in nodes if n not in busy]
            if not free:
                j["reason"] = "Resources"
                continue
            j["state"], j["start"], j["node"], j["reason"] = "RUNNING", now, free[0], "None"
            busy.add(free[0])
            running[j["array"]] = running.get(j["array"], 0) + 1

    def visible(self, now):
        """The jobs slurmctld still lists (MinJobAge)."""
        age = env("FAKE_SLURM_MIN_AGE_S", 300.0)
        return {k: j for k, j in self.data["jobs"].items() if j["state"] not in ENDED or now - j["end"] < age}


def attempt_dirs(script):
    """The attempt folders a kwb job script (cd '<dir>') or array script (exec /bin/sh '<dir>/job.sh') names."""
    text = open(script).read()
    unquote = lambda s: s.replace("'\\''", "'")
    tasks = re.findall(r"exec /bin/sh '((?:[^']|'\\'')*)/job\.sh'", text)
    if tasks:
        return [unquote(t) for t in tasks]
    cd = re.search(r"^cd '((?:[^']|'\\'')*)'", text, re.M)
    return [unquote(cd.group(1)) if cd else ""]


def sbatch(state, args, now):
    script = args[-1]
    array = next((a.split("=", 1)[1] for a in args if a.startswith("--array=")), None)
    dirs = attempt_dirs(script)
    job_id = state.data["next_id"]
    state.data["next_id"] += 1
    limit = 0
    if array is not None:
        spec, _, lim = array.partition("%")
        first, _, last = spec.partition("-")
        indices = range(int(first), int(last or first) + 1)
        limit = int(lim) if lim else 0
        if len(dirs) != len(indices):
            print(f"sbatch: error: the array script names {len(dirs)} jobs for {len(indices)} tasks", file=sys.stderr)
            return 1
    else:
        indices = [None]
    for n, i in enumerate(indices):
        key = str(job_id) if i is None else f"{job_id}_{i}"
        state.data["jobs"][key] = {"state": "PENDING", "reason": "None", "submit": now, "start": 0, "end": 0,
                                   "node": "", "dir": dirs[n], "array": str(job_id), "index": n, "limit": limit}
    print(job_id)
    return 0


def wanted(args):
    ids = set()
    for a in args:
        if a.startswith("--jobs="):
            ids.update(a.split("=", 1)[1].split(","))
    return ids


def squeue(state, args, now):
    ids = wanted(args)
    fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "%i|%T|%r|%N")
    # As Slurm's squeue: only pending and running jobs, unless --states=all (then ended ones too, for MinJobAge).
    shown = {k: j for k, j in state.visible(now).items()
             if "--states=all" in args or j["state"] in ("PENDING", "RUNNING")}
    if len(ids) == 1 and not any(k == next(iter(ids)) or j["array"] == next(iter(ids)) for k, j in shown.items()):
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    for key, j in shown.items():
        if ids and key not in ids and j["array"] not in ids:
            continue
        print(fmt.replace("%i", key).replace("%T", j["state"]).replace("%r", j["reason"])
              .replace("%N", j["node"] if j["state"] != "PENDING" else ""))
    return 0


def sacct(state, args, now):
    if env("FAKE_SLURM_ACCOUNTING", 1) == 0:
        print("sacct: error: Slurm accounting storage is disabled", file=sys.stderr)
        return 1
    ids = wanted(args)
    for key, j in state.data["jobs"].items():
        if ids and key not in ids and j["array"] not in ids:
            continue
        ended = j["state"] in ENDED
        elapsed = int((j["end"] if ended else now) - j["start"]) if j["start"] else 0
        code = f"{env('FAKE_SLURM_EXIT', 1)}:0" if j["state"] in ("COMPLETED", "FAILED") else "0:0"
        state_text = j["state"]
        stamp = f"00:00:{elapsed:02d}"
        print(f"{key}|{state_text}|{code}|{stamp}||{j['node'] or 'None assigned'}")
        if j["start"]:
            print(f"{key}.batch|{state_text}|{code}|{stamp}|2048K|{j['node']}")
    return 0


def scontrol(state, args, now):
    if args[:3] != ["show", "job", "-o"] or len(args) != 4:
        print("scontrol: the fake knows only `scontrol show job -o ID`", file=sys.stderr)
        return 2
    j = state.visible(now).get(args[3])
    if j is None:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    print(f"JobId={args[3]} JobName=x JobState={j['state']} Reason={j['reason']} ExitCode=0:0 "
          f"NodeList={j['node'] or '(null)'}")
    return 0


def scancel(state, args, now):
    for key in args:
        for k, j in state.data["jobs"].items():
            if (k == key or j["array"] == key) and j["state"] not in ENDED:
                j["state"], j["end"], j["reason"] = "CANCELLED", now, "None"
    return 0


def install(folder):
    bin_dir = os.path.join(folder, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    for name in ("sbatch", "squeue", "sacct", "scontrol", "scancel"):
        link = os.path.join(bin_dir, name)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(os.path.abspath(__file__), link)
    return 0


def main():
    name = os.path.basename(sys.argv[0])
    if name == "fake_slurm.py":
        if len(sys.argv) == 3 and sys.argv[1] == "install":
            return install(sys.argv[2])
        print(__doc__, file=sys.stderr)
        return 2
    folder = os.environ.get("FAKE_SLURM_DIR")
    if not folder:
        print(f"{name}: FAKE_SLURM_DIR is not set (tests/slurm/fake_slurm.py)", file=sys.stderr)
        return 2
    args = sys.argv[1:]
    with open(os.path.join(folder, "calls.log"), "a") as log:
        log.write(f"{time.time():.3f} " + " ".join([name] + args) + "\n")
    state = State(folder)
    now = time.time()
    state.advance(now)
    rc = {"sbatch": sbatch, "squeue": squeue, "sacct": sacct, "scontrol": scontrol, "scancel": scancel}[name](
        state, args, now)
    state.save()
    return rc


if __name__ == "__main__":
    sys.exit(main())
