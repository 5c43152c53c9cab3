#!/usr/bin/env bash
# A/A noise floor: the baseline's layout pool against itself (A', drawn independently; docs/timing.md) on RMSNorm decode
# and prefill. Target (per workload): |difference| <= 0.5% and interval half-width <= 0.5% within 30 s.
# Usage: bench/aa_noise.sh            KWB_BENCH_MINUTES=0.1 for a quick smoke run (default 0.5 = 30 s budget)
# Takes ~1 min of timing plus ~10 s of builds and checks per workload. Run nothing else at the same time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
minutes="${KWB_BENCH_MINUTES:-0.5}"
for w in decode prefill; do
  echo "== A/A $w (budget $minutes min)" >&2
  run_kwb "aa_$w" compare "$task" --aa --workload "$w" --max-aa-difference-pct 0.5 --max-minutes "$minutes"
done
python3 - "$out" <<'PY'
import sys
sys.path.insert(0, "bench")
from summary import load, pct, interval, half_width, table
out, rows = sys.argv[1], []
for wl in ["decode", "prefill"]:
    w, _, wall = load(out, "aa_" + wl)
    hw, d = half_width(w), w.get("improvement_pct")
    met = hw is not None and abs(d) <= 0.5 and hw <= 0.5 and w["seconds"] <= 30
    rows.append([wl, pct(d), interval(w), "-" if hw is None else f"{hw:.2f}%", w["blocks"],
                 f"{w['seconds']:.1f}", f"{wall:.1f}", w["verdict"], "yes" if met else "NO"])
print("\nA/A: A' (the baseline's layout pool, drawn independently) vs A; difference in kwb's sign (+ = A' faster)")
table(["workload", "difference", "interval", "half-width", "blocks", "seconds", "wall s", "verdict",
       "|d|<=0.5% & hw<=0.5% in 30 s"], rows)
print(f"\nseconds: the comparison's own time; wall s: the whole command (build + checks of both arms + pilot).")
print(f"raw JSON: {out}")
PY
