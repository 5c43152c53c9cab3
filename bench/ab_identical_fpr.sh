#!/usr/bin/env bash
# False "faster" rate of the improvement gate on identical code, through the real sequential A/B procedure:
# N sessions of `kwb compare --candidate COPY` where COPY is the baseline's source plus an unused padding function
# (so the candidate is the same kernel in a different binary layout), gate --min-improvement-pct 0, short budget,
# seeds 1..N. A session that ends PASS declared identical code faster. Target: <= 5% (alpha = 0.05, spent over
# looks). Usage: bench/ab_identical_fpr.sh [N=100] [SECONDS_PER_SESSION=3] [WORKLOAD=decode]
# The arms' checks are cached by identity after the first session, so a session costs about its budget + 1 s.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
n="${1:-100}"
secs="${2:-3}"
workload="${3:-decode}"
minutes="$(python3 -c "print($secs / 60)")"
copy="$out/baseline_layout_copy.cpp"
cp "$task/cpu/baseline.cpp" "$copy"
cat >>"$copy" <<'PAD'

// bench padding: never called; shifts the code that follows it in the binary.
extern "C" __attribute__((used, noinline)) void kwb_bench_layout_pad(void) { __asm__ volatile(".skip 1088, 0x90"); }
PAD
for ((i = 1; i <= n; i++)); do
  run_kwb "ab_$i" compare "$task" --candidate "$copy" --workload "$workload" --seed "$i" --max-minutes "$minutes" \
    --min-improvement-pct 0 2>/dev/null
done
python3 - "$out" "$n" "$secs" "$workload" <<'PY'
import math, sys
sys.path.insert(0, "bench")
from summary import load, table
out, n, secs, workload = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ws = [load(out, f"ab_{i}")[0] for i in range(1, n + 1)]

def wilson(k, n, z=1.96):
    p, d = k / n, 1 + z * z / n
    c, h = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)

rows = []
for label, k in [("PASS (identical code declared faster)", sum(w["verdict"] == "PASS" for w in ws)),
                 ("FAIL (declared slower)", sum(w["verdict"] == "FAIL" for w in ws)),
                 ("INCONCLUSIVE", sum(w["verdict"] == "INCONCLUSIVE" for w in ws)),
                 ("INVALID", sum(w["verdict"] == "INVALID" for w in ws))]:
    lo, hi = wilson(k, n)
    rows.append([label, f"{k}/{n}", f"{100 * k / n:.1f}%", f"[{100 * lo:.1f}%, {100 * hi:.1f}%]"])
est = sorted(w["improvement_pct"] for w in ws if isinstance(w.get("improvement_pct"), (int, float)))
print(f"\nA/B on identical code ({workload}, baseline vs a layout-shifted copy), {n} sessions of {secs} s, gate X = 0")
table(["event", "count", "rate", "95% Wilson interval"], rows)
if est:
    print(f"estimates: median {est[len(est)//2]:+.2f}%, min {est[0]:+.2f}%, max {est[-1]:+.2f}%")
print(f"raw JSON: {out}")
PY
