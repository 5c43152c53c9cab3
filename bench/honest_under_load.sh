#!/usr/bin/env bash
# Honest code on a loaded machine: N compares of the fused rmsnorm against its baseline on decode (a 1.4 us kernel
# against a 5 us one: the pair a burst of load separates most), each with a neighbour that loads the caches and the
# memory bus in bursts of 10-200 ms (bench/burst_load.c) running beside it. Counts the verdicts, and the long blocks
# of the steady-state test (stats/aging.h) that tripped, the comparisons left suspected and the ones called aging.
# Target: no INVALID, no aging finding. Usage: bench/honest_under_load.sh [N=20] [SECONDS_PER_COMPARE=12]
# Takes about N x (SECONDS + 4) s. The timings it prints are under load on purpose: judge nothing else by them.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
n="${1:-20}"
secs="${2:-12}"
minutes="$(python3 -c "print($secs / 60)")"
cc -O2 -o "$out/burst_load" bench/burst_load.c
"$out/burst_load" &
load_pid=$!
trap 'kill "$load_pid" 2>/dev/null || true' EXIT
for ((i = 1; i <= n; i++)); do
  run_kwb "fused_$i" compare "$task" --candidate "$task/cpu/fused.cpp" --workload decode --max-minutes "$minutes" \
    2>/dev/null
done
kill "$load_pid" 2>/dev/null || true
python3 - "$out" "$n" "$secs" <<'PY'
import sys
sys.path.insert(0, "bench")
from summary import load, table
out, n, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ws = [load(out, f"fused_{i}")[0] for i in range(1, n + 1)]
count = lambda f: sum(1 for w in ws if f(w))
aging = [w.get("aging", {}) for w in ws]
rows = [[v, f"{count(lambda w: w['verdict'] == v)}/{n}"] for v in ("PASS", "INCONCLUSIVE", "FAIL", "INVALID")]
rows += [["long blocks run", str(sum(a.get("long_blocks", 0) for a in aging))],
         ["long blocks tripped (one direction)", str(sum(a.get("aging_blocks", 0) for a in aging))],
         ["comparisons ending suspected", f"{sum(bool(a.get('suspected')) for a in aging)}/{n}"],
         ["comparisons found aging", f"{sum(bool(a.get('ages')) for a in aging)}/{n}"]]
print(f"\nfused vs baseline, rmsnorm decode, {n} compares of {secs} s beside bench/burst_load.c")
table(["event", "count"], rows)
est = sorted(w["improvement_pct"] for w in ws if isinstance(w.get("improvement_pct"), (int, float)))
if est:
    print(f"estimates: median {est[len(est)//2]:+.2f}%, min {est[0]:+.2f}%, max {est[-1]:+.2f}%")
print(f"raw JSON: {out}")
PY
