#!/usr/bin/env bash
# The README's main job, N times over: `bash scripts/demo.sh` (validate the fused RMSNorm against the 6-pass
# baseline), each run a fresh kwb process with its own drawn seed and its own bundle. Prints each run's decision,
# the validate wall time, and its stages' seconds; then how many ended KEEP_CANDIDATE and how many took <= 120 s.
# Usage: bench/demo_runs.sh [N=10]
# Run nothing else at the same time: on 2 vCPUs a build next to it shows up directly in the A/A stage. The build
# cache (KWB_CACHE_DIR, default ~/.cache/kwb) is shared by the runs: the first run compiles the 16 layout builds
# and 6 controls, the later ones find them.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
n="${1:-10}"
bash scripts/build.sh ci >/dev/null
for ((i = 1; i <= n; i++)); do
  t0="$(now)"
  rc=0
  KWB_DEMO_OUT="$out/demo_$i" bash scripts/demo.sh >"$out/demo_$i.out" 2>"$out/demo_$i.err" || rc=$?
  python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(now)" >"$out/demo_$i.wall"
  echo "run $i/$n: exit $rc, $(cat "$out/demo_$i.wall") s" >&2
done
python3 - "$out" "$n" <<'PY'
import json, math, sys
sys.path.insert(0, "bench")
from summary import table
out, n = sys.argv[1], int(sys.argv[2])
rows, keep, fast = [], 0, 0
for i in range(1, n + 1):
    wall = float(open(f"{out}/demo_{i}.wall").read())
    try:
        decision = json.load(open(f"{out}/demo_{i}/decision.json"))["decision"]
        stages = {s["name"]: s["seconds"] for s in json.load(open(f"{out}/demo_{i}/stages.json"))["stages"]}
    except (OSError, ValueError, KeyError) as e:
        decision, stages = f"no bundle ({e.__class__.__name__})", {}
    keep += decision == "KEEP_CANDIDATE"
    fast += wall <= 120
    rows.append([i, decision, f"{wall:.1f}"] + [f"{stages.get(s, float('nan')):.1f}" for s in
                ("freeze", "check_baseline", "profile", "check_candidate", "controls", "aa", "ab", "final_validation")])
table(["run", "decision", "wall s", "freeze", "chk A", "profile", "chk B", "controls", "A/A", "A/B", "final"], rows)
print(f"\nKEEP_CANDIDATE: {keep}/{n}; wall <= 120 s: {fast}/{n} (wall: the whole demo.sh after the build)")
print(f"bundles and logs: {out}")
PY
