#!/usr/bin/env bash
# The A/A floor at a fixed budget: the baseline's layout pool against itself on RMSNorm prefill (60 s) and decode
# (30 s), with an equivalence bound no interval can meet (0.001%), so every session runs its whole budget and ends in
# its final analysis. Prints each session's interval and half-width. Several kwb binaries take turns session by
# session, so all meet the same load (an old build against a new one: the same run, side by side).
# Targets (docs/timing.md): half-width <= 1% on prefill within 60 s, <= 0.5% on decode within 30 s.
# Usage: bench/aa_floor.sh [ROUNDS=2] [KWB_BINARY...]   (default binary: build/ci/kwb)
# Takes 90 s per round and binary, plus builds and checks. Run nothing else at the same time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds="${1:-2}"
shift || true
binaries=("$@")
if ((${#binaries[@]} == 0)); then binaries=("$KWB"); fi
for ((i = 1; i <= rounds; i++)); do
  for b in "${binaries[@]}"; do
    for spec in prefill:1 decode:0.5; do
      w="${spec%%:*}" minutes="${spec##*:}"
      KWB="$b" run_kwb "floor_${i}_$(echo "$b" | tr '/' '_')_$w" compare "$task" --aa --workload "$w" \
        --max-aa-difference-pct 0.001 --max-minutes "$minutes" --seed "$i" 2>/dev/null
    done
  done
done
python3 - "$out" "$rounds" "${binaries[@]}" <<'PY'
import sys
sys.path.insert(0, "bench")
from summary import load, pct, interval, half_width, table
out, rounds, binaries = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = []
for i in range(1, rounds + 1):
    for b in binaries:
        for wl in ["prefill", "decode"]:
            w, _, wall = load(out, f"floor_{i}_{b.replace('/', '_')}_{wl}")
            hw = half_width(w)
            rows.append([b, wl, i, pct(w.get("improvement_pct")), interval(w),
                         "-" if hw is None else f"{hw:.2f}%", f"{100 * w.get('confidence', 0):.2f}%",
                         w["blocks"], f"{w['seconds']:.1f}"])
table(["kwb", "workload", "round", "A' vs A", "interval", "half-width", "confidence", "blocks", "seconds"], rows)
print(f"raw JSON: {out}")
PY
