#!/usr/bin/env bash
# Time to resolve a true 3% difference: tests/candidates/slow_by_work.cpp (fused.cpp plus a known serial sum, output
# bit-identical) at extra_work = 1.6, about 3% slower than tasks/rmsnorm/cpu/fused.cpp on prefill, compared against
# fused at bar 0 (`--min-improvement-pct 0`). "Resolved" means the comparison decided (FAIL: the whole interval below
# 0) within the budget. N runs per kwb binary, the binaries taking turns run by run, so both meet the same load.
# Usage: bench/resolve_3pct.sh [N=10] [KWB_BINARY...]   (default binary: build/ci/kwb)
#        KWB_BENCH_MINUTES (default 2), KWB_BENCH_WORKLOAD (default prefill)
# Run nothing else at the same time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
n="${1:-10}"
shift || true
binaries=("$@")
if ((${#binaries[@]} == 0)); then binaries=("$KWB"); fi
minutes="${KWB_BENCH_MINUTES:-2}"
workload="${KWB_BENCH_WORKLOAD:-prefill}"
# tasks/rmsnorm with an `extra_work` scalar: the other implementations, and the copy's oracle, ignore it.
copy="$out/rmsnorm_3pct"
rm -rf "$copy"
cp -r "$task" "$copy"
rm -rf "$copy/.kwb"
python3 - "$copy/task.toml" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
new, count = re.subn(r'scalars = \[\{ name = "eps", default = 1e-6 \}\]',
                     'scalars = [{ name = "eps", default = 1e-6 }, { name = "extra_work", default = 1.6 }]', text)
if count != 1:
    sys.exit(f"{path}: no `scalars = [{{ name = \"eps\", default = 1e-6 }}]` line to extend")
open(path, "w").write(new)
# The oracle takes eps as its first scalar and, in this copy, ignores the one after it.
oracle = path.replace("task.toml", "oracle.cpp")
code = open(oracle).read()
if "args->num_scalars != 1" not in code:
    sys.exit(f"{oracle}: no `args->num_scalars != 1` check to relax")
open(oracle, "w").write(code.replace("args->num_scalars != 1", "args->num_scalars < 1"))
PY
for ((i = 1; i <= n; i++)); do
  for b in "${binaries[@]}"; do
    tag="$(basename "$(dirname "$(dirname "$(dirname "$(readlink -f "$b")")")")")"
    KWB="$b" run_kwb "r3_${tag}_$i" compare "$copy" --baseline "$copy/cpu/fused.cpp" \
      --candidate tests/candidates/slow_by_work.cpp --workload "$workload" --min-improvement-pct 0 \
      --max-minutes "$minutes" --seed "$i" 2>/dev/null
    python3 - "$out" "r3_${tag}_$i" <<'PY'
import sys
sys.path.insert(0, "bench")
from summary import load, pct, interval
w, _, wall = load(sys.argv[1], sys.argv[2])
print(f"{sys.argv[2]}: {w['verdict']:<12} {pct(w.get('improvement_pct'))} {interval(w)} blocks={w['blocks']} "
      f"timing={w.get('seconds', 0):.1f}s wall={wall:.1f}s", file=sys.stderr)
PY
  done
done
python3 - "$out" "$n" "${binaries[@]}" <<'PY'
import os, sys
sys.path.insert(0, "bench")
from summary import load
out, n, binaries = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for b in binaries:
    tag = os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(b)))))
    runs = [load(out, f"r3_{tag}_{i}")[0] for i in range(1, n + 1)]
    resolved = [w for w in runs if w["verdict"] == "FAIL"]
    secs = sorted(w.get("seconds", 0) for w in resolved)
    med = secs[len(secs) // 2] if secs else float("nan")
    print(f"{b}: resolved {len(resolved)}/{n}; timing seconds of the resolved: median {med:.1f}, max "
          f"{max(secs) if secs else float('nan'):.1f}; estimates " +
          ", ".join(f"{w.get('improvement_pct', float('nan')):+.2f}%" for w in runs))
PY
