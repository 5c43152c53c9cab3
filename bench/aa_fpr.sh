#!/usr/bin/env bash
# False "faster" rate: N A/A sessions (the baseline's layout pool against itself) on one RMSNorm workload, each with
# its own --seed and a short budget. Counts how often the session's faster_verdict (what the improvement gate at
# X = 0 would say about identical code) is PASS, target <= 5%, and how often the equivalence verdict is FAIL.
# Usage: bench/aa_fpr.sh [N=100] [SECONDS_PER_SESSION=3] [WORKLOAD=decode]
# Each session also builds (cached after the first) and checks both arms, so a session costs the budget plus
# ~3-10 s (mostly the two checks): N=100 takes roughly 10-20 min. Run nothing else at the same time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
n="${1:-100}"
secs="${2:-3}"
workload="${3:-decode}"
minutes="$(python3 -c "print($secs / 60)")"
for ((i = 1; i <= n; i++)); do
  run_kwb "fpr_$i" compare "$task" --aa --workload "$workload" --seed "$i" --max-minutes "$minutes" --repetitions 10 \
    2>/dev/null
  python3 - "$out" "$i" "$n" <<'PY'
import sys
sys.path.insert(0, "bench")
from summary import load, pct, interval
out, i, n = sys.argv[1], sys.argv[2], sys.argv[3]
w, _, wall = load(out, "fpr_" + i)
print(f"session {i}/{n}: {w['verdict']:<12} faster={w.get('faster_verdict', '-'):<12} {pct(w.get('improvement_pct'))} "
      f"{interval(w)} blocks={w['blocks']} wall={wall:.1f}s", file=sys.stderr)
PY
done
python3 - "$out" "$n" "$secs" "$workload" <<'PY'
import math, sys
sys.path.insert(0, "bench")
from summary import load, table
out, n, secs, workload = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ws = [load(out, f"fpr_{i}")[0] for i in range(1, n + 1)]

def wilson(k, n, z=1.96):
    p, d = k / n, 1 + z * z / n
    c, h = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)

rows = []
for label, k in [("faster_verdict == PASS (false 'faster')", sum(w.get("faster_verdict") == "PASS" for w in ws)),
                 ("faster_verdict == FAIL (false 'slower')", sum(w.get("faster_verdict") == "FAIL" for w in ws)),
                 ("verdict == FAIL (A' judged different)", sum(w["verdict"] == "FAIL" for w in ws)),
                 ("verdict == INCONCLUSIVE", sum(w["verdict"] == "INCONCLUSIVE" for w in ws)),
                 ("verdict == INVALID", sum(w["verdict"] == "INVALID" for w in ws))]:
    lo, hi = wilson(k, n)
    rows.append([label, f"{k}/{n}", f"{100 * k / n:.1f}%", f"[{100 * lo:.1f}%, {100 * hi:.1f}%]"])
print(f"\nA/A {workload}, {n} sessions of {secs} s (seeds 1..{n}); target: false 'faster' rate <= 5%")
table(["event", "count", "rate", "95% Wilson interval"], rows)
print(f"raw JSON: {out}")
PY
