#!/usr/bin/env python3
"""kwb experiment generator "tuner": searches the unroll and blocking knobs of a task's fused reference.

Protocol (docs of `kwb experiment`; see generators/README.md): kwb runs this once per attempt with the
environment variables KWB_TASK, KWB_BACKEND, KWB_INCUMBENT, KWB_SEED, KWB_ATTEMPT, KWB_HISTORY, KWB_WORK and
KWB_OUTPUT set. It writes one candidate source to KWB_OUTPUT and its parameters to KWB_OUTPUT + ".json" (the
attempt's "meta"), and exits 0. Exit 3: the task (or backend) has no template here, so no candidate; exit 4: every
point of the search space has been tried already; exit 2: the protocol's environment is missing or malformed.

Deterministic: the output depends only on the task, KWB_SEED, KWB_ATTEMPT, the history's result.json files and
the incumbent's text. Python 3 standard library only, no network, nothing written outside KWB_OUTPUT(.json).

Strategy:
  attempt 1 (or no usable history): the seed's start point, starts[seed mod len(starts)] of the task's space file;
  later attempts: coordinate descent around the centre = the parameters of the current incumbent: the most
  recent kept attempt's meta (or the marker line of its candidate.cpp when the meta is missing); else the tuner
  marker in KWB_INCUMBENT's text; else the seed's start point. If the centre itself is untried it is emitted;
  otherwise the neighbours are the points one step away along one knob (knobs in space-file order, the larger
  value first), and the first one not yet tried in this trajectory is emitted. When all are tried: a random
  untried point drawn with random.Random(f"{task}:{seed}:{attempt}"). When every point is tried: exit 4.
"""

import json
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "templates")
MARKER = re.compile(r"^// kwb-tuner: task=(\S+)((?: [A-Z_]+=-?\d+)+)\s*$", re.MULTILINE)

EXIT_BAD_ENV = 2
EXIT_UNKNOWN_TASK = 3
EXIT_EXHAUSTED = 4


class SpaceError(Exception):
    pass


def known_tasks():
    return sorted(name[: -len(".json")] for name in os.listdir(TEMPLATES) if name.endswith(".json"))


def load_space(task):
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", task or ""):
        raise SpaceError(f"task name {task!r} is not one this tuner has a template for")
    path = os.path.join(TEMPLATES, task + ".json")
    if not os.path.isfile(path):
        raise SpaceError(
            f"no template for task {task!r}: the tuner knows {', '.join(known_tasks())} "
            f"(a template is generators/tuner/templates/<task>.cpp with a <task>.json search space)"
        )
    with open(path, encoding="utf-8") as f:
        space = json.load(f)
    with open(os.path.join(TEMPLATES, space["template"]), encoding="utf-8") as f:
        space["template_text"] = f.read()
    return space


def knob_names(space):
    return [k["name"] for k in space["knobs"]]


def all_points(space):
    points = [{}]
    for knob in space["knobs"]:
        points = [dict(p, **{knob["name"]: v}) for p in points for v in knob["values"]]
    return points


def key(point, space):
    return tuple(point[n] for n in knob_names(space))


def valid(point, space):
    if not isinstance(point, dict):
        return False
    for knob in space["knobs"]:
        if point.get(knob["name"]) not in knob["values"] or isinstance(point.get(knob["name"]), bool):
            return False
    return True


def params_text(point, space):
    return " ".join(f"{n}={point[n]}" for n in knob_names(space))


def render(space, point):
    """The candidate source of one point: the template with every @KNOB@ replaced by its value."""
    if not valid(point, space):
        raise SpaceError(f"{point!r} is not a point of the {space['task']} search space")
    text = space["template_text"].replace("@PARAMS@", params_text(point, space))
    for n in knob_names(space):
        text = text.replace(f"@{n}@", str(int(point[n])))
    if "@" in re.sub(r"//[^\n]*", "", text):
        raise SpaceError(f"template {space['template']} has a placeholder left after substitution")
    return text


def neighbours(center, space):
    """Points one step away along one knob, knobs in space order, the larger value first."""
    out = []
    for knob in space["knobs"]:
        values = knob["values"]
        i = values.index(center[knob["name"]])
        for j in (i + 1, i - 1):
            if 0 <= j < len(values):
                out.append(dict(center, **{knob["name"]: values[j]}))
    return out


