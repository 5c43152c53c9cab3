#!/usr/bin/env python3
"""Runs kwb for real and validates every JSON it writes against schemas/<schema>.schema.json.

Usage: check_schemas.py KWB_BINARY SOURCE_DIR [TASK_DIR]

TASK_DIR is the RMSNorm task to run (default SOURCE_DIR/tasks/rmsnorm; CTest passes the copy without the DRAM case).

Each output is matched to its schema by its own "schema" field, and so is every object nested in it that carries
one (plan.json's environment, a profile's bandwidth_probe). Fails when an output does not validate, when an output
names a schema that has no file, when a bundle file carries no "schema", and when a schema file is never exercised.
The runs use short budgets, and their own ledger and timing lock in a temporary folder; the artifact cache is
$KWB_CACHE_DIR when set (CTest sets the tests' own), else one in that folder.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import jsonschema
except ImportError:
    print("check_schemas: the Python package jsonschema is missing (Debian: python3-jsonschema; scripts/setup.sh "
          "installs it)", file=sys.stderr)
    sys.exit(1)

ID_BASE = "https://kwb.invalid/schemas/"
Validator = jsonschema.Draft202012Validator


def load_schemas(schema_dir):
    """{name: schema} for every schemas/kwb.*.schema.json, each checked against the metaschema and its own name."""
    schemas = {}
    for path in sorted(schema_dir.glob("kwb.*.schema.json")):
        name = path.name[: -len(".schema.json")]
        try:
            schema = json.loads(path.read_text())
            Validator.check_schema(schema)
        except (json.JSONDecodeError, jsonschema.exceptions.SchemaError) as e:
            raise SystemExit(f"check_schemas: {path}: not a valid draft 2020-12 schema: {str(e)[:500]}")
        if schema.get("$id") != ID_BASE + path.name:
            raise SystemExit(f"check_schemas: {path}: $id is {schema.get('$id')!r}, expected {ID_BASE + path.name!r}")
        if schema.get("title") != name:
            raise SystemExit(f"check_schemas: {path}: title is {schema.get('title')!r}, expected {name!r}")
        schemas[name] = schema
    if not schemas:
        raise SystemExit(f"check_schemas: no kwb.*.schema.json in {schema_dir}")
    return schemas


def make_validators(schemas):
    """One validator per schema, resolving the schemas' references to each other by $id, offline."""
    try:
        from referencing import Registry, Resource  # jsonschema >= 4.18
        from referencing.jsonschema import DRAFT202012

        registry = Registry().with_resources(
            (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012)) for s in schemas.values())
        return {n: Validator(s, registry=registry) for n, s in schemas.items()}
    except ImportError:  # older jsonschema (Debian 12 ships 4.10): RefResolver with every schema in its store
        store = {s["$id"]: s for s in schemas.values()}
        return {n: Validator(s, resolver=jsonschema.RefResolver(s["$id"], s, store=store))
                for n, s in schemas.items()}