def read_history(history_dir):
    """[(attempt, result dict)] in attempt order; unreadable entries are skipped (they carry no parameters)."""
    entries = []
    if not history_dir or not os.path.isdir(history_dir):
        return entries
    for name in os.listdir(history_dir):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(history_dir, name, "result.json"), encoding="utf-8") as f:
                result = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(result, dict):
            continue
        # The candidate's marker line stands in for a meta that did not come through.
        result["_candidate_text"] = ""
        for cname in sorted(os.listdir(os.path.join(history_dir, name))):
            if cname.startswith("candidate."):
                try:
                    with open(os.path.join(history_dir, name, cname), encoding="utf-8", errors="replace") as f:
                        result["_candidate_text"] = f.read()
                except OSError:
                    pass
                break
        entries.append((int(name), result))
    entries.sort(key=lambda e: e[0])
    return entries


def meta_point(result, space):
    meta = result.get("meta")
    if isinstance(meta, dict) and meta.get("generator") == "tuner" and meta.get("task") == space["task"]:
        point = meta.get("params")
        if valid(point, space):
            return {n: point[n] for n in knob_names(space)}
    return marker_point(result.get("_candidate_text"), space)


def marker_point(text, space):
    for m in MARKER.finditer(text or ""):
        if m.group(1) != space["task"]:
            continue
        point = {}
        for item in m.group(2).split():
            name, value = item.split("=")
            point[name] = int(value)
        if valid(point, space) and set(point) == set(knob_names(space)):
            return point
    return None


def choose(space, seed, attempt, history, incumbent_text):
    starts = [p for p in space["starts"] if valid(p, space)]
    if not starts:
        raise SpaceError(f"{space['task']}: the space file names no valid start point")
    start = starts[seed % len(starts)]
    tried = set()
    kept = None
    for _, result in history:
        point = meta_point(result, space)
        if point is None:
            continue
        tried.add(key(point, space))
        if result.get("kept") is True:
            kept = point  # the last kept one is the current incumbent
    if not tried:
        return start, {"move": "start", "center": None}
    if kept is not None:
        center, center_from = kept, "kept_attempt_meta"
    else:
        center = marker_point(incumbent_text, space)
        center_from = "incumbent_marker" if center is not None else "seed_start"
        if center is None:
            center = start
    if key(center, space) not in tried:
        return center, {"move": "center", "center": center, "center_from": center_from}
    for n in neighbours(center, space):
        if key(n, space) not in tried:
            return n, {"move": "neighbour", "center": center, "center_from": center_from}
    untried = [p for p in all_points(space) if key(p, space) not in tried]
    if not untried:
        return None, {"move": "exhausted", "center": center, "center_from": center_from}
    rng = random.Random(f"{space['task']}:{seed}:{attempt}")
    return rng.choice(untried), {"move": "random", "center": center, "center_from": center_from}


def env_int(name, default=None):
    value = os.environ.get(name)
    if value is None or value == "":
        if default is None:
            raise ValueError(f"{name} is not set")
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    try:
        task = os.environ.get("KWB_TASK", "")
        backend = os.environ.get("KWB_BACKEND", "cpu")
        output = os.environ["KWB_OUTPUT"] if os.environ.get("KWB_OUTPUT") else None
        if output is None:
            raise ValueError("KWB_OUTPUT is not set")
        seed = env_int("KWB_SEED", 0)
        attempt = env_int("KWB_ATTEMPT", 1)
    except ValueError as e:
        print(f"tuner: {e}", file=sys.stderr)
        return EXIT_BAD_ENV
    if backend != "cpu":
        print(f"tuner: backend {backend!r} has no templates; the tuner writes cpu candidates only", file=sys.stderr)
        return EXIT_UNKNOWN_TASK
    try:
        space = load_space(task)
    except SpaceError as e:
        print(f"tuner: {e}; no candidate this attempt", file=sys.stderr)
        return EXIT_UNKNOWN_TASK
    incumbent_text = ""
    if os.environ.get("KWB_INCUMBENT"):
        try:
            with open(os.environ["KWB_INCUMBENT"], encoding="utf-8", errors="replace") as f:
                incumbent_text = f.read()
        except OSError:
            incumbent_text = ""
    history = read_history(os.environ.get("KWB_HISTORY"))
    point, how = choose(space, seed, attempt, history, incumbent_text)
    if point is None:
        print(f"tuner: all {len(all_points(space))} points of the {task} space have been tried; no candidate",
              file=sys.stderr)
        return EXIT_EXHAUSTED
    meta = {
        "generator": "tuner",
        "task": task,
        "params": point,
        "move": how["move"],
        "center": how.get("center"),
        "center_from": how.get("center_from"),
        "seed": seed,
        "attempt": attempt,
        "tried_before": sorted(
            [list(key(p, space)) for p in (meta_point(r, space) for _, r in history) if p is not None]
        ),
        "space_size": len(all_points(space)),
    }
    write_atomic(output, render(space, point))
    write_atomic(output + ".json", json.dumps(meta, sort_keys=True) + "\n")
    print(f"tuner: {task} attempt {attempt} seed {seed}: {how['move']} {params_text(point, space)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