class Checker:
    def __init__(self, validators):
        self.validators = validators
        self.exercised = {n: 0 for n in validators}
        self.errors = []
        self.documents = 0

    def error(self, where, message):
        self.errors.append(f"{where}: {message}")
        print(f"FAIL {where}: {message}", file=sys.stderr)

    def check_document(self, where, doc, require_schema=True):
        self.documents += 1
        if not isinstance(doc, dict) or not isinstance(doc.get("schema"), str):
            if require_schema:
                self.error(where, "no \"schema\" field")
            return
        self.check_object(where, "$", doc)

    def check_file(self, where, path):
        try:
            doc = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            self.error(where, f"not readable as JSON: {e}")
            return None
        self.check_document(where, doc)
        return doc

    def check_object(self, where, pointer, obj):
        name = obj["schema"]
        label = where if pointer == "$" else f"{where} at {pointer}"
        validator = self.validators.get(name)
        if validator is None:
            self.error(label, f"schema {name!r} has no file schemas/{name}.schema.json")
        else:
            self.exercised[name] += 1
            for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))[:20]:
                e = jsonschema.exceptions.best_match([e])  # into anyOf/oneOf: the branch that came closest
                self.error(label, f"{name}: {e.json_path}: {e.message[:300]}")
        self.walk(where, pointer, obj, top=True)

    def walk(self, where, pointer, value, top=False):
        """Nested objects that carry their own schema are validated against it too."""
        if isinstance(value, dict):
            if not top and isinstance(value.get("schema"), str) and value["schema"].startswith("kwb."):
                self.check_object(where, pointer, value)
                return
            for k, v in value.items():
                self.walk(where, f"{pointer}.{k}", v)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.walk(where, f"{pointer}[{i}]", v)


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 64
    kwb = str(Path(sys.argv[1]).resolve())
    src = Path(sys.argv[2]).resolve()
    checker = Checker(make_validators(load_schemas(src / "schemas")))
    task = Path(sys.argv[3]).resolve() if len(sys.argv) == 4 else src / "tasks" / "rmsnorm"
    fused = task / "cpu" / "fused.cpp"
    control = task / "cpu" / "controls" / "no_eps.cpp"
    t0 = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="kwb-schemas-") as tmp:
        tmp = Path(tmp)
        bundle = tmp / "b"
        cache = Path(os.environ.get("KWB_CACHE_DIR") or tmp / "cache")
        env = dict(os.environ, KWB_LEDGER=str(tmp / "ledger.sqlite"), KWB_TIMING_LOCK=str(tmp / "timing.lock"),
                   KWB_CACHE_DIR=str(cache))

        def run(label, args, exit_codes):
            """Runs kwb and returns its stdout parsed as JSON (None after a failure, already recorded)."""
            started = time.monotonic()
            try:
                p = subprocess.run([kwb] + args, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.TimeoutExpired) as e:
                checker.error(label, f"kwb did not run to its end: {e}")
                return None
            print(f"ran  {label}: exit {p.returncode}, {time.monotonic() - started:.1f} s", flush=True)
            if p.returncode not in exit_codes:
                checker.error(label, f"exit {p.returncode}, expected one of {sorted(exit_codes)}; stderr:\n"
                                     f"{p.stderr[-2000:]}")
                return None
            try:
                doc = json.loads(p.stdout)
            except json.JSONDecodeError as e:
                checker.error(label, f"stdout is not one JSON document ({e}): {p.stdout[:300]!r}")
                return None
            checker.check_document(label, doc)
            return doc

        # Exit codes: 0 ok/KEEP_CANDIDATE, 1 rejected/KEEP_BASELINE, 2 inconclusive, 3 invalid. Timing verdicts
        # depend on the machine; every one of them must still be described by its schema.
        timed = {0, 1, 2, 3}
        run("check (PASS)", ["check", str(task), "--impl", str(fused), "--case", "zeros", "--json"], {0})
        run("check (control, FAIL)", ["check", str(task), "--impl", str(control), "--case", "zeros", "--json"], {1})
        saved = tmp / "compare-out"
        # Two layouts per arm, not eight: the documents' shapes do not depend on the pool's size.
        run("compare", ["compare", str(task), "--candidate", str(fused), "--workload", "decode", "--max-minutes", "0.05",
                        "--layouts", "2", "--output-dir", str(saved), "--json"], timed)
        checker.check_file("compare --output-dir compare.json", saved / "compare.json")
        decision = run("validate", ["validate", str(task), "--candidate", str(fused), "--workload", "decode",
                                    "--max-minutes", "0.1", "--max-aa-difference-pct", "25", "--layouts", "2",
                                    "--output-dir",
                                    str(bundle), "--json"], timed)
        bundle_files = sorted(bundle.rglob("*.json"))
        if not bundle_files:
            checker.error("validate", f"no JSON files in the bundle {bundle}")
        bundle_docs = {str(p.relative_to(bundle)): checker.check_file(f"bundle {p.relative_to(bundle)}", p)
                       for p in bundle_files}
        if decision is not None and decision != bundle_docs.get("decision.json"):
            checker.error("validate", "--json printed something other than the bundle's decision.json")
        run("verify", ["verify", str(bundle), "--json"], {0})
        run("compare-saved", ["compare-saved", str(saved), str(bundle), "--old-arm", "A", "--json"], {0})
        run("keep", ["keep", str(bundle), "--json"], {0, 1})
        run("history", ["history", str(task), "--json"], {0})
        run("history --runs", ["history", str(task), "--runs", "--json"], {0})
        run("history --runs (filtered)", ["history", str(task), "--runs", "--kind", "check,validate", "--outcome",
                                          "PASS", "--since", "1d", "--limit", "2", "--json"], {0})
        run("profile", ["profile", str(task), "--impl", str(fused), "--workload", "decode", "--json"], {0})
        run("profile (refused)", ["profile", str(task), "--impl", str(control), "--workload", "decode", "--json"], {1})
        # A campaign of one candidate refused at its check (nothing timed): its state file and its status.
        campaign = tmp / "campaign.toml"
        campaign.write_text(f'name = "schemas"\nstorage = "campaign-out"\n[validate]\nworkloads = ["decode"]\n'
                            f'layouts = 2\nno_profile = true\n[[tasks]]\ndir = "{task}"\n'
                            f'candidates = ["{control}"]\n')
        started = time.monotonic()
        p = subprocess.run([kwb, "campaign", "run", str(campaign)], cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=900)
        print(f"ran  campaign run: exit {p.returncode}, {time.monotonic() - started:.1f} s", flush=True)
        if p.returncode != 0:
            checker.error("campaign run", f"exit {p.returncode}, expected 0; stderr:\n{p.stderr[-2000:]}")
        checker.check_file("campaign state campaign.json", tmp / "campaign-out" / "campaign.json")
        run("campaign status", ["campaign", "status", str(campaign), "--json"], {0})
        run("campaign report", ["campaign", "report", str(campaign), "--json"], {0})
        run("doctor", ["doctor", "--task", str(task), "--storage", str(tmp), "--json"], {0, 69})
        # An experiment of one task, one seed, one attempt (nothing timed): arm a proposes the error control, which
        # fails its check; arm b writes nothing (it may call a model it never calls, and sees a folder mounted). Its plan, trajectory records, analysis and status.
        os.chmod(tmp, 0o755)  # kwb run as root runs its generators as users of their own, which must reach the arms
        (tmp / "arm").mkdir()
        (tmp / "arm" / "control.cpp").write_text(control.read_text())
        experiment = tmp / "experiment.toml"
        experiment.write_text(f'name = "schemas"\nstorage = "experiment-out"\nseeds = [1]\nattempts = 1\n'
                              f'[validate]\nworkloads = ["decode"]\nlayouts = 2\nno_profile = true\n'
                              f'[[tasks]]\ndir = "{task}"\n'
                              f'[[arms]]\nname = "a"\ncommand = ["sh", "-c", "cp control.cpp \\"$KWB_OUTPUT\\""]\n'
                              f'files = ["arm/control.cpp"]\n'
                              f'[[prices]]\nmodel = "m-*"\ninput_usd_per_mtok = 1\noutput_usd_per_mtok = 2\n'
                              f'[[arms]]\nname = "b"\ncommand = ["sh", "-c", "exit 3"]\naddress_space_gib = 2\n'
                              f'mounts = ["arm"]\nbudget_per_attempt = {{ requests = 3, usd = 0.5 }}\n'
                              f'[[arms.endpoints]]\nname = "m"\nurl = "http://127.0.0.1:9"\n')
        started = time.monotonic()
        p = subprocess.run([kwb, "experiment", "run", str(experiment)], cwd=tmp, env=env, capture_output=True,
                           text=True, timeout=900)
        print(f"ran  experiment run: exit {p.returncode}, {time.monotonic() - started:.1f} s", flush=True)
        if p.returncode != 2:
            checker.error("experiment run", f"exit {p.returncode}, expected 2 (INCONCLUSIVE); stderr:\n"
                                            f"{p.stderr[-2000:]}")
        out = tmp / "experiment-out"
        checker.check_file("experiment plan experiment.json", out / "experiment.json")
        checker.check_file("experiment analysis.json", out / "analysis.json")
        for record in sorted(out.glob("trajectories/*/trajectory.json")):
            checker.check_file(f"experiment {record.parent.name}/trajectory.json", record)
        run("experiment status", ["experiment", "status", str(out), "--json"], {0})
        run("experiment plan", ["experiment", "plan", str(out), "--effect", "1.2x", "--sd", "0.25", "--json"], {0})
        # kwb mcp's list_tasks runs in the server, not as a verb: its result (kwb.tasks), from one exchange.
        messages = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "check_schemas", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "list_tasks", "arguments": {"root": str(task.parent)}}},
        ]
        p = None
        try:
            p = subprocess.run([kwb, "mcp"], input="".join(json.dumps(m) + "\n" for m in messages), cwd=tmp, env=env,
                               capture_output=True, text=True, timeout=60)
            replies = {m.get("id"): m for m in map(json.loads, p.stdout.splitlines())}
            tasks = replies[2]["result"]["structuredContent"]["result"]
            print(f"ran  mcp list_tasks: exit {p.returncode}, {len(tasks['tasks'])} task(s)", flush=True)
            checker.check_document("mcp list_tasks", tasks)
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError, TypeError) as e:
            checker.error("mcp list_tasks", f"no result: {type(e).__name__}: {e}; stderr:\n"
                                            f"{p.stderr[-2000:] if p else '(kwb mcp did not run)'}")
        # The cache's records that carry a schema: check reports (compare's) and the bandwidth probe (profile's).
        for sub in ("checks", "bandwidth"):
            files = sorted((cache / sub).glob("*.json"))
            if not files:
                checker.error(f"cache {sub}/", "no JSON files (did the cache layout change?)")
            for path in files:
                checker.check_file(f"cache {sub}/{path.name}", path)

    for name, count in sorted(checker.exercised.items()):
        print(f"     {name}: {count} object(s) validated")
        if count == 0:
            checker.error(f"schemas/{name}.schema.json", "never exercised: no output carried this schema")
    elapsed = time.monotonic() - t0
    if checker.errors:
        print(f"check_schemas: {len(checker.errors)} problem(s) in {checker.documents} documents ({elapsed:.0f} s)",
              file=sys.stderr)
        return 1
    print(f"check_schemas: {checker.documents} documents valid against {len(checker.validators)} schemas "
          f"({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
